package probe

import (
	"math"
	"testing"
	"time"
)

const ms = time.Millisecond

func TestPercentile(t *testing.T) {
	ten := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(i + 1)
	}
	tests := []struct {
		name   string
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{"empty", nil, 50, 0},
		{"one", []time.Duration{7}, 99, 7},
		{"p50 of 10", ten, 50, 5},
		{"p99 of 10 is max", ten, 99, 10},
		{"p100", ten, 100, 10},
		{"p0 is min", ten, 0, 1},
		{"p99 of 100", hundred, 99, 99},
		{"p50 of 100", hundred, 50, 50},
		{"p51 of 10", ten, 51, 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Percentile(tt.sorted, tt.p); got != tt.want {
				t.Errorf("Percentile(p=%v) = %v, want %v", tt.p, got, tt.want)
			}
		})
	}
}

func TestSummarize(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Second) }
	tests := []struct {
		name    string
		samples []Sample
		want    Stats
	}{
		{"none", nil, Stats{}},
		{"all lost", []Sample{{Sent: at(0), Lost: true}, {Sent: at(1), Lost: true}},
			Stats{Sent: 2, Lost: 2, Loss: 1}},
		{"mixed", []Sample{
			{Sent: at(0), RTT: 10 * ms, Jitter: 1 * ms},
			{Sent: at(1), Lost: true},
			{Sent: at(3), RTT: 30 * ms, Jitter: 3 * ms},
			{Sent: at(2), RTT: 20 * ms, Jitter: 2 * ms}, // decided out of order
		}, Stats{Sent: 4, Lost: 1, Loss: 0.25, RTTMin: 10 * ms, RTTMax: 30 * ms, RTTMean: 20 * ms,
			RTTP50: 20 * ms, RTTP99: 30 * ms, Jitter: 3 * ms}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Summarize(tt.samples); got != tt.want {
				t.Errorf("Summarize =\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
}

func TestJitter(t *testing.T) {
	// d(n) is the value after n equal |D| steps of size d from J=0:
	// J_n = d * (1 - (15/16)^n), RFC 3550's first-order estimator.
	conv := func(d time.Duration, n int) time.Duration {
		return time.Duration(math.Round(float64(d) * (1 - math.Pow(15.0/16, float64(n)))))
	}
	alternating := func(n int, a, b time.Duration) []time.Duration {
		out := make([]time.Duration, n)
		for i := range out {
			out[i] = a
			if i%2 == 1 {
				out[i] = b
			}
		}
		return out
	}
	tests := []struct {
		name    string
		transit []time.Duration
		want    time.Duration
	}{
		{"no packets", nil, 0},
		{"first packet has no D", []time.Duration{50 * ms}, 0},
		{"constant transit", []time.Duration{50 * ms, 50 * ms, 50 * ms, 50 * ms}, 0},
		{"constant clock offset cancels", []time.Duration{-3 * time.Hour, -3 * time.Hour, -3 * time.Hour}, 0},
		{"one step moves J by |D|/16", []time.Duration{10 * ms, 26 * ms}, 1 * ms},
		{"negative D counts as |D|", []time.Duration{26 * ms, 10 * ms}, 1 * ms},
		{"two steps", []time.Duration{10 * ms, 26 * ms, 10 * ms}, conv(16*ms, 2)},
		{"alternating converges to |D|", alternating(201, 0, 4*ms), conv(4*ms, 200)},
		// RFC 3550 A.8 arithmetic by hand: D=+8,-8,+16 ms from J=0 gives
		// 0.5, then 0.5+(8-0.5)/16=0.96875, then 0.96875+(16-0.96875)/16.
		{"RFC 3550 recurrence", []time.Duration{100 * ms, 108 * ms, 100 * ms, 116 * ms},
			time.Duration(math.Round(1e6 * (0.96875 + (16-0.96875)/16)))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var j Jitter
			for _, tr := range tt.transit {
				j.Add(tr)
			}
			if got := j.Value(); got != tt.want {
				t.Errorf("Jitter = %v, want %v", got, tt.want)
			}
		})
	}
}
