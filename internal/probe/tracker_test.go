package probe

import (
	"reflect"
	"testing"
	"time"
)

func TestTracker(t *testing.T) {
	t0 := time.Unix(2000, 0)
	const session = 42
	req := func(seq uint32, at time.Time) Packet {
		return Packet{Type: Request, Session: session, Seq: seq, SendTime: at.UnixNano()}
	}
	// reply answers req(seq, sent), received by the responder recvAfter
	// after sent and held for hold.
	reply := func(seq uint32, sent time.Time, recvAfter, hold time.Duration) Packet {
		return Packet{Type: Reply, Session: session, Seq: seq, SendTime: sent.UnixNano(),
			RecvTime: sent.Add(recvAfter).UnixNano(), ReplyTime: sent.Add(recvAfter + hold).UnixNano()}
	}
	tests := []struct {
		name   string
		rep    Packet
		at     time.Duration // arrival after t0
		want   Sample
		wantOK bool
	}{
		{"hold time taken out", reply(0, t0, 5*ms, 2*ms), 12 * ms, Sample{Seq: 0, Sent: t0, RTT: 10 * ms}, true},
		{"negative hold ignored", reply(0, t0, 5*ms, -2*ms), 12 * ms, Sample{Seq: 0, Sent: t0, RTT: 12 * ms}, true},
		{"hold longer than RTT ignored", reply(0, t0, 5*ms, 20*ms), 12 * ms, Sample{Seq: 0, Sent: t0, RTT: 12 * ms}, true},
		{"just before timeout", reply(0, t0, 5*ms, 0), time.Second - 1, Sample{Seq: 0, Sent: t0, RTT: time.Second - 1}, true},
		{"at timeout is lost", reply(0, t0, 5*ms, 0), time.Second, Sample{Seq: 0, Sent: t0, Lost: true}, true},
		{"late reply is lost", reply(0, t0, 5*ms, 0), 3 * time.Second, Sample{Seq: 0, Sent: t0, Lost: true}, true},
		{"other session", func() Packet { p := reply(0, t0, 0, 0); p.Session++; return p }(), ms, Sample{}, false},
		{"unknown seq", reply(5, t0, 0, 0), ms, Sample{}, false},
		{"wrong echoed send time", reply(0, t0.Add(ms), 0, 0), 2 * ms, Sample{}, false},
		{"request is no reply", req(0, t0), ms, Sample{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := newTracker(session, time.Second)
			tr.sent(req(0, t0), t0, false)
			got, ok := tr.reply(tt.rep, t0.Add(tt.at))
			if ok != tt.wantOK || got != tt.want {
				t.Errorf("reply = %+v, %v; want %+v, %v", got, ok, tt.want, tt.wantOK)
			}
			if ok {
				if _, again := tr.reply(tt.rep, t0.Add(tt.at)); again {
					t.Errorf("duplicate reply decided the probe twice")
				}
			}
		})
	}
}

func TestTrackerExpire(t *testing.T) {
	t0 := time.Unix(2000, 0)
	tr := newTracker(1, time.Second)
	for i := range 5 {
		at := t0.Add(time.Duration(i) * 100 * ms)
		tr.sent(Packet{Type: Request, Session: 1, Seq: uint32(i), SendTime: at.UnixNano()}, at, false)
	}
	if d, ok := tr.nextDeadline(); !ok || !d.Equal(t0.Add(time.Second)) {
		t.Errorf("nextDeadline = %v, %v; want %v", d, ok, t0.Add(time.Second))
	}
	got := tr.expire(t0.Add(1200 * ms))
	want := []Sample{{Seq: 0, Sent: t0, Lost: true}, {Seq: 1, Sent: t0.Add(100 * ms), Lost: true},
		{Seq: 2, Sent: t0.Add(200 * ms), Lost: true}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("expire =\n%+v\nwant\n%+v", got, want)
	}
	if tr.idle() {
		t.Errorf("idle with 2 outstanding")
	}
	// A reply for an expired probe is not matched again.
	if _, ok := tr.reply(Packet{Type: Reply, Session: 1, Seq: 0, SendTime: t0.UnixNano()}, t0.Add(1300*ms)); ok {
		t.Errorf("reply to an expired probe was matched")
	}
	tr.expire(t0.Add(2 * time.Second))
	if !tr.idle() {
		t.Errorf("not idle after all expired")
	}
}

func TestTrackerJitter(t *testing.T) {
	// Forward transit alternates between 10 ms and 26 ms (plus a large
	// clock offset), so each D is 16 ms and J climbs toward it.
	t0 := time.Unix(3000, 0)
	const offset = 5 * time.Hour
	tr := newTracker(1, time.Second)
	var want Jitter
	for i := range 10 {
		sent := t0.Add(time.Duration(i) * time.Second)
		fwd := 10 * ms
		if i%2 == 1 {
			fwd = 26 * ms
		}
		tr.sent(Packet{Type: Request, Session: 1, Seq: uint32(i), SendTime: sent.UnixNano()}, sent, false)
		rep := Packet{Type: Reply, Session: 1, Seq: uint32(i), SendTime: sent.UnixNano(),
			RecvTime: sent.Add(fwd + offset).UnixNano(), ReplyTime: sent.Add(fwd + offset).UnixNano()}
		s, ok := tr.reply(rep, sent.Add(fwd+10*ms))
		if !ok {
			t.Fatalf("probe %d not matched", i)
		}
		want.Add(fwd)
		if s.Jitter != want.Value() {
			t.Errorf("probe %d: jitter %v, want %v", i, s.Jitter, want.Value())
		}
	}
	if want.Value() == 0 {
		t.Fatal("test is vacuous: jitter stayed 0")
	}
}
