package lab

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// Impairment shapes a site's internet link: the veth between each of the
// site's gateways and the internet bridge. Every field applies to each
// direction separately (upload and download), as netem on both ends of a
// link would: a Delay of 50 ms adds 100 ms to a round trip that crosses the
// link twice, and a Loss of 1 % loses about 2 % of ping exchanges. The zero
// value is no impairment.
type Impairment struct {
	// Rate limits the link in bit/s with a token bucket (tbf), counting
	// whole frames as the kernel queues them (Ethernet header included);
	// 0 leaves the rate alone.
	Rate float64
	// Burst is the token bucket's depth in bytes (default: 100 µs at Rate,
	// at least 1600 bytes, one full frame). A small bucket keeps bursts
	// from passing above Rate: a bucket of b bytes hides b·8/t bit/s of
	// excess from a probe stream lasting t.
	Burst int
	// Queue is how long a frame may wait in the token bucket's queue
	// before it is dropped (default 50 ms at Rate).
	Queue time.Duration
	// Delay is added to every packet, in each direction.
	Delay time.Duration
	// Jitter varies Delay uniformly within ±Jitter. Packets keep their
	// order (a packet never leaves before the one ahead of it), as on a
	// real link; netem without rate would reorder them.
	Jitter time.Duration
	// Loss is the probability, 0 to 1, that a packet is dropped, in each
	// direction, independently of other packets.
	Loss float64
}

// Defaults and bounds of Impairment.
const (
	minBurst     = 1600
	defaultQueue = 50 * time.Millisecond
	maxDelay     = 10 * time.Second
	// maxRate bounds Rate to what tbf's 64-bit byte rate and the lab can
	// carry with room to spare (100 Gbit/s).
	maxRate = 100e9
)

// delayed reports whether the impairment needs the userspace delay line
// (the kernel here has no netem).
func (im Impairment) delayed() bool {
	return im.Delay > 0 || im.Jitter > 0 || im.Loss > 0
}

// IsZero reports whether the impairment changes nothing.
func (im Impairment) IsZero() bool { return im.Rate == 0 && !im.delayed() }

// Validate reports the first field out of range, naming it and the fix.
func (im Impairment) Validate() error {
	switch {
	case im.Rate < 0 || im.Rate > maxRate || math.IsNaN(im.Rate):
		return fmt.Errorf("impairment rate %v bit/s: use 0 (no limit) up to 100gbit", im.Rate)
	case im.Rate > 0 && im.Rate < 8000:
		return fmt.Errorf("impairment rate %v bit/s: use at least 8kbit", im.Rate)
	case im.Burst < 0 || im.Burst > 1<<30:
		return fmt.Errorf("impairment burst %d bytes: use 0 (default) up to 1 GiB", im.Burst)
	case im.Queue < 0 || im.Queue > maxDelay:
		return fmt.Errorf("impairment queue %v: use 0 (default %v) up to %v", im.Queue, defaultQueue, maxDelay)
	case im.Delay < 0 || im.Delay > maxDelay:
		return fmt.Errorf("impairment delay %v: use 0 up to %v", im.Delay, maxDelay)
	case im.Jitter < 0 || im.Jitter > maxDelay:
		return fmt.Errorf("impairment jitter %v: use 0 up to %v", im.Jitter, maxDelay)
	case im.Loss < 0 || im.Loss > 1 || math.IsNaN(im.Loss):
		return fmt.Errorf("impairment loss %v: use a probability from 0 to 1 (0%% to 100%%)", im.Loss)
	}
	return nil
}

// String renders the impairment in the CLI's terms.
func (im Impairment) String() string {
	if im.IsZero() {
		return "none"
	}
	var parts []string
	if im.Rate > 0 {
		parts = append(parts, "rate "+FormatRate(im.Rate))
	}
	if im.Delay > 0 {
		parts = append(parts, "delay "+im.Delay.String())
	}
	if im.Jitter > 0 {
		parts = append(parts, "jitter "+im.Jitter.String())
	}
	if im.Loss > 0 {
		parts = append(parts, "loss "+strconv.FormatFloat(im.Loss*100, 'g', -1, 64)+"%")
	}
	return strings.Join(parts, ", ")
}

// burst returns the token bucket depth in bytes.
func (im Impairment) burst() int {
	if im.Burst > 0 {
		return im.Burst
	}
	return max(int(im.Rate/8/10000), minBurst)
}

// limit returns the token bucket's queue in bytes.
func (im Impairment) limit() int {
	q := im.Queue
	if q == 0 {
		q = defaultQueue
	}
	return int(im.Rate/8*q.Seconds()) + im.burst()
}

// ParseRate reads a rate in bit/s as tc writes it: a number with an
// optional unit bit, kbit, mbit or gbit (case-insensitive; k, m, g alone
// work too). "100mbit" is 100e6.
func ParseRate(s string) (float64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	mult := 1.0
	for _, u := range []struct {
		suffix string
		mult   float64
	}{{"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}, {"bit", 1}, {"g", 1e9}, {"m", 1e6}, {"k", 1e3}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSuffix(t, u.suffix), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(t), 64)
	if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, fmt.Errorf("rate %q: write a number of bit/s with an optional unit, e.g. 100mbit, 1.5gbit, 800kbit", s)
	}
	return v * mult, nil
}

// FormatRate renders a rate in bit/s with the largest unit ParseRate reads
// back ("100mbit").
func FormatRate(r float64) string {
	for _, u := range []struct {
		unit string
		div  float64
	}{{"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}} {
		if r >= u.div {
			return strconv.FormatFloat(r/u.div, 'g', 6, 64) + u.unit
		}
	}
	return strconv.FormatFloat(r, 'g', 6, 64) + "bit"
}

// ParseLoss reads a loss percentage, "1%" or "1" (both 1 %), as a
// probability.
func ParseLoss(s string) (float64, error) {
	t := strings.TrimSuffix(strings.TrimSpace(s), "%")
	v, err := strconv.ParseFloat(strings.TrimSpace(t), 64)
	if err != nil || v < 0 || v > 100 || math.IsNaN(v) {
		return 0, fmt.Errorf("loss %q: write a percentage from 0 to 100, e.g. 1%% or 0.5%%", s)
	}
	return v / 100, nil
}

// schedule decides, for each packet the delay line reads, whether it is
// lost and when it leaves. It keeps packets in order: a packet never
// leaves before the one read before it. Not safe for concurrent use.
type schedule struct {
	delay, jitter time.Duration
	loss          float64
	rng           *rand.Rand
	last          time.Time
}

// next returns when a packet read at now leaves, or ok false if it is
// lost.
func (s *schedule) next(now time.Time) (due time.Time, ok bool) {
	if s.loss > 0 && s.rng.Float64() < s.loss {
		return time.Time{}, false
	}
	d := s.delay
	if s.jitter > 0 {
		d += time.Duration((s.rng.Float64()*2 - 1) * float64(s.jitter))
	}
	due = now.Add(max(d, 0))
	if due.Before(s.last) {
		due = s.last
	}
	s.last = due
	return due, true
}

// Direction says which way traffic crosses a site's internet link.
type Direction int

// Directions.
const (
	// Download is from the internet into the site.
	Download Direction = iota + 1
	// Upload is from the site to the internet.
	Upload
)

// String returns "download" or "upload".
func (d Direction) String() string {
	switch d {
	case Download:
		return "download"
	case Upload:
		return "upload"
	}
	return "direction(" + strconv.Itoa(int(d)) + ")"
}

// Cross traffic packets: UDP payload size, and what a frame adds to it
// (UDP, IPv4 and Ethernet headers).
const (
	crossPayload     = 1400
	udpFrameOverhead = 8 + 20 + 14
)
