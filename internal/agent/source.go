package agent

import (
	"context"

	"github.com/fednet/fednet/internal/dataplane"
	"github.com/fednet/fednet/internal/plan"
)

// Source delivers the plans of one gateway to a Loop. The sources are a
// plan file (FileSource, static mode), the manager (managed mode: enrollment,
// plan watch, plan cache, key rotation) and a decorator over either that
// can put a locally computed plan in force (Failover).
//
// Run delivers updates, in the order the source decides them, by calling
// deliver, until ctx ends; then it returns nil, promptly. It returns an
// error only for a failure that waiting does not cure (a first plan file
// that cannot be read, a gateway removed from the federation, a damaged
// data directory): the loop then ends with that error and leaves the data
// plane as it is. Trouble that may pass (a manager out of reach, a manager
// that does not know the gateway for now) is the source's to retry and to
// log. A plan the source got but refuses (a newer plan format, a broken
// plan file) is delivered as an Update with Err set, so that the loop
// keeps the plan in force and reports the refusal.
//
// A source that has nothing more to deliver may return nil before ctx ends;
// the loop keeps the plan in force and goes on repairing drift.
//
// Run is called once per Source value (so never concurrently), by the
// loop, which cancels ctx when it ends and waits for Run to return.
// deliver must not be called after Run returned.
type Source interface {
	Run(ctx context.Context, deliver Deliver) error
}

// Deliver hands one update to the loop and waits until the loop has dealt
// with it: it returns the Result of the apply, or a Result whose Err is
// ErrStopped when the loop ended first. It is safe for concurrent use (a
// decorator may deliver from its own goroutines); the loop applies
// updates one at a time.
type Deliver func(Update) Result

// Update is what a source hands the loop.
type Update struct {
	// Plan, when not nil, becomes the plan in force and is applied. Nil
	// applies the plan in force again (with Dataplane, when set). The
	// loop and decorators may keep the pointer: a source must not change
	// the plan after delivering it.
	Plan *plan.Gateway
	// Revision and Generation say which of the manager's plans Plan is
	// (zero for a plan file); they go into status reports and metrics.
	Revision   int
	Generation int64
	// Why names the update in log lines and in Status: "plan file
	// changed", "revision 3, generation 12", "local failover: ...".
	Why string
	// Dataplane, when not nil, replaces the loop's data plane before the
	// apply (the manager source's key rotation: a data plane with the new
	// private key).
	Dataplane dataplane.Dataplane
	// Err, when set, is a plan the source got but refuses. The loop keeps
	// the plan in force as it is, logs Err and reports it as the apply
	// error until the next plan; Plan and Dataplane are ignored.
	Err error
}

// Result is how the loop dealt with an Update.
type Result struct {
	// Changes are what the apply changed.
	Changes []dataplane.Change
	// Err is the apply's error, the refusal of Update.Err, or ErrStopped.
	Err error
}
