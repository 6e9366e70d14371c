package dataplane

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
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
	p.Bridges[0].VXLANs = append(p.Bridges[0].VXLANs,
		plan.VXLAN{Name: "fnb0", Kind: plan.ToHost, Local: netip.MustParseAddr("10.1.0.254"), UDPPort: 4790, Remotes: []netip.Addr{netip.MustParseAddr("10.1.0.10")}, To: "web1"},
		plan.VXLAN{Name: "fnb3", Kind: plan.ToHost, Local: netip.MustParseAddr("10.1.0.254"), UDPPort: 4793, Remotes: []netip.Addr{netip.MustParseAddr("10.1.0.11")}, To: "db1"},
	)
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
		nb(&p, 0).Remotes = []netip.Addr{netip.MustParseAddr("10.1.0.20")}
		p.Firewall.Neighbors[0].Address = netip.MustParseAddr("10.1.0.20")
		return p
	},
	"4-one-leaves": func() plan.Gateway {
		p := withNeighbors()
		p.Bridges[0].VXLANs = slices.DeleteFunc(p.Bridges[0].VXLANs, func(v plan.VXLAN) bool { return v.Name == "fnb0" })
		p.Firewall.Neighbors = p.Firewall.Neighbors[1:]
		return p
	},
	"5-slot-reused": func() plan.Gateway { // another host takes slot 0: alias changes
		p := withNeighbors()
		nb(&p, 0).To = "web2"
		return p
	},
	"6-no-bridge": planA,
}

// nb is the i-th neighbor tunnel of p's first bridge.
func nb(p *plan.Gateway, i int) *plan.VXLAN {
	for j := range p.Bridges[0].VXLANs {
		if p.Bridges[0].VXLANs[j].Kind == plan.ToHost {
			if i == 0 {
				return &p.Bridges[0].VXLANs[j]
			}
			i--
		}
	}
	panic("no such neighbor tunnel")
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
		{"port of the bridge", func(p *plan.Gateway) { nb(p, 0).UDPPort = 4789 },
			"bridges[0].vxlans[1].udpPort 4789 is also the port of vxlans[0]"},
		{"same port twice", func(p *plan.Gateway) { nb(p, 1).UDPPort = 4790 },
			"bridges[0].vxlans[2].udpPort 4790 is also the port of vxlans[1]"},
		{"name of the bridge", func(p *plan.Gateway) { nb(p, 0).Name = "fbr100" },
			"bridges[0].vxlans[1].name fbr100: interface fbr100 is also bridges[0].name"},
		{"family", func(p *plan.Gateway) { nb(p, 0).Remotes = []netip.Addr{netip.MustParseAddr("fd00::1")} },
			"bridges[0].vxlans[1].remotes fd00::1 is not of the local address's family"},
		{"host", func(p *plan.Gateway) { nb(p, 0).To = "" }, "bridges[0].vxlans[1].to"},
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
