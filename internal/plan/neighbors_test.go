package plan_test

import (
	"bytes"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/spec"
)

// neighborHosts are two hosts of aws-eu (fabric: dropsUnknownMACs in
// examples/neighbors.yaml) joined to lan, slots 0 and 3.
func neighborHosts() []plan.Host {
	return []plan.Host{
		{Name: "web1", Site: "aws-eu", Network: "lan", Address: netip.MustParseAddr("10.1.0.10"), Slot: 3},
		{Name: "db1", Site: "aws-eu", Network: "lan", Address: netip.MustParseAddr("10.1.0.11"), Slot: 0},
	}
}

// neighborPlans computes the plans of examples/neighbors.yaml with
// neighborHosts joined.
func neighborPlans(t *testing.T) (*spec.Federation, plan.Inputs, []plan.Gateway) {
	t.Helper()
	f := load(t, "neighbors.yaml")
	in := testKeys(f)
	in.Hosts = neighborHosts()
	gws, err := plan.Compute(f, in)
	if err != nil {
		t.Fatal(err)
	}
	return f, in, gws
}

func TestNeighborsGolden(t *testing.T) {
	_, _, gws := neighborPlans(t)
	var tb, jb bytes.Buffer
	for _, g := range gws {
		tb.WriteString(g.String() + "\n")
		jb.Write(g.JSON())
	}
	golden(t, "neighbors.txt", tb.Bytes())
	golden(t, "neighbors.json", jb.Bytes())
}

// TestNeighbors checks what the golden file could hide: the tunnels sit
// on the drop-unknown-MAC site's gateway only, one port per slot, the
// firewall opens exactly those ports to exactly those hosts, and every
// member's MTU has the neighbor-tunnel term.
func TestNeighbors(t *testing.T) {
	f, in, gws := neighborPlans(t)
	for _, g := range gws {
		if len(g.Bridges) != 1 {
			t.Fatalf("%s: %d bridges, want 1", g.Name, len(g.Bridges))
		}
		b := g.Bridges[0]
		if !strings.Contains(b.MTUReason, "neighbor tunnels at aws-eu: segment 1500 (default) - VXLAN/IPv4 50 = 1450") {
			t.Errorf("%s: MTU reason has no neighbor-tunnel term: %s", g.Name, b.MTUReason)
		}
		hostPorts := hostPortsOf(b)
		if g.Site != "aws-eu" {
			if len(hostPorts) != 0 || len(g.Firewall.Neighbors) != 0 {
				t.Errorf("%s: neighbors %v, firewall %v; want none outside aws-eu", g.Name, hostPorts, g.Firewall.Neighbors)
			}
			continue
		}
		want := []plan.VXLAN{
			{Name: "fnb0", Kind: plan.ToHost, Local: netip.MustParseAddr("10.1.0.254"), UDPPort: 4790, Remotes: []netip.Addr{netip.MustParseAddr("10.1.0.11")}, To: "db1"},
			{Name: "fnb3", Kind: plan.ToHost, Local: netip.MustParseAddr("10.1.0.254"), UDPPort: 4793, Remotes: []netip.Addr{netip.MustParseAddr("10.1.0.10")}, To: "web1"},
		}
		if !reflect.DeepEqual(hostPorts, want) {
			t.Errorf("aws-gw neighbor ports = %+v\nwant %+v", hostPorts, want)
		}
		rules := []plan.NeighborRule{{Address: netip.MustParseAddr("10.1.0.11"), Port: 4790}, {Address: netip.MustParseAddr("10.1.0.10"), Port: 4793}}
		if len(g.Firewall.Neighbors) != 2 || g.Firewall.Neighbors[0] != rules[0] || g.Firewall.Neighbors[1] != rules[1] {
			t.Errorf("aws-gw firewall neighbors = %v, want %v", g.Firewall.Neighbors, rules)
		}
	}

	ht, err := plan.ForHost(f, in, "web1")
	if err != nil {
		t.Fatal(err)
	}
	want := plan.HostTunnel{Host: "web1", Network: "lan", VNI: 200, Device: "fvx200",
		Local: netip.MustParseAddr("10.1.0.10"), Remote: netip.MustParseAddr("10.1.0.254"),
		Gateway: "aws-gw", UDPPort: 4793, MTU: gws[0].Bridges[0].MTU, MTUReason: gws[0].Bridges[0].MTUReason}
	if ht != want {
		t.Errorf("ForHost(web1) = %+v\nwant %+v", ht, want)
	}
}

// A segment MTU smaller than the tunnel's makes the neighbor-tunnel term
// the limit: the network MTU leaves room for VXLAN over the site's LAN.
func TestNeighborTermLimits(t *testing.T) {
	mtu, why := plan.NetworkMTU(1420, plan.MTUInputs{Bridged: true, Segments: []plan.Segment{
		{Site: "aws-eu", MTU: 1400, Neighbors: plan.IPv4}, {Site: "lab"},
	}})
	if mtu != 1350 || !strings.Contains(why, "limited by neighbor tunnels at aws-eu") {
		t.Errorf("NetworkMTU = %d, %q; want 1350 limited by the neighbor tunnels", mtu, why)
	}
}

// Hosts that cannot join are left out of plans, and CheckHost says why.
func TestHostRejected(t *testing.T) {
	f := load(t, "neighbors.yaml")
	ok := plan.Host{Name: "h", Site: "aws-eu", Network: "lan", Address: netip.MustParseAddr("10.1.0.10")}
	tests := []struct {
		name string
		edit func(h *plan.Host)
		msg  string
	}{
		{"ordinary fabric", func(h *plan.Host) { h.Site = "azure-we" }, "does not declare fabric: dropsUnknownMACs"},
		{"routed network", func(h *plan.Host) { h.Network = "apps" }, "not a bridged network of site aws-eu"},
		{"unknown network", func(h *plan.Host) { h.Network = "nope" }, `network "nope" is not in the spec`},
		{"unknown site", func(h *plan.Host) { h.Site = "nope" }, `site "nope" is not in the spec`},
		{"IPv6 address", func(h *plan.Host) { h.Address = netip.MustParseAddr("fd00::1") }, "not in a prefix of site aws-eu"},
		{"outside the site", func(h *plan.Host) { h.Address = netip.MustParseAddr("10.9.0.10") }, "not in a prefix of site aws-eu"},
		{"network address", func(h *plan.Host) { h.Address = netip.MustParseAddr("10.1.0.0") }, "network address of 10.1.0.0/24"},
		{"broadcast address", func(h *plan.Host) { h.Address = netip.MustParseAddr("10.1.0.255") }, "broadcast address of 10.1.0.0/24"},
		{"gateway's address", func(h *plan.Host) { h.Address = netip.MustParseAddr("10.1.0.254") }, "gateway aws-gw's LAN address"},
		{"no address", func(h *plan.Host) { h.Address = netip.Addr{} }, "no address"},
		{"slot", func(h *plan.Host) { h.Slot = plan.MaxNeighborSlots }, "out of range"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := ok
			tt.edit(&h)
			err := plan.CheckHost(f, h)
			if err == nil || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("CheckHost = %v, want %q", err, tt.msg)
			}
			in := testKeys(f)
			in.Hosts = []plan.Host{h}
			gws, err := plan.Compute(f, in)
			if err != nil {
				t.Fatal(err)
			}
			for _, g := range gws {
				if len(g.Firewall.Neighbors) != 0 {
					t.Errorf("%s opens %v for a host that cannot join", g.Name, g.Firewall.Neighbors)
				}
			}
		})
	}
	if err := plan.CheckHost(f, ok); err != nil {
		t.Errorf("CheckHost(valid host) = %v", err)
	}
}

// A host that cannot join, or that claims another host's address or slot,
// is skipped and reported; it never stops the gateway's plan, and the
// first host by name keeps what both claim.
func TestHostSkipped(t *testing.T) {
	f := load(t, "neighbors.yaml")
	in := testKeys(f)
	a := func(s string) netip.Addr { return netip.MustParseAddr(s) }
	in.Hosts = []plan.Host{
		{Name: "a", Site: "aws-eu", Network: "lan", Address: a("10.1.0.10"), Slot: 0},
		{Name: "b", Site: "aws-eu", Network: "lan", Address: a("10.1.0.10"), Slot: 1},  // a's address
		{Name: "c", Site: "aws-eu", Network: "lan", Address: a("10.1.0.11"), Slot: 0},  // a's slot
		{Name: "d", Site: "aws-eu", Network: "lan", Address: a("10.1.0.254"), Slot: 2}, // the gateway's address
		{Name: "e", Site: "aws-eu", Network: "lan", Address: a("10.1.0.12"), Slot: 3},  // fine
	}
	gws, err := plan.Compute(f, in)
	if err != nil {
		t.Fatalf("Compute with bad hosts = %v; want plans with the bad hosts left out", err)
	}
	var got []string
	for _, g := range gws {
		for _, b := range g.Bridges {
			for _, v := range hostPortsOf(b) {
				got = append(got, g.Name+":"+v.To)
			}
		}
	}
	if want := []string{"aws-gw:a", "aws-gw:e"}; !reflect.DeepEqual(got, want) {
		t.Errorf("neighbor tunnels = %v, want %v", got, want)
	}
	var msgs []string
	for _, err := range plan.SkippedHosts(f, in) {
		msgs = append(msgs, err.Error())
	}
	want := []string{
		"host b: address 10.1.0.10 at site aws-eu is host a's",
		"host c: slot 0 at site aws-eu is host a's",
		"host d cannot join network lan at site aws-eu: host address 10.1.0.254 is gateway aws-gw's LAN address",
	}
	if !reflect.DeepEqual(msgs, want) {
		t.Errorf("SkippedHosts = %q\nwant %q", msgs, want)
	}
}

func hostPortsOf(b plan.Bridge) []plan.VXLAN { return b.Ports(plan.ToHost) }
