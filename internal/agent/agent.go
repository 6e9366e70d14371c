// Package agent runs the reconcile loop of a gateway: it takes the
// gateway's plan from a source, applies it through a dataplane, and applies
// again when the plan changes or on a timer, so drift is repaired.
package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"sync"
	"time"

	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/dataplane"
	"github.com/fednet/fednet/internal/metrics"
	"github.com/fednet/fednet/internal/plan"
)

// DefaultResync is how often the agent re-applies its plan to repair drift
// when nothing else happens.
const DefaultResync = 30 * time.Second

// Config configures a static-mode agent.
type Config struct {
	// PlanFile is a plan in the JSON form of `fednet plan -o json`.
	PlanFile string
	// Dataplane applies plans to this machine.
	Dataplane dataplane.Dataplane
	// Resync is the drift-repair period (default DefaultResync).
	Resync time.Duration
	// Reload, when it receives, makes the agent read PlanFile at once (the
	// CLI sends on SIGHUP). The file is also checked every second and
	// applied when its content changed.
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

// LoadPlan reads and decodes a plan file.
func LoadPlan(path string) (plan.Gateway, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return plan.Gateway{}, fmt.Errorf("reading plan: %w", err)
	}
	g, err := plan.Decode(data)
	if err != nil {
		return plan.Gateway{}, fmt.Errorf("%s: %w", path, err)
	}
	return g, nil
}

// Once applies the plan file one time and returns the changes made.
func Once(ctx context.Context, cfg Config) ([]dataplane.Change, error) {
	g, err := LoadPlan(cfg.PlanFile)
	if err != nil {
		return nil, err
	}
	return cfg.Dataplane.Apply(ctx, g)
}

// Run applies the plan file and keeps the machine at it until ctx ends. A
// plan file that cannot be read or decoded is reported and the last good
// plan stays in force; the first plan must be good, or Run returns its
// error. Run never tears the tunnels down: stopping the agent leaves the
// data plane running (use Down for that).
func Run(ctx context.Context, cfg Config) error {
	logf := cfg.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	resync := cfg.Resync
	if resync <= 0 {
		resync = DefaultResync
	}
	current, err := LoadPlan(cfg.PlanFile)
	if err != nil {
		return err
	}
	links := cfg.Probes.withMetrics(cfg.Metrics).start(ctx, logf, nil)
	defer links.Close()
	bw := cfg.Bandwidth.start(ctx, logf, cfg.Metrics)
	defer bw.Close()
	var mu sync.Mutex // guards current for the metrics source
	cfg.Metrics.SetLinkSource(func(ctx context.Context) []api.LinkStatus {
		mu.Lock()
		g := current
		mu.Unlock()
		return linkStatuses(ctx, g, cfg.Dataplane, links, nil, logf)
	})
	apply := func(g plan.Gateway, why string) {
		defer links.Update(g)
		defer bw.Update(g)
		cfg.Metrics.SetPlan(g)
		changes, err := cfg.Dataplane.Apply(ctx, g)
		if err != nil {
			cfg.Metrics.ApplyFailed()
		}
		for _, c := range changes {
			logf("%s", c)
		}
		switch {
		case err != nil:
			logf("applying plan (%s): %v", why, err)
		case len(changes) > 0:
			logf("applied plan (%s): %d changes", why, len(changes))
		}
	}
	apply(current, "start")
	last, _ := os.ReadFile(cfg.PlanFile)

	poll := time.NewTicker(time.Second)
	defer poll.Stop()
	resyncT := time.NewTicker(resync)
	defer resyncT.Stop()
	reload := func(why string) {
		last, _ = os.ReadFile(cfg.PlanFile)
		g, err := LoadPlan(cfg.PlanFile)
		if err != nil {
			logf("keeping the current plan: %v", err)
			return
		}
		if reflect.DeepEqual(g, current) {
			return
		}
		mu.Lock()
		current = g
		mu.Unlock()
		apply(current, why)
	}
	for {
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.Canceled) {
				return nil
			}
			return ctx.Err()
		case <-cfg.Reload:
			reload("reload")
		case <-poll.C:
			// Modification times are too coarse to tell two quick writes
			// apart; plan files are small, so compare the content.
			if data, err := os.ReadFile(cfg.PlanFile); err == nil && !bytes.Equal(data, last) {
				reload("plan file changed")
			}
		case <-resyncT.C:
			apply(current, "resync")
		}
	}
}

// Down removes what the plan file's plan created.
func Down(ctx context.Context, cfg Config) ([]dataplane.Change, error) {
	g, err := LoadPlan(cfg.PlanFile)
	if err != nil {
		return nil, err
	}
	return cfg.Dataplane.Down(ctx, g)
}
