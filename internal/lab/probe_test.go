package lab

import (
	"strings"
	"testing"
	"time"
)

// probeLog builds a log from a pattern: one character per probe, 10 ms
// apart, '.' answered and 'x' lost.
func probeLog(pattern string) ProbeLog {
	g := ProbeLog{Interval: 10 * time.Millisecond}
	for i, c := range pattern {
		g.Probes = append(g.Probes, Probe{Sent: time.Duration(i) * 10 * time.Millisecond, Answered: c == '.', RTT: time.Millisecond})
	}
	return g
}

func TestProbeLog(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	for _, tc := range []struct {
		pattern    string
		lost       int
		outage     time.Duration
		from       time.Duration // AnsweringFrom(0)
		answeringA bool
	}{
		{"", 0, 0, 0, false},
		{"..........", 0, 0, 0, true},
		{"....x.....", 1, ms(20), ms(50), true},
		{"..xxx...xx.", 5, ms(40), ms(100), true},
		{"xxx.......", 3, ms(40), ms(30), true},
		{"......xxxx", 4, ms(50), 0, false},
		{"xxxx", 4, ms(50), 0, false},
	} {
		g := probeLog(tc.pattern)
		if got := g.Lost(); got != tc.lost {
			t.Errorf("%q: lost %d, want %d", tc.pattern, got, tc.lost)
		}
		if got := g.Outage(); got != tc.outage {
			t.Errorf("%q: outage %v, want %v", tc.pattern, got, tc.outage)
		}
		from, ok := g.AnsweringFrom(0)
		if ok != tc.answeringA || ok && from != tc.from {
			t.Errorf("%q: answering from %v %v, want %v %v", tc.pattern, from, ok, tc.from, tc.answeringA)
		}
	}
	g := probeLog("..xxx...xx.")
	if from, ok := g.AnsweringFrom(ms(5)); !ok || from != ms(100) {
		t.Errorf("answering from 5 ms: %v %v; want 100ms", from, ok)
	}
	if from, ok := probeLog("..........").AnsweringFrom(ms(35)); !ok || from != ms(35) {
		t.Errorf("answering from 35 ms: %v %v; want 35ms (not before the time asked)", from, ok)
	}
	if _, ok := g.AnsweringFrom(ms(200)); ok {
		t.Error("answering from after the last probe")
	}
	part := g.Between(ms(20), ms(50))
	if len(part.Probes) != 3 || part.Lost() != 3 || part.Interval != g.Interval {
		t.Errorf("Between(20ms, 50ms): %+v; want the 3 lost probes", part)
	}
}

func TestTransferResult(t *testing.T) {
	// An iperf3 client report (-J --get-server-output), trimmed.
	report := `{
	  "intervals": [{"sum": {"start": 0, "end": 0.5, "bytes": 999}}],
	  "end": {"sum_sent": {"seconds": 2, "bytes": 3000, "retransmits": 7},
	          "sum_received": {"seconds": 2, "bytes": 2500}},
	  "server_output_json": {"intervals": [
	    {"sum": {"start": 0, "end": 0.5, "bytes": 1000}},
	    {"sum": {"start": 0.5, "end": 1.0, "bytes": 0}},
	    {"sum": {"start": 1.0, "end": 1.5, "bytes": 0}},
	    {"sum": {"start": 1.5, "end": 2.0, "bytes": 1500}}]}
	}`
	r, err := decodeIperf3([]byte(report))
	if err != nil {
		t.Fatal(err)
	}
	res := transferResult(r)
	if res.Bytes != 2500 || res.Retransmits != 7 || len(res.Intervals) != 4 {
		t.Fatalf("result %+v", res)
	}
	if got := res.BytesAfter(time.Second); got != 1500 {
		t.Errorf("bytes after 1 s: %d, want 1500 (the receiver's, not the sender's)", got)
	}
	if got := res.BytesAfter(0); got != 2500 {
		t.Errorf("bytes after 0: %d, want 2500", got)
	}
	if _, err := decodeIperf3([]byte(`{"error": "control socket has closed unexpectedly"}`)); err == nil || !strings.Contains(err.Error(), "closed unexpectedly") {
		t.Errorf("a failed run: %v", err)
	}
}
