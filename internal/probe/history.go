package probe

import (
	"math"
	"sync"
	"time"
)

// History resolution and span.
const (
	// SecondSpan is how far back History keeps 1-second samples.
	SecondSpan = time.Hour
	// MinuteSpan is how far back History keeps 1-minute aggregates.
	MinuteSpan = 24 * time.Hour

	secondSlots = int64(SecondSpan / time.Second) // 3600
	minuteSlots = int64(MinuteSpan / time.Minute) // 1440
)

// RTT histogram of a minute aggregate: bucket i holds RTTs in
// [histBase*2^(i/4), histBase*2^((i+1)/4)), the first and last buckets
// also everything below and above. A bucket is about 19% wide, so a
// quantile read from its geometric middle is within about 9% of the truth.
const (
	histBase    = time.Microsecond
	histPerOct  = 4
	histBuckets = 96 // up to about 16.8 s
)

// Minute is the aggregate of the samples sent during one minute.
type Minute struct {
	Start time.Time // the minute, truncated, in UTC
	Count int       // samples with an outcome
	Lost  int
	// RTT figures over the received samples; zero when none was received.
	RTTMin, RTTMax, RTTMean time.Duration
	// RTTP99 is read from a log-scale histogram (about ±9%), clamped to
	// [RTTMin, RTTMax].
	RTTP99 time.Duration
	Jitter time.Duration // of the minute's most recent received sample
}

// History is the 24-hour record of one link: one sample per second for the
// last hour (a ring of 3600 slots) and one aggregate per minute for the
// last 24 hours (a ring of 1440 slots, including the last hour).
//
// Time comes from the caller: samples carry their send time and queries
// take "now", so History never reads a clock. A sample is filed by its Sent
// time; the 1-second ring keeps the last sample added for each second,
// while a minute aggregate counts every sample of its minute. Samples
// added late (a lost probe is known only after the timeout) land in their
// own second and minute as long as those are still kept. Seconds without
// any sample (prober not running) count neither as sent nor as lost.
//
// The zero value is not usable; call [NewHistory]. Methods are safe for
// concurrent use.
type History struct {
	mu      sync.Mutex
	seconds []secondSlot // guarded by mu
	minutes []minuteSlot // guarded by mu
	latest  int64        // newest second added; guarded by mu
}

type secondSlot struct {
	sec   int64 // Unix second; valid only if ok
	ok    bool
	entry Sample
}

type minuteSlot struct {
	min        int64 // Unix minute; valid only if ok
	ok         bool
	count      int
	lost       int
	rttMin     time.Duration
	rttMax     time.Duration
	rttSum     time.Duration
	jitter     time.Duration
	jitterAt   time.Time
	hist       [histBuckets]uint16 // saturating counts
	histTotals int
}

// NewHistory returns an empty History.
func NewHistory() *History {
	return &History{
		seconds: make([]secondSlot, secondSlots),
		minutes: make([]minuteSlot, minuteSlots),
	}
}

// Add records s under s.Sent. A sample older than 24 hours before the
// newest sample added is dropped.
func (h *History) Add(s Sample) {
	h.mu.Lock()
	defer h.mu.Unlock()
	sec := floorDiv(s.Sent.UnixNano(), int64(time.Second))
	if sec > h.latest {
		h.latest = sec
	}
	if h.latest-sec < secondSlots {
		slot := &h.seconds[mod(sec, secondSlots)]
		if !slot.ok || slot.sec <= sec {
			*slot = secondSlot{sec: sec, ok: true, entry: s}
		}
	}
	m := floorDiv(sec, 60)
	if h.latest/60-m >= minuteSlots {
		return
	}
	ms := &h.minutes[mod(m, minuteSlots)]
	if !ms.ok || ms.min < m {
		*ms = minuteSlot{min: m, ok: true}
	} else if ms.min > m {
		return // the slot already holds a newer minute
	}
	ms.addLocked(s)
}

func (ms *minuteSlot) addLocked(s Sample) {
	ms.count++
	if s.Lost {
		ms.lost++
		return
	}
	if ms.histTotals == 0 || s.RTT < ms.rttMin {
		ms.rttMin = s.RTT
	}
	if ms.histTotals == 0 || s.RTT > ms.rttMax {
		ms.rttMax = s.RTT
	}
	ms.rttSum += s.RTT
	ms.histTotals++
	if b := &ms.hist[bucket(s.RTT)]; *b < math.MaxUint16 {
		*b++
	}
	if ms.jitterAt.IsZero() || !s.Sent.Before(ms.jitterAt) {
		ms.jitter, ms.jitterAt = s.Jitter, s.Sent
	}
}

// Samples returns the 1-second samples sent in (now-d, now], oldest first.
// d is capped at [SecondSpan]: older seconds are gone.
func (h *History) Samples(now time.Time, d time.Duration) []Sample {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.samplesLocked(now, min(d, SecondSpan))
}

func (h *History) samplesLocked(now time.Time, d time.Duration) []Sample {
	from, to := now.Add(-d), now
	var out []Sample
	last := floorDiv(now.UnixNano(), int64(time.Second))
	// The window touches at most secondSlots+1 seconds; a slot answers only
	// for the second it holds.
	for sec := floorDiv(from.UnixNano(), int64(time.Second)); sec <= last; sec++ {
		slot := h.seconds[mod(sec, secondSlots)]
		if !slot.ok || slot.sec != sec {
			continue
		}
		if t := slot.entry.Sent; t.After(from) && !t.After(to) {
			out = append(out, slot.entry)
		}
	}
	return out
}

// Minutes returns the aggregates of the minutes that overlap (now-d, now],
// oldest first, capped at [MinuteSpan]. The current minute is included
// and may be partial.
func (h *History) Minutes(now time.Time, d time.Duration) []Minute {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []Minute
	for _, ms := range h.minutesLocked(now, d) {
		out = append(out, ms.export())
	}
	return out
}

func (h *History) minutesLocked(now time.Time, d time.Duration) []*minuteSlot {
	d = min(d, MinuteSpan)
	first := floorDiv(now.Add(-d).UnixNano(), int64(time.Minute))
	last := floorDiv(now.UnixNano(), int64(time.Minute))
	first = max(first, last-minuteSlots+1)
	var out []*minuteSlot
	for m := first; m <= last; m++ {
		ms := &h.minutes[mod(m, minuteSlots)]
		if ms.ok && ms.min == m {
			out = append(out, ms)
		}
	}
	return out
}

// Window returns the statistics of the last d before now. Up to
// [SecondSpan] it summarises the 1-second samples sent in (now-d, now]
// exactly ([Summarize]). Beyond that it merges the minute aggregates of
// the minutes overlapping the window (whole minutes, so up to a minute
// more than d), capped at [MinuteSpan]; its percentiles then come from the
// merged histograms (about ±9%, clamped to the exact min and max).
func (h *History) Window(now time.Time, d time.Duration) Stats {
	h.mu.Lock()
	defer h.mu.Unlock()
	if d <= SecondSpan {
		return Summarize(h.samplesLocked(now, d))
	}
	var merged minuteSlot
	for _, ms := range h.minutesLocked(now, d) {
		merged.merge(ms)
	}
	st := Stats{Sent: merged.count, Lost: merged.lost, Jitter: merged.jitter}
	if st.Sent > 0 {
		st.Loss = float64(st.Lost) / float64(st.Sent)
	}
	if merged.histTotals > 0 {
		st.RTTMin, st.RTTMax = merged.rttMin, merged.rttMax
		st.RTTMean = merged.rttSum / time.Duration(merged.histTotals)
		st.RTTP50 = merged.quantile(50)
		st.RTTP99 = merged.quantile(99)
	}
	return st
}

func (ms *minuteSlot) merge(o *minuteSlot) {
	ms.count += o.count
	ms.lost += o.lost
	if o.histTotals > 0 {
		if ms.histTotals == 0 || o.rttMin < ms.rttMin {
			ms.rttMin = o.rttMin
		}
		if ms.histTotals == 0 || o.rttMax > ms.rttMax {
			ms.rttMax = o.rttMax
		}
		ms.rttSum += o.rttSum
		ms.histTotals += o.histTotals
		for i, c := range o.hist {
			ms.hist[i] = uint16(min(int(ms.hist[i])+int(c), math.MaxUint16))
		}
		if ms.jitterAt.IsZero() || !o.jitterAt.Before(ms.jitterAt) {
			ms.jitter, ms.jitterAt = o.jitter, o.jitterAt
		}
	}
}

// quantile reads the nearest-rank p-th percentile from the histogram: the
// geometric middle of the bucket holding that rank, clamped to [min, max].
func (ms *minuteSlot) quantile(p float64) time.Duration {
	total := 0
	for _, c := range ms.hist {
		total += int(c)
	}
	if total == 0 {
		return 0
	}
	rank := min(max(int(math.Ceil(p/100*float64(total))), 1), total)
	seen := 0
	for i, c := range ms.hist {
		seen += int(c)
		if seen >= rank {
			v := time.Duration(float64(histBase) * math.Exp2((float64(i)+0.5)/histPerOct))
			return min(max(v, ms.rttMin), ms.rttMax)
		}
	}
	return ms.rttMax
}

func (ms *minuteSlot) export() Minute {
	m := Minute{
		Start:  time.Unix(ms.min*60, 0).UTC(),
		Count:  ms.count,
		Lost:   ms.lost,
		Jitter: ms.jitter,
	}
	if ms.histTotals > 0 {
		m.RTTMin, m.RTTMax = ms.rttMin, ms.rttMax
		m.RTTMean = ms.rttSum / time.Duration(ms.histTotals)
		m.RTTP99 = ms.quantile(99)
	}
	return m
}

// bucket returns the histogram bucket of rtt.
func bucket(rtt time.Duration) int {
	if rtt <= histBase {
		return 0
	}
	i := int(math.Floor(math.Log2(float64(rtt)/float64(histBase)) * histPerOct))
	return min(max(i, 0), histBuckets-1)
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

func mod(a, b int64) int64 {
	r := a % b
	if r < 0 {
		r += b
	}
	return r
}
