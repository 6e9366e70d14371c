package controlplane

import (
	"context"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/client"
)

// Backoff of the simulated agents while no manager answers: exponential
// with full jitter, as fednet agent's defaults.
const (
	backoffMin = 200 * time.Millisecond
	backoffMax = 5 * time.Second
)

// watchTimeout is the simulated agents' long-poll timeout (fednet agent's).
const watchTimeout = 30 * time.Second

// statusInterval is the simulated agents' period of status reports
// (fednet agent's default): 1000 agents make 200 reports a second, which
// the managers validate and write to the store while changes propagate.
const statusInterval = 5 * time.Second // agent.DefaultStatusInterval

// agent is a simulated fednet agent: real HTTPS, real enrollment, real long
// polls (with deltas and gzip, through the client every agent uses), and a
// data plane that applies nothing: it takes each plan, watches for the next
// at once and has its report loop say the plan is applied (as fednet
// agent pokes its own), and reports its status every statusInterval.
type agent struct {
	name string
	cl   *client.Client
	read *atomic.Int64 // bytes read from the managers, over all connections
	// kick asks the report loop for a report now (a plan was applied).
	kick chan struct{}

	mu       sync.Mutex
	gen      int64
	rev      int
	arrived  map[int64]time.Time // when each generation's plan arrived
	removed  bool
	err      error
	failures int // requests that got no answer
	// A run of failed requests: since when, how many, and when a request
	// got an answer again (the agent reconnected).
	outageSince time.Time
	outageTries int
	maxTries    int
	reconnected time.Time
	// failedAt are the requests that failed, when and why (to count
	// those after the managers were back, and say why they failed).
	failedAt []failure
	// inOutage is set while the watch loop backs off; periodic reports
	// wait for it to end (the loop reports first when it is back).
	inOutage bool
	// reports and reportFails count the periodic status reports.
	reports, reportFails int
}

// countingConn counts the bytes read from a connection.
type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.n.Add(int64(n))
	return n, err
}

// countingDialer dials TCP and counts what the connections read into n.
func countingDialer(n *atomic.Int64) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{c, n}, nil
	}
}

// run watches the agent's plan until ctx ends or the gateway is removed.
func (a *agent) run(ctx context.Context) {
	n := 0 // failed tries in a row
	report := false
	for ctx.Err() == nil {
		a.mu.Lock()
		after := a.gen
		a.mu.Unlock()
		var err error
		if report {
			// Back from an outage: say so first (a quick round trip),
			// then watch again.
			err = a.cl.PutStatus(ctx, a.name, a.status())
		} else {
			var resp *api.PlanResponse
			var changed bool
			resp, changed, err = a.cl.WatchPlan(ctx, a.name, after, watchTimeout)
			if err == nil && changed {
				a.apply(resp)
				a.poke()
			}
		}
		if ctx.Err() != nil {
			return
		}
		switch {
		case client.CodeOf(err) == api.CodeGatewayRemoved:
			a.mu.Lock()
			a.removed = true
			a.mu.Unlock()
			return
		case err != nil && client.StatusOf(err) == 0:
			n++
			a.failed(n, err)
			report = true
			// Full jitter: a uniform wait up to min(max, min·2^n).
			limit := min(backoffMax, backoffMin<<min(n-1, 10))
			select {
			case <-ctx.Done():
				return
			case <-time.After(rand.N(limit)):
			}
		case err != nil:
			a.mu.Lock()
			a.err = err
			a.mu.Unlock()
			return
		default:
			if report {
				a.back()
			}
			n, report = 0, false
		}
	}
}

// poke asks the report loop for a report now.
func (a *agent) poke() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// report sends a status report every statusInterval (the first after a
// random part of it, so the agents' reports spread) and when poked (a plan
// applied) until ctx ends or the gateway is removed, as fednet agent does
// besides its watch: the watch does not wait for the report. A report
// that fails is counted (with the watch's failures, for
// Reconnect.FailedAfterUp); the next tick tries again.
func (a *agent) report(ctx context.Context) {
	t := time.NewTimer(rand.N(statusInterval))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			t.Reset(statusInterval)
		case <-a.kick:
		}
		a.mu.Lock()
		skip := a.removed || a.err != nil || a.inOutage || a.gen == 0
		a.mu.Unlock()
		if skip {
			if a.removed {
				return
			}
			continue
		}
		err := a.cl.PutStatus(ctx, a.name, a.status())
		if ctx.Err() != nil {
			return
		}
		a.mu.Lock()
		a.reports++
		if err != nil && client.CodeOf(err) != api.CodeGatewayRemoved {
			a.reportFails++
			a.failedAt = append(a.failedAt, failure{time.Now(), "status report: " + err.Error()})
		}
		a.mu.Unlock()
	}
}

func (a *agent) apply(p *api.PlanResponse) {
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.gen, a.rev = p.Generation, p.Revision
	if _, ok := a.arrived[p.Generation]; !ok {
		a.arrived[p.Generation] = now
	}
}

func (a *agent) status() api.StatusReport {
	a.mu.Lock()
	defer a.mu.Unlock()
	return api.StatusReport{Generation: a.gen, Revision: a.rev}
}

// failed records the n-th failed try in a row.
func (a *agent) failed(n int, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.failures++
	a.failedAt = append(a.failedAt, failure{time.Now(), err.Error()})
	if n == 1 {
		a.outageSince = time.Now()
	}
	a.inOutage = true
	a.outageTries = n
	a.maxTries = max(a.maxTries, n)
}

// back records that a request was answered after an outage.
func (a *agent) back() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.reconnected = time.Now()
	a.inOutage = false
}

// arrival returns when the plan of generation gen (or a later one) first
// arrived.
func (a *agent) arrival(gen int64) (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var best time.Time
	for g, at := range a.arrived {
		if g >= gen && (best.IsZero() || at.Before(best)) {
			best = at
		}
	}
	return best, !best.IsZero()
}

func (a *agent) generation() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.gen
}

// failure is a request that failed: when, and its error.
type failure struct {
	at  time.Time
	err string
}
