package abw

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"
)

// TestEstimateLoopback runs the sender against a real Responder over
// loopback: the protocol works end to end, every fleet gets its reports,
// and the byte count matches the packets sent. Loopback has no tight
// link, so the figure itself is not checked.
func TestEstimateLoopback(t *testing.T) {
	srv, err := listen(netip.MustParseAddrPort("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r := NewResponder()
	done := make(chan error, 1)
	go func() { done <- r.Serve(ctx, srv) }()
	conn, err := net.DialUDP("udp", nil, srv.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	res, err := Estimate(ctx, conn, Config{MaxFleets: 3, Streams: 3})
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
		// Loopback drops freely when a fleet outruns the socket buffers
		// (at Gbit/s, more so under -race on a busy machine); what matters
		// here is that reports came back for every fleet.
		if len(f.Streams) == 0 || len(f.Streams) > 3 || f.Lost >= 1 {
			t.Errorf("fleet %+v: want 1 to 3 streams, of which some packets arrived", f)
		}
		packets += len(f.Streams) * f.K
		want += int64(len(f.Streams) * f.K * TunnelFrame(f.Payload))
	}
	if res.Packets != packets || res.Bytes != want {
		t.Errorf("counted %d packets, %d bytes; want %d, %d", res.Packets, res.Bytes, packets, want)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve: %v", err)
	}
}

func TestEstimateNoResponder(t *testing.T) {
	// A closed port: the error says what to check.
	l, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	addr := l.LocalAddr().(*net.UDPAddr)
	l.Close()
	conn, err := net.DialUDP("udp", nil, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = Estimate(context.Background(), conn, Config{Timeout: 300 * time.Millisecond})
	if err == nil {
		t.Fatal("Estimate without a responder succeeded")
	}
	t.Log(err)
}

// TestEstimateCostBound: a tight MaxCost stops the search before a fleet
// could pass it, whatever the trend tests say.
func TestEstimateCostBound(t *testing.T) {
	srv, err := listen(netip.MustParseAddrPort("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go NewResponder().Serve(ctx, srv)
	conn, err := net.DialUDP("udp", nil, srv.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
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
