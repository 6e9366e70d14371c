package probe

import (
	"math"
	"slices"
	"time"
)

// Sample is the outcome of one probe.
type Sample struct {
	Seq  uint32
	Sent time.Time // when the request was sent, on the prober's clock
	// Lost is true when no valid reply arrived within the prober's timeout;
	// RTT and Jitter are then zero.
	Lost bool
	// RTT is the round-trip time with the responder's hold time (reply
	// time minus receive time) taken out.
	RTT time.Duration
	// Jitter is the RFC 3550 interarrival jitter estimate of the prober
	// after this reply (see [Jitter]).
	Jitter time.Duration
	// Retry marks a probe sent early because the one before it went
	// unanswered (Config.Retry): it counts for the link-up verdict, but
	// loss rates leave it out, or an outage would weigh more than its
	// share of time.
	Retry bool
}

// Stats summarises samples over a window. The zero value means no samples.
type Stats struct {
	Sent int     // probes with an outcome in the window
	Lost int     // of which lost
	Loss float64 // Lost/Sent, 0 when Sent is 0
	// RTT figures over the received probes; zero when none was received.
	RTTMin, RTTMax, RTTMean time.Duration
	RTTP50, RTTP99          time.Duration
	// Jitter is the RFC 3550 estimate carried by the most recent received
	// sample of the window: a running value, like the one RTCP reports.
	Jitter time.Duration
}

// Summarize computes exact statistics over samples, in any order.
// Percentiles use the nearest-rank method ([Percentile]). It is pure and
// does not modify samples.
func Summarize(samples []Sample) Stats {
	var st Stats
	rtts := make([]time.Duration, 0, len(samples))
	var sum time.Duration
	var last time.Time
	for _, s := range samples {
		st.Sent++
		if s.Lost {
			st.Lost++
			continue
		}
		rtts = append(rtts, s.RTT)
		sum += s.RTT
		if len(rtts) == 1 || !s.Sent.Before(last) {
			last = s.Sent
			st.Jitter = s.Jitter
		}
	}
	if st.Sent > 0 {
		st.Loss = float64(st.Lost) / float64(st.Sent)
	}
	if len(rtts) == 0 {
		return st
	}
	slices.Sort(rtts)
	st.RTTMin = rtts[0]
	st.RTTMax = rtts[len(rtts)-1]
	st.RTTMean = sum / time.Duration(len(rtts))
	st.RTTP50 = Percentile(rtts, 50)
	st.RTTP99 = Percentile(rtts, 99)
	return st
}

// Percentile returns the nearest-rank p-th percentile (0 < p <= 100) of
// sorted, which must be sorted ascending: the smallest value such that at
// least p% of the values are less than or equal to it. It returns 0 for an
// empty slice; p <= 0 gives the minimum.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// Jitter is the RFC 3550 (section 6.4.1) interarrival jitter estimator.
// Each Add takes the transit time of one packet, its arrival time minus its
// send timestamp. For consecutive packets i and j, D = transit(j) -
// transit(i), and the estimate moves by J += (|D| - J)/16. A constant clock
// offset between sender and receiver cancels in D, so transit may be taken
// between unsynchronised clocks.
//
// The zero value is ready to use and estimates 0. It is pure and not safe
// for concurrent use.
type Jitter struct {
	j       float64 // ns
	last    time.Duration
	started bool
}

// Add feeds the transit time of the next packet in arrival order.
func (j *Jitter) Add(transit time.Duration) {
	if !j.started {
		j.started, j.last = true, transit
		return
	}
	d := float64(transit - j.last)
	j.last = transit
	j.j += (math.Abs(d) - j.j) / 16
}

// Value returns the current estimate, rounded to the nanosecond.
func (j Jitter) Value() time.Duration {
	return time.Duration(math.Round(j.j))
}
