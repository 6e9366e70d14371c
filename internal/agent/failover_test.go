package agent_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/agent"
	"github.com/fednet/fednet/internal/dataplane"
)

// TestFailoverReplacesAndRestores drives the local failover seam: the
// inner source's plans pass through; a replacement goes in force and is
// applied; the inner source's plans meanwhile are held (its new keys are
// not); Restore puts its latest plan back. InForce and the loop's Status
// say which plan is in force and why.
func TestFailoverReplacesAndRestores(t *testing.T) {
	g := testPlan(t)
	inner := newFeed()
	fo := agent.NewFailover(inner)
	if r := fo.Replace(*withMTU(g, 1200), "before the run"); !errors.Is(r.Err, agent.ErrStopped) {
		t.Fatalf("Replace before Run: %v, want ErrStopped", r.Err)
	}
	fake := dataplane.NewFake()
	var l logs
	loop, _, _ := startLoop(t, agent.LoopConfig{Source: fo, Dataplane: fake, Resync: time.Hour, Logf: l.logf})

	// Passed through.
	if r := inner.send(t, agent.Update{Plan: withMTU(g, 1400), Revision: 4, Generation: 9, Why: "revision 4, generation 9"}); r.Err != nil || mtu(fake) != 1400 {
		t.Fatalf("the inner plan: %v, mtu %d", r.Err, mtu(fake))
	}
	if in := fo.InForce(); in.Local || in.Plan == nil || in.Plan.Tunnels[0].MTU != 1400 || in.Why != "revision 4, generation 9" {
		t.Errorf("in force after the inner plan: %+v", in)
	}

	// Replaced.
	r := fo.Replace(*withMTU(g, 1300), "link to azure-gw down")
	if r.Err != nil || len(r.Changes) == 0 || mtu(fake) != 1300 {
		t.Fatalf("Replace: %v, %d changes, mtu %d", r.Err, len(r.Changes), mtu(fake))
	}
	in := fo.InForce()
	if !in.Local || in.Why != "link to azure-gw down" || in.Plan.Tunnels[0].MTU != 1300 || in.Since.IsZero() {
		t.Errorf("in force after Replace: %+v", in)
	}
	st := loop.Status()
	if st.Why != "local plan: link to azure-gw down" || st.Revision != 4 || st.Generation != 9 {
		t.Errorf("loop status after Replace: %+v; want the local plan, standing in for revision 4, generation 9", st)
	}

	// The inner source's next plan is held, not applied.
	if r := inner.send(t, agent.Update{Plan: withMTU(g, 1380), Revision: 5, Generation: 10, Why: "revision 5, generation 10"}); r.Err != nil || len(r.Changes) != 0 {
		t.Fatalf("an inner plan under a local one: %v, %d changes", r.Err, len(r.Changes))
	}
	if mtu(fake) != 1300 || !fo.InForce().Local {
		t.Fatalf("an inner plan replaced the local one: mtu %d, %+v", mtu(fake), fo.InForce())
	}
	// Its new data plane (a rotated key) is taken, with the local plan.
	rotated := dataplane.NewFake()
	if r := inner.send(t, agent.Update{Why: "new key, rotation 1", Dataplane: rotated}); r.Err != nil || mtu(rotated) != 1300 {
		t.Fatalf("a new data plane under a local plan: %v, mtu %d", r.Err, mtu(rotated))
	}
	// Its refusals are reported.
	if r := inner.send(t, agent.Update{Why: "watch", Err: errors.New("format 9")}); r.Err == nil || !strings.Contains(loop.Status().Err.Error(), "format 9") {
		t.Fatalf("a refusal under a local plan: %v, status %v", r.Err, loop.Status().Err)
	}

	// Restored: the inner source's latest plan.
	r = fo.Restore("link to azure-gw up again")
	if r.Err != nil || mtu(rotated) != 1380 {
		t.Fatalf("Restore: %v, mtu %d", r.Err, mtu(rotated))
	}
	if in := fo.InForce(); in.Local || in.Plan.Tunnels[0].MTU != 1380 || !strings.Contains(in.Why, "revision 5, generation 10") || !strings.Contains(in.Why, "link to azure-gw up again") {
		t.Errorf("in force after Restore: %+v", in)
	}
	if st := loop.Status(); st.Revision != 5 || st.Generation != 10 || st.Err != nil {
		t.Errorf("loop status after Restore: %+v", st)
	}
	if r := fo.Restore("again"); r.Err != nil || len(r.Changes) != 0 {
		t.Errorf("Restore without a local plan: %v, %d changes; want nothing", r.Err, len(r.Changes))
	}
	// And the inner source's plans pass through again.
	if r := inner.send(t, agent.Update{Plan: withMTU(g, 1360), Why: "revision 6"}); r.Err != nil || mtu(rotated) != 1360 {
		t.Fatalf("an inner plan after Restore: %v, mtu %d", r.Err, mtu(rotated))
	}
}

// TestFailoverBeforeTheFirstPlan: a local plan may go in force before the
// inner source delivered one; Restore then keeps it and says why.
func TestFailoverBeforeTheFirstPlan(t *testing.T) {
	g := testPlan(t)
	fo := agent.NewFailover(newFeed())
	fake := dataplane.NewFake()
	startLoop(t, agent.LoopConfig{Source: fo, Dataplane: fake, Resync: time.Hour})
	var r agent.Result
	eventually(t, "the failover running", func() bool {
		r = fo.Replace(*withMTU(g, 1300), "no manager yet")
		return !errors.Is(r.Err, agent.ErrStopped)
	})
	if r.Err != nil || mtu(fake) != 1300 {
		t.Fatalf("Replace: %v, mtu %d", r.Err, mtu(fake))
	}
	if r := fo.Restore("over"); r.Err == nil || !strings.Contains(r.Err.Error(), "no plan yet") || !fo.InForce().Local || mtu(fake) != 1300 {
		t.Errorf("Restore with no inner plan: %v, %+v, mtu %d", r.Err, fo.InForce(), mtu(fake))
	}
}
