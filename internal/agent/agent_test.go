package agent_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/agent"
	"github.com/fednet/fednet/internal/await"
	"github.com/fednet/fednet/internal/dataplane"
	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/spec"
)

// testPlan is aws-gw's plan from the three-site example, with keys.
func testPlan(t *testing.T) plan.Gateway {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "examples", "three-sites.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := spec.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	in := plan.Inputs{PublicKeys: map[string]plan.Key{}}
	for _, gw := range []string{"aws-gw", "azure-gw", "onprem-gw"} {
		in.PublicKeys[gw] = plan.Key(sha256.Sum256([]byte(gw)))
	}
	g, err := plan.ForGateway(f, in, "aws-gw")
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func writePlan(t *testing.T, path string, g plan.Gateway) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, g.JSON(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// logs collects log lines safely.
type logs struct {
	mu    sync.Mutex
	lines []string
}

func (l *logs) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *logs) has(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			return true
		}
	}
	return false
}

// eventually waits up to 5 s for cond (await.Until).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	await.Until(t, 5*time.Second, func() (bool, string) { return cond(), "waiting for " + what })
}

func mtu(fake *dataplane.Fake) int {
	t, ok := fake.State().Tunnel("fed0")
	if !ok {
		return 0
	}
	return t.Link.MTU
}

func TestOnceIsIdempotent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "plan.json")
	writePlan(t, path, testPlan(t))
	fake := dataplane.NewFake()
	cfg := agent.Config{PlanFile: path, Dataplane: fake}
	changes, err := agent.Once(context.Background(), cfg)
	if err != nil || len(changes) == 0 {
		t.Fatalf("first apply: %d changes, %v", len(changes), err)
	}
	changes, err = agent.Once(context.Background(), cfg)
	if err != nil || len(changes) != 0 {
		t.Fatalf("second apply changed %v (%v), want nothing", changes, err)
	}
	changes, err = agent.Down(context.Background(), cfg)
	if err != nil || len(changes) == 0 {
		t.Fatalf("down: %v %v", changes, err)
	}
	if s := fake.State(); !s.IsEmpty() {
		t.Errorf("down left %+v", s)
	}
}

func TestRunFollowsThePlanFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "plan.json")
	g := testPlan(t)
	writePlan(t, path, g)
	fake := dataplane.NewFake()
	var l logs
	reload := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- agent.Run(ctx, agent.Config{PlanFile: path, Dataplane: fake, Reload: reload, Logf: l.logf})
	}()
	eventually(t, "the first apply", func() bool { return mtu(fake) == g.Tunnels[0].MTU })

	// A changed file is picked up by itself.
	g.Tunnels[0].MTU = 1300
	writePlan(t, path, g)
	eventually(t, "the changed plan", func() bool { return mtu(fake) == 1300 })

	// A broken file keeps the current plan in force and says so.
	if err := os.WriteFile(path, []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	reload <- struct{}{}
	eventually(t, "the complaint", func() bool { return l.has("keeping the current plan") })
	if mtu(fake) != 1300 {
		t.Errorf("a broken plan file changed the machine: mtu %d", mtu(fake))
	}

	// A good file after a broken one is applied.
	g.Tunnels[0].MTU = 1280
	writePlan(t, path, g)
	eventually(t, "the next plan", func() bool { return mtu(fake) == 1280 })

	// Stopping the agent leaves the data plane in place.
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run returned %v after cancel", err)
	}
	if s := fake.State(); len(s.Tunnels) == 0 || s.Table == nil {
		t.Error("stopping the agent removed the data plane")
	}
}

func TestRunRefusesABadFirstPlan(t *testing.T) {
	path := filepath.Join(t.TempDir(), "plan.json")
	os.WriteFile(path, []byte(`{"gateway":"x"}`), 0o644)
	err := agent.Run(context.Background(), agent.Config{PlanFile: path, Dataplane: dataplane.NewFake()})
	if err == nil || !strings.Contains(err.Error(), "plan.json") {
		t.Fatalf("err %v, want one naming the file", err)
	}
	err = agent.Run(context.Background(), agent.Config{PlanFile: filepath.Join(t.TempDir(), "none.json"), Dataplane: dataplane.NewFake()})
	if err == nil || !strings.Contains(err.Error(), "reading plan") {
		t.Fatalf("err %v, want a read error", err)
	}
}

func TestRunRepairsDrift(t *testing.T) {
	path := filepath.Join(t.TempDir(), "plan.json")
	g := testPlan(t)
	writePlan(t, path, g)
	fake := dataplane.NewFake()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go agent.Run(ctx, agent.Config{PlanFile: path, Dataplane: fake, Resync: 20 * time.Millisecond})
	eventually(t, "the first apply", func() bool { return mtu(fake) == g.Tunnels[0].MTU })
	// Someone deletes the tunnel by hand: the next resync brings it back.
	s := fake.State()
	s.Tunnels, s.Routes = nil, nil
	fake.SetState(s)
	eventually(t, "the repair", func() bool {
		s := fake.State()
		return len(s.Tunnels) == 1 && len(s.Routes) == len(g.Routes)
	})
}
