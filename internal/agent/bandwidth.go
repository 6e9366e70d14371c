package agent

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/fednet/fednet/internal/abw"
	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/metrics"
	"github.com/fednet/fednet/internal/plan"
)

// BandwidthConfig configures the agent's part in available-bandwidth
// estimates (docs/bandwidth.md): the responder on the transit address
// (port abw.Port), which always runs, and estimates of its own links.
type BandwidthConfig struct {
	// Interval between scheduled estimates of every link, each started at
	// a random point within ±20 % of it; 0 (the default) schedules none.
	// Estimates asked for through the manager run either way.
	Interval time.Duration
	// Estimator tunes the estimates (zero: abw defaults).
	Estimator abw.Config
}

// MinBandwidthInterval bounds BandwidthConfig.Interval from below: each
// estimate loads the link for a second or so.
const MinBandwidthInterval = time.Minute

// bandwidth runs the responder on the gateway's transit address, follows
// the plan's peers, and estimates links on a schedule or on demand, one at
// a time. Methods are safe for concurrent use.
type bandwidth struct {
	cfg     BandwidthConfig
	logf    func(string, ...any)
	metrics *metrics.Agent

	mu      sync.Mutex
	local   netip.Addr            // responder's address; guarded by mu
	conn    *net.UDPConn          // responder's socket; guarded by mu
	peers   map[string]netip.Addr // transit addresses by gateway; guarded by mu
	lastErr string                // last responder error logged; guarded by mu
	closed  bool                  // guarded by mu

	responder *abw.Responder
	one       sync.Mutex // one estimate at a time
	stop      context.CancelFunc
	done      chan struct{}
}

// start returns the bandwidth part of an agent run; it schedules
// estimates when cfg.Interval is set. Close ends it.
func (c BandwidthConfig) start(ctx context.Context, logf func(string, ...any), m *metrics.Agent) *bandwidth {
	ctx, cancel := context.WithCancel(ctx)
	b := &bandwidth{cfg: c, logf: logf, metrics: m, peers: map[string]netip.Addr{}, responder: abw.NewResponder(), stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(b.done)
		if c.Interval > 0 {
			b.schedule(ctx)
		}
	}()
	return b
}

// Update follows g: the responder moves to g's transit address, and the
// peers with a key and a transit address become the links to estimate.
// Idempotent; a socket that cannot be opened yet is tried again at the
// next Update.
func (b *bandwidth) Update(g plan.Gateway) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	peers := map[string]netip.Addr{}
	for _, p := range g.Peers {
		if a, ok := peerTransit(g, p); ok && !p.WireGuard.PublicKey.IsZero() {
			peers[p.Gateway] = a
		}
	}
	b.peers = peers
	local := g.TransitAddress()
	if b.conn != nil && b.local == local {
		return
	}
	if b.conn != nil {
		b.conn.Close()
		b.conn = nil
	}
	b.local = local
	if !local.IsValid() {
		return
	}
	conn, err := abw.Listen(local)
	if err != nil {
		if msg := err.Error(); msg != b.lastErr {
			b.lastErr = msg
			b.logf("%v; retrying at the next apply", err)
		}
		return
	}
	b.lastErr = ""
	b.conn = conn
	go func() {
		if err := b.responder.Serve(context.Background(), conn); err != nil {
			b.logf("%v", err)
		}
	}()
}

// Close stops the responder and the schedule and waits for them.
func (b *bandwidth) Close() {
	b.mu.Lock()
	b.closed = true
	if b.conn != nil {
		b.conn.Close()
		b.conn = nil
	}
	b.mu.Unlock()
	b.stop()
	<-b.done
}

// Estimate measures the available bandwidth of the link to peer now and
// publishes it to the metrics. It waits for an estimate already running.
func (b *bandwidth) Estimate(ctx context.Context, peer string) (abw.Result, error) {
	b.mu.Lock()
	local := b.local
	remote, ok := b.peers[peer]
	b.mu.Unlock()
	if !ok {
		return abw.Result{}, fmt.Errorf("no link to %q in the current plan", peer)
	}
	if !local.IsValid() {
		return abw.Result{}, errors.New("no transit address yet (the plan is not applied)")
	}
	b.one.Lock()
	defer b.one.Unlock()
	conn, err := net.DialUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(local, 0)), net.UDPAddrFromAddrPort(netip.AddrPortFrom(remote, abw.Port)))
	if err != nil {
		return abw.Result{}, fmt.Errorf("available-bandwidth sender on %s: %w", local, err)
	}
	defer conn.Close()
	res, err := abw.Estimate(ctx, conn, b.cfg.Estimator)
	if err != nil {
		return res, fmt.Errorf("estimating the link to %s: %w", peer, err)
	}
	b.metrics.SetAvailableBandwidth(peer, res.Estimate)
	return res, nil
}

// schedule estimates every link once per jittered interval until ctx
// ends, spreading the links over the interval.
func (b *bandwidth) schedule(ctx context.Context) {
	for {
		b.mu.Lock()
		peers := make([]string, 0, len(b.peers))
		for p := range b.peers {
			peers = append(peers, p)
		}
		b.mu.Unlock()
		slices.Sort(peers)
		slots := max(len(peers), 1)
		for i := 0; i < slots; i++ {
			wait := time.Duration(float64(b.cfg.Interval) / float64(slots) * (0.8 + 0.4*rand.Float64()))
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			if i >= len(peers) {
				continue
			}
			res, err := b.Estimate(ctx, peers[i])
			switch {
			case ctx.Err() != nil:
				return
			case err != nil:
				b.logf("scheduled available-bandwidth estimate: %v", err)
			default:
				b.logf("available bandwidth to %s: %.1f Mbit/s (range %.1f–%.1f, %d bytes, %.2f s)",
					peers[i], res.Estimate/1e6, res.Low/1e6, res.High/1e6, res.Bytes, res.Duration.Seconds())
			}
		}
	}
}

// measureLoop long-polls the manager for relayed measurements
// (api.PathMeasurements), runs each and sends the result back, until ctx
// ends. Failures back off as the plan watch does; the refusals the plan
// watch logs are not logged again.
func (s *managerSource) measureLoop(ctx context.Context) {
	var out outage
	bo := s.backoff()
	for ctx.Err() == nil {
		s.mu.Lock()
		cl, gw := s.cl, s.cred.Gateway
		s.mu.Unlock()
		req, err := cl.NextMeasurement(ctx, gw, DefaultWatchTimeout)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if !watchSaysIt(err) {
				out.failed(s.logf, "waiting for measurement requests", err)
			}
			if !sleep(ctx, bo.next()) {
				return
			}
			continue
		}
		out.recovered(s.logf)
		bo.reset()
		if req == nil {
			continue
		}
		res := s.measure(ctx, *req)
		if err := cl.PutMeasurement(ctx, gw, req.ID, res); err != nil && ctx.Err() == nil {
			s.logf("sending the result of measurement %s: %v", req.ID, err)
		}
	}
}

// measure runs one relayed measurement.
func (s *managerSource) measure(ctx context.Context, req api.Measurement) api.BandwidthResult {
	r := api.BandwidthResult{To: req.To}
	if req.Kind != api.MeasurementBandwidth {
		r.Error = fmt.Sprintf("this agent does not know measurement kind %q; upgrade it", req.Kind)
		return r
	}
	res, err := s.loop.estimate(ctx, req.To)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	s.logf("available bandwidth to %s (asked through the manager): %.1f Mbit/s (range %.1f–%.1f)", req.To, res.Estimate/1e6, res.Low/1e6, res.High/1e6)
	return api.BandwidthResult{
		To: req.To, LowBps: res.Low, HighBps: res.High, EstimateBps: res.Estimate, ADRBps: res.ADR,
		Converged: res.Converged, Bytes: res.Bytes, Packets: res.Packets, Seconds: res.Duration.Seconds(), Fleets: len(res.Fleets),
	}
}
