package agent

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/fednet/fednet/internal/plan"
)

// Failover is a Source that passes on the plans of another source (the
// inner one: a plan file or the manager) and lets a caller put a plan
// computed on this gateway in force instead, without the inner source.
// It is the seam of local failover: a failure detector computes the plan
// for "gateway X / link Y is down" (plan.ForGateway with
// Inputs.WithGatewayDown, WithLinkDown or WithActive) and calls Replace;
// when the failure is over it calls Restore. Failover itself detects
// nothing.
//
// While a local plan is in force, the inner source's new plans are kept
// (Restore puts the latest in force) but not applied; its refusals and
// data plane replacements (a new key) pass through, the latter applied
// with the local plan. Methods are safe for concurrent use.
type Failover struct {
	inner Source
	now   func() time.Time

	// seq serializes deciding and delivering, so that the loop applies
	// plans in the order the decisions were made.
	seq sync.Mutex

	mu      sync.Mutex // guards the fields below
	running bool
	deliver Deliver
	last    *Update // the inner source's latest plan
	inForce InForce // what is in force
}

// InForce says which plan a Failover has put in force, and why.
type InForce struct {
	// Plan is the plan in force; nil before the first.
	Plan *plan.Gateway
	// Local is true when Plan was computed on this gateway (Replace), not
	// delivered by the inner source.
	Local bool
	// Why is the inner update's Why, or for a local plan the reason given
	// to Replace.
	Why string
	// Since is when the plan was put in force.
	Since time.Time
}

// NewFailover returns a Failover over inner.
func NewFailover(inner Source) *Failover {
	return &Failover{inner: inner, now: time.Now}
}

// Run implements Source: it runs the inner source, passing its updates
// on as described on Failover.
func (f *Failover) Run(ctx context.Context, deliver Deliver) error {
	f.mu.Lock()
	if f.running || f.deliver != nil {
		f.mu.Unlock()
		return errors.New("agent: Failover.Run called twice")
	}
	f.running, f.deliver = true, deliver
	f.mu.Unlock()
	defer func() {
		// No delivery after Run returned: wait for one under way.
		f.seq.Lock()
		f.mu.Lock()
		f.deliver = nil
		f.mu.Unlock()
		f.seq.Unlock()
	}()
	return f.inner.Run(ctx, f.fromInner)
}

// fromInner is the Deliver the inner source gets.
func (f *Failover) fromInner(u Update) Result {
	f.seq.Lock()
	defer f.seq.Unlock()
	f.mu.Lock()
	deliver, local := f.deliver, f.inForce.Local
	if u.Err == nil && u.Plan != nil {
		kept := u
		kept.Dataplane = nil
		f.last = &kept
		if !local {
			f.inForce = InForce{Plan: u.Plan, Why: u.Why, Since: f.now()}
		}
	}
	f.mu.Unlock()
	if local && u.Err == nil {
		if u.Dataplane == nil {
			return Result{}
		}
		u = Update{Why: u.Why, Dataplane: u.Dataplane}
	}
	return deliver(u)
}

// Replace puts p in force instead of the inner source's plans, for reason
// (logged, and in InForce), and returns once the loop applied it, with the
// result (ErrStopped when Run is not running). The plan carries the
// revision and generation of the inner plan it stands in for.
func (f *Failover) Replace(p plan.Gateway, reason string) Result {
	f.seq.Lock()
	defer f.seq.Unlock()
	f.mu.Lock()
	deliver := f.deliver
	if deliver == nil {
		f.mu.Unlock()
		return Result{Err: ErrStopped}
	}
	u := Update{Plan: &p, Why: "local plan: " + reason}
	if f.last != nil {
		u.Revision, u.Generation = f.last.Revision, f.last.Generation
	}
	f.inForce = InForce{Plan: &p, Local: true, Why: reason, Since: f.now()}
	f.mu.Unlock()
	return deliver(u)
}

// Restore puts the inner source's latest plan back in force, for reason,
// and returns once the loop applied it. Without a local plan in force it
// does nothing; when the inner source has delivered no plan yet, the
// local plan stays in force and Restore says so.
func (f *Failover) Restore(reason string) Result {
	f.seq.Lock()
	defer f.seq.Unlock()
	f.mu.Lock()
	deliver, last := f.deliver, f.last
	switch {
	case deliver == nil:
		f.mu.Unlock()
		return Result{Err: ErrStopped}
	case !f.inForce.Local:
		f.mu.Unlock()
		return Result{}
	case last == nil:
		f.mu.Unlock()
		return Result{Err: errors.New("the plan source has delivered no plan yet; the local plan stays in force")}
	}
	u := *last
	u.Why = last.Why + " (back from the local plan: " + reason + ")"
	f.inForce = InForce{Plan: last.Plan, Why: u.Why, Since: f.now()}
	f.mu.Unlock()
	return deliver(u)
}

// InForce says which plan is in force and why.
func (f *Failover) InForce() InForce {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.inForce
}
