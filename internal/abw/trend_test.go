package abw

import (
	"math/rand/v2"
	"testing"
)

// synthetic returns k one-way delays (ns) of a stream sent at rate r
// through a tight link with available bandwidth a: the queue grows by
// (r−a)/r of each packet period when r > a, plus noise of the given
// spread.
func synthetic(rng *rand.Rand, k int, r, a, period, noise float64) []float64 {
	owd := make([]float64, k)
	queue := 0.0
	for i := range owd {
		if r > a {
			queue += (r - a) / r * period
		}
		owd[i] = 5e6 + queue + rng.NormFloat64()*noise
	}
	return owd
}

func TestStreamTrend(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	const period = 100e3 // 100 µs
	for _, tc := range []struct {
		name string
		r, a float64
		want Trend
	}{
		{"far above", 200e6, 100e6, Increasing},
		{"above", 125e6, 100e6, Increasing},
		{"below", 80e6, 100e6, Flat},
		{"far below", 20e6, 100e6, Flat},
	} {
		votes := map[Trend]int{}
		for range 50 {
			votes[StreamTrend(synthetic(rng, 100, tc.r, tc.a, period, 20e3), 0)]++
		}
		if votes[tc.want] < 40 {
			t.Errorf("%s (rate %v, available %v): votes %v, want mostly %v", tc.name, tc.r, tc.a, votes, tc.want)
		}
	}
	if got := StreamTrend(synthetic(rng, 100, 50e6, 100e6, period, 1e3), 0.3); got != Increasing {
		t.Errorf("a stream losing 30%% of its packets: %v, want increasing", got)
	}
	if got := StreamTrend([]float64{1, 2}, 0); got != Grey {
		t.Errorf("two delays: %v, want grey", got)
	}
}

func TestPCTAndPDT(t *testing.T) {
	up := []float64{1, 2, 3, 4, 5}
	if PCT(up) != 1 || PDT(up) != 1 {
		t.Errorf("strictly increasing medians: PCT %v PDT %v, want 1 and 1", PCT(up), PDT(up))
	}
	flat := []float64{3, 3, 3, 3}
	if PCT(flat) != 0 || PDT(flat) != 0 {
		t.Errorf("equal medians: PCT %v PDT %v, want 0 and 0", PCT(flat), PDT(flat))
	}
	zigzag := []float64{1, 3, 1, 3, 1}
	if PCT(zigzag) != 0.5 || PDT(zigzag) != 0 {
		t.Errorf("zigzag: PCT %v PDT %v, want 0.5 and 0", PCT(zigzag), PDT(zigzag))
	}
	if m := groupMedians([]float64{5, 1, 3, 9, 8, 7, 2, 2, 2}); len(m) != 3 || m[0] != 3 || m[1] != 8 || m[2] != 2 {
		t.Errorf("groupMedians = %v, want [3 8 2]", m)
	}
}

func TestFleetTrend(t *testing.T) {
	I, F, G := Increasing, Flat, Grey
	for _, tc := range []struct {
		in   []Trend
		want Trend
	}{
		{[]Trend{I, I, I, I, I, F}, I},
		{[]Trend{F, F, F, F, G, F}, F},
		{[]Trend{I, I, I, F, F, F}, G},
		{[]Trend{I, I, I, I, G, G}, I},
		{[]Trend{I, I, I, G, G}, I},
		{[]Trend{I, I, G, G, F}, G},
		{nil, G},
	} {
		if got := FleetTrend(tc.in); got != tc.want {
			t.Errorf("FleetTrend(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestFleetVerdictEarly(t *testing.T) {
	I, F, G := Increasing, Flat, Grey
	for _, tc := range []struct {
		in      []Trend
		want    Trend
		decided bool
	}{
		{[]Trend{I, I, I}, I, true},  // 3 of 5 already
		{[]Trend{I, I, F}, G, false}, // a fourth could decide
		{[]Trend{I, F}, G, false},
		{[]Trend{I, F, G, G}, G, true}, // neither can reach 3 of 5
		{[]Trend{F, F, G, F}, F, true},
	} {
		got, decided := fleetVerdict(tc.in, 5)
		if got != tc.want || decided != tc.decided {
			t.Errorf("fleetVerdict(%v, 5) = %v, %v; want %v, %v", tc.in, got, decided, tc.want, tc.decided)
		}
	}
}
