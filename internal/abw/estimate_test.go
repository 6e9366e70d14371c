package abw

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"
)

// loopbackStreams makes every stream minStreamLen (64) probes long: even
// a default 208 KiB socket buffer holds a whole stream of 1200-byte
// probes, and only one stream is in flight at a time, so loopback loses
// none of them.
const loopbackStreams = time.Microsecond

// startResponder serves a Responder on a loopback socket until the test
// ends and returns the socket's address.
func startResponder(t *testing.T) *net.UDPAddr {
	t.Helper()
	srv, err := listen(netip.MustParseAddrPort("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- NewResponder().Serve(ctx, srv) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return srv.LocalAddr().(*net.UDPAddr)
}

func dial(t *testing.T, to *net.UDPAddr) *net.UDPConn {
	t.Helper()
	conn, err := net.DialUDP("udp", nil, to)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestEstimateLoopback runs the sender against a real Responder over
// loopback: the protocol works end to end, every fleet gets the reports
// of all its packets (loopback loses none), and the byte count matches
// the packets sent. Loopback has no tight link, so the figure itself is
// not checked.
func TestEstimateLoopback(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn := dial(t, startResponder(t))
	res, err := Estimate(ctx, conn, Config{MaxFleets: 3, Streams: 3, StreamTime: loopbackStreams})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("loopback: ADR %.0f Mbit/s, range [%.0f, %.0f], %d packets, %d bytes, %v", res.ADR/1e6, res.Low/1e6, res.High/1e6, res.Packets, res.Bytes, res.Duration)
	if res.ADR <= 0 || len(res.Fleets) != 3 {
		t.Fatalf("result %+v: want an ADR and 3 fleets", res)
	}
	var want int64
	packets := defaultTrainLen
	want += int64(defaultTrainLen * TunnelFrame(defaultMaxPayload))
	for _, f := range res.Fleets {
		if len(f.Streams) == 0 || len(f.Streams) > 3 || f.K != minStreamLen || f.Lost != 0 {
			t.Errorf("fleet %+v: want 1 to 3 streams of %d probes, none lost", f, minStreamLen)
		}
		packets += len(f.Streams) * f.K
		want += int64(len(f.Streams) * f.K * TunnelFrame(f.Payload))
	}
	if res.Packets != packets || res.Bytes != want {
		t.Errorf("counted %d packets, %d bytes; want %d, %d", res.Packets, res.Bytes, packets, want)
	}
}

// lossyRelay forwards datagrams between one sender and a Responder over
// loopback and drops every probe whose sequence number is 9 modulo 10, as a
// lossy path would; it returns the address the sender should use.
func lossyRelay(t *testing.T, responder *net.UDPAddr) (front *net.UDPConn, sender func(*net.UDPConn)) {
	t.Helper()
	front, err := listen(netip.MustParseAddrPort("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	back := dial(t, responder)
	t.Cleanup(func() { front.Close() })
	clients := make(chan netip.AddrPort, 1)
	go func() { // sender -> responder, dropping
		buf := make([]byte, 1<<16)
		for {
			n, _, err := front.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			if p, err := decodeProbe(buf[:n]); err == nil && p.seq%10 == 9 {
				continue
			}
			if _, err := back.Write(buf[:n]); err != nil {
				return
			}
		}
	}()
	go func() { // responder -> sender
		to := <-clients
		buf := make([]byte, 1<<16)
		for {
			n, err := back.Read(buf)
			if err != nil {
				return
			}
			if _, err := front.WriteToUDPAddrPort(buf[:n], to); err != nil {
				return
			}
		}
	}()
	return front, func(c *net.UDPConn) { clients <- c.LocalAddr().(*net.UDPAddr).AddrPort() }
}

// TestEstimateCountsLoss: through a relay that drops every tenth probe of
// each stream, every fleet reports exactly the share of its probes that
// did not arrive (6 of 64), and the protocol still completes.
func TestEstimateCountsLoss(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	front, sender := lossyRelay(t, startResponder(t))
	conn := dial(t, front.LocalAddr().(*net.UDPAddr))
	sender(conn)
	res, err := Estimate(ctx, conn, Config{MaxFleets: 3, Streams: 3, StreamTime: loopbackStreams})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Fleets) != 3 {
		t.Fatalf("%d fleets, want 3: %+v", len(res.Fleets), res)
	}
	for _, f := range res.Fleets {
		if want := float64(f.K/10) / float64(f.K); f.K != minStreamLen || f.Lost != want {
			t.Errorf("fleet at %.0f Mbit/s: K %d, lost %v; want K %d and %v lost (every tenth probe)", f.Rate/1e6, f.K, f.Lost, minStreamLen, want)
		}
	}
}

// TestEstimateNoResponder: without a responder the estimate fails with an
// error that names the address and says what to check, whether the port
// is closed (ICMP port unreachable) or the probes vanish (no answer).
func TestEstimateNoResponder(t *testing.T) {
	closed, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.LocalAddr().(*net.UDPAddr)
	closed.Close()
	// A socket nobody reads: no ICMP error, no answer.
	silent, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	for _, c := range []struct {
		name string
		to   *net.UDPAddr
		want string
	}{
		{"closed port", closedAddr, "no available-bandwidth responder at " + closedAddr.String()},
		{"silent port", silent.LocalAddr().(*net.UDPAddr), "no answer from an available-bandwidth responder at " + silent.LocalAddr().String() + " within 300ms"},
	} {
		_, err := Estimate(context.Background(), dial(t, c.to), Config{Timeout: 300 * time.Millisecond})
		t.Logf("%s: %v", c.name, err)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "is the agent running there, and port 51822 open?") {
			t.Errorf("%s: Estimate = %v; want an error containing %q and what to check", c.name, err, c.want)
		}
		if c.name == "closed port" && !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("%s: %v does not wrap ECONNREFUSED", c.name, err)
		}
	}
}

// TestEstimateCostBound: a tight MaxCost stops the search before a fleet
// could pass it, whatever the trend tests say.
func TestEstimateCostBound(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn := dial(t, startResponder(t))
	const maxCost = 0.01
	res, err := Estimate(ctx, conn, Config{MaxCost: maxCost})
	if err != nil {
		t.Fatal(err)
	}
	if budget := maxCost * 10 * res.ADR / 8; float64(res.Bytes) > budget {
		t.Errorf("sent %d bytes, more than %.0f (1%% of 10 s at the train's %.0f Mbit/s)", res.Bytes, budget, res.ADR/1e6)
	}
	if res.Converged && len(res.Fleets) == 0 {
		t.Errorf("no fleet fit the budget, yet the search converged")
	}
}
