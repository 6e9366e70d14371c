package abw

import (
	"math"
	"slices"
)

// Trend is what the one-way delays of a stream, or the streams of a fleet,
// say about the rate they were sent at.
type Trend int

// Trends.
const (
	// Grey: neither clearly increasing nor clearly flat; the rate is about
	// the available bandwidth (Pathload's grey region).
	Grey Trend = iota
	// Increasing: the delays grow, the rate is above the available
	// bandwidth.
	Increasing
	// Flat: no trend, the rate is below the available bandwidth.
	Flat
)

// String returns "increasing", "flat" or "grey".
func (t Trend) String() string {
	switch t {
	case Increasing:
		return "increasing"
	case Flat:
		return "flat"
	}
	return "grey"
}

// Thresholds of the trend tests, as in Pathload: PCT above pctIncreasing
// says increasing, below pctFlat flat; PDT likewise. Between them the
// statistic is ambiguous.
const (
	pctIncreasing = 0.66
	pctFlat       = 0.54
	pdtIncreasing = 0.55
	pdtFlat       = 0.45
	// lossyStream: a stream that loses more than this fraction of its
	// packets overflowed a queue, so its rate is above the available
	// bandwidth whatever its delays say.
	lossyStream = 0.1
	// fleetMajority of a fleet's streams must agree for the fleet to be
	// increasing or flat. Pathload asks for 70 % of 12 streams; with 5
	// streams that would be 4, and on a tunnel whose delays jitter by
	// milliseconds (userspace WireGuard on a busy host) most fleets would
	// end grey, so 3 of 5 decide.
	fleetMajority = 0.6
)

// groupMedians splits the delays, in sending order, into ⌊√K⌋ groups of
// consecutive packets and returns each group's median. Medians make the
// tests robust to single delayed packets.
func groupMedians(owd []float64) []float64 {
	g := int(math.Sqrt(float64(len(owd))))
	if g < 2 {
		return nil
	}
	size := len(owd) / g
	out := make([]float64, 0, g)
	for i := range g {
		end := (i + 1) * size
		if i == g-1 {
			end = len(owd)
		}
		out = append(out, median(owd[i*size:end]))
	}
	return out
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// PCT is the pairwise comparison test: the fraction of consecutive group
// medians that increase. About 0.5 for noise without trend, near 1 for a
// growing queue.
func PCT(m []float64) float64 {
	if len(m) < 2 {
		return 0
	}
	up := 0
	for i := 1; i < len(m); i++ {
		if m[i] > m[i-1] {
			up++
		}
	}
	return float64(up) / float64(len(m)-1)
}

// PDT is the pairwise difference test: the net change from the first to
// the last group median over the sum of the absolute changes, from −1 to
// 1. Near 0 without trend, near 1 for a growing queue.
func PDT(m []float64) float64 {
	if len(m) < 2 {
		return 0
	}
	var total float64
	for i := 1; i < len(m); i++ {
		total += math.Abs(m[i] - m[i-1])
	}
	if total == 0 {
		return 0
	}
	return (m[len(m)-1] - m[0]) / total
}

// StreamTrend classifies a stream from its delays in sending order (lost
// packets left out) and the fraction of its packets lost. As in Pathload,
// a statistic that is ambiguous defers to the other; when they disagree,
// or both are ambiguous, the stream is grey.
func StreamTrend(owd []float64, lost float64) Trend {
	if lost > lossyStream {
		return Increasing
	}
	m := groupMedians(owd)
	if m == nil {
		return Grey
	}
	pct := vote(PCT(m), pctIncreasing, pctFlat)
	pdt := vote(PDT(m), pdtIncreasing, pdtFlat)
	switch {
	case pct == pdt:
		return pct
	case pct == Grey:
		return pdt
	case pdt == Grey:
		return pct
	}
	return Grey
}

func vote(v, increasing, flat float64) Trend {
	switch {
	case v > increasing:
		return Increasing
	case v < flat:
		return Flat
	}
	return Grey
}

// FleetTrend classifies a fleet from its streams' trends: increasing or
// flat when at least 60 % of the streams say so, else grey.
func FleetTrend(streams []Trend) Trend {
	t, _ := fleetVerdict(streams, len(streams))
	return t
}

// fleetVerdict classifies a fleet of total streams of which the first
// len(streams) are known, and reports whether the rest could still change
// the verdict (decided false). A fleet stops sending once it is decided.
func fleetVerdict(streams []Trend, total int) (t Trend, decided bool) {
	if total == 0 {
		return Grey, true
	}
	var inc, flat int
	for _, t := range streams {
		switch t {
		case Increasing:
			inc++
		case Flat:
			flat++
		}
	}
	need := fleetMajority * float64(total)
	rest := float64(total - len(streams))
	switch {
	case float64(inc) >= need:
		return Increasing, true
	case float64(flat) >= need:
		return Flat, true
	case float64(inc)+rest < need && float64(flat)+rest < need:
		return Grey, true
	}
	return Grey, rest == 0
}
