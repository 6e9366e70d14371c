package bench

import (
	"math"
	"testing"
)

func TestPercentile(t *testing.T) {
	for _, c := range []struct {
		values []float64
		p      float64
		want   float64
	}{
		{[]float64{5}, 50, 5},
		{[]float64{1, 2, 3, 4}, 0, 1},
		{[]float64{1, 2, 3, 4}, 100, 4},
		{[]float64{4, 1, 3, 2}, 50, 2.5}, // order does not matter
		{[]float64{1, 2, 3, 4, 5}, 90, 4.6},
		{[]float64{10, 20}, 25, 12.5},
		{[]float64{1, 2, 3}, 150, 3}, // clamped
		{[]float64{1, 2, 3}, -5, 1},
	} {
		if got := Percentile(c.values, c.p); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("Percentile(%v, %g) = %g, want %g", c.values, c.p, got, c.want)
		}
	}
	if !math.IsNaN(Percentile(nil, 50)) {
		t.Error("Percentile of nothing should be NaN")
	}
}

func TestSummarize(t *testing.T) {
	values := []float64{2, 4, 4, 4, 5, 5, 7, 9}
	s := Summarize(values)
	want := Summary{N: 8, Min: 2, Max: 9, Mean: 5, StdDev: math.Sqrt(32.0 / 7), P50: 4.5, P90: 7.6, P99: 8.86}
	if s.N != want.N || s.Min != want.Min || s.Max != want.Max {
		t.Errorf("Summarize = %+v, want %+v", s, want)
	}
	for name, pair := range map[string][2]float64{"mean": {s.Mean, want.Mean}, "stddev": {s.StdDev, want.StdDev},
		"p50": {s.P50, want.P50}, "p90": {s.P90, want.P90}, "p99": {s.P99, want.P99}} {
		if math.Abs(pair[0]-pair[1]) > 1e-9 {
			t.Errorf("%s = %g, want %g", name, pair[0], pair[1])
		}
	}
	if values[0] != 2 || values[7] != 9 {
		t.Error("Summarize changed its input")
	}
	if got := Summarize(nil); got != (Summary{}) {
		t.Errorf("Summarize(nil) = %+v, want zero", got)
	}
	if got := Summarize([]float64{3}); got.StdDev != 0 || got.P99 != 3 {
		t.Errorf("Summarize of one value = %+v", got)
	}
}

func TestCDF(t *testing.T) {
	got := CDF([]float64{3, 1, 2, 2})
	want := []CDFPoint{{1, 0.25}, {2, 0.75}, {3, 1}}
	if len(got) != len(want) {
		t.Fatalf("CDF = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("CDF[%d] = %v, want %v", i, got[i], want[i])
		}
	}
	if CDF(nil) != nil {
		t.Error("CDF of nothing should be empty")
	}
}

func TestRatio(t *testing.T) {
	for _, c := range []struct{ a, b, want float64 }{
		{1, 2, 0.5}, {3, 1, 3}, {0, 2, 0}, {2, 0, 0}, {-1, 2, 0}, {math.NaN(), 1, 0}, {math.Inf(1), 1, 0},
	} {
		if got := Ratio(c.a, c.b); got != c.want {
			t.Errorf("Ratio(%g, %g) = %g, want %g", c.a, c.b, got, c.want)
		}
	}
}

func TestRatios(t *testing.T) {
	m := ModeResult{
		RTT: []RTTResult{{Path: Overlay, Ms: Summary{P50: 0.8, Mean: 1}}, {Path: Underlay, Ms: Summary{P50: 0.1, Mean: 0.2}},
			{Path: Standalone, Ms: Summary{P50: 0.4}}},
		TCP: []TCPResult{{Path: Overlay, Streams: 1, Mbps: 1000}, {Path: Overlay, Streams: 4, Mbps: 900},
			{Path: Underlay, Streams: 1, Mbps: 10000}, {Path: Underlay, Streams: 4, Mbps: 18000},
			{Path: Standalone, Streams: 1, Mbps: 1250}},
		Overhead: []OverheadResult{{Path: Overlay, Ratio: 1.12}, {Path: Underlay, Ratio: 1.05}},
		Loaded:   []LoadedResult{{Path: Overlay, IdleMs: Summary{P50: 0.8}, LoadedMs: Summary{P50: 4}}},
	}
	got := ratios(m)
	want := Ratios{RTTP50: 8, RTTMean: 5, StandaloneRTT: 2, Throughput1: 0.1, Throughput4: 0.05, Standalone1: 0.8,
		Overhead: 1.12, OverheadUnderlay: 1.05, OverheadRelative: 1.0667, LoadedRTT: 5}
	if got != want {
		t.Errorf("ratios =\n%+v\nwant\n%+v", got, want)
	}
}
