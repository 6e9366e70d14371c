package lab

import (
	"context"
	"fmt"
	"math"
	"net/netip"
	"strconv"
	"time"
)

// UDPThroughput is what one iperf3 UDP run measured.
type UDPThroughput struct {
	// OfferedMbps is the sender's rate, Mbps what the receiver got, both
	// UDP payload in Mbit/s.
	OfferedMbps, Mbps float64
	// Packets sent and Lost at the receiver.
	Packets, Lost int
	// Jitter is the receiver's RFC 3550 interarrival jitter.
	Jitter   time.Duration
	Duration time.Duration
}

// Loss returns the fraction of packets lost, 0 to 1.
func (u UDPThroughput) Loss() float64 {
	if u.Packets == 0 {
		return 0
	}
	return float64(u.Lost) / float64(u.Packets)
}

// String summarises the run.
func (u UDPThroughput) String() string {
	return fmt.Sprintf("%.1f of %.1f Mbit/s offered (%.1f%% lost, jitter %v)", u.Mbps, u.OfferedMbps, 100*u.Loss(), u.Jitter)
}

// Iperf3UDP sends UDP from client to address to (of server) at rate bit/s
// of UDP payload, in datagrams of payload bytes, for d rounded up to whole
// seconds, with a one-shot iperf3 server as Iperf3 does.
func Iperf3UDP(ctx context.Context, client, server *Node, to netip.Addr, d time.Duration, rate float64, payload int) (UDPThroughput, error) {
	secs := max(int(math.Ceil(d.Seconds())), 1)
	if rate <= 0 || payload <= 0 {
		return UDPThroughput{}, fmt.Errorf("iperf3 UDP: rate %v bit/s and payload %d bytes must be positive", rate, payload)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(secs)*time.Second+20*time.Second)
	defer cancel()
	port, family, stopServer, err := startIperf3Server(ctx, server, to, secs)
	if err != nil {
		return UDPThroughput{}, err
	}
	defer stopServer()
	r, err := runIperf3Client(ctx, client, to, "-c", to.String(), family, "-p", port, "-u", "-t", strconv.Itoa(secs),
		"-b", strconv.FormatFloat(rate, 'f', 0, 64), "-l", strconv.Itoa(payload), "-J", "--connect-timeout", "3000")
	if err != nil {
		return UDPThroughput{}, err
	}
	return udpThroughput(r), nil
}

func udpThroughput(r iperfReport) UDPThroughput {
	s := r.End.SumReceived
	return UDPThroughput{
		OfferedMbps: r.End.SumSent.BitsPerSecond / 1e6,
		Mbps:        s.BitsPerSecond / 1e6,
		Packets:     s.Packets,
		Lost:        s.LostPackets,
		Jitter:      time.Duration(s.JitterMS * float64(time.Millisecond)),
		Duration:    time.Duration(s.Seconds * float64(time.Second)),
	}
}
