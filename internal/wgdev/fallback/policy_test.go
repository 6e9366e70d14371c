package fallback

import (
	"net/netip"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/backend"
)

var peer = netip.MustParseAddrPort("198.51.100.10:51820")

// clock is a fake clock the tests move by hand.
type clock struct{ t time.Time }

func (c *clock) now() time.Time                { return c.t }
func (c *clock) add(d time.Duration) time.Time { c.t = c.t.Add(d); return c.t }

func newClock() *clock { return &clock{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)} }

func TestPolicyUDPAnsweredNeverDials(t *testing.T) {
	c := newClock()
	p := NewPolicy(PolicyConfig{})
	for i := 0; i < 100; i++ {
		act := p.Sent(peer, i%10 == 0, c.now())
		if act.Via != backend.TransportUDP || act.Dial || act.Probe {
			t.Fatalf("send %d: %+v, want UDP alone", i, act)
		}
		p.ReceivedUDP(peer, c.add(50*time.Millisecond))
		if due := p.Due(peer); !due.IsZero() {
			t.Fatalf("send %d: a check is due at %v with UDP answering", i, due)
		}
		c.add(time.Second)
	}
}

// TestPolicyOneWayDataNeverDials: data without initiations (a one-way
// flow, the peer silent) is no sign of a blocked UDP.
func TestPolicyOneWayDataNeverDials(t *testing.T) {
	c := newClock()
	p := NewPolicy(PolicyConfig{})
	for i := 0; i < 60; i++ {
		if act := p.Sent(peer, false, c.add(time.Second)); act.Dial || act.Via != backend.TransportUDP {
			t.Fatalf("second %d: %+v", i, act)
		}
	}
	if !p.Due(peer).IsZero() {
		t.Error("a check is due without an initiation")
	}
}

func TestPolicyFallsBackAndReturns(t *testing.T) {
	c := newClock()
	p := NewPolicy(PolicyConfig{})
	start := c.now()
	if act := p.Sent(peer, true, start); act.Dial || act.Via != backend.TransportUDP {
		t.Fatalf("first initiation: %+v", act)
	}
	if due := p.Due(peer); !due.Equal(start.Add(DefaultAfter)) {
		t.Fatalf("Due = %v, want After (%v) after the initiation", due.Sub(start), DefaultAfter)
	}
	if p.Check(peer, c.add(DefaultAfter-time.Millisecond)) {
		t.Fatal("dials before After")
	}
	if !p.Check(peer, c.add(time.Millisecond)) {
		t.Fatal("does not dial at After")
	}
	if p.Check(peer, c.add(time.Millisecond)) || p.Sent(peer, true, c.now()).Dial {
		t.Fatal("dials twice while a dial is under way")
	}
	if !p.Due(peer).IsZero() {
		t.Fatal("a check is due while dialing")
	}
	if !p.StreamUp(peer, c.add(20*time.Millisecond)) {
		t.Fatal("StreamUp with UDP silent = false")
	}
	up := c.now()
	if v := p.Via(peer); v != backend.TransportTCP443 {
		t.Fatalf("Via = %v after StreamUp", v)
	}
	// Probes after After, then at doubling gaps up to RetryUDP; the
	// stream in between.
	var probes []time.Duration
	for c.now().Before(up.Add(3 * time.Minute)) {
		act := p.Sent(peer, false, c.add(100*time.Millisecond))
		switch {
		case act.Probe && act.Via == backend.TransportUDP:
			probes = append(probes, c.now().Sub(up))
		case act != (Action{Via: backend.TransportTCP443}):
			t.Fatalf("%v after StreamUp: %+v, want the stream or a probe", c.now().Sub(up), act)
		}
	}
	want := []time.Duration{3 * time.Second, 9 * time.Second, 21 * time.Second, 45 * time.Second, 75 * time.Second, 105 * time.Second, 135 * time.Second, 165 * time.Second}
	if len(probes) != len(want) {
		t.Fatalf("probes at %v, want %v", probes, want)
	}
	for i := range want {
		if d := probes[i] - want[i]; d < 0 || d > 100*time.Millisecond {
			t.Fatalf("probes at %v, want %v", probes, want)
		}
	}
	if !p.ReceivedUDP(peer, c.add(10*time.Millisecond)) {
		t.Fatal("ReceivedUDP on the stream = false, want back to UDP")
	}
	if v := p.Via(peer); v != backend.TransportUDP {
		t.Fatalf("Via = %v after UDP answered", v)
	}
	if p.ReceivedUDP(peer, c.add(time.Millisecond)) {
		t.Error("ReceivedUDP on UDP = true")
	}
}

func TestPolicyUDPAnswersDuringDial(t *testing.T) {
	c := newClock()
	p := NewPolicy(PolicyConfig{After: time.Second})
	p.Sent(peer, true, c.now())
	if !p.Check(peer, c.add(time.Second)) {
		t.Fatal("no dial")
	}
	p.ReceivedUDP(peer, c.add(time.Millisecond))
	if p.StreamUp(peer, c.add(time.Millisecond)) {
		t.Error("StreamUp after UDP answered = true, want the stream closed")
	}
	if v := p.Via(peer); v != backend.TransportUDP {
		t.Errorf("Via = %v", v)
	}
}

func TestPolicyRedial(t *testing.T) {
	c := newClock()
	p := NewPolicy(PolicyConfig{After: time.Second, Redial: 5 * time.Second})
	p.Sent(peer, true, c.now())
	if !p.Check(peer, c.add(time.Second)) {
		t.Fatal("no dial")
	}
	dial := c.now()
	// WireGuard retries its initiation while the dial fails.
	p.Sent(peer, true, c.add(time.Second))
	p.DialFailed(peer, c.add(time.Second))
	if due := p.Due(peer); !due.Equal(dial.Add(5 * time.Second)) {
		t.Fatalf("Due = %v after the dial, want Redial", due.Sub(dial))
	}
	if p.Check(peer, c.add(time.Second)) {
		t.Fatal("redials before Redial")
	}
	if !p.Check(peer, dial.Add(5*time.Second)) {
		t.Fatal("no redial at Redial")
	}
	// No initiation since this dial: once it fails, the bind stops.
	p.DialFailed(peer, c.add(6*time.Second))
	if due := p.Due(peer); !due.IsZero() {
		t.Errorf("Due = %v with WireGuard no longer initiating", due)
	}
}

func TestPolicyStreamBreaks(t *testing.T) {
	c := newClock()
	p := NewPolicy(PolicyConfig{})
	p.Sent(peer, true, c.now())
	p.Check(peer, c.add(DefaultAfter))
	p.StreamUp(peer, c.add(time.Millisecond))
	p.StreamDown(peer, c.add(time.Minute))
	if v := p.Via(peer); v != backend.TransportUDP {
		t.Fatalf("Via = %v after the stream broke", v)
	}
	if act := p.Sent(peer, false, c.add(DefaultRedial)); !act.Dial {
		t.Errorf("first send after the stream broke: %+v, want a redial", act)
	}
}

func TestPolicyPeersAreIndependent(t *testing.T) {
	c := newClock()
	p := NewPolicy(PolicyConfig{})
	other := netip.MustParseAddrPort("203.0.113.20:51820")
	p.Sent(peer, true, c.now())
	p.Sent(other, true, c.now())
	p.ReceivedUDP(other, c.add(time.Millisecond))
	if !p.Check(peer, c.add(DefaultAfter)) || p.Check(other, c.now()) {
		t.Error("a peer's silence or answer leaked to the other")
	}
}
