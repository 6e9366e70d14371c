package dataplane

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/fednet/fednet/internal/backend"
	"github.com/fednet/fednet/internal/dataplane/tunnel"
	"github.com/fednet/fednet/internal/dataplane/wireguard"
	"github.com/fednet/fednet/internal/plan"
)

// machine is a gateway with things that are not fednet's: an uplink with
// the default route (uplink0, 192.0.2.10/24 via 192.0.2.1), a LAN port
// (eth1), another WireGuard interface (wgvpn, 192.168.9.1/24, another key)
// and a TUN named fed9 without fednet's mark; and fednet's own tunnel fed0
// (planA applied).
func machine(t testing.TB) State {
	f := NewFake()
	if _, err := f.Apply(context.Background(), planA()); err != nil {
		t.Fatal(err)
	}
	s := f.State()
	s.Underlay = Underlay{
		Interfaces: []tunnel.Interface{
			{Name: "eth1", Kind: "veth", MTU: 1500, Up: true},
			{Name: "fed9", Kind: "tun", MTU: 1500},
			{Name: "lo", Kind: "device", MTU: 65536, Up: true, Addresses: pfx("127.0.0.1/8")},
			{Name: "uplink0", Kind: "veth", MTU: 1500, Up: true, Addresses: pfx("192.0.2.10/24")},
			{Name: "wgvpn", Kind: "wireguard", MTU: 1420, Up: true, Addresses: pfx("192.168.9.1/24")},
		},
		DefaultRoutes: []UnderlayRoute{{Destination: netip.MustParsePrefix("0.0.0.0/0"), Device: "uplink0", Gateway: netip.MustParseAddr("192.0.2.1")}},
		Endpoints: []UnderlayRoute{
			{Destination: netip.MustParsePrefix("192.0.2.2/32"), Device: "uplink0"},
			{Destination: netip.MustParsePrefix("192.0.2.3/32"), Device: "uplink0"},
		},
	}
	s.Tunnels = append(s.Tunnels,
		TunnelState{Name: "wgvpn", State: tunnel.State{Link: &s.Underlay.Interfaces[4], Device: &wireguard.Device{PublicKey: keyB, ListenPort: 51000}}},
		TunnelState{Name: "fed9", State: tunnel.State{Link: &s.Underlay.Interfaces[1]}})
	return s.Clone()
}

// malicious are plans that reach outside what fednet owns, as an edited
// plan file or a compromised manager would: each must be refused whole,
// naming the field.
var malicious = map[string]struct {
	edit func(p *plan.Gateway)
	want string
}{
	"table filter":         {func(p *plan.Gateway) { p.Firewall.Table = "filter" }, `firewall.table "filter" is not fednet's table`},
	"port uplink0":         {func(p *plan.Gateway) { bridgeOn(p, "uplink0") }, "bridges[0].port uplink0 holds the default route"},
	"port to an endpoint":  {func(p *plan.Gateway) { bridgeOn(p, "uplink0"); p.Bounds.Ports = append(p.Bounds.Ports, "uplink0") }, "uplink0 is the interface peer endpoint 192.0.2.2 is reached by"},
	"port not in bounds":   {func(p *plan.Gateway) { bridgeOn(p, "eth7") }, `bridges[0].port "eth7" is not one of bounds.ports`},
	"routes 0/1 and 128/1": {func(p *plan.Gateway) { p.Routes = append(p.Routes, fed0Route("0.0.0.0/1"), fed0Route("128.0.0.0/1")) }, "routes[2].destination 0.0.0.0/1 is not inside bounds.supernet"},
	"route over the uplink": {func(p *plan.Gateway) {
		p.Bounds.Supernet = netip.MustParsePrefix("128.0.0.0/1")
		p.Routes = append(p.Routes, fed0Route("192.0.2.0/24"))
	}, "routes[2].destination 192.0.2.0/24 covers 192.0.2.10, an address of interface uplink0"},
	"route over the default gateway": {func(p *plan.Gateway) {
		p.Bounds.Supernet = netip.MustParsePrefix("192.0.2.0/24")
		p.Routes = append(p.Routes, fed0Route("192.0.2.0/31"))
	}, "covers 192.0.2.1, the gateway of the default route via uplink0"},
	"allowed IP over an endpoint": {func(p *plan.Gateway) {
		p.Bounds.Supernet = netip.MustParsePrefix("192.0.2.0/24")
		p.Peers[1].AllowedIPs = append(p.Peers[1].AllowedIPs, netip.MustParsePrefix("192.0.2.2/31"))
	}, "peers[1] (c).allowedIPs 192.0.2.2/31 covers 192.0.2.2"},
	"peer 0.0.0.0/0": {func(p *plan.Gateway) {
		p.Peers[0].AllowedIPs = append(p.Peers[0].AllowedIPs, netip.MustParsePrefix("0.0.0.0/0"))
	}, "0.0.0.0/0 is a default route"},
	"supernet 0/0":    {func(p *plan.Gateway) { p.Bounds.Supernet = netip.MustParsePrefix("0.0.0.0/0") }, "bounds.supernet 0.0.0.0/0 is not a prefix fednet can keep routes inside"},
	"route on uplink": {func(p *plan.Gateway) { p.Routes[0].Device = "uplink0" }, `routes[0].device "uplink0" is not a tunnel interface of this plan`},
	"tunnel wgvpn": {func(p *plan.Gateway) {
		p.Tunnels[0].Name, p.Firewall.Tunnels = "wgvpn", []string{"wgvpn"}
		for i := range p.Routes {
			p.Routes[i].Device = "wgvpn"
		}
	}, "tunnels[0].name wgvpn: interface exists and is not fednet's"},
	"tunnel on an unmarked TUN": {func(p *plan.Gateway) {
		p.Tunnels[0].Name, p.Firewall.Tunnels = "fed9", []string{"fed9"}
		for i := range p.Routes {
			p.Routes[i].Device = "fed9"
		}
	}, "tunnels[0].name fed9: interface exists and is not fednet's (a tun link"},
	"bridge named like the uplink": {func(p *plan.Gateway) { bridgeOn(p, "eth1"); p.Bridges[0].Name = "uplink0" }, "bridges[0].name uplink0: interface exists and is not fednet's"},
}

func bridgeOn(p *plan.Gateway, port string) {
	p.Bridges = bridged().Bridges
	p.Bridges[0].Port = port
}

func fed0Route(dst string) plan.Route {
	return plan.Route{Destination: netip.MustParsePrefix(dst), Device: "fed0"}
}

// TestMaliciousPlansRefused: each malicious plan is refused whole, naming
// the field, and the machine is unchanged.
func TestMaliciousPlansRefused(t *testing.T) {
	for name, tc := range malicious {
		t.Run(name, func(t *testing.T) {
			p := planA()
			tc.edit(&p)
			f := NewFake()
			before := machine(t)
			f.SetState(before)
			changes, err := f.Apply(context.Background(), p)
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Apply = %v; want a refusal containing %q", err, tc.want)
			}
			if len(changes) != 0 || f.State().String() != before.String() {
				t.Errorf("a refused plan changed the machine: %q", changes)
			}
		})
	}
	// The same machine takes a good plan, bridge and all.
	f := NewFake()
	f.SetState(machine(t))
	if _, err := f.Apply(context.Background(), bridged()); err != nil {
		t.Errorf("the good plan: %v", err)
	}
}

// FuzzPlanOwnership decodes plans as an agent does and asks the dataplane
// for the ops that would bring a machine with things that are not
// fednet's (machine) to them: whatever the plan, either it is refused
// with no op, or every op stays inside what fednet owns: interfaces it
// marked or creates, ports of the plan's bounds that carry neither the
// default route nor an endpoint's route, its one table, and prefixes
// inside the bounds that cover none of the machine's own addresses.
func FuzzPlanOwnership(f *testing.F) {
	seeds := []plan.Gateway{planA(), planB(), planC(), bridged(), withNeighbors()}
	for _, tc := range malicious {
		p := planA()
		tc.edit(&p)
		seeds = append(seeds, p)
	}
	for _, p := range seeds {
		p.Version = plan.Version
		b, err := json.Marshal(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	cur := machine(f)
	reg, err := newRegistry(NewFake().reg[backend.WireGuard])
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := plan.Decode(data)
		if err != nil {
			return
		}
		ops, err := diff(cur, p, reg, kernelL2{})
		if err != nil {
			if len(ops) != 0 {
				t.Fatalf("a refused plan has ops: %v", ops)
			}
			return
		}
		if msg := outsideOwnership(cur, p, ops); msg != "" {
			t.Fatalf("plan %s\nop outside fednet's ownership: %s", data, msg)
		}
	})
}

// outsideOwnership returns what the first op of ops that reaches outside
// fednet's ownership on machine cur does, "" when none does.
func outsideOwnership(cur State, p plan.Gateway, ops []op) string {
	owned := map[string]bool{}
	for _, t := range cur.Tunnels {
		if t.Marked() != "" {
			owned[t.Name] = true
		}
	}
	for _, b := range cur.L2.Bridges {
		owned[b.Name] = true
	}
	for _, v := range cur.L2.VXLANs {
		owned[v.Name] = true
	}
	foreign := map[string]bool{}
	for _, i := range cur.Underlay.Interfaces {
		foreign[i.Name] = true
	}
	uplinks := map[string]bool{}
	for _, r := range append(slices.Clone(cur.Underlay.DefaultRoutes), cur.Underlay.Endpoints...) {
		uplinks[r.Device] = true
	}
	var held []netip.Addr
	for _, i := range cur.Underlay.Interfaces {
		for _, a := range i.Addresses {
			held = append(held, a.Addr())
		}
	}
	for _, r := range append(slices.Clone(cur.Underlay.DefaultRoutes), cur.Underlay.Endpoints...) {
		held = append(held, r.Gateway, r.Destination.Addr())
	}
	for _, o := range ops {
		t := o.target()
		c := string(o.change())
		switch {
		case t.Table != "" && t.Table != plan.Table:
			return c + ": table " + t.Table
		case t.Creates && foreign[t.Interface]:
			return c + ": creates over an interface that is not fednet's"
		case t.Creates:
			owned[t.Interface] = true
		case t.Interface != "" && !owned[t.Interface]:
			return c + ": changes an interface that is not fednet's"
		}
		if t.Port != "" && (!slices.Contains(p.Bounds.Ports, t.Port) || uplinks[t.Port] || owned[t.Port]) {
			return c + ": port " + t.Port
		}
		for _, pre := range t.Prefixes {
			if pre.Bits() == 0 || !covers(p.Bounds.Supernet, pre) && !covers(p.Bounds.Transit, pre) {
				return c + ": prefix " + pre.String() + " outside the bounds"
			}
			for _, a := range held {
				if a.IsValid() && pre.Contains(a) {
					return c + ": prefix " + pre.String() + " covers " + a.String()
				}
			}
		}
	}
	return ""
}

// The oracle itself catches what it is there for.
func TestOutsideOwnershipCatches(t *testing.T) {
	cur := machine(t)
	p := planA()
	for _, tc := range []struct {
		op   op
		want string
	}{
		{tableReplace{rules: ruleset{table: "filter"}, fingerprint: "00000000"}, "table filter"},
		{linkSet{name: "wgvpn", up: true}, "not fednet's"},
		{portSet{port: "uplink0", bridge: "fbr100"}, "port uplink0"},
		{routeAdd{route: RouteState{Destination: netip.MustParsePrefix("128.0.0.0/1"), Device: "fed0"}}, "outside the bounds"},
		{bridgeAdd{name: "uplink0", network: "x"}, "creates over"},
	} {
		ops := []op{tc.op}
		if _, ok := tc.op.(portSet); ok {
			ops = []op{bridgeAdd{name: "fbr100", network: "lan"}, tc.op}
		}
		if got := outsideOwnership(cur, p, ops); !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.op.change(), got, tc.want)
		}
	}
	p.Bounds.Supernet = netip.MustParsePrefix("192.0.0.0/8")
	if got := outsideOwnership(cur, p, []op{routeAdd{route: RouteState{Destination: netip.MustParsePrefix("192.0.2.0/24"), Device: "fed0"}}}); !strings.Contains(got, "covers 192.0.2.10") {
		t.Errorf("a route over the uplink: %q", got)
	}
}
