package faults

import (
	"fmt"
	"time"

	"github.com/fednet/fednet/internal/lab"
)

// measure fills the probe figures of res from the prober's logs (one per
// pair, in the order of pairs) of one fault: concerned says which pairs
// the fault concerns; inject and repair are offsets from the prober's
// start. Losses count from the injection on. It returns when every pair
// answered again after the repair (ok false when some pair does not answer
// at the end of its log).
//
// down, when not nil, marks the concerned pairs of a site the fault takes
// down as a whole: they go into the SiteDown figures instead.
func measure(res *Result, logs []lab.ProbeLog, pairs []Pair, concerned, down []bool, inject, repair time.Duration) (recovered time.Duration, ok bool) {
	anyConcerned := false
	for _, c := range concerned {
		anyConcerned = anyConcerned || c
	}
	var outage time.Duration
	ok = len(logs) > 0
	for i, g := range logs {
		w := g
		if n := len(g.Probes); n > 0 {
			w = g.Between(inject, g.Probes[n-1].Sent+1)
		}
		lost, out := w.Lost(), w.Outage()
		switch {
		case concerned[i] && down != nil && down[i]:
			res.SiteDownPairs++
			res.SiteDownLost += lost
			res.SiteDownOutageMs = max(res.SiteDownOutageMs, millis(out))
		case concerned[i] || !anyConcerned:
			res.Pairs++
			res.Sent += len(w.Probes)
			res.Lost += lost
			outage = max(outage, out)
		}
		if !concerned[i] {
			res.UnconcernedPairs++
			res.UnconcernedSent += len(w.Probes)
			res.UnconcernedLost += lost
		}
		if lost > 0 {
			res.Losses = append(res.Losses, PairLoss{Pair: pairs[i].String(), Concerned: concerned[i], Sent: len(w.Probes), Lost: lost, OutageMs: millis(out), Gaps: gaps(w, inject)})
		}
		from, answering := g.AnsweringFrom(repair)
		ok = ok && answering
		recovered = max(recovered, from)
	}
	res.OutageMs = millis(outage)
	if !ok {
		return 0, false
	}
	res.Recovered = true
	res.RecoveredS = round((recovered - repair).Seconds(), 2)
	return recovered, true
}

// lostAfter counts the probes every pair lost among those sent after the
// offset repair: a repaired link's way back.
func lostAfter(logs []lab.ProbeLog, repair time.Duration) int {
	n := 0
	for _, g := range logs {
		if k := len(g.Probes); k > 0 && g.Probes[k-1].Sent > repair {
			n += g.Between(repair, g.Probes[k-1].Sent+1).Lost()
		}
	}
	return n
}

func millis(d time.Duration) float64 { return round(float64(d)/float64(time.Millisecond), 1) }

// gaps describes the first maxGaps runs of lost probes of g, from the
// offset inject.
func gaps(g lab.ProbeLog, inject time.Duration) []string {
	var out []string
	for i := 0; i < len(g.Probes) && len(out) < maxGaps; {
		if g.Probes[i].Answered {
			i++
			continue
		}
		j := i
		for j < len(g.Probes) && !g.Probes[j].Answered {
			j++
		}
		start := g.Probes[i].Sent - inject
		length := g.Probes[j-1].Sent - g.Probes[i].Sent + g.Interval
		out = append(out, fmt.Sprintf("%+.2f s for %.0f ms", start.Seconds(), millis(length)))
		i = j
	}
	return out
}
