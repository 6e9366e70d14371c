package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Throughput is what one iperf3 TCP run measured.
type Throughput struct {
	// Mbps is the receiver's rate in Mbit/s (10^6 bit/s).
	Mbps float64
	// SentMbps is the sender's rate in Mbit/s.
	SentMbps float64
	// Retransmits counts TCP retransmissions at the sender.
	Retransmits int
	// Duration is how long the test ran.
	Duration time.Duration
	Streams  int
}

// String summarises the run.
func (t Throughput) String() string {
	return fmt.Sprintf("%.1f Mbit/s (%d streams, %v, %d retransmits)", t.Mbps, t.Streams, t.Duration, t.Retransmits)
}

// iperfPort numbers the server ports of concurrent runs (5201 upwards).
var iperfPort atomic.Int32

// Iperf3 measures TCP throughput from client to server: it starts a
// one-shot iperf3 server in server, waits until it listens, and runs the
// client towards address to (an address of server) for d, rounded up to
// whole seconds (at least 1), with streams parallel streams. Both
// processes are bounded by ctx and by d plus a margin; the server is
// killed if it outlives the run.
func Iperf3(ctx context.Context, client, server *Node, to netip.Addr, d time.Duration, streams int) (Throughput, error) {
	secs := int(math.Ceil(d.Seconds()))
	if secs < 1 {
		secs = 1
	}
	if streams < 1 {
		streams = 1
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(secs)*time.Second+20*time.Second)
	defer cancel()
	port, family, stopServer, err := startIperf3Server(ctx, server, to, secs)
	if err != nil {
		return Throughput{}, err
	}
	defer stopServer()

	r, err := runIperf3Client(ctx, client, to, "-c", to.String(), family, "-p", port, "-t", strconv.Itoa(secs),
		"-P", strconv.Itoa(streams), "-J", "--connect-timeout", "3000")
	if err != nil {
		return Throughput{}, err
	}
	t := tcpThroughput(r)
	t.Streams = streams
	return t, nil
}

// runIperf3Client runs an iperf3 client (-J) towards to in node client
// and decodes its report; a failure's error carries iperf3's own message.
func runIperf3Client(ctx context.Context, client *Node, to netip.Addr, args ...string) (iperfReport, error) {
	var out, errOut bytes.Buffer
	cli := client.Command(ctx, "iperf3", args...)
	cli.Stdout, cli.Stderr = &out, &errOut
	runErr := cli.Run()
	r, err := decodeIperf3(out.Bytes())
	if err != nil {
		if runErr != nil {
			err = fmt.Errorf("%w (%v: %s)", err, runErr, tail(errOut.String(), 500))
		}
		return r, fmt.Errorf("iperf3 from %s to %s: %w", client.Name, to, err)
	}
	return r, nil
}

// startIperf3Server starts a one-shot iperf3 server in server for a run of
// secs seconds towards address to, waits until it listens, and returns its
// port, the address family flag for the client, and a function that waits
// for the server to end (killing it if it outlives the run by 2 s).
func startIperf3Server(ctx context.Context, server *Node, to netip.Addr, secs int) (port, family string, stop func(), err error) {
	port = strconv.Itoa(5201 + int(iperfPort.Add(1)-1)%200)
	family = "-4"
	if to.Is6() {
		family = "-6"
	}
	var serverOut bytes.Buffer
	srv := server.Command(ctx, "iperf3", "-s", "-1", family, "-p", port, "--idle-timeout", strconv.Itoa(secs+15))
	srv.Stdout, srv.Stderr = &serverOut, &serverOut
	if err := srv.Start(); err != nil {
		return "", "", nil, fmt.Errorf("starting iperf3 server in %s: %w", server.Name, err)
	}
	srvDone := make(chan error, 1)
	go func() { srvDone <- srv.Wait() }()
	stop = func() {
		select {
		case <-srvDone:
		case <-time.After(2 * time.Second):
			_ = srv.Process.Kill()
			<-srvDone
		}
	}
	if err := waitListening(ctx, srv.Process.Pid, port, srvDone); err != nil {
		stop()
		return "", "", nil, fmt.Errorf("iperf3 server in %s: %w: %s", server.Name, err, tail(serverOut.String(), 500))
	}
	return port, family, stop, nil
}

// waitListening polls the server's namespace (through /proc/PID/net) until
// a TCP socket listens on port, the server exits, or ctx ends (at most 5 s).
func waitListening(ctx context.Context, pid int, port string, exited <-chan error) error {
	p, _ := strconv.Atoi(port)
	want := fmt.Sprintf(":%04X ", p)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		for _, f := range []string{"tcp", "tcp6"} {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, f))
			for _, line := range strings.Split(string(b), "\n") {
				fields := strings.Fields(line)
				// sl local_address rem_address st ...; st 0A is LISTEN.
				if len(fields) > 3 && strings.HasSuffix(fields[1]+" ", want) && fields[3] == "0A" {
					return nil
				}
			}
		}
		select {
		case err := <-exited:
			return fmt.Errorf("exited before listening (%v)", err)
		case <-ctx.Done():
			return fmt.Errorf("not listening on port %s: %w", port, ctx.Err())
		case <-tick.C:
		}
	}
}

// iperfSum is one summary of iperf3's JSON report; the loss and jitter
// fields are set for UDP runs only.
type iperfSum struct {
	// Start and End bound an interval's sum, in seconds from the test's
	// start; Bytes is what it moved.
	Start         float64 `json:"start"`
	End           float64 `json:"end"`
	Bytes         int64   `json:"bytes"`
	Seconds       float64 `json:"seconds"`
	BitsPerSecond float64 `json:"bits_per_second"`
	Retransmits   int     `json:"retransmits"`
	JitterMS      float64 `json:"jitter_ms"`
	LostPackets   int     `json:"lost_packets"`
	Packets       int     `json:"packets"`
}

// iperfReport is the part of iperf3's JSON output the lab reads.
type iperfReport struct {
	Error string `json:"error"`
	// Intervals are the periodic reports (-i) of this side.
	Intervals []struct {
		Sum iperfSum `json:"sum"`
	} `json:"intervals"`
	End struct {
		SumSent     iperfSum `json:"sum_sent"`
		SumReceived iperfSum `json:"sum_received"`
	} `json:"end"`
	// ServerOutput is the server's own report, with a client run with
	// --get-server-output.
	ServerOutput *iperfReport `json:"server_output_json"`
}

// decodeIperf3 reads an iperf3 client's JSON report (-J) and checks that
// the receiver got data.
func decodeIperf3(b []byte) (iperfReport, error) {
	var r iperfReport
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("reading iperf3 JSON: %w", err)
	}
	if r.Error != "" {
		return r, fmt.Errorf("iperf3: %s", r.Error)
	}
	if r.End.SumReceived.Seconds == 0 {
		return r, fmt.Errorf("iperf3 reported no received data")
	}
	return r, nil
}

// parseIperf3 reads the JSON report of an iperf3 TCP client (-J).
func parseIperf3(b []byte) (Throughput, error) {
	r, err := decodeIperf3(b)
	if err != nil {
		return Throughput{}, err
	}
	return tcpThroughput(r), nil
}

func tcpThroughput(r iperfReport) Throughput {
	s := r.End.SumReceived
	return Throughput{
		Mbps:        s.BitsPerSecond / 1e6,
		SentMbps:    r.End.SumSent.BitsPerSecond / 1e6,
		Retransmits: r.End.SumSent.Retransmits,
		Duration:    time.Duration(s.Seconds * float64(time.Second)),
	}
}
