package probe

import (
	"testing"
	"time"
)

func TestProbesUp(t *testing.T) {
	ok := func(seq uint32) Sample { return Sample{Seq: seq, RTT: time.Millisecond} }
	lost := func(seq uint32) Sample { return Sample{Seq: seq, Lost: true} }
	for _, tc := range []struct {
		name    string
		samples []Sample
		want    bool
	}{
		{"no samples: no verdict", nil, true},
		{"all answered", []Sample{ok(0), ok(1), ok(2)}, true},
		{"two lost after an answer", []Sample{ok(0), lost(1), lost(2)}, true},
		{"three lost", []Sample{ok(0), lost(1), lost(2), lost(3)}, false},
		{"three lost, decided out of order", []Sample{lost(3), ok(0), lost(1), lost(2)}, false},
		{"answered again after three lost", []Sample{lost(1), lost(2), lost(3), ok(4)}, true},
		{"fewer than three, all lost", []Sample{lost(0), lost(1)}, false},
		{"late answer of an older probe does not count", []Sample{lost(2), lost(3), lost(4), ok(1)}, false},
	} {
		if got := ProbesUp(tc.samples); got != tc.want {
			t.Errorf("%s: ProbesUp = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestHandshakeUp(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		last time.Time
		want bool
	}{
		{time.Time{}, false},
		{now.Add(-time.Second), true},
		{now.Add(-HandshakeWithin + time.Second), true},
		{now.Add(-HandshakeWithin), false},
		{now.Add(-time.Hour), false},
	} {
		if got := HandshakeUp(tc.last, now); got != tc.want {
			t.Errorf("HandshakeUp(%v ago) = %v, want %v", now.Sub(tc.last), got, tc.want)
		}
	}
}

func TestRecent(t *testing.T) {
	in := []Sample{{Seq: 5}, {Seq: 1}, {Seq: 9}, {Seq: 3}}
	got := Recent(in, 2)
	if len(got) != 2 || got[0].Seq != 5 || got[1].Seq != 9 {
		t.Errorf("Recent = %+v, want seq 5 then 9", got)
	}
	if in[0].Seq != 5 {
		t.Error("Recent modified its input")
	}
	if got := Recent(in[:1], 3); len(got) != 1 {
		t.Errorf("Recent of one = %d samples", len(got))
	}
}
