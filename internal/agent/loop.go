package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fednet/fednet/internal/abw"
	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/dataplane"
	"github.com/fednet/fednet/internal/metrics"
	"github.com/fednet/fednet/internal/plan"
)

// DefaultResync is how often the agent re-applies its plan to repair drift
// when nothing else happens.
const DefaultResync = 30 * time.Second

// ErrStopped is the Result.Err of an update that reached no running loop:
// delivered after the loop ended, or before a Failover ran.
var ErrStopped = errors.New("the reconcile loop is not running")

// LoopConfig configures a Loop.
type LoopConfig struct {
	// Source delivers the plans. Required.
	Source Source
	// Dataplane applies plans to this machine; an Update may replace it.
	// Required.
	Dataplane dataplane.Dataplane
	// Resync is the drift-repair period (default DefaultResync).
	Resync time.Duration
	// Probes configures the link probes (docs/probe.md).
	Probes ProbeConfig
	// Bandwidth configures the available-bandwidth responder and the
	// scheduled estimates (docs/bandwidth.md).
	Bandwidth BandwidthConfig
	// Metrics, when set, is fed the loop's figures (see metrics.Agent).
	Metrics *metrics.Agent
	// LinkChanged, when set, is called after a link's probe verdict
	// changed (a managed agent reports at once).
	LinkChanged func()
	// Logf logs one line; nil discards.
	Logf func(format string, args ...any)
}

// Loop is the agent's one reconcile loop. It applies the plan its Source
// delivers, applies it again on every new plan, every Resync (drift
// repair) and on demand (Reapply), runs the link probes and the
// available-bandwidth responder for the plan in force, and feeds the
// metrics. Apply results go back to the source (Deliver's Result) and
// into Status. The loop never tears the data plane down: when it ends, the
// machine stays at the plan in force.
type Loop struct {
	cfg     LoopConfig
	logf    func(string, ...any)
	updates chan delivery
	kick    chan string
	stopped chan struct{} // closed when Run ends
	ran     atomic.Bool

	// Set by Run before the source starts, read-only after.
	links *links
	bw    *bandwidth

	mu       sync.Mutex // guards the fields below
	dp       dataplane.Dataplane
	current  *Status // the plan in force, Err unset; nil before the first
	applyErr error   // of the last apply
	refused  error   // the last refused update, until the next plan
}

// delivery is one Update on its way into the loop.
type delivery struct {
	u    Update
	done chan Result
}

// Status is the plan in force and how it went.
type Status struct {
	// Plan is the plan in force; nil before the first.
	Plan *plan.Gateway
	// Revision and Generation are those of the update that brought Plan.
	Revision   int
	Generation int64
	// Why is that update's Why; Since is when the loop took it.
	Why   string
	Since time.Time
	// Err is the last apply's error and a refused update's error (kept
	// until the next plan), nil when the plan in force applied cleanly.
	Err error
}

// NewLoop returns a loop; Run starts it.
func NewLoop(cfg LoopConfig) (*Loop, error) {
	switch {
	case cfg.Source == nil:
		return nil, errors.New("agent: LoopConfig.Source is required")
	case cfg.Dataplane == nil:
		return nil, errors.New("agent: LoopConfig.Dataplane is required")
	}
	if cfg.Resync <= 0 {
		cfg.Resync = DefaultResync
	}
	logf := cfg.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	return &Loop{
		cfg: cfg, logf: logf, dp: cfg.Dataplane,
		updates: make(chan delivery), kick: make(chan string, 1), stopped: make(chan struct{}),
	}, nil
}

// Run runs the source and applies what it delivers until ctx ends (then it
// returns nil) or the source fails (then it returns the source's error).
// Either way it waits for the source to return and leaves the data plane
// as it is. Run may be called once.
func (l *Loop) Run(ctx context.Context) error {
	if !l.ran.CompareAndSwap(false, true) {
		return errors.New("agent: Loop.Run called twice")
	}
	l.links = l.cfg.Probes.withMetrics(l.cfg.Metrics).start(ctx, l.logf, l.cfg.LinkChanged)
	defer l.links.Close()
	l.bw = l.cfg.Bandwidth.start(ctx, l.logf, l.cfg.Metrics)
	defer l.bw.Close()
	l.cfg.Metrics.SetLinkSource(func(ctx context.Context) []api.LinkStatus {
		if st := l.Status(); st.Plan != nil {
			return l.Links(ctx, *st.Plan)
		}
		return nil
	})

	l.mu.Lock()
	l.supervise(nil, l.dp)
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.supervise(l.dp, nil)
		l.mu.Unlock()
	}()

	sctx, stopSource := context.WithCancel(ctx)
	sourceDone := make(chan error, 1)
	go func() { sourceDone <- l.cfg.Source.Run(sctx, l.deliver) }()
	waitSource := sourceDone
	defer func() {
		close(l.stopped) // pending and later deliveries return ErrStopped
		stopSource()
		if waitSource != nil {
			<-waitSource
		}
	}()

	resync := time.NewTicker(l.cfg.Resync)
	defer resync.Stop()
	var r retry
	defer r.stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-waitSource:
			waitSource = nil
			if err != nil && ctx.Err() == nil {
				return err
			}
		case d := <-l.updates:
			d.done <- l.handle(ctx, d.u)
		case <-resync.C:
			l.apply(ctx, "resync")
		case why := <-l.kick:
			l.apply(ctx, why)
		case <-r.c:
			r.c = nil // fired
			l.apply(ctx, "again after a failed apply")
		}
		l.mu.Lock()
		failed := l.applyErr != nil
		l.mu.Unlock()
		r.after(failed, l.cfg.Resync)
	}
}

// A failed apply (a driver's transient error: strongSwan's control socket
// busy, a device still starting) is tried again after applyRetryMin,
// doubling up to the resync period, rather than at the next resync (30 s
// by default): the plan's links stay down until it is applied.
const applyRetryMin = time.Second

// retry times the next try of a failed apply: c fires when it is due (nil
// when no apply failed).
type retry struct {
	t    *time.Timer
	c    <-chan time.Time
	wait time.Duration
}

// after arms the next try when the last apply failed (the wait doubling
// from applyRetryMin up to limit) and disarms it when it went through.
func (r *retry) after(failed bool, limit time.Duration) {
	if !failed {
		r.stop()
		r.wait = 0
		return
	}
	if r.c != nil {
		return // armed already: a failure since does not push it back
	}
	r.wait = min(limit, max(applyRetryMin, 2*r.wait))
	if r.t == nil {
		r.t = time.NewTimer(r.wait)
	} else {
		r.t.Reset(r.wait)
	}
	r.c = r.t.C
}

// stop disarms r.
func (r *retry) stop() {
	if r.t != nil {
		r.t.Stop()
	}
	r.c = nil
}

// deliver is the Deliver the source gets.
func (l *Loop) deliver(u Update) Result {
	d := delivery{u: u, done: make(chan Result, 1)}
	select {
	case l.updates <- d:
	case <-l.stopped:
		return Result{Err: ErrStopped}
	}
	// Run answers every delivery it took before it stops.
	return <-d.done
}

// Reapply asks the loop to apply the plan in force again now, for why
// (logged); it does not wait. Requests made while one is pending merge
// into it. Safe for concurrent use; after Run ended it does nothing.
func (l *Loop) Reapply(why string) {
	select {
	case l.kick <- why:
	default:
	}
}

// supervise moves the supervision of the tunnels (dataplane.Supervised)
// from data plane old to new (either may be nil): a tunnel device that
// dies outside an apply is counted, and the loop applies the plan again at
// once, which makes a lost one anew and verifies a restored one (the
// driver logs what happened). Only the data plane in force supervises, so
// a device is never replaced twice. l.mu is held.
func (l *Loop) supervise(old, new dataplane.Dataplane) {
	if s, ok := old.(dataplane.Supervised); ok {
		s.OnEvent(nil)
	}
	if s, ok := new.(dataplane.Supervised); ok {
		s.OnEvent(func(e dataplane.TunnelEvent) {
			l.cfg.Metrics.DataplaneRestarted(e.Restored)
			what := "lost"
			if e.Restored {
				what = "restarted"
			}
			l.Reapply(fmt.Sprintf("tunnel %s %s: %s", e.Interface, what, e.Cause))
		})
	}
}

// Status returns the plan in force and how it went. Safe for concurrent
// use.
func (l *Loop) Status() Status {
	l.mu.Lock()
	defer l.mu.Unlock()
	var st Status
	if l.current != nil {
		st = *l.current
	}
	st.Err = errors.Join(l.refused, l.applyErr)
	return st
}

// Links returns the links of g as a status report carries them: the data
// plane's view of each link (established, handshake, counters), the probe
// figures and the available-bandwidth estimates. Safe for concurrent use
// once Run started.
func (l *Loop) Links(ctx context.Context, g plan.Gateway) []api.LinkStatus {
	l.mu.Lock()
	dp := l.dp
	l.mu.Unlock()
	return linkStatuses(ctx, g, dp, l.links, l.cfg.Metrics, l.logf)
}

// estimate measures the available bandwidth of the link to peer now (a
// measurement the manager relays). Safe for concurrent use once Run
// started.
func (l *Loop) estimate(ctx context.Context, peer string) (abw.Result, error) {
	return l.bw.Estimate(ctx, peer)
}

// handle deals with one update, in Run's goroutine.
func (l *Loop) handle(ctx context.Context, u Update) Result {
	why := u.Why
	if why == "" {
		why = "update"
	}
	if u.Err != nil {
		l.logf("refusing the plan (%s): %v; keeping the current plan", why, u.Err)
		l.mu.Lock()
		l.refused = u.Err
		l.mu.Unlock()
		l.cfg.Metrics.ApplyFailed()
		return Result{Err: u.Err}
	}
	l.mu.Lock()
	if u.Dataplane != nil && u.Dataplane != l.dp {
		l.supervise(l.dp, u.Dataplane)
		l.dp = u.Dataplane
	}
	if u.Plan != nil {
		g := *u.Plan
		l.current = &Status{Plan: &g, Revision: u.Revision, Generation: u.Generation, Why: why, Since: time.Now()}
		l.refused = nil
	}
	l.mu.Unlock()
	return l.apply(ctx, why)
}

// apply applies the plan in force, in Run's goroutine; without one it
// does nothing.
func (l *Loop) apply(ctx context.Context, why string) Result {
	l.mu.Lock()
	dp, cur := l.dp, l.current
	l.mu.Unlock()
	if cur == nil {
		return Result{}
	}
	g := *cur.Plan
	l.cfg.Metrics.SetPlan(g)
	changes, err := dp.Apply(ctx, g)
	for _, c := range changes {
		l.logf("%s", c)
	}
	switch {
	case err != nil:
		l.logf("applying plan (%s): %v", why, err)
	case len(changes) > 0:
		l.logf("applied plan (%s): %d changes", why, len(changes))
	}
	l.mu.Lock()
	l.applyErr = err
	l.mu.Unlock()
	switch {
	case err != nil:
		l.cfg.Metrics.ApplyFailed()
	case cur.Revision > 0:
		l.cfg.Metrics.SetRevision(cur.Revision)
	}
	l.links.Update(g)
	l.bw.Update(g)
	return Result{Changes: changes, Err: err}
}
