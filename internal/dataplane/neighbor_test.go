package dataplane

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/fednet/fednet/internal/plan"
)

// withNeighbors returns the bridged plan with neighbor tunnels to the hosts
// 10.1.0.10 (slot 0) and 10.1.0.11 (slot 3), as the planner gives a site
// whose fabric drops unknown MACs.
func withNeighbors() plan.Gateway {
	p := bridged()
	p.Bridges[0].Neighbors = []plan.Neighbor{
		{Host: "web1", VXLAN: "fnb0", Local: netip.MustParseAddr("10.1.0.254"), Remote: netip.MustParseAddr("10.1.0.10"), UDPPort: 4790},
		{Host: "db1", VXLAN: "fnb3", Local: netip.MustParseAddr("10.1.0.254"), Remote: netip.MustParseAddr("10.1.0.11"), UDPPort: 4793},
	}
	p.Firewall.Neighbors = []plan.NeighborRule{{Address: netip.MustParseAddr("10.1.0.10"), Port: 4790}, {Address: netip.MustParseAddr("10.1.0.11"), Port: 4793}}
	return p
}

// Steps of the neighbor tunnels' life; each changes one thing.
var neighborPlans = map[string]func() plan.Gateway{
	"1-add": withNeighbors,
	"2-mtu": func() plan.Gateway {
		p := withNeighbors()
		p.Bridges[0].MTU = 1330
		return p
	},
	"3-host-moves": func() plan.Gateway { // web1's address changes: its device is recreated
		p := withNeighbors()
		p.Bridges[0].Neighbors[0].Remote = netip.MustParseAddr("10.1.0.20")
		p.Firewall.Neighbors[0].Address = netip.MustParseAddr("10.1.0.20")
		return p
	},
	"4-one-leaves": func() plan.Gateway {
		p := withNeighbors()
		p.Bridges[0].Neighbors = p.Bridges[0].Neighbors[1:]
		p.Firewall.Neighbors = p.Firewall.Neighbors[1:]
		return p
	},
	"5-slot-reused": func() plan.Gateway { // another host takes slot 0: alias changes
		p := withNeighbors()
		p.Bridges[0].Neighbors[0].Host = "web2"
		return p
	},
	"6-no-bridge": planA,
}

func TestFakeNeighborTransitions(t *testing.T) {
	checkTransitions(t, neighborPlans, "1-add", "neighbors.golden")
}

func TestFakeNeighborSamePlanTwiceAndRandomOrder(t *testing.T) {
	checkSamePlanTwiceAndRandomOrder(t, neighborPlans)
}

// checkTransitions applies plans on the fake in name order, then the plan
// named last and Down, and compares the changes and states with the golden
// file; the state after Down must be empty.
func checkTransitions(t *testing.T, plans map[string]func() plan.Gateway, last, goldenFile string) {
	t.Helper()
	f := NewFake()
	var b strings.Builder
	for _, name := range sortedKeys(plans) {
		fmt.Fprintf(&b, "== apply %s ==\n%s-- state --\n%s\n", name, render(mustApply(t, f, plans[name]())), f.State())
	}
	mustApply(t, f, plans[last]())
	changes, err := f.Down(context.Background(), planA())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&b, "== apply %s, down ==\n%s-- state --\n%s", last, render(changes), f.State())
	golden(t, goldenFile, b.String())
	if s := f.State(); !s.IsEmpty() {
		t.Errorf("state after Down is not empty:\n%s", s)
	}
}

// checkSamePlanTwiceAndRandomOrder: applying a plan twice changes nothing
// the second time, and random sequences of plans end in the state of their
// last plan applied alone.
func checkSamePlanTwiceAndRandomOrder(t *testing.T, plans map[string]func() plan.Gateway) {
	t.Helper()
	want := map[string]string{}
	for _, n := range sortedKeys(plans) {
		f := NewFake()
		mustApply(t, f, plans[n]())
		if c := mustApply(t, f, plans[n]()); len(c) != 0 {
			t.Errorf("%s: second Apply made changes:\n%s", n, render(c))
		}
		want[n] = f.State().String()
	}
	applyRandomSequences(t, 3, 50, plans, func(seq []string, f *Fake) {
		last := seq[len(seq)-1]
		if d := cmp.Diff(want[last], f.State().String()); d != "" {
			t.Errorf("sequence %v: state differs from applying %s alone (-want +got):\n%s", seq, last, d)
		}
	})
}

// A neighbor device whose name another interface holds is reported and
// left alone; the rest of the plan applies.
func TestNeighborForeignName(t *testing.T) {
	f := NewFake()
	f.SetState(State{Foreign: []string{"fnb0"}})
	changes, err := f.Apply(context.Background(), withNeighbors())
	if err == nil || !strings.Contains(err.Error(), "interface fnb0 exists and is not fednet's") {
		t.Errorf("Apply error = %v, want fnb0 reported", err)
	}
	if got := render(changes); strings.Contains(got, "fnb0") || !strings.Contains(got, "fnb3") {
		t.Errorf("changes touch fnb0 or miss fnb3:\n%s", got)
	}
}

func TestNeighborPlanRejected(t *testing.T) {
	tests := []struct {
		name string
		edit func(p *plan.Gateway)
		msg  string
	}{
		{"port of the bridge", func(p *plan.Gateway) { p.Bridges[0].Neighbors[0].UDPPort = 4789 },
			"bridges[0].neighbors[0].udpPort 4789 is also bridges[0].vxlans[0].udpPort"},
		{"same port twice", func(p *plan.Gateway) { p.Bridges[0].Neighbors[1].UDPPort = 4790 },
			"bridges[0].neighbors[1].udpPort 4790 is also bridges[0].neighbors[0].udpPort"},
		{"name of the bridge", func(p *plan.Gateway) { p.Bridges[0].Neighbors[0].VXLAN = "fbr100" },
			"bridges[0].neighbors[0].vxlan fbr100: interface fbr100 is also bridges[0].name"},
		{"family", func(p *plan.Gateway) { p.Bridges[0].Neighbors[0].Remote = netip.MustParseAddr("fd00::1") },
			"bridges[0].neighbors[0].remote fd00::1 is not of the local address's family"},
		{"host", func(p *plan.Gateway) { p.Bridges[0].Neighbors[0].Host = "" }, "bridges[0].neighbors[0].host"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := withNeighbors()
			tt.edit(&p)
			f := NewFake()
			changes, err := f.Apply(context.Background(), p)
			if err == nil || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("Apply error = %v, want %q", err, tt.msg)
			}
			if len(changes) != 0 {
				t.Errorf("an invalid plan changed the machine: %q", changes)
			}
		})
	}
}
