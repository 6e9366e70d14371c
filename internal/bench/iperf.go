package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/fednet/fednet/internal/lab"
)

// IperfPort is the TCP (control and data) and UDP port of the iperf3
// servers bench runs or expects on a live federation's targets.
const IperfPort = 5201

// udpLength is the UDP payload bench's UDP tests send: small enough for
// every path (a 1420-byte tunnel MTU less VXLAN for bridged networks), so
// no path fragments and all paths carry the same datagrams.
const udpLength = 1200

// transfer says what one iperf3 client run does.
type transfer struct {
	from lab.Commander
	to   netip.Addr
	port int
	// duration of a timed run (whole seconds, at least 1); ignored when
	// bytes is set.
	duration time.Duration
	// bytes, when set, sends exactly that many bytes (-n) instead.
	bytes   int64
	streams int
	// udpMbps, when set, runs a UDP test at that offered rate.
	udpMbps float64
}

// iperfResult is what bench reads from iperf3's JSON report.
type iperfResult struct {
	// Mbps is the receiver's rate in Mbit/s.
	Mbps float64
	// Bytes is what the receiver got.
	Bytes int64
	// Retransmits counts TCP retransmissions at the sender.
	Retransmits int
	Seconds     float64
	// UDP only: what the sender offered, lost datagrams, jitter.
	SentMbps    float64
	LostPercent float64
	JitterMs    float64
}

// args returns the iperf3 client arguments of t.
func (t transfer) args() []string {
	a := []string{"-c", t.to.String(), "-p", strconv.Itoa(t.port), "-J", "--connect-timeout", "3000"}
	if t.bytes > 0 {
		a = append(a, "-n", strconv.FormatInt(t.bytes, 10))
	} else {
		secs := int(math.Ceil(t.duration.Seconds()))
		a = append(a, "-t", strconv.Itoa(max(secs, 1)))
	}
	if t.streams > 1 {
		a = append(a, "-P", strconv.Itoa(t.streams))
	}
	if t.udpMbps > 0 {
		a = append(a, "-u", "-b", strconv.FormatFloat(t.udpMbps, 'f', -1, 64)+"M", "-l", strconv.Itoa(udpLength))
	}
	return a
}

// busyTries bounds how often run tries again while the server is still
// busy with the previous test (it resets only after that client left).
const busyTries = 10

// transient reports whether an iperf3 failure comes from a server that is
// still finishing the previous test: it says it is busy, it resets the
// new test's control connection while it tears the old one down, or it
// refuses it while it closes and opens again its listening socket (seen
// in CI: a live run's 4-stream test right after its 1-stream one). A
// server that is not there at all is reported after busyTries, 2 s.
func transient(err error) bool {
	msg := err.Error()
	for _, s := range []string{"busy", "unable to receive control message", "reset by peer", "Connection refused"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// run runs the client; the server must be listening. ctx bounds it, and
// so does each try's own length plus a margin.
func (t transfer) run(ctx context.Context) (iperfResult, error) {
	for try := 1; ; try++ {
		r, err := t.runOnce(ctx)
		if err == nil || try == busyTries || !transient(err) {
			return r, err
		}
		select {
		case <-ctx.Done():
			return r, err
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (t transfer) runOnce(ctx context.Context) (iperfResult, error) {
	limit := t.duration + 30*time.Second
	if t.bytes > 0 {
		limit = 2 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var out, errOut bytes.Buffer
	cmd := t.from.Command(ctx, "iperf3", t.args()...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	runErr := cmd.Run()
	r, err := parseIperf(out.Bytes(), t.udpMbps > 0)
	if err != nil {
		if runErr != nil {
			err = fmt.Errorf("%w (%v: %s)", err, runErr, strings.TrimSpace(errOut.String()))
		}
		return r, fmt.Errorf("iperf3 from %s to %s: %w", t.from, t.to, err)
	}
	return r, nil
}

// iperfSum is one of the summaries in iperf3's report.
type iperfSum struct {
	Seconds       float64 `json:"seconds"`
	Bytes         int64   `json:"bytes"`
	BitsPerSecond float64 `json:"bits_per_second"`
	Retransmits   int     `json:"retransmits"`
	// UDP only.
	JitterMs    float64 `json:"jitter_ms"`
	LostPercent float64 `json:"lost_percent"`
}

// iperfJSON is the part of iperf3's client report (-J) bench reads.
type iperfJSON struct {
	Error string `json:"error"`
	End   struct {
		SumSent     iperfSum `json:"sum_sent"`
		SumReceived iperfSum `json:"sum_received"`
		// Sum is the UDP summary of the sender's side (iperf3 3.12).
		Sum iperfSum `json:"sum"`
	} `json:"end"`
}

// parseIperf reads iperf3's JSON client report of a TCP or a UDP test.
// Rates, bytes, loss and jitter are the receiver's (sum_received); for
// UDP from an iperf3 that reports only the sender's summary, the
// received rate is the sent rate less the lost datagrams.
func parseIperf(b []byte, udp bool) (iperfResult, error) {
	var j iperfJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return iperfResult{}, fmt.Errorf("reading iperf3 JSON: %w", err)
	}
	if j.Error != "" {
		return iperfResult{}, fmt.Errorf("iperf3: %s", j.Error)
	}
	recv, sent := j.End.SumReceived, j.End.SumSent
	if udp {
		if j.End.Sum.Seconds > 0 {
			sent = j.End.Sum
		}
		if recv.Seconds == 0 && sent.Seconds > 0 {
			recv = sent
			recv.BitsPerSecond *= 1 - sent.LostPercent/100
		}
	}
	if recv.Seconds == 0 {
		return iperfResult{}, fmt.Errorf("iperf3 reported no received data")
	}
	r := iperfResult{Mbps: recv.BitsPerSecond / 1e6, SentMbps: sent.BitsPerSecond / 1e6, Bytes: recv.Bytes,
		Seconds: recv.Seconds, Retransmits: sent.Retransmits}
	if udp {
		r.LostPercent, r.JitterMs = recv.LostPercent, recv.JitterMs
	}
	return r, nil
}

// waitIperfServer polls until a TCP socket listens on port in the server's
// place (with ss), or ctx ends (at most 5 s).
func waitIperfServer(ctx context.Context, server lab.Commander, port int) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var last string
	for {
		out, err := server.Command(ctx, "ss", "-Hltn", "sport = :"+strconv.Itoa(port)).Output()
		if err == nil && strings.Contains(string(out), "LISTEN") {
			return nil
		}
		last = strings.TrimSpace(string(out))
		select {
		case <-ctx.Done():
			return fmt.Errorf("no iperf3 server listening on port %d in %s (%s): %w", port, server, last, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
