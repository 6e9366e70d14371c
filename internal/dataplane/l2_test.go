package dataplane

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/fednet/fednet/internal/dataplane/tunnel"
	"github.com/fednet/fednet/internal/plan"
)

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, x := range s {
		out = append(out, netip.MustParseAddr(x))
	}
	return out
}

// bridged returns plan A with the bridged network "lan" (VNI 100) on port
// eth1, flooding to b and c.
func bridged() plan.Gateway {
	p := planA()
	p.Bridges = []plan.Bridge{{
		Network: "lan", VNI: 100, Name: "fbr100", Port: "eth1", MTU: 1370,
		VXLANs: []plan.VXLAN{{Name: "fvx100", Kind: plan.ToGateways, Local: netip.MustParseAddr("10.255.0.1"),
			Remotes: addrs("10.255.0.2", "10.255.0.3"), UDPPort: 4789, To: "members"}},
	}}
	return p
}

// twoBridged adds the network "lab" (VNI 200, port eth2) to bridged.
func twoBridged() plan.Gateway {
	p := bridged()
	p.Bridges = append(p.Bridges, plan.Bridge{
		Network: "lab", VNI: 200, Name: "fbr200", Port: "eth2", MTU: 1370,
		VXLANs: []plan.VXLAN{{Name: "fvx200", Kind: plan.ToGateways, Local: netip.MustParseAddr("10.255.0.1"),
			Remotes: addrs("10.255.0.3"), UDPPort: 4789, To: "members"}},
	})
	return p
}

// tree returns the bridged plan with lan relayed along a tree: one device
// per neighbor.
func tree() plan.Gateway {
	p := bridged()
	local := p.Bridges[0].VXLANs[0].Local
	p.Bridges[0].VXLANs = []plan.VXLAN{
		{Name: "fvx100-0", Kind: plan.ToGateways, Local: local, Remotes: addrs("10.255.0.2"), UDPPort: 4790, To: "b"},
		{Name: "fvx100-1", Kind: plan.ToGateways, Local: local, Remotes: addrs("10.255.0.3"), UDPPort: 4791, To: "c"},
	}
	return p
}

// Steps of a bridged network's life; each changes one thing.
var bridgePlans = map[string]func() plan.Gateway{
	"1-add": bridged,
	"2-remotes": func() plan.Gateway { // c leaves, d joins
		p := bridged()
		p.Bridges[0].VXLANs[0].Remotes = addrs("10.255.0.2", "10.255.0.4")
		return p
	},
	"3-mtu": func() plan.Gateway {
		p := bridged()
		p.Bridges[0].MTU = 1330
		return p
	},
	"4-no-port": func() plan.Gateway {
		p := bridged()
		p.Bridges[0].Port = ""
		return p
	},
	"5-second": twoBridged,
	"6-vni": func() plan.Gateway { // lan's VNI changes: its VXLAN device is recreated
		p := bridged()
		p.Bridges[0].VNI = 101
		return p
	},
	"7-move-port": func() plan.Gateway { // eth1 moves from lan to lab, lan goes
		p := twoBridged()
		p.Bridges = p.Bridges[1:]
		p.Bridges[0].Port = "eth1"
		return p
	},
	"8-none": planA,
	"9-tree": tree,
	"9-tree-lead": func() plan.Gateway { // a way back's lead: tree and mesh ports, learning off on both
		p := tree()
		mesh := bridged().Bridges[0].VXLANs[0]
		p.Bridges[0].VXLANs = append([]plan.VXLAN{mesh}, p.Bridges[0].VXLANs...)
		for i := range p.Bridges[0].VXLANs {
			p.Bridges[0].VXLANs[i].NoLearning = true
		}
		return p
	},
	"9-tree-relay": func() plan.Gateway { // a relays for lan without a port of its own
		p := bridged()
		local := p.Bridges[0].VXLANs[0].Local
		p.Bridges[0].Port, p.Bridges[0].Relay = "", true
		p.Bridges[0].VXLANs = []plan.VXLAN{
			{Name: "fvx100-0", Kind: plan.ToGateways, Local: local, Remotes: addrs("10.255.0.2"), UDPPort: 4790, To: "b"},
			{Name: "fvx100-2", Kind: plan.ToGateways, Local: local, Remotes: addrs("10.255.0.4"), UDPPort: 4792, To: "d"},
		}
		return p
	},
}

func TestFakeBridgeTransitions(t *testing.T) {
	checkTransitions(t, bridgePlans, "5-second", "bridges.golden")
}

func TestFakeBridgeSamePlanTwiceAndRandomOrder(t *testing.T) {
	checkSamePlanTwiceAndRandomOrder(t, bridgePlans)
}

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

// A plan naming as a bridge or VXLAN port an interface that is not
// fednet's is refused whole, and the interface is left alone.
func TestL2ForeignName(t *testing.T) {
	for _, name := range []string{"fbr100", "fvx100", "fnb0"} {
		t.Run(name, func(t *testing.T) {
			f := NewFake()
			f.SetState(State{Underlay: Underlay{Interfaces: []tunnel.Interface{{Name: name, Kind: "bridge"}}}})
			changes, err := f.Apply(context.Background(), withNeighbors())
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), name+": interface exists and is not fednet's (a bridge link, without fednet's mark fednet:lan)") {
				t.Errorf("Apply error = %v, want %s reported", err, name)
			}
			if len(changes) != 0 {
				t.Errorf("a refused plan changed the machine:\n%s", render(changes))
			}
		})
	}
}

// Neighbor-tunnel devices made before one L2 model (alias
// fednet-neighbor:..., a default remote) are fednet's and are replaced.
func TestL2ReplacesOldNeighborDevices(t *testing.T) {
	f := NewFake()
	mustApply(t, f, withNeighbors())
	s := f.State()
	for i, v := range s.L2.VXLANs {
		if v.Name == "fnb0" {
			s.L2.VXLANs[i].DefaultRemote = v.Remotes[0]
		}
	}
	f.SetState(s)
	got := render(mustApply(t, f, withNeighbors()))
	want := "ip link del fnb0\n" +
		"ip link add fnb0 mtu 1370 type vxlan id 100 local 10.1.0.254 dstport 4790 && ip link set fnb0 alias fednet:lan\n" +
		"ip link set fnb0 up\nip link set fnb0 master fbr100\nbridge fdb append 00:00:00:00:00:00 dev fnb0 dst 10.1.0.10\n"
	if got != want {
		t.Errorf("changes:\n%swant:\n%s", got, want)
	}
	if c := mustApply(t, f, withNeighbors()); len(c) != 0 {
		t.Errorf("Apply after the replacement made changes:\n%s", render(c))
	}
	for alias, want := range map[string]string{"fednet:lan": "lan", "fednet-neighbor:lan/web1": "lan", "fednet:": ""} {
		if n, ok := l2Network(alias); !ok || n != want {
			t.Errorf("l2Network(%q) = %q, %v; want %q", alias, n, ok, want)
		}
	}
	if _, ok := l2Network("office-bridge"); ok {
		t.Error("an alias that is not fednet's was taken for fednet's")
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
		{"two remotes", func(p *plan.Gateway) { nb(p, 0).Remotes = addrs("10.1.0.10", "10.1.0.12") }, "bridges[0].vxlans[1].remotes has 2 addresses"},
		{"remote outside", func(p *plan.Gateway) { nb(p, 0).Remotes = addrs("192.0.2.10") }, "bridges[0].vxlans[1].remotes 192.0.2.10 is not inside bounds.supernet"},
		{"gateway remote outside", func(p *plan.Gateway) { p.Bridges[0].VXLANs[0].Remotes = addrs("10.1.0.7") }, "bridges[0].vxlans[0].remotes 10.1.0.7 is not inside bounds.transit"},
		{"port not in bounds", func(p *plan.Gateway) { p.Bridges[0].Port = "eth9" }, `bridges[0].port "eth9" is not one of bounds.ports [eth1 eth2]`},
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

// A remote that moves on a bridge's only port to gateways is flooded to
// before the old one is dropped (no moment floods to neither); on a
// relay's tree ports the old entry goes first (a moment flooding to both
// could close a cycle).
func TestFloodEntryOrder(t *testing.T) {
	moved := func(p plan.Gateway, port int, to string) plan.Gateway {
		p.Bridges[0].VXLANs[port].Remotes = addrs(to)
		return p
	}
	mesh := bridged()
	mesh.Bridges[0].VXLANs[0].Remotes = addrs("10.255.0.2", "10.255.0.4")
	tests := []struct {
		name     string
		from, to plan.Gateway
		want     string
	}{
		{"mesh port", bridged(), mesh,
			"bridge fdb append 00:00:00:00:00:00 dev fvx100 dst 10.255.0.4\n" +
				"bridge fdb del 00:00:00:00:00:00 dev fvx100 dst 10.255.0.3\n"},
		{"relay's tree port", tree(), moved(tree(), 1, "10.255.0.4"),
			"bridge fdb del 00:00:00:00:00:00 dev fvx100-1 dst 10.255.0.3\n" +
				"bridge fdb append 00:00:00:00:00:00 dev fvx100-1 dst 10.255.0.4\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := NewFake()
			mustApply(t, f, tt.from)
			if got := render(mustApply(t, f, tt.to)); got != tt.want {
				t.Errorf("changes:\n%swant:\n%s", got, tt.want)
			}
		})
	}
}
