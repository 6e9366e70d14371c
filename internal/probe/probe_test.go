package probe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/await"
)

// dropConn is a PacketConn for a Responder that swallows every nth probe
// request it reads, as a lossy path would.
type dropConn struct {
	net.PacketConn
	every int

	mu    sync.Mutex
	reqs  int // guarded by mu
	drops int // guarded by mu
}

func (c *dropConn) ReadFrom(b []byte) (int, net.Addr, error) {
	for {
		n, addr, err := c.PacketConn.ReadFrom(b)
		if err != nil {
			return n, addr, err
		}
		if p, derr := Decode(b[:n]); derr == nil && p.Type == Request {
			c.mu.Lock()
			c.reqs++
			drop := c.reqs%c.every == 0
			if drop {
				c.drops++
			}
			c.mu.Unlock()
			if drop {
				continue
			}
		}
		return n, addr, err
	}
}

func listen(t *testing.T) net.PacketConn {
	t.Helper()
	c, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// startResponder serves on conn until the test ends and checks that Serve
// returns net.ErrClosed after Close.
func startResponder(t *testing.T, conn net.PacketConn) *Responder {
	t.Helper()
	r, err := NewResponder(ResponderConfig{Conn: conn})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Serve() }()
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		select {
		case err := <-done:
			if err != net.ErrClosed {
				t.Errorf("Serve after Close = %v, want net.ErrClosed", err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("Serve did not return within 5s of Close")
		}
	})
	return r
}

func runProber(t *testing.T, cfg Config) (*Prober, []Sample) {
	t.Helper()
	var mu sync.Mutex
	var seen []Sample
	cfg.OnSample = func(s Sample) { mu.Lock(); seen = append(seen, s); mu.Unlock() }
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Run(ctx); err != nil {
		t.Fatalf("Run: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	return p, seen
}

func TestProberResponder(t *testing.T) {
	srv := listen(t)
	r := startResponder(t, srv)
	p, seen := runProber(t, Config{Conn: listen(t), Target: srv.LocalAddr(), Interval: 10 * ms, Timeout: 2 * time.Second, Count: 20})

	st := p.Stats()
	if st.Sent != 20 || st.Lost != 0 || st.Loss != 0 {
		t.Errorf("stats = %+v, want 20 sent, 0 lost", st)
	}
	if st.RTTMin <= 0 || st.RTTP50 < st.RTTMin || st.RTTP99 < st.RTTP50 || st.RTTMax < st.RTTP99 {
		t.Errorf("RTT figures out of order: %+v", st)
	}
	if len(seen) != 20 {
		t.Errorf("OnSample called %d times, want 20", len(seen))
	}
	waitCounts(t, r, 20, 0)
	// The samples feed a History like the agent will.
	h := NewHistory()
	for _, s := range p.Samples() {
		h.Add(s)
	}
	if got := h.Window(time.Now(), time.Minute); got.Lost != 0 || got.Sent == 0 || got.RTTMin <= 0 {
		t.Errorf("history window = %+v", got)
	}
}

func TestProberLoss(t *testing.T) {
	srv := &dropConn{PacketConn: listen(t), every: 4}
	startResponder(t, srv)
	p, _ := runProber(t, Config{Conn: listen(t), Target: srv.LocalAddr(), Interval: 10 * ms, Timeout: 300 * ms, Count: 20})

	st := p.Stats()
	// Requests 4, 8, ..., 20 are dropped: exactly 5 of 20. Allow one probe
	// either way for the edge.
	if st.Sent != 20 || st.Lost < 4 || st.Lost > 6 {
		t.Errorf("stats = %+v, want 20 sent and 25%% loss", st)
	}
	if st.RTTMin <= 0 {
		t.Errorf("RTTMin = %v, want > 0", st.RTTMin)
	}
	srv.mu.Lock()
	drops := srv.drops
	srv.mu.Unlock()
	if drops != st.Lost {
		t.Errorf("responder dropped %d, prober lost %d", drops, st.Lost)
	}
	for _, s := range p.Samples() {
		if want := s.Seq%4 == 3; s.Lost != want {
			t.Errorf("probe %d lost = %v, want %v", s.Seq, s.Lost, want)
		}
	}
}

func TestProberStopsWithContext(t *testing.T) {
	srv := listen(t)
	startResponder(t, srv)
	conn := listen(t)
	p, err := New(Config{Conn: conn, Target: srv.LocalAddr(), Interval: 5 * ms})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	await.Until(t, 5*time.Second, func() (bool, string) {
		n := p.Stats().Sent
		return n >= 3, fmt.Sprintf("%d probes decided, want 3", n)
	})
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Run = %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return within 5s of cancel")
	}
	if p.Stats().Sent < 3 {
		t.Errorf("only %d probes decided", p.Stats().Sent)
	}
}

func TestProberConnClosed(t *testing.T) {
	conn := listen(t)
	p, err := New(Config{Conn: conn, Target: conn.LocalAddr(), Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Run(ctx); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Run on a closed conn = %v, want net.ErrClosed", err)
	}
}

func TestResponderIgnoresJunk(t *testing.T) {
	srv := listen(t)
	r := startResponder(t, srv)
	c := listen(t)
	rep, _ := Packet{Type: Reply, Session: 1}.Encode(nil)
	req, _ := Packet{Type: Request, Session: 1, Seq: 9, SendTime: 77}.Encode(nil)
	for _, b := range [][]byte{[]byte("hello"), rep, req} {
		if _, err := c.WriteTo(b, srv.LocalAddr()); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 100)
	n, _, err := c.ReadFrom(buf)
	if err != nil {
		t.Fatalf("no reply: %v", err)
	}
	got, err := Decode(buf[:n])
	if err != nil || got.Type != Reply || got.Session != 1 || got.Seq != 9 || got.SendTime != 77 || got.RecvTime == 0 {
		t.Errorf("reply = %+v, %v", got, err)
	}
	waitCounts(t, r, 1, 2)
}

func TestNewRejects(t *testing.T) {
	c := listen(t)
	for name, cfg := range map[string]Config{
		"no conn":          {Target: c.LocalAddr()},
		"no target":        {Conn: c},
		"negative timeout": {Conn: c, Target: c.LocalAddr(), Timeout: -1},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: New succeeded", name)
		}
	}
	if _, err := NewResponder(ResponderConfig{}); err == nil {
		t.Errorf("NewResponder without Conn succeeded")
	}
	p, err := New(Config{Conn: c, Target: c.LocalAddr()})
	if err != nil {
		t.Fatal(err)
	}
	if p.cfg.Interval != DefaultInterval || p.cfg.Timeout != DefaultTimeout || p.cfg.Keep != DefaultKeep || p.Session() == 0 {
		t.Errorf("defaults not applied: %+v", p.cfg)
	}
}

// waitCounts waits until the responder's counters match: a reply can
// reach the prober before the responder counts it.
func waitCounts(t *testing.T, r *Responder, answered, ignored uint64) {
	t.Helper()
	await.Until(t, 5*time.Second, func() (bool, string) {
		a, i := r.Counts()
		return a == answered && i == ignored, fmt.Sprintf("responder counts = %d answered, %d ignored; want %d, %d", a, i, answered, ignored)
	})
}

// cutConn is a PacketConn for a Responder that swallows every request
// while cut is set, as a path that went down would.
type cutConn struct {
	net.PacketConn
	mu  sync.Mutex
	cut bool // guarded by mu
}

func (c *cutConn) set(cut bool) { c.mu.Lock(); c.cut = cut; c.mu.Unlock() }

func (c *cutConn) ReadFrom(b []byte) (int, net.Addr, error) {
	for {
		n, addr, err := c.PacketConn.ReadFrom(b)
		c.mu.Lock()
		cut := c.cut
		c.mu.Unlock()
		if err != nil || !cut {
			return n, addr, err
		}
	}
}

// TestProberFastRetry cuts the path until the prober sees it: it then
// probes every Retry instead of every Interval, marks those samples Retry
// and reaches DownAfterLost lost probes (within a few hundred ms, where the
// 400 ms interval alone would take over a second), and it returns to the
// Interval once a probe is answered again. Without a cut it never retries.
func TestProberFastRetry(t *testing.T) {
	srv := &cutConn{PacketConn: listen(t)}
	startResponder(t, srv)
	var mu sync.Mutex
	var seen []Sample // guarded by mu
	p, err := New(Config{Conn: listen(t), Target: srv.LocalAddr(), Interval: 400 * ms, Timeout: 300 * ms,
		Retry: 40 * ms, Overdue: 60 * ms, OnSample: func(s Sample) { mu.Lock(); seen = append(seen, s); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	defer func() { cancel(); <-done }()
	samples := func() []Sample { mu.Lock(); defer mu.Unlock(); return slices.Clone(seen) }

	// Before the cut: answered probes at the interval, and no retry unless
	// a probe was lost (a reply a loaded machine delayed past the timeout;
	// its retry may be decided before it).
	await.Until(t, 10*time.Second, func() (bool, string) {
		answered := 0
		for _, x := range samples() {
			if !x.Lost {
				answered++
			}
		}
		return answered >= 3, fmt.Sprintf("%d answered probes, want 3 before the cut", answered)
	})
	srv.set(true)
	before := samples()
	lost := slices.ContainsFunc(before, func(s Sample) bool { return s.Lost })
	for i, s := range before {
		if s.Retry && !lost {
			t.Errorf("sample %d before the cut is a retry though no probe was lost: %+v", i, s)
		}
	}

	// During the cut: lost retries until the link is seen down.
	await.Until(t, 10*time.Second, func() (bool, string) {
		s := samples()[len(before):]
		lostRetries := 0
		for _, x := range s {
			if x.Retry && x.Lost {
				lostRetries++
			}
		}
		return lostRetries >= DownAfterLost && !ProbesUp(samples()),
			fmt.Sprintf("%d lost retries since the cut (samples %v), want %d and the link down", lostRetries, s, DownAfterLost)
	})
	srv.set(false)
	cut := len(samples())

	// After the cut: answered again, the link up, and the interval back:
	// the last two samples are answered and not retries.
	await.Until(t, 10*time.Second, func() (bool, string) {
		s := samples()[cut:]
		if len(s) < 2 {
			return false, fmt.Sprintf("%d samples since the path came back", len(s))
		}
		last := s[len(s)-2:]
		return ProbesUp(samples()) && !last[0].Lost && !last[0].Retry && !last[1].Lost && !last[1].Retry,
			fmt.Sprintf("since the path came back %v; want the last two answered and not retries", s)
	})
}
