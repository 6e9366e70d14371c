package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fednet/fednet/internal/lab"
)

// path is one measured path: where the client runs, the address it sends
// to (where an iperf3 server listens on port), and the interfaces whose
// counters make up the path's wire.
type path struct {
	info PathInfo
	from lab.Commander
	to   netip.Addr
	port int
	// wire lists the public interfaces of both ends of the path's wire
	// (the gateways); none: the overhead is not measured.
	wire []wireIface
	// send, when set, transfers exactly n payload bytes for the overhead
	// measurement; else an iperf3 run of n bytes does, whose received
	// bytes are the payload.
	send func(ctx context.Context, n int64) (int64, error)
	// keepOffloads leaves the wire interfaces' segmentation as it is (on
	// machines bench does not own).
	keepOffloads bool
	// cost reads the CPU time of the machine and of the path's userspace
	// WireGuard processes.
	cost costMeter
}

// wireIface is a network interface in some place.
type wireIface struct {
	at    lab.Commander
	iface string
}

func (w wireIface) String() string { return w.at.String() + " " + w.iface }

// pathResult is everything measured on one path.
type pathResult struct {
	rtt      *RTTResult
	tcp      []TCPResult
	udp      []UDPResult
	overhead *OverheadResult
	loaded   *LoadedResult
	memory   *MemoryResult
	errs     []string
}

func (r *pathResult) fail(what string, err error) {
	r.errs = append(r.errs, what+": "+err.Error())
}

// measurePath runs every measurement but the delay sweep on p.
func measurePath(ctx context.Context, s Settings, p *path, progress func(string, ...any)) *pathResult {
	return measurePaths(ctx, s, []*path{p}, progress)[0]
}

// measurePaths runs every measurement but the delay sweep on each path,
// interleaved: each measurement (pings, TCP with n streams, UDP at a rate,
// ...) runs on every path in turn before the next starts, so paths
// compared with each other see the machine in the same state (on a shared
// machine, measuring one path after the other moves their ratios by
// ±20 %). It returns one result per path, in the order of paths.
func measurePaths(ctx context.Context, s Settings, paths []*path, progress func(string, ...any)) []*pathResult {
	res := make([]*pathResult, len(paths))
	for i := range res {
		res[i] = &pathResult{}
	}
	// each runs fn on every path in turn.
	each := func(fn func(p *path, r *pathResult)) {
		for i, p := range paths {
			fn(p, res[i])
		}
	}
	interval := time.Duration(s.PingIntervalMs * float64(time.Millisecond))
	each(func(p *path, r *pathResult) {
		progress("%s: %d pings at %v, %s -> %s", p.info.Name, s.PingCount, interval, p.info.From, p.info.To)
		if rtt, err := measureRTT(ctx, p, s.PingCount, interval); err != nil {
			r.fail("rtt", err)
		} else {
			r.rtt = &rtt
		}
	})
	dur := time.Duration(s.TransferS * float64(time.Second))
	rounds := max(s.TCPRounds, 1)
	for _, n := range s.Streams {
		got := make([][]TCPResult, len(paths))
		for round := range rounds {
			for i, p := range paths {
				progress("%s: TCP, %d stream(s), %v%s", p.info.Name, n, dur, roundOf(round, rounds))
				t, err := measureTCP(ctx, p, dur, n)
				if err != nil {
					res[i].fail(fmt.Sprintf("tcp %d streams", n), err)
					continue
				}
				got[i] = append(got[i], t)
			}
		}
		for i := range paths {
			if len(got[i]) > 0 {
				res[i].tcp = append(res[i].tcp, medianTCP(got[i]))
			}
		}
	}
	for _, rate := range s.UDPRatesMbps {
		each(func(p *path, r *pathResult) {
			progress("%s: UDP at %g Mbit/s, %v", p.info.Name, rate, dur)
			u, err := measureUDP(ctx, p, dur, rate)
			if err != nil {
				r.fail(fmt.Sprintf("udp %g Mbit/s", rate), err)
				return
			}
			r.udp = append(r.udp, u)
		})
	}
	each(func(p *path, r *pathResult) {
		if len(p.wire) == 0 || s.OverheadBytes <= 0 {
			return
		}
		progress("%s: traffic overhead, %d bytes over TCP", p.info.Name, s.OverheadBytes)
		if o, err := measureOverhead(ctx, p, s.OverheadBytes); err != nil {
			r.fail("overhead", err)
		} else {
			r.overhead = &o
		}
	})
	// Latency under load in rounds like TCP's: a p99 of one transfer's
	// few hundred pings is its third-highest sample, as noisy as a single
	// transfer's rate.
	loaded := make([][]LoadedResult, len(paths))
	for round := range rounds {
		for i, p := range paths {
			progress("%s: latency under load (ping during a bulk TCP transfer)%s", p.info.Name, roundOf(round, rounds))
			var idle Summary
			if res[i].rtt != nil {
				idle = res[i].rtt.Ms
			}
			l, err := measureLoaded(ctx, p, dur, interval, idle)
			if err != nil {
				res[i].fail("latency under load", err)
				continue
			}
			loaded[i] = append(loaded[i], l)
		}
	}
	for i := range paths {
		if len(loaded[i]) > 0 {
			l := poolLoaded(loaded[i])
			res[i].loaded = &l
		}
	}
	// Last: a peak over everything measured (paths that share processes,
	// routed and bridged, show the same peak).
	each(func(p *path, r *pathResult) {
		if p.cost.pids == nil {
			return
		}
		if m, err := memoryOf(p.info.Name, p.cost.pids()); err != nil {
			r.fail("memory", err)
		} else {
			r.memory = &m
		}
	})
	return res
}

// roundOf says which round of how many a measurement is, for progress
// lines: nothing when there is one.
func roundOf(round, rounds int) string {
	if rounds < 2 {
		return ""
	}
	return fmt.Sprintf(", round %d of %d", round+1, rounds)
}

// ping pings the path's target: from a lab node with the lab's own pinger
// (lab.Echo), which sleeps between requests where iputils ping, at
// intervals of 10 ms and less, spins on the CPU the path needs (a fifth
// of a CPU on a loaded two-CPU lab); from anywhere else with iputils ping.
func (p *path) ping(ctx context.Context, count int, interval time.Duration) (lab.PingResult, error) {
	if n, ok := p.from.(*lab.Node); ok {
		return lab.Echo(ctx, n, p.to, count, interval)
	}
	return lab.Ping(ctx, p.from, p.to, count, interval)
}

// measureRTT pings the path's target.
func measureRTT(ctx context.Context, p *path, count int, interval time.Duration) (RTTResult, error) {
	res, err := p.ping(ctx, count, interval)
	if err != nil {
		return RTTResult{}, err
	}
	if res.Received == 0 {
		return RTTResult{}, fmt.Errorf("no reply to %d pings from %s to %s", res.Sent, p.from, p.to)
	}
	samples := millis(res.RTTs)
	return RTTResult{Path: p.info.Name, Sent: res.Sent, Received: res.Received, LossPct: round(100*res.Loss(), 2),
		Ms: Summarize(samples), SamplesMs: samples}, nil
}

func millis(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = round(float64(d)/float64(time.Millisecond), 4)
	}
	return out
}

// measureTCP runs one timed iperf3 TCP test.
func measureTCP(ctx context.Context, p *path, d time.Duration, streams int) (TCPResult, error) {
	r, c, err := p.costed(ctx, transfer{from: p.from, to: p.to, port: p.port, duration: d, streams: streams})
	if err != nil {
		return TCPResult{}, err
	}
	return TCPResult{Path: p.info.Name, Streams: streams, Mbps: round(r.Mbps, 1), Retransmits: r.Retransmits, Seconds: round(r.Seconds, 2), Cost: c}, nil
}

// medianTCP returns, of the transfers ts of one path (in the order they
// ran), the one with the median rate (the lower of the middle two of an
// even count), with every transfer's rate in RoundsMbps when there was
// more than one.
func medianTCP(ts []TCPResult) TCPResult {
	if len(ts) == 1 {
		return ts[0]
	}
	sorted := slices.Clone(ts)
	slices.SortStableFunc(sorted, func(a, b TCPResult) int { return cmp.Compare(a.Mbps, b.Mbps) })
	m := sorted[(len(sorted)-1)/2]
	for _, t := range ts {
		m.RoundsMbps = append(m.RoundsMbps, t.Mbps)
	}
	return m
}

// measureUDP runs one timed iperf3 UDP test at an offered rate.
func measureUDP(ctx context.Context, p *path, d time.Duration, rate float64) (UDPResult, error) {
	r, c, err := p.costed(ctx, transfer{from: p.from, to: p.to, port: p.port, duration: d, udpMbps: rate})
	if err != nil {
		return UDPResult{}, err
	}
	return UDPResult{Path: p.info.Name, OfferedMbps: rate, SentMbps: round(r.SentMbps, 1), Mbps: round(r.Mbps, 1),
		LossPct: round(r.LostPercent, 3), JitterMs: round(r.JitterMs, 4), Cost: c}, nil
}

// costed runs t and measures its CPU cost per gigabyte received. A cost
// that cannot be read is left out (0); the transfer still counts.
func (p *path) costed(ctx context.Context, t transfer) (iperfResult, Cost, error) {
	before, berr := p.cost.sample()
	r, err := t.run(ctx)
	if err != nil {
		return r, Cost{}, err
	}
	var c Cost
	if after, aerr := p.cost.sample(); berr == nil && aerr == nil {
		c.CPUSecondsPerGB, c.WgdevCPUSecondsPerGB = p.cost.perGB(before, after, r.Bytes)
	}
	return r, c, nil
}

// measureOverhead sends a fixed number of bytes over TCP and counts the
// frames both ends' public interfaces send meanwhile. Segmentation
// offloads would count one super-packet of up to 64 KiB where the wire
// carries many packets, each with its headers; so for the transfer the
// interfaces get gso_max_segs 1 (the kernel then segments before the
// interface counts) and their old value back afterwards.
func measureOverhead(ctx context.Context, p *path, n int64) (res OverheadResult, err error) {
	if !p.keepOffloads {
		restore, serr := segmentOnWire(ctx, p.wire)
		defer func() { err = errors.Join(err, restore()) }()
		if serr != nil {
			return res, serr
		}
	}
	before, err := wireCounters(ctx, p.wire)
	if err != nil {
		return res, err
	}
	payload, err := p.transferBytes(ctx, n)
	if err != nil {
		return res, err
	}
	after, err := wireCounters(ctx, p.wire)
	if err != nil {
		return res, err
	}
	var where []string
	for _, w := range p.wire {
		where = append(where, w.String())
	}
	res = OverheadResult{Path: p.info.Name, PayloadBytes: payload, WireBytes: after.bytes - before.bytes,
		WirePackets: after.packets - before.packets, Counted: "tx of " + strings.Join(where, " and ")}
	res.Ratio = round(Ratio(float64(res.WireBytes), float64(res.PayloadBytes)), 4)
	return res, nil
}

// transferBytes sends about n bytes over the path and returns the payload
// that arrived.
func (p *path) transferBytes(ctx context.Context, n int64) (int64, error) {
	if p.send != nil {
		return p.send(ctx, n)
	}
	r, err := transfer{from: p.from, to: p.to, port: p.port, bytes: n, streams: 1}.run(ctx)
	return r.Bytes, err
}

type counters struct{ bytes, packets int64 }

// wireCounters adds up the transmit counters of the interfaces.
func wireCounters(ctx context.Context, wire []wireIface) (counters, error) {
	var c counters
	for _, w := range wire {
		out, err := w.at.Command(ctx, "cat", "/sys/class/net/"+w.iface+"/statistics/tx_bytes",
			"/sys/class/net/"+w.iface+"/statistics/tx_packets").Output()
		if err != nil {
			return c, fmt.Errorf("reading the counters of %s: %w", w, err)
		}
		f := strings.Fields(string(out))
		if len(f) != 2 {
			return c, fmt.Errorf("reading the counters of %s: got %q", w, out)
		}
		b, err1 := strconv.ParseInt(f[0], 10, 64)
		pk, err2 := strconv.ParseInt(f[1], 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return c, fmt.Errorf("reading the counters of %s: %w", w, err)
		}
		c.bytes += b
		c.packets += pk
	}
	return c, nil
}

// segmentOnWire sets gso_max_segs 1 on the interfaces and returns what
// restores their old values (always non-nil).
func segmentOnWire(ctx context.Context, wire []wireIface) (func() error, error) {
	var undo []func() error
	restore := func() error {
		var errs []error
		for _, u := range undo {
			errs = append(errs, u())
		}
		return errors.Join(errs...)
	}
	for _, w := range wire {
		old, err := gsoMaxSegs(ctx, w)
		if err != nil {
			return restore, err
		}
		if err := setGSOSegs(ctx, w, "1"); err != nil {
			return restore, err
		}
		undo = append(undo, func() error {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			return setGSOSegs(cctx, w, old)
		})
	}
	return restore, nil
}

// gsoMaxSegs reads an interface's gso_max_segs (ip -d -j link).
func gsoMaxSegs(ctx context.Context, w wireIface) (string, error) {
	out, err := w.at.Command(ctx, "ip", "-d", "-j", "link", "show", "dev", w.iface).Output()
	if err != nil {
		return "", fmt.Errorf("reading gso_max_segs of %s: %w", w, err)
	}
	var links []struct {
		GSOMaxSegs *int `json:"gso_max_segs"`
	}
	if err := json.Unmarshal(out, &links); err != nil || len(links) != 1 || links[0].GSOMaxSegs == nil {
		return "", fmt.Errorf("reading gso_max_segs of %s: unexpected output of ip -d -j link: %.200s", w, out)
	}
	return strconv.Itoa(*links[0].GSOMaxSegs), nil
}

func setGSOSegs(ctx context.Context, w wireIface, v string) error {
	if out, err := w.at.Command(ctx, "ip", "link", "set", "dev", w.iface, "gso_max_segs", v).CombinedOutput(); err != nil {
		return fmt.Errorf("setting gso_max_segs %s on %s: %w: %s", v, w, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// measureLoaded pings the path's target while a bulk TCP transfer of d
// runs on the same path: pings start a second into the transfer and stop
// a second before its end, so they see a full queue.
func measureLoaded(ctx context.Context, p *path, d time.Duration, interval time.Duration, idle Summary) (LoadedResult, error) {
	if d < 3*time.Second {
		d = 3 * time.Second
	}
	var wg sync.WaitGroup
	var bulk iperfResult
	var bulkErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		bulk, bulkErr = transfer{from: p.from, to: p.to, port: p.port, duration: d, streams: 1}.run(ctx)
	}()
	var res lab.PingResult
	var pingErr error
	select {
	case <-time.After(time.Second):
		count := int((d - 2*time.Second) / interval)
		res, pingErr = p.ping(ctx, max(count, 1), interval)
	case <-ctx.Done():
		pingErr = ctx.Err()
	}
	wg.Wait()
	if err := errors.Join(bulkErr, pingErr); err != nil {
		return LoadedResult{}, err
	}
	if res.Received == 0 {
		return LoadedResult{}, fmt.Errorf("no reply to %d pings under load from %s to %s", res.Sent, p.from, p.to)
	}
	samples := millis(res.RTTs)
	return LoadedResult{Path: p.info.Name, IdleMs: idle, LoadedMs: Summarize(samples), LoadMbps: round(bulk.Mbps, 1),
		LossPct: round(100*res.Loss(), 2), SamplesMs: samples, sent: res.Sent, received: res.Received}, nil
}

// poolLoaded returns the latency under load of a path's rounds ls (in the
// order they ran) as one: every round's pings summed up together, loss
// over all pings sent, the median round's load and each round's p99; one
// round is the result as it is.
func poolLoaded(ls []LoadedResult) LoadedResult {
	if len(ls) == 1 {
		return ls[0]
	}
	m := LoadedResult{Path: ls[0].Path, IdleMs: ls[0].IdleMs}
	var loads []float64
	for _, l := range ls {
		m.SamplesMs = append(m.SamplesMs, l.SamplesMs...)
		m.sent += l.sent
		m.received += l.received
		loads = append(loads, l.LoadMbps)
		m.RoundsP99Ms = append(m.RoundsP99Ms, l.LoadedMs.P99)
	}
	m.LoadedMs = Summarize(m.SamplesMs)
	if m.sent > 0 {
		m.LossPct = round(100*float64(m.sent-m.received)/float64(m.sent), 2)
	}
	slices.Sort(loads)
	m.LoadMbps = loads[(len(loads)-1)/2]
	return m
}
