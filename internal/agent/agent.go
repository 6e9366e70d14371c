// Package agent runs a gateway's one reconcile loop (Loop): it takes the
// gateway's plan from a Source, applies it through a dataplane, applies it
// again on every new plan, on a timer (drift repair) and on demand, and
// reports how that went. The sources are a plan file (FileSource, static
// mode), the manager (RunManaged: enrollment, plan watch, plan cache, key
// rotation, status reports) and a decorator over either that can put a
// locally computed plan in force (Failover).
package agent

import (
	"context"
	"time"

	"github.com/fednet/fednet/internal/dataplane"
	"github.com/fednet/fednet/internal/metrics"
)

// Config configures a static-mode agent: the loop over a FileSource.
type Config struct {
	// HA configures failover (docs/resilience.md); it acts only on plans
	// that carry their Local inputs (the manager's).
	HA HAConfig
	// PlanFile is a plan in the JSON form of `fednet plan -o json`.
	PlanFile string
	// Dataplane applies plans to this machine.
	Dataplane dataplane.Dataplane
	// Resync is the drift-repair period (default DefaultResync).
	Resync time.Duration
	// Reload, when it receives, makes the agent read PlanFile at once and
	// apply it (the CLI sends on SIGHUP). The file is also checked every
	// second and applied when its content changed.
	Reload <-chan struct{}
	// Probes configures the link probes (docs/probe.md).
	Probes ProbeConfig
	// Bandwidth configures the available-bandwidth responder and the
	// scheduled estimates (docs/bandwidth.md).
	Bandwidth BandwidthConfig
	// Metrics, when set, is fed the agent's figures (see metrics.Agent).
	Metrics *metrics.Agent
	// Logf logs one line; nil discards.
	Logf func(format string, args ...any)
}

// Once applies the plan file one time and returns the changes made.
func Once(ctx context.Context, cfg Config) ([]dataplane.Change, error) {
	g, err := LoadPlan(cfg.PlanFile)
	if err != nil {
		return nil, err
	}
	return cfg.Dataplane.Apply(ctx, g)
}

// Run applies the plan file and keeps the machine at it until ctx ends
// (then it returns nil): the reconcile loop over a FileSource. The first
// plan must be good, or Run returns its error; a later plan file that
// cannot be read or decoded (or is of a newer plan format) is reported
// and the plan in force stays. Run never tears the tunnels down: stopping
// the agent leaves the data plane running (use Down for that).
func Run(ctx context.Context, cfg Config) error {
	src, err := NewFileSource(FileConfig{Path: cfg.PlanFile, Reload: cfg.Reload})
	if err != nil {
		return err
	}
	loop, err := NewLoop(LoopConfig{
		Source: newHASource(src, cfg.HA, cfg.Metrics, cfg.Logf), Dataplane: cfg.Dataplane, Resync: cfg.Resync, Probes: cfg.Probes, Bandwidth: cfg.Bandwidth,
		Metrics: cfg.Metrics, Logf: cfg.Logf,
	})
	if err != nil {
		return err
	}
	return loop.Run(ctx)
}

// Down removes what the plan file's plan created.
func Down(ctx context.Context, cfg Config) ([]dataplane.Change, error) {
	g, err := LoadPlan(cfg.PlanFile)
	if err != nil {
		return nil, err
	}
	return cfg.Dataplane.Down(ctx, g)
}
