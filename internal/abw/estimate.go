package abw

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"syscall"
	"time"
)

// Config tunes an estimate; the zero value uses the defaults below, which
// docs/bandwidth.md explains.
type Config struct {
	// Streams is the number of streams per fleet (default 5); a fleet stops
	// early once its verdict is decided.
	Streams int
	// MinPeriod is the shortest gap between two packets of a stream
	// (default 250 µs): at low rates packets shrink to keep it, which keeps
	// the bytes sent proportional to the rate. Pathload uses 100 µs; fewer,
	// larger packets cost userspace WireGuard less per byte and so jitter
	// less (at 20 Mbit/s, 250 µs put 12 of 12 trial runs within 15 %, 80 µs
	// 7 of 12).
	MinPeriod time.Duration
	// StreamTime is how long a stream lasts at least (default 12 ms), which
	// sets K, the packets per stream (from 64 to MaxStreamLen).
	StreamTime time.Duration
	// MaxPayload is the largest UDP payload of a probe (default 1200 bytes,
	// which fits a tunnel MTU of 1280).
	MaxPayload int
	// Resolution ends the search when High−Low is at most this fraction of
	// High (default 0.1).
	Resolution float64
	// GreyResolution ends the search when a grey region reaches to within
	// this fraction of High from both ends (default 0.1).
	GreyResolution float64
	// MaxFleets and MaxTime bound the search (defaults 10 fleets, 10 s);
	// a search stopped by them reports Converged false.
	MaxFleets int
	MaxTime   time.Duration
	// MaxCost bounds the bytes sent, as a fraction of what a 10 s transfer
	// at the initial train's dispersion rate sends (default 0.045, under
	// the 5 % goal): no fleet starts that could pass it, and the search
	// then reports Converged false. The dispersion rate lies between the
	// available bandwidth and the capacity, so this bounds the cost
	// against either.
	MaxCost float64
	// TrainLen is the number of packets of the initial back-to-back train
	// whose dispersion gives the first upper guess (default 48).
	TrainLen int
	// Frame returns the bytes a probe with a UDP payload of p bytes takes
	// on the underlay link (default TunnelFrame).
	Frame func(p int) int
	// Timeout is how long to wait for the responder's reports of a fleet
	// (default 1 s, asked up to three times).
	Timeout time.Duration
}

// Defaults of Config.
const (
	defaultStreams        = 5
	defaultMinPeriod      = 250 * time.Microsecond
	defaultStreamTime     = 12 * time.Millisecond
	defaultMaxPayload     = 1200
	defaultResolution     = 0.1
	defaultGreyResolution = 0.1
	defaultMaxFleets      = 10
	defaultMaxTime        = 10 * time.Second
	defaultMaxCost        = 0.045
	defaultTrainLen       = 48
	defaultTimeout        = time.Second
	minStreamLen          = 64
	// minFrame is the smallest probe frame on the underlay: smaller
	// packets would cost the tunnel more per byte than they save.
	minFrame = 200
)

func (c Config) withDefaults() Config {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	defFrac := func(v *float64, d float64) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.Streams, defaultStreams)
	def(&c.MaxPayload, defaultMaxPayload)
	def(&c.MaxFleets, defaultMaxFleets)
	def(&c.TrainLen, defaultTrainLen)
	defDur(&c.MinPeriod, defaultMinPeriod)
	defDur(&c.StreamTime, defaultStreamTime)
	defDur(&c.MaxTime, defaultMaxTime)
	defDur(&c.Timeout, defaultTimeout)
	defFrac(&c.Resolution, defaultResolution)
	defFrac(&c.GreyResolution, defaultGreyResolution)
	defFrac(&c.MaxCost, defaultMaxCost)
	if c.Frame == nil {
		c.Frame = TunnelFrame
	}
	c.MaxPayload = max(c.MaxPayload, probeLen)
	c.TrainLen = min(max(c.TrainLen, 2), MaxStreamLen)
	return c
}

// TunnelFrame returns the underlay frame size of a UDP datagram with p
// bytes of payload sent through a WireGuard tunnel over IPv4 and
// Ethernet: inner UDP and IPv4 headers (28 bytes), padded to 16 bytes,
// WireGuard's data header and tag (32), outer UDP and IPv4 (28) and the
// Ethernet header (14).
func TunnelFrame(p int) int {
	inner := p + 28
	inner = (inner + 15) / 16 * 16
	return inner + 32 + 28 + 14
}

// Result is an estimate of the available bandwidth.
type Result struct {
	// Low and High bound the available bandwidth, bit/s of underlay frames.
	Low  float64 `json:"low_bps"`
	High float64 `json:"high_bps"`
	// Estimate is the middle of the range.
	Estimate float64 `json:"estimate_bps"`
	// ADR is the dispersion rate of the initial packet train, the first
	// upper guess (between the available bandwidth and the capacity).
	ADR float64 `json:"adr_bps"`
	// Converged is false when MaxFleets or MaxTime stopped the search.
	Converged bool `json:"converged"`
	// Bytes counts the underlay frames of every probe sent, Packets the
	// probes.
	Bytes   int64 `json:"bytes"`
	Packets int   `json:"packets"`
	// Duration is the time the estimate took.
	Duration time.Duration `json:"duration_ns"`
	Fleets   []Fleet       `json:"fleets"`
}

// Fleet is one probing rate of the search and what its streams showed.
type Fleet struct {
	Rate    float64 `json:"rate_bps"`
	Payload int     `json:"payload"`
	K       int     `json:"k"`
	Trend   Trend   `json:"-"`
	Verdict string  `json:"trend"`
	// Streams are the trends of the streams, in order.
	Streams []string `json:"streams"`
	// Lost is the fraction of the fleet's packets that did not arrive.
	Lost float64 `json:"lost"`
}

// Estimate measures the available bandwidth from this host to a Responder
// over conn, a UDP socket connected to the responder (on a gateway, from
// its transit address to the peer's, so the probes cross the tunnel). It
// sends a packet train, then fleets of periodic streams, and returns the
// range that holds the available bandwidth. Only one Estimate may use a
// conn at a time. ctx cancels it.
func Estimate(ctx context.Context, conn *net.UDPConn, cfg Config) (Result, error) {
	cfg = cfg.withDefaults()
	start := time.Now()
	p := &prober{conn: conn, cfg: cfg, session: randomSession()}
	adr, err := p.train(ctx)
	if err != nil {
		return Result{}, err
	}
	res := Result{ADR: adr}
	s := newSearch(adr*1.1, cfg.Resolution, cfg.GreyResolution)
	budget := cfg.MaxCost * 10 * adr / 8 // bytes
	for len(res.Fleets) < cfg.MaxFleets && time.Since(start) < cfg.MaxTime && !s.done() {
		if float64(p.bytes)+p.fleetCost(s.rate()) > budget {
			break
		}
		f, err := p.fleet(ctx, s.rate())
		if err != nil {
			return Result{}, err
		}
		res.Fleets = append(res.Fleets, f)
		s.record(f.Rate, f.Trend)
	}
	res.Converged = s.done()
	res.Low, res.High = s.bounds()
	res.Estimate = (res.Low + res.High) / 2
	res.Bytes, res.Packets = p.bytes, p.packets
	res.Duration = time.Since(start)
	return res, nil
}

func randomSession() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.BigEndian.Uint64(b[:])
}

// prober sends streams of one session and collects their reports.
type prober struct {
	conn    *net.UDPConn
	cfg     Config
	session uint64
	next    uint32 // next stream number
	bytes   int64
	packets int
}

// sent is what the prober knows of one stream it sent.
type sent struct {
	stream uint32
	count  int
	times  []int64 // send timestamps by sequence number
	frame  int
	// slow is set when the sender could not keep the stream's rate.
	slow bool
}

// train sends TrainLen packets back to back and returns their dispersion
// rate at the responder, bit/s of frames.
func (p *prober) train(ctx context.Context) (float64, error) {
	st, err := p.stream(p.cfg.MaxPayload, p.cfg.TrainLen, 0)
	if err != nil {
		return 0, err
	}
	reps, err := p.collect(ctx, []*sent{st})
	if err != nil {
		return 0, err
	}
	arr := reps[0].arrivals
	if len(arr) < 2 {
		return 0, fmt.Errorf("available bandwidth: only %d of %d packets of the initial train arrived", len(arr), st.count)
	}
	var t0, t1 int64 = math.MaxInt64, math.MinInt64
	for _, a := range arr {
		at := st.times[a.seq] + a.owd // arrival time on the responder's clock
		t0, t1 = min(t0, at), max(t1, at)
	}
	if t1 <= t0 {
		return 0, errors.New("available bandwidth: the initial train arrived in no time; the receiver's clock is too coarse")
	}
	return float64((len(arr)-1)*st.frame*8) / (float64(t1-t0) / 1e9), nil
}

// fleet sends Streams streams at rate r and classifies them.
func (p *prober) fleet(ctx context.Context, r float64) (Fleet, error) {
	payload, period := p.shape(r)
	frame := p.cfg.Frame(payload)
	rate := float64(frame*8) / period.Seconds() // exact rate of this shape
	k := p.streamLen(period)
	gap := max(2*time.Duration(k)*period, 5*time.Millisecond)
	f := Fleet{Rate: rate, Payload: payload, K: k}
	var trends []Trend
	var lost, total int
	for i := range p.cfg.Streams {
		if t, decided := fleetVerdict(trends, p.cfg.Streams); decided {
			f.Trend = t
			break
		}
		if i > 0 {
			if err := sleep(ctx, gap); err != nil {
				return Fleet{}, err
			}
		}
		st, err := p.stream(payload, k, period)
		if err != nil {
			return Fleet{}, err
		}
		// Asking for the report takes a round trip, part of the gap that
		// lets the queue the stream built drain.
		reps, err := p.collect(ctx, []*sent{st})
		if err != nil {
			return Fleet{}, err
		}
		owd, missing := delays(reps[0], st.count)
		lost += missing
		total += st.count
		t := StreamTrend(owd, float64(missing)/float64(st.count))
		if st.slow && t == Flat {
			// A sender that fell behind did not send at r; its flat
			// delays prove nothing.
			t = Grey
		}
		trends = append(trends, t)
		f.Streams = append(f.Streams, t.String())
		f.Trend, _ = fleetVerdict(trends, p.cfg.Streams)
	}
	f.Verdict = f.Trend.String()
	f.Lost = float64(lost) / float64(total)
	return f, nil
}

// fleetCost is the most bytes a fleet at rate r sends (every stream).
func (p *prober) fleetCost(r float64) float64 {
	payload, period := p.shape(r)
	k := p.streamLen(period)
	return float64(p.cfg.Streams * k * p.cfg.Frame(payload))
}

// streamLen is K for packets period apart: StreamTime's worth, within
// [minStreamLen, MaxStreamLen].
func (p *prober) streamLen(period time.Duration) int {
	return min(max(int(math.Ceil(float64(p.cfg.StreamTime)/float64(period))), minStreamLen), MaxStreamLen)
}

// shape picks the payload and the packet period for rate r: frames of
// r·MinPeriod, within [minFrame, Frame(MaxPayload)], sent every
// frame·8/r.
func (p *prober) shape(r float64) (payload int, period time.Duration) {
	maxFrame := p.cfg.Frame(p.cfg.MaxPayload)
	want := min(max(int(r*p.cfg.MinPeriod.Seconds()/8), minFrame), maxFrame)
	payload = p.cfg.MaxPayload
	for payload > probeLen && p.cfg.Frame(payload) > want {
		payload -= max((p.cfg.Frame(payload)-want)/2, 1)
	}
	payload = max(payload, probeLen)
	frame := p.cfg.Frame(payload)
	return payload, time.Duration(float64(frame*8) / r * 1e9)
}

// stream sends k probes of payload bytes, one every period (back to back
// when period is 0), as the session's next stream.
func (p *prober) stream(payload, k int, period time.Duration) (*sent, error) {
	st := &sent{stream: p.next, count: k, times: make([]int64, k), frame: p.cfg.Frame(payload)}
	p.next++
	buf := make([]byte, payload)
	start := time.Now()
	for i := range k {
		if period > 0 {
			waitUntil(start.Add(time.Duration(i) * period))
		}
		now := time.Now()
		st.times[i] = now.UnixNano()
		encodeProbe(buf, probe{session: p.session, stream: st.stream, seq: uint16(i), count: uint16(k), sent: st.times[i]})
		if _, err := p.conn.Write(buf); err != nil {
			return nil, p.sendError("sending available-bandwidth probes", err)
		}
		p.bytes += int64(st.frame)
		p.packets++
	}
	if period > 0 {
		took := time.Duration(st.times[k-1] - st.times[0])
		st.slow = took > time.Duration(float64(time.Duration(k-1)*period)*1.1)
	}
	return st, nil
}

// waitUntil returns at t: it sleeps while t is far and spins the last
// stretch, because sleeps overshoot by tens of microseconds.
func waitUntil(t time.Time) {
	for {
		d := time.Until(t)
		if d <= 0 {
			return
		}
		if d > 300*time.Microsecond {
			time.Sleep(d - 200*time.Microsecond)
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// collect asks the responder for the reports of streams (consecutive
// numbers) and waits for them, asking again for missing ones up to three
// times. A stream of which no packet arrived has no report: it comes back
// empty, as fully lost.
func (p *prober) collect(ctx context.Context, streams []*sent) ([]report, error) {
	first := streams[0].stream
	out := make([]report, len(streams))
	have := make([]bool, len(streams))
	buf := make([]byte, 1<<16)
	got := 0
	for attempt := 0; attempt < 3 && got < len(streams); attempt++ {
		req := encodeRequest(request{session: p.session, first: first, n: uint16(len(streams))})
		if _, err := p.conn.Write(req); err != nil {
			return nil, p.sendError("asking for available-bandwidth reports", err)
		}
		deadline := time.Now().Add(p.cfg.Timeout / 3)
		for got < len(streams) {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			_ = p.conn.SetReadDeadline(deadline)
			n, err := p.conn.Read(buf)
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					break
				}
				// ICMP port unreachable shows as a read error: nobody listens.
				return nil, p.noResponder(err)
			}
			rep, err := decodeReport(buf[:n])
			if err != nil || rep.session != p.session || rep.stream < first || rep.stream >= first+uint32(len(streams)) {
				continue
			}
			i := rep.stream - first
			if !have[i] {
				have[i], out[i] = true, rep
				got++
			}
		}
	}
	_ = p.conn.SetReadDeadline(time.Time{})
	if got == 0 {
		return nil, fmt.Errorf("no answer from an available-bandwidth responder at %s within %v (is the agent running there, and port %d open?)", p.conn.RemoteAddr(), p.cfg.Timeout, Port)
	}
	for i, st := range streams {
		out[i].stream, out[i].count = st.stream, uint16(st.count)
	}
	return out, nil
}

// noResponder is the error for a socket error that means nobody listens
// at the responder's address (ICMP port unreachable).
func (p *prober) noResponder(err error) error {
	return fmt.Errorf("no available-bandwidth responder at %s (is the agent running there, and port %d open?): %w", p.conn.RemoteAddr(), Port, err)
}

// sendError wraps an error writing to the responder: an earlier probe's
// ICMP port unreachable shows on the next write as ECONNREFUSED.
func (p *prober) sendError(what string, err error) error {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return p.noResponder(err)
	}
	return fmt.Errorf("%s to %s: %w", what, p.conn.RemoteAddr(), err)
}

// delays returns a stream's one-way delays in sending order (ns as
// float64) and how many of its count packets are missing.
func delays(r report, count int) ([]float64, int) {
	arr := slices.Clone(r.arrivals)
	slices.SortFunc(arr, func(a, b arrival) int { return int(a.seq) - int(b.seq) })
	owd := make([]float64, 0, len(arr))
	for _, a := range arr {
		owd = append(owd, float64(a.owd))
	}
	return owd, max(count-len(arr), 0)
}
