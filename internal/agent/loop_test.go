package agent_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/agent"
	"github.com/fednet/fednet/internal/await"
	"github.com/fednet/fednet/internal/dataplane"
	"github.com/fednet/fednet/internal/plan"
)

// feed is a Source the test drives: every Update sent with send is
// delivered, and send returns the loop's Result; fail makes Run return an
// error.
type feed struct {
	updates chan agent.Update
	results chan agent.Result
	errs    chan error
}

func newFeed() *feed {
	return &feed{updates: make(chan agent.Update), results: make(chan agent.Result), errs: make(chan error, 1)}
}

func (f *feed) Run(ctx context.Context, deliver agent.Deliver) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-f.errs:
			return err
		case u := <-f.updates:
			f.results <- deliver(u)
		}
	}
}

func (f *feed) send(t *testing.T, u agent.Update) agent.Result {
	t.Helper()
	select {
	case f.updates <- u:
	case <-time.After(10 * time.Second):
		t.Fatal("the source's Run did not take the update within 10s")
	}
	select {
	case r := <-f.results:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("the loop did not deal with the update within 10s")
		return agent.Result{}
	}
}

// startLoop runs a loop until the end of the test; the returned channel
// gets what Run returned.
func startLoop(t *testing.T, cfg agent.LoopConfig) (*agent.Loop, <-chan error, context.CancelFunc) {
	t.Helper()
	loop, err := agent.NewLoop(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1) // the test may take the result
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		done <- loop.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-ended:
		case <-time.After(10 * time.Second):
			t.Error("the loop did not stop within 10s of cancel")
		}
	})
	return loop, done, cancel
}

func withMTU(g plan.Gateway, mtu int) *plan.Gateway {
	g.Tunnels = append([]plan.Tunnel(nil), g.Tunnels...)
	g.Tunnels[0].MTU = mtu
	return &g
}

// TestLoopAppliesUpdates: a plan is applied and reported back; an update
// without a plan applies the plan in force again, on a new data plane when
// it brings one; a refusal keeps the plan in force and shows in Status
// until the next plan.
func TestLoopAppliesUpdates(t *testing.T) {
	g := testPlan(t)
	first := dataplane.NewFake()
	src := newFeed()
	var l logs
	loop, _, _ := startLoop(t, agent.LoopConfig{Source: src, Dataplane: first, Resync: time.Hour, Logf: l.logf})

	if st := loop.Status(); st.Plan != nil || st.Err != nil {
		t.Fatalf("status before the first plan: %+v", st)
	}
	r := src.send(t, agent.Update{Plan: withMTU(g, 1300), Revision: 3, Generation: 7, Why: "test plan"})
	if r.Err != nil || len(r.Changes) == 0 || mtu(first) != 1300 {
		t.Fatalf("first plan: %d changes, %v; mtu %d", len(r.Changes), r.Err, mtu(first))
	}
	st := loop.Status()
	if st.Plan == nil || st.Plan.Tunnels[0].MTU != 1300 || st.Revision != 3 || st.Generation != 7 || st.Why != "test plan" || st.Err != nil {
		t.Errorf("status %+v", st)
	}

	// A new data plane (a new key) gets the plan in force.
	second := dataplane.NewFake()
	if r := src.send(t, agent.Update{Why: "new key", Dataplane: second}); r.Err != nil || mtu(second) != 1300 {
		t.Fatalf("new data plane: %v, mtu %d", r.Err, mtu(second))
	}

	// A refused plan changes nothing and is reported until the next plan.
	refusal := errors.New("plan of format 9")
	if r := src.send(t, agent.Update{Why: "watch", Err: refusal}); !errors.Is(r.Err, refusal) {
		t.Fatalf("refusal result %v", r.Err)
	}
	if mtu(second) != 1300 || !errors.Is(loop.Status().Err, refusal) || !l.has("refusing the plan (watch): plan of format 9; keeping the current plan") {
		t.Fatalf("after a refusal: mtu %d, status error %v", mtu(second), loop.Status().Err)
	}
	s := second.State()
	s.Tunnels = nil
	second.SetState(s)
	loop.Reapply("test")
	eventually(t, "a re-apply", func() bool { return mtu(second) == 1300 })
	if !errors.Is(loop.Status().Err, refusal) {
		t.Error("a clean re-apply of the plan in force cleared the refusal")
	}
	if r := src.send(t, agent.Update{Plan: withMTU(g, 1280), Why: "next"}); r.Err != nil || mtu(second) != 1280 || loop.Status().Err != nil {
		t.Fatalf("the plan after a refusal: %v, mtu %d, status error %v", r.Err, mtu(second), loop.Status().Err)
	}

	// An apply error is the result and in Status; the next clean apply
	// clears it.
	second.SetFault(func(c dataplane.Change) error {
		if strings.Contains(string(c), "mtu") {
			return errors.New("boom")
		}
		return nil
	})
	if r := src.send(t, agent.Update{Plan: withMTU(g, 1260), Why: "faulty"}); r.Err == nil || !strings.Contains(loop.Status().Err.Error(), "boom") {
		t.Fatalf("apply error: result %v, status %v", r.Err, loop.Status().Err)
	}
	second.SetFault(nil)
	loop.Reapply("after the fault")
	eventually(t, "a clean apply", func() bool { return mtu(second) == 1260 && loop.Status().Err == nil })
}

// TestLoopReapplyRepairsDrift: Reapply applies the plan in force at once,
// without waiting for the resync timer.
func TestLoopReapplyRepairsDrift(t *testing.T) {
	g := testPlan(t)
	fake := dataplane.NewFake()
	src := newFeed()
	loop, _, _ := startLoop(t, agent.LoopConfig{Source: src, Dataplane: fake, Resync: time.Hour})
	src.send(t, agent.Update{Plan: &g})
	s := fake.State()
	s.Tunnels, s.Routes = nil, nil
	fake.SetState(s)
	loop.Reapply("on demand")
	eventually(t, "the repair", func() bool {
		s := fake.State()
		return len(s.Tunnels) == 1 && len(s.Routes) == len(g.Routes)
	})
}

// TestLoopEndsWithTheSourcesError: a source that fails ends the loop with
// its error, and the data plane stays; deliveries after the end get
// ErrStopped.
func TestLoopEndsWithTheSourcesError(t *testing.T) {
	g := testPlan(t)
	fake := dataplane.NewFake()
	src := newFeed()
	var deliver agent.Deliver
	capture := sourceFunc(func(ctx context.Context, d agent.Deliver) error {
		deliver = d
		return src.Run(ctx, d)
	})
	_, done, _ := startLoop(t, agent.LoopConfig{Source: capture, Dataplane: fake, Resync: time.Hour})
	src.send(t, agent.Update{Plan: &g})
	before := fake.State().String()
	removed := errors.New("gateway removed")
	src.errs <- removed
	select {
	case err := <-done:
		if !errors.Is(err, removed) {
			t.Fatalf("Run returned %v, want the source's error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the loop did not end with its source")
	}
	if got := fake.State().String(); got != before {
		t.Errorf("the data plane changed when the loop ended:\n%s\nwant\n%s", got, before)
	}
	if r := deliver(agent.Update{Plan: &g}); !errors.Is(r.Err, agent.ErrStopped) {
		t.Errorf("a delivery after the end: %v, want ErrStopped", r.Err)
	}
}

type sourceFunc func(context.Context, agent.Deliver) error

func (f sourceFunc) Run(ctx context.Context, d agent.Deliver) error { return f(ctx, d) }

// TestFileSourceRefusesANewerPlanFormat: a plan file of a newer format is
// refused at start (an error saying to upgrade) and later (the plan in
// force stays, Status says why, the file is still watched).
func TestFileSourceRefusesANewerPlanFormat(t *testing.T) {
	path := filepath.Join(t.TempDir(), "plan.json")
	g := testPlan(t)
	newer := *withMTU(g, g.Tunnels[0].MTU)
	newer.Version = plan.Version + 1

	writePlan(t, path, newer)
	src, err := agent.NewFileSource(agent.FileConfig{Path: path, Poll: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	fake := dataplane.NewFake()
	loop, err := agent.NewLoop(agent.LoopConfig{Source: src, Dataplane: fake})
	if err != nil {
		t.Fatal(err)
	}
	err = loop.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "upgrade fednet") {
		t.Fatalf("a newer first plan: %v, want an error naming the file and saying to upgrade", err)
	}
	if s := fake.State(); len(s.Tunnels) != 0 {
		t.Error("a refused first plan was applied")
	}

	writePlan(t, path, g)
	src, _ = agent.NewFileSource(agent.FileConfig{Path: path, Poll: 10 * time.Millisecond})
	var l logs
	loop, _, _ = startLoop(t, agent.LoopConfig{Source: src, Dataplane: fake, Resync: time.Hour, Logf: l.logf})
	eventually(t, "the first plan", func() bool { return mtu(fake) == g.Tunnels[0].MTU })
	newer.Tunnels[0].MTU = 1300
	writePlan(t, path, newer)
	eventually(t, "the refusal", func() bool { return l.has("refusing the plan (plan file changed)") })
	if !l.has("newer than the 2 this fednet understands; upgrade fednet") || !l.has("keeping the current plan") {
		t.Errorf("the refusal's log line does not say what and why:\n%s", strings.Join(l.lines, "\n"))
	}
	if err := loop.Status().Err; err == nil || !strings.Contains(err.Error(), "upgrade fednet") {
		t.Errorf("status error %v, want the refusal", err)
	}
	if mtu(fake) != g.Tunnels[0].MTU {
		t.Errorf("a refused plan changed the machine: mtu %d", mtu(fake))
	}
	// Still watching: the next plan of this format goes in.
	g.Tunnels[0].MTU = 1280
	writePlan(t, path, g)
	eventually(t, "the next plan", func() bool { return mtu(fake) == 1280 && loop.Status().Err == nil })
}

// TestFileSourceReloadAppliesAtOnce: a reload (SIGHUP) re-reads the file
// and applies it even when it did not change, which repairs drift.
func TestFileSourceReloadAppliesAtOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "plan.json")
	g := testPlan(t)
	writePlan(t, path, g)
	reload := make(chan struct{})
	src, err := agent.NewFileSource(agent.FileConfig{Path: path, Reload: reload, Poll: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	fake := dataplane.NewFake()
	startLoop(t, agent.LoopConfig{Source: src, Dataplane: fake, Resync: time.Hour})
	eventually(t, "the first plan", func() bool { return mtu(fake) == g.Tunnels[0].MTU })
	s := fake.State()
	s.Tunnels = nil
	fake.SetState(s)
	reload <- struct{}{}
	eventually(t, "the reload's apply", func() bool { return len(fake.State().Tunnels) != 0 })

	// A changed file is read on reload, without waiting for the poll.
	g.Tunnels[0].MTU = 1300
	writePlan(t, path, g)
	reload <- struct{}{}
	eventually(t, "the changed plan", func() bool { return mtu(fake) == 1300 })
}

func TestNewLoopAndSourceNeedTheirParts(t *testing.T) {
	if _, err := agent.NewLoop(agent.LoopConfig{Dataplane: dataplane.NewFake()}); err == nil || !strings.Contains(err.Error(), "Source") {
		t.Errorf("no source: %v", err)
	}
	if _, err := agent.NewLoop(agent.LoopConfig{Source: newFeed()}); err == nil || !strings.Contains(err.Error(), "Dataplane") {
		t.Errorf("no data plane: %v", err)
	}
	if _, err := agent.NewFileSource(agent.FileConfig{}); err == nil || !strings.Contains(err.Error(), "Path") {
		t.Errorf("no path: %v", err)
	}
}

// TestLoopRetriesAFailedApply: an apply that fails (a driver's transient
// error) is tried again within seconds, not at the next resync an hour
// away, until it goes through; then the loop stops trying.
func TestLoopRetriesAFailedApply(t *testing.T) {
	g := testPlan(t)
	fake := dataplane.NewFake()
	var failures atomic.Int32
	fake.SetFault(func(c dataplane.Change) error {
		if strings.Contains(string(c), "mtu") && failures.Add(1) <= 2 {
			return errors.New("control socket busy")
		}
		return nil
	})
	src := newFeed()
	var l logs
	loop, _, _ := startLoop(t, agent.LoopConfig{Source: src, Dataplane: fake, Resync: time.Hour, Logf: l.logf})
	if r := src.send(t, agent.Update{Plan: withMTU(g, 1300), Why: "test plan"}); r.Err == nil {
		t.Fatal("the first apply did not fail")
	}
	// Tried again after 1 s, then 2 s (the wait doubles).
	await.Until(t, 15*time.Second, func() (bool, string) {
		return mtu(fake) == 1300 && loop.Status().Err == nil, "waiting for the apply to be tried again until it goes through"
	})
	if n := failures.Load(); n < 3 || !l.has("applying plan (again after a failed apply): ") || !l.has("applied plan (again after a failed apply)") {
		t.Errorf("%d tries of the failing change; the retries not logged", n)
	}
	before := failures.Load()
	time.Sleep(2500 * time.Millisecond) // past the next try, had it been armed
	if n := failures.Load(); n != before {
		t.Errorf("the loop went on applying after a clean apply: %d tries, then %d", before, n)
	}
}
