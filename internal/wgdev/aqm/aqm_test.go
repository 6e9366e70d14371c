package aqm

import (
	"net/netip"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/tun"
)

const ms = int64(time.Millisecond)

// TestCodelDropsOnlyAStandingQueue: a queue that stays above the target
// for an interval gets drops at intervals shrinking with the square root
// of the count; one that dips below target gets none; a drop due on a
// small packet goes to the next large one.
func TestCodelDropsOnlyAStandingQueue(t *testing.T) {
	c := newCodel(2*time.Millisecond, 20*time.Millisecond)
	// 1 ms sojourn for a second: never a drop.
	for now := int64(0); now < 1000*ms; now += ms / 10 {
		if c.dequeue(now, ms, true) {
			t.Fatalf("drop at %d ms with the sojourn below target", now/ms)
		}
	}
	// 10 ms sojourn from t=1000ms: the first drop an interval later, then
	// at 20/sqrt(2), 20/sqrt(3)... ms.
	var drops []int64
	for now := 1000 * ms; now < 1200*ms; now += ms / 10 {
		if c.dequeue(now, 10*ms, true) {
			drops = append(drops, now)
		}
	}
	if len(drops) < 5 || drops[0] < 1020*ms || drops[0] > 1021*ms {
		t.Fatalf("drops at %v ms, want the first at 1020 and more after", millis(drops))
	}
	for i := 2; i < len(drops); i++ {
		if drops[i]-drops[i-1] > drops[i-1]-drops[i-2]+ms/10 {
			t.Errorf("drop gaps grow: %v ms", millis(drops))
		}
	}
	// Below target again: no drops.
	for now := 1200 * ms; now < 1300*ms; now += ms / 10 {
		if c.dequeue(now, ms, true) {
			t.Fatalf("drop at %d ms after the queue drained", now/ms)
		}
	}
	// A standing queue of small packets: no drop, but one owed, paid by
	// the next large packet.
	c = newCodel(2*time.Millisecond, 20*time.Millisecond)
	now := int64(0)
	for ; now < 100*ms; now += ms / 10 {
		if c.dequeue(now, 10*ms, false) {
			t.Fatal("a small packet was dropped")
		}
	}
	if !c.dequeue(now, 10*ms, true) {
		t.Error("the drop owed was not paid by the next large packet")
	}
}

func millis(ts []int64) []int64 {
	out := make([]int64, len(ts))
	for i, t := range ts {
		out[i] = t / ms
	}
	return out
}

func TestStamp(t *testing.T) {
	buf := make([]byte, 65535)
	stamp(buf, 1500, 12345)
	if got, ok := stampOf(buf[:1500]); !ok || got != 12345 {
		t.Errorf("stampOf = %d, %v; want 12345", got, ok)
	}
	if _, ok := stampOf(buf[:1500:1600]); ok {
		t.Error("stampOf read a stamp past a shorter array")
	}
	full := make([]byte, 1600)
	stamp(full, 1550, 99)
	if _, ok := stampOf(full[:1550]); ok {
		t.Error("a packet without room got a stamp")
	}
	if _, ok := stampOf(make([]byte, 100, 65535)); ok {
		t.Error("an unstamped buffer has a stamp")
	}
}

// fakeTUN hands out packets of given sizes and records writes.
type fakeTUN struct {
	tun.Device
	sizes   []int
	written [][]byte
}

func (f *fakeTUN) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	n := copy(sizes, f.sizes)
	return n, nil
}

func (f *fakeTUN) Write(bufs [][]byte, offset int) (int, error) {
	f.written = append(f.written, bufs...)
	return len(bufs), nil
}

type fakeBind struct {
	conn.Bind
	sent, small int
}

func (b *fakeBind) Send(bufs [][]byte, ep conn.Endpoint) error {
	b.sent += len(bufs)
	for _, p := range bufs {
		if len(p) < 1000 {
			b.small++
		}
	}
	return nil
}

type fakeEndpoint struct{ conn.StdNetEndpoint }

func (e *fakeEndpoint) ClearSrc() {}

// TestWrappersDropOnlyLargePacketsOfAStandingQueue runs packets through
// the wrapped TUN device and bind with the clock moved on between read
// and send (or receive and write), as a full queue would.
func TestWrappersDropOnlyLargePacketsOfAStandingQueue(t *testing.T) {
	a := New(Config{Target: 2 * time.Millisecond, Interval: 20 * time.Millisecond})
	ft := &fakeTUN{sizes: []int{1400, 84, 1400, 60}}
	fb := &fakeBind{}
	dev, b := a.TUN(ft), a.Bind(fb)
	ep := &fakeEndpoint{StdNetEndpoint: conn.StdNetEndpoint{AddrPort: netip.MustParseAddrPort("192.0.2.1:51820")}}
	sent := 0
	for round := 0; round < 200; round++ {
		bufs := make([][]byte, 4)
		for i := range bufs {
			bufs[i] = make([]byte, 65535)
		}
		sizes := make([]int, 4)
		n, _ := dev.Read(bufs, sizes, 16)
		// Encrypted: header and tag added; 10 ms later.
		a.base = a.base.Add(-10 * time.Millisecond)
		out := make([][]byte, n)
		for i := range n {
			out[i] = bufs[i][:16+sizes[i]+16]
		}
		sent += n
		if err := b.Send(out, ep); err != nil {
			t.Fatal(err)
		}
	}
	tx, _ := a.Drops()
	if tx == 0 || fb.sent+int(tx) != sent {
		t.Errorf("sent %d, dropped %d of %d packets", fb.sent, tx, sent)
	}
	// Small packets are never dropped: every round's two small ones went,
	// and some large ones.
	if fb.small != 400 || tx >= 400 {
		t.Errorf("sent %d of 400 small packets, dropped %d of 400 large ones", fb.small, tx)
	}

	// Receive direction: stamped when received, measured when written.
	ft.written = nil
	for round := 0; round < 200; round++ {
		bufs := [][]byte{make([]byte, 65535), make([]byte, 65535)}
		stamp(bufs[0], 1400, a.now())
		stamp(bufs[1], 80, a.now())
		a.base = a.base.Add(-10 * time.Millisecond)
		if _, err := dev.Write([][]byte{bufs[0][:16+1400], bufs[1][:16+64]}, 16); err != nil {
			t.Fatal(err)
		}
	}
	_, rx := a.Drops()
	smallWritten := 0
	for _, w := range ft.written {
		if len(w) == 16+64 {
			smallWritten++
		}
	}
	if rx == 0 || smallWritten != 200 || len(ft.written)+int(rx) != 400 {
		t.Errorf("wrote %d packets (%d small of 200), dropped %d", len(ft.written), smallWritten, rx)
	}
}

// TestNoDropsWithoutStamps: packets the device did not stamp (handshakes,
// keepalives) are neither measured nor dropped.
func TestNoDropsWithoutStamps(t *testing.T) {
	a := New(Config{})
	fb := &fakeBind{}
	b := a.Bind(fb)
	ep := &fakeEndpoint{}
	for range 1000 {
		a.base = a.base.Add(-10 * time.Millisecond)
		if err := b.Send([][]byte{make([]byte, 1500, 65535)}, ep); err != nil {
			t.Fatal(err)
		}
	}
	if tx, _ := a.Drops(); tx != 0 || fb.sent != 1000 {
		t.Errorf("dropped %d, sent %d of 1000 unstamped packets", tx, fb.sent)
	}
}

// TestDefaultsLetAShortQueueBe: with the default target and interval, a
// queue of 4 ms is left alone, and one of 10 ms gets its first drop only
// after 100 ms, so a flow's round trip of tens of milliseconds passes
// before CoDel acts.
func TestDefaultsLetAShortQueueBe(t *testing.T) {
	a := New(Config{})
	for now := int64(0); now < 2000*ms; now += ms / 10 {
		if a.tx.dequeue(now, 4*ms, true) {
			t.Fatalf("drop at %d ms of a 4 ms queue", now/ms)
		}
	}
	for now := 2000 * ms; now < 2200*ms; now += ms / 10 {
		if a.tx.dequeue(now, 10*ms, true) {
			if now < 2100*ms {
				t.Fatalf("first drop %d ms into a 10 ms queue, want 100", now/ms-2000)
			}
			return
		}
	}
	t.Fatal("no drop in 200 ms of a 10 ms queue")
}
