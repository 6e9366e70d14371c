package abw

import (
	"math"
	"math/rand/v2"
	"testing"
)

// runSearch drives a search against a synthetic path of available
// bandwidth a: each fleet's streams are synthetic delays classified by
// the real trend tests, at most fleets fleets.
func runSearch(rng *rand.Rand, s *search, a float64, fleets int) (lo, hi float64, n int, ok bool) {
	for n = 0; n < fleets && !s.done(); n++ {
		r := s.rate()
		var trends []Trend
		for range defaultStreams {
			trends = append(trends, StreamTrend(synthetic(rng, 100, r, a, 100e3, 20e3), 0))
		}
		s.record(r, FleetTrend(trends))
	}
	lo, hi = s.bounds()
	return lo, hi, n, s.done()
}

func TestSearchConverges(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 3))
	for _, tc := range []struct {
		name     string
		a, guess float64
	}{
		{"guess above", 70e6, 100e6},
		{"guess far above", 14e6, 100e6},
		{"guess below", 300e6, 100e6}, // the train underestimated: the search widens
		{"guess at", 400e6, 440e6},
	} {
		s := newSearch(tc.guess, defaultResolution, defaultGreyResolution)
		lo, hi, n, ok := runSearch(rng, s, tc.a, defaultMaxFleets)
		mid := (lo + hi) / 2
		t.Logf("%s: available %.0f, range [%.1f, %.1f] Mbit/s after %d fleets", tc.name, tc.a/1e6, lo/1e6, hi/1e6, n)
		if !ok {
			t.Errorf("%s: no convergence in %d fleets: [%v, %v]", tc.name, n, lo, hi)
		}
		if math.Abs(mid-tc.a)/tc.a > 0.15 {
			t.Errorf("%s: midpoint %.1f Mbit/s, want within 15%% of %.1f", tc.name, mid/1e6, tc.a/1e6)
		}
		if lo > tc.a*1.05 || hi < tc.a*0.95 {
			t.Errorf("%s: range [%.1f, %.1f] misses the available bandwidth %.1f", tc.name, lo/1e6, hi/1e6, tc.a/1e6)
		}
	}
}

func TestSearchGreyRegion(t *testing.T) {
	// A path whose fleets are grey between 90 and 110: the search ends
	// with a range around the grey region.
	s := newSearch(200, 0.02, 0.12)
	for n := 0; n < 20 && !s.done(); n++ {
		r := s.rate()
		switch {
		case r > 110:
			s.record(r, Increasing)
		case r < 90:
			s.record(r, Flat)
		default:
			s.record(r, Grey)
		}
	}
	lo, hi := s.bounds()
	if !s.done() || lo > 90 || hi < 110 || lo < 70 || hi > 130 {
		t.Errorf("grey region 90..110: done %v, range [%v, %v]", s.done(), lo, hi)
	}
}

func TestTunnelFrame(t *testing.T) {
	// 1200 bytes of payload: inner 1228 → padded 1232, +32 +28 +14.
	if got := TunnelFrame(1200); got != 1306 {
		t.Errorf("TunnelFrame(1200) = %d, want 1306", got)
	}
}

func TestPacketRoundTrip(t *testing.T) {
	b := make([]byte, 100)
	encodeProbe(b, probe{session: 7, stream: 3, seq: 9, count: 64, sent: -5})
	p, err := decodeProbe(b)
	if err != nil || p != (probe{session: 7, stream: 3, seq: 9, count: 64, sent: -5}) {
		t.Errorf("probe round trip: %+v, %v", p, err)
	}
	q, err := decodeRequest(encodeRequest(request{session: 1, first: 2, n: 3}))
	if err != nil || q != (request{session: 1, first: 2, n: 3}) {
		t.Errorf("request round trip: %+v, %v", q, err)
	}
	rep := report{session: 4, stream: 5, count: 3, arrivals: []arrival{{0, 1e9}, {2, 1e9 + 1500}, {1, 1e9 - 20}}}
	r, err := decodeReport(encodeReport(rep))
	if err != nil || r.session != 4 || r.stream != 5 || r.count != 3 || len(r.arrivals) != 3 || r.arrivals[1] != rep.arrivals[1] || r.arrivals[2] != rep.arrivals[2] {
		t.Errorf("report round trip: %+v, %v", r, err)
	}
	if _, err := decodeProbe([]byte("GET / HTTP/1.1")); err == nil {
		t.Error("decodeProbe accepted a foreign datagram")
	}
	if _, err := decodeReport(encodeReport(rep)[:40]); err == nil {
		t.Error("decodeReport accepted a truncated report")
	}
}
