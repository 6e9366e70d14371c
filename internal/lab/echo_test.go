package lab

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// TestEchoReply: of what a raw ICMP socket hands over, only this run's
// echo replies count (its identifier and cookie), with or without the
// IPv4 header in front, for IPv4 and IPv6; requests, other runs' replies
// and truncated packets do not.
func TestEchoReply(t *testing.T) {
	for _, to := range []netip.Addr{netip.MustParseAddr("10.2.0.1"), netip.MustParseAddr("fd00::1")} {
		e := &echo{to: to, id: 0x1234, cookie: 0xfeedfacecafebeef}
		replyType, requestType, proto := icmp.Type(ipv4.ICMPTypeEchoReply), icmp.Type(ipv4.ICMPTypeEcho), 1
		if to.Is6() {
			replyType, requestType, proto = ipv6.ICMPTypeEchoReply, ipv6.ICMPTypeEchoRequest, 58
		}
		msg := func(typ icmp.Type, id int, cookie uint64, seq int) []byte {
			data := binary.BigEndian.AppendUint64(nil, cookie)
			data = append(data, make([]byte, echoDataLen-8)...)
			b, err := (&icmp.Message{Type: typ, Body: &icmp.Echo{ID: id, Seq: seq, Data: data}}).Marshal(nil)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		withIPv4Header := func(b []byte) []byte {
			h := make([]byte, 20, 20+len(b))
			h[0] = 0x45
			binary.BigEndian.PutUint16(h[2:], uint16(20+len(b)))
			h[9] = byte(proto)
			return append(h, b...)
		}
		req, err := e.request(nil, 7)
		if err != nil {
			t.Fatal(err)
		}
		if m, err := icmp.ParseMessage(proto, req); err != nil || m.Type != requestType || len(req) != 8+echoDataLen {
			t.Errorf("%s: request %x: %v %v, want an echo request of %d bytes", to, req, m, err, 8+echoDataLen)
		}
		for _, tc := range []struct {
			name string
			p    []byte
			seq  int
			ok   bool
		}{
			{"reply", msg(replyType, 0x1234, e.cookie, 7), 7, true},
			{"reply of another run", msg(replyType, 0x1234, e.cookie+1, 7), 0, false},
			{"reply to another identifier", msg(replyType, 0x4321, e.cookie, 7), 0, false},
			{"echo request", msg(requestType, 0x1234, e.cookie, 7), 0, false},
			{"truncated", msg(replyType, 0x1234, e.cookie, 7)[:10], 0, false},
			{"empty", nil, 0, false},
		} {
			p := tc.p
			if to.Is4() {
				// A raw IPv4 socket hands over the IP header too.
				p = withIPv4Header(p)
			}
			seq, ok := e.reply(p)
			if ok != tc.ok || seq != tc.seq {
				t.Errorf("%s: %s: reply = %d, %v; want %d, %v", to, tc.name, seq, ok, tc.seq, tc.ok)
			}
		}
	}
}

// TestEchoAnswers: each request counts once, in time; duplicates, replies
// to requests not sent and replies later than ProbeTimeout do not; the
// summary is ping's (min, mean, max, mean deviation).
func TestEchoAnswers(t *testing.T) {
	start := time.Now()
	e := &echo{to: netip.MustParseAddr("10.2.0.1"), got: make([]bool, 4), total: 4}
	for i := range 4 {
		e.sent = append(e.sent, start.Add(time.Duration(i)*10*time.Millisecond))
	}
	in := e.allIn()
	e.answer(1, e.sent[1].Add(2*time.Millisecond))
	e.answer(1, e.sent[1].Add(3*time.Millisecond))            // duplicate
	e.answer(0, e.sent[0].Add(4*time.Millisecond))            // out of order: counts
	e.answer(9, start)                                        // never sent
	e.answer(2, e.sent[2].Add(ProbeTimeout+time.Millisecond)) // late
	select {
	case <-in:
		t.Fatal("all in with two of four answered")
	default:
	}
	e.answer(3, e.sent[3].Add(6*time.Millisecond))
	r := e.result()
	want := []time.Duration{2 * time.Millisecond, 4 * time.Millisecond, 6 * time.Millisecond}
	if r.Sent != 4 || r.Received != 3 || len(r.RTTs) != 3 {
		t.Fatalf("result %v, want 4 sent, 3 received", r)
	}
	for i, d := range want {
		if r.RTTs[i] != d {
			t.Errorf("RTTs %v, want %v in arrival order", r.RTTs, want)
			break
		}
	}
	if r.Min != 2*time.Millisecond || r.Max != 6*time.Millisecond || r.Avg != 4*time.Millisecond {
		t.Errorf("min/avg/max %v/%v/%v, want 2ms/4ms/6ms", r.Min, r.Avg, r.Max)
	}
	// sqrt(((2-4)² + 0 + (6-4)²)/3) ms
	if d := r.Mdev - 1632993*time.Nanosecond; d < -time.Microsecond || d > time.Microsecond {
		t.Errorf("mdev %v, want about 1.633ms", r.Mdev)
	}
	e.mu.Lock()
	e.failed = 1 // the late one counts as a failed send here: all in
	e.mu.Unlock()
	e.answer(3, e.sent[3]) // a duplicate does not close it
	if got := e.allIn(); got == nil {
		t.Fatal("allIn returned nil")
	} else {
		select {
		case <-got:
		default:
			t.Error("not all in with 3 answered and 1 failed of 4")
		}
	}
}
