package manager

import (
	"fmt"
	"testing"
	"time"
)

// TestFollowerPlansItsAgentsOnly: a manager following another's change
// plans only the gateways whose agents it serves; the others' plans stay
// lazy until asked for, and then are those the first manager stored (same
// generation, plan and sum). A change made through the follower plans
// every gateway again, and both managers then serve the same plans.
func TestFollowerPlansItsAgentsOnly(t *testing.T) {
	a := newHarness(t)
	b := a.sharing()
	a.putSpec(manySites(6, 1500))
	eventually(t, 5*time.Second, "the spec on the second manager", func() bool { return b.m.snapshot().gen == a.m.snapshot().gen })
	b.plan("gw-00") // gw-00's agent is served by b
	a.putSpec(manySites(7, 1500))
	eventually(t, 5*time.Second, "the change on the second manager", func() bool { return b.m.snapshot().gen == a.m.snapshot().gen })

	st := b.m.snapshot()
	if e := st.plans["gw-00"]; e.lazy != nil {
		t.Error("gw-00, served by the follower, was not planned there")
	}
	for _, name := range []string{"gw-01", "gw-03", "gw-06"} {
		if e := st.plans[name]; e.lazy == nil || e.lazy.computed.Load() {
			t.Errorf("%s, served by nobody, was planned by the follower", name)
		}
	}
	for i := range 7 {
		name := fmt.Sprintf("gw-%02d", i)
		pa, pb := a.plan(name), b.plan(name)
		if pa.Generation != pb.Generation || pa.Plan.String() != pb.Plan.String() {
			t.Errorf("%s: the follower serves generation %d, the first manager %d (or other plans)", name, pb.Generation, pa.Generation)
		}
		eb, _, _ := b.m.snapshot().entry(name)
		if ea, _, _ := a.m.snapshot().entry(name); ea.Sum != eb.Sum || eb.Sum != b.m.snapshot().plans[name].Sum {
			t.Errorf("%s: sums differ between the managers", name)
		}
	}

	// Through the follower: it plans every gateway, from its lazy plans.
	b.putSpec(manySites(8, 1500))
	eventually(t, 5*time.Second, "the change on the first manager", func() bool { return a.m.snapshot().gen == b.m.snapshot().gen })
	for i := range 8 {
		name := fmt.Sprintf("gw-%02d", i)
		ea, _, err1 := a.m.snapshot().entry(name)
		eb, _, err2 := b.m.snapshot().entry(name)
		if err1 != nil || err2 != nil || ea.Generation != eb.Generation || ea.Sum != eb.Sum || ea.held.Gateway().String() != eb.held.Gateway().String() {
			t.Errorf("%s after a change through the follower: generation %d / %d, errors %v / %v, or other plans", name, ea.Generation, eb.Generation, err1, err2)
		}
	}
}
