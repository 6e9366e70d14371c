package dataplane

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fednet/fednet/internal/backend"
	"github.com/fednet/fednet/internal/dataplane/tunnel"
	"github.com/fednet/fednet/internal/dataplane/wireguard"
	"github.com/fednet/fednet/internal/plan"
)

func render(changes []Change) string {
	var b strings.Builder
	for _, c := range changes {
		b.WriteString(string(c) + "\n")
	}
	return b.String()
}

func mustApply(t *testing.T, d Dataplane, p plan.Gateway) []Change {
	t.Helper()
	changes, err := d.Apply(context.Background(), p)
	if err != nil {
		t.Fatalf("Apply(%s): %v", p.Name, err)
	}
	return changes
}

// stateOf returns the state a fresh fake reaches with p.
func stateOf(t *testing.T, p plan.Gateway) State {
	f := NewFake()
	mustApply(t, f, p)
	return f.State()
}

func TestFakeTransitions(t *testing.T) {
	f := NewFake()
	var b strings.Builder
	for _, name := range []string{"A", "B", "C", "A"} {
		fmt.Fprintf(&b, "== apply %s ==\n%s-- state --\n%s\n", name, render(mustApply(t, f, plans[name]())), f.State())
	}
	changes, err := f.Down(context.Background(), planA())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&b, "== down ==\n%s-- state --\n%s", render(changes), f.State())
	golden(t, "transitions.golden", b.String())
}

func TestFakeSamePlanTwiceChangesNothing(t *testing.T) {
	for _, name := range sortedNames() {
		t.Run(name, func(t *testing.T) {
			f := NewFake()
			if c := mustApply(t, f, plans[name]()); len(c) == 0 {
				t.Fatal("first Apply made no changes")
			}
			if c := mustApply(t, f, plans[name]()); len(c) != 0 {
				t.Errorf("second Apply made changes:\n%s", render(c))
			}
		})
	}
}

func TestFakeRandomOrderEndsInLastPlan(t *testing.T) {
	names := sortedNames()
	want := map[string]State{}
	for _, n := range names {
		want[n] = stateOf(t, plans[n]())
	}
	applyRandomSequences(t, 1, 30, plans, func(seq []string, f *Fake) {
		last := seq[len(seq)-1]
		w := want[last]
		// Forwarding is never turned off: it is on once any plan wanted it.
		w.Forwarding = slices.ContainsFunc(seq, func(n string) bool { return plans[n]().Forwarding })
		if d := cmp.Diff(w.String(), f.State().String()); d != "" {
			t.Errorf("sequence %v: state differs from applying %s alone (-want +got):\n%s", seq, last, d)
		}
	})
}

func TestFakeDown(t *testing.T) {
	for _, name := range sortedNames() {
		t.Run(name, func(t *testing.T) {
			f := NewFake()
			mustApply(t, f, plans[name]())
			changes, err := f.Down(context.Background(), plans[name]())
			if err != nil {
				t.Fatal(err)
			}
			want := "ip link del fed0\nnft delete table inet fednet\n"
			if got := render(changes); got != want {
				t.Errorf("Down changes:\n%swant:\n%s", got, want)
			}
			if s := f.State(); !s.IsEmpty() {
				t.Errorf("state after Down is not empty:\n%s", s)
			}
			changes, err = f.Down(context.Background(), plans[name]())
			if err != nil || len(changes) != 0 {
				t.Errorf("second Down = %q, %v; want no changes, no error", changes, err)
			}
		})
	}
}

func TestFakeDownOfEmptyMachine(t *testing.T) {
	changes, err := NewFake().Down(context.Background(), planA())
	if err != nil || len(changes) != 0 {
		t.Errorf("Down = %q, %v; want no changes, no error", changes, err)
	}
}

func TestFakeAllowedIPsOnlyKeepsEndpoint(t *testing.T) {
	f := NewFake()
	mustApply(t, f, planB())
	// d is behind NAT (no endpoint in the plan); its device learned one.
	s := f.State()
	dev := wgDevice(s)
	for i, p := range dev.Peers {
		if p.PublicKey == keyD {
			dev.Peers[i].Endpoint = "203.0.113.7:40001"
		}
	}
	f.SetState(s)

	p := planB()
	p.Peers[0].AllowedIPs = pfx("10.2.0.0/23", "10.255.0.2/32")                // b
	p.Peers[1].AllowedIPs = pfx("10.4.0.0/24", "10.4.1.0/24", "10.255.0.4/32") // d
	got := render(mustApply(t, f, p))
	want := "wg set fed0 peer " + keyB.String() + " allowed-ips 10.2.0.0/23,10.255.0.2/32\n" +
		"wg set fed0 peer " + keyD.String() + " allowed-ips +10.4.1.0/24\n" // added: the others stay
	if got != want {
		t.Errorf("changes:\n%swant:\n%s", got, want)
	}
	endpoints := map[plan.Key]string{}
	for _, p := range wgDevice(f.State()).Peers {
		endpoints[p.PublicKey] = p.Endpoint
	}
	if endpoints[keyB] != "192.0.2.2:51820" || endpoints[keyD] != "203.0.113.7:40001" {
		t.Errorf("endpoints after the change = %v; want b 192.0.2.2:51820, d 203.0.113.7:40001", endpoints)
	}
}

func TestFakeSkipsPeersWithoutKey(t *testing.T) {
	f := NewFake()
	mustApply(t, f, planA())
	for _, p := range wgDevice(f.State()).Peers {
		if p.PublicKey.IsZero() {
			t.Errorf("peer with zero key configured: %+v", p)
		}
	}
	if n := len(wgDevice(f.State()).Peers); n != 2 {
		t.Errorf("%d peers, want 2 (d has no key)", n)
	}
}

func TestFakeKeepsApplyingAfterAnError(t *testing.T) {
	f := NewFake()
	boom := errors.New("boom")
	f.SetFault(func(c Change) error {
		if strings.HasPrefix(string(c), "ip route add 10.2.0.0/24") {
			return boom
		}
		return nil
	})
	changes, err := f.Apply(context.Background(), planA())
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "ip route add 10.2.0.0/24 dev fed0 proto fednet: boom") {
		t.Errorf("Apply error = %v, want the failed route named, wrapping boom", err)
	}
	if !slices.Contains(changes, "ip route add 10.3.0.0/24 dev fed0 proto fednet") || !slices.Contains(changes, "sysctl -w net.ipv4.ip_forward=1") {
		t.Errorf("changes after the failed one are missing:\n%s", render(changes))
	}
	f.SetFault(nil)
	changes = mustApply(t, f, planA())
	if got, want := render(changes), "ip route add 10.2.0.0/24 dev fed0 proto fednet\n"; got != want {
		t.Errorf("retry changes:\n%swant:\n%s", got, want)
	}
}

func TestFakeFailedLinkSkipsItsChanges(t *testing.T) {
	f := NewFake()
	f.SetFault(func(c Change) error {
		if strings.HasPrefix(string(c), "ip link add") {
			return errors.New("no WireGuard")
		}
		return nil
	})
	changes, err := f.Apply(context.Background(), planA())
	if err == nil {
		t.Fatal("Apply = nil error, want the link error")
	}
	want := "nft replace table inet fednet (sha256:" + buildRuleset(planA().Firewall).fingerprint()[:8] + ")\n" +
		"sysctl -w net.ipv4.ip_forward=1\n"
	if got := render(changes); got != want {
		t.Errorf("changes:\n%swant:\n%s", got, want)
	}
}

func TestFakeRecreatesDeadUserspaceDevice(t *testing.T) {
	f := NewFake()
	mustApply(t, f, planA())
	s := f.State()
	s.tunnel("fed0").Link.Kind = wireguard.KindUserspace
	s.tunnel("fed0").Device = nil // its process is gone
	f.SetState(s)
	got := render(mustApply(t, f, planA()))
	for _, want := range []string{"ip link del fed0\n", "ip link add fed0 type wireguard && ip link set fed0 alias fednet-tunnel:wireguard\n", "ip route add 10.2.0.0/24 dev fed0 proto fednet\n", "wg set fed0 peer " + keyB.String()} {
		if !strings.Contains(got, want) {
			t.Errorf("changes lack %q:\n%s", want, got)
		}
	}
	if c := mustApply(t, f, planA()); len(c) != 0 {
		t.Errorf("Apply after recreation made changes:\n%s", render(c))
	}
}

// foreignTunnel is a machine where fed0 exists and is not fednet's.
func foreignTunnel(l tunnel.Interface, dev tunnel.Device) State {
	return State{
		Tunnels:  []TunnelState{{Name: "fed0", Backend: backend.WireGuard, State: tunnel.State{Link: &l, Device: dev}}},
		Underlay: Underlay{Interfaces: []tunnel.Interface{l}},
	}
}

func TestFakeRefusesForeignLink(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    State
	}{
		{"veth", foreignTunnel(tunnel.Interface{Name: "fed0", Kind: "veth", MTU: 1500}, nil)},
		{"TUN without a device", foreignTunnel(tunnel.Interface{Name: "fed0", Kind: "tun", MTU: 1500}, nil)},
		{"WireGuard of another key", foreignTunnel(tunnel.Interface{Name: "fed0", Kind: "wireguard", MTU: 1420,
			Addresses: pfx("192.168.9.1/24")}, &wireguard.Device{PublicKey: keyB, ListenPort: 51820})},
		{"marked as another's", foreignTunnel(tunnel.Interface{Name: "fed0", Kind: "wireguard", Alias: "vpn:office", MTU: 1420},
			&wireguard.Device{PublicKey: keyB})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFake()
			f.SetState(tc.s)
			changes, err := f.Apply(context.Background(), planA())
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "tunnels[0].name fed0: interface exists and is not fednet's") || len(changes) != 0 {
				t.Errorf("Apply = %q, %v; want a refusal naming tunnels[0].name and no change", changes, err)
			}
			_, err = f.Down(context.Background(), planA())
			if err == nil || !strings.Contains(err.Error(), "fednet leaves it alone") {
				t.Errorf("Down = %v, want a refusal to delete fed0", err)
			}
			if d := cmp.Diff(tc.s.String(), f.State().String()); d != "" {
				t.Errorf("the foreign interface changed (-before +after):\n%s", d)
			}
		})
	}
}

// An unmarked WireGuard interface whose device holds this gateway's key
// was made by a fednet from before marks: it is adopted and marked.
func TestFakeAdoptsUnmarkedInterfaceWithOurKey(t *testing.T) {
	f := NewFake()
	mustApply(t, f, planA())
	s := f.State()
	s.tunnel("fed0").Link.Alias = ""
	f.SetState(s)
	if got, want := render(mustApply(t, f, planA())), "ip link set fed0 alias fednet-tunnel:wireguard\n"; got != want {
		t.Errorf("changes:\n%swant:\n%s", got, want)
	}
	s.tunnel("fed0").Link.Alias = ""
	f.SetState(s)
	if changes, err := f.Down(context.Background(), planA()); err != nil || !slices.Contains(changes, "ip link del fed0") {
		t.Errorf("Down = %q, %v; want fed0 deleted", changes, err)
	}
}

func TestFakeDeletesOnlyStaleRoutes(t *testing.T) {
	f := NewFake()
	mustApply(t, f, planA())
	s := f.State()
	s.Routes = append(s.Routes, RouteState{Destination: netip.MustParsePrefix("10.9.0.0/16"), Device: "fed0"})
	f.SetState(s)
	if got, want := render(mustApply(t, f, planA())), "ip route del 10.9.0.0/16 dev fed0 proto fednet\n"; got != want {
		t.Errorf("changes:\n%swant:\n%s", got, want)
	}
}

func TestFakePrivateKeyAndPort(t *testing.T) {
	f := NewFake()
	mustApply(t, f, planA())
	s := f.State()
	wgDevice(s).PublicKey = plan.Key{9}
	f.SetState(s)
	if got, want := render(mustApply(t, f, planA())), "wg set fed0 private-key (set)\n"; got != want {
		t.Errorf("changes:\n%swant:\n%s", got, want)
	}
	p := planA()
	p.Tunnels[0].ListenPort = 51821
	p.Firewall.Public = []backend.Port{{Protocol: backend.UDP, Port: 51821}}
	got := render(mustApply(t, f, p))
	if !strings.Contains(got, "wg set fed0 listen-port 51821\n") || !strings.HasPrefix(got, "nft replace table inet fednet") {
		t.Errorf("changes:\n%s", got)
	}
}

func TestValidatePlan(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*plan.Gateway)
		want   string
	}{
		{"no interface", func(p *plan.Gateway) { p.Tunnels[0].Name = "" }, "tunnels[0].name"},
		{"long interface", func(p *plan.Gateway) { p.Tunnels[0].Name = "fednet-interface0" }, "longer than 15"},
		{"port", func(p *plan.Gateway) { p.Tunnels[0].ListenPort = 70000 }, "tunnels[0].listenPort"},
		{"mtu", func(p *plan.Gateway) { p.Tunnels[0].MTU = 100 }, "tunnels[0].mtu"},
		{"no tunnel", func(p *plan.Gateway) { p.Tunnels = nil }, "tunnels is empty"},
		{"unknown backend", func(p *plan.Gateway) { p.Tunnels[0].Backend = "ipsec" }, `tunnels[0].backend "ipsec" has no tunnel driver`},
		{"keepalive", func(p *plan.Gateway) { p.Peers[0].WireGuard.PersistentKeepalive = -1 }, "tunnels[0] (wireguard): peer b: wireguard.persistentKeepalive -1"},
		{"peer backend", func(p *plan.Gateway) { p.Peers[0].Backend = "ipsec" }, `peers[0] (b).backend "ipsec" is not the backend of a tunnel`},
		{"firewall tunnels", func(p *plan.Gateway) { p.Firewall.Tunnels = []string{"wg0"} }, "firewall.tunnels [wg0] are not the plan's tunnel interfaces [fed0]"},
		{"no bounds", func(p *plan.Gateway) { p.Bounds = plan.Bounds{} }, "bounds.supernet invalid Prefix is not a prefix"},
		{"route", func(p *plan.Gateway) { p.Routes = append(p.Routes, plan.Route{Device: "fed0"}) }, "routes"},
		{"table", func(p *plan.Gateway) { p.Firewall.Table = "filter" }, `firewall.table "filter" is not fednet's table`},
		{"flow", func(p *plan.Gateway) {
			p.Firewall.Flows = append(p.Firewall.Flows, plan.Flow{Network: "x", Source: netip.MustParsePrefix("10.0.0.0/8"), Destination: netip.MustParsePrefix("fd00::/8")})
		}, "mixes IPv4 and IPv6"},
		{"admit protocol", func(p *plan.Gateway) {
			p.Firewall.Admit = []plan.Admission{{Protocol: backend.ESP, Port: 22, Sources: pfx("192.0.2.0/24")}}
		}, "admit: protocol esp is not one fednet admits (tcp, udp)"},
		{"admit port", func(p *plan.Gateway) {
			p.Firewall.Admit = []plan.Admission{{Protocol: backend.TCP, Sources: pfx("192.0.2.0/24")}}
		}, "admit: tcp port 0 is out of range 1-65535"},
		{"admit sources", func(p *plan.Gateway) { p.Firewall.Admit = []plan.Admission{{Protocol: backend.TCP, Port: 22}} }, "admit: tcp port 22 has no source prefix"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := planA()
			tc.change(&p)
			f := NewFake()
			changes, err := f.Apply(context.Background(), p)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Apply = %v, want an error mentioning %q", err, tc.want)
			}
			if len(changes) != 0 || !f.State().IsEmpty() {
				t.Errorf("an invalid plan changed the machine: %q", changes)
			}
		})
	}
}

func TestRenderFirewall(t *testing.T) {
	for _, name := range sortedNames() {
		text, err := RenderFirewall(plans[name]().Firewall)
		if err != nil {
			t.Fatal(err)
		}
		golden(t, "firewall_"+strings.ToLower(name)+".nft", text)
	}
	p := planA()
	p.Firewall.Local = pfx("10.1.0.0/23", "fd00:1::/64", "192.0.2.9/32")
	p.Firewall.Transit = netip.MustParsePrefix("fd00:ffff::/48")
	p.Firewall.Flows = flows("fd00:1::/64", "fd00:2::/64", "0.0.0.0/0", "10.2.0.0/24")
	p.Firewall.MSS = 0
	p.Firewall.Neighbors = []plan.NeighborRule{{Address: netip.MustParseAddr("10.1.0.10"), Port: 4790}, {Address: netip.MustParseAddr("fd00:1::10"), Port: 4791}}
	p.Firewall.TunnelPorts = []int{4789, 5790}
	p.Firewall.Admit = []plan.Admission{
		{Protocol: backend.TCP, Port: 22, Sources: pfx("203.0.113.64/26", "2001:db8::/32")},
		{Protocol: backend.UDP, Port: 161, Sources: pfx("0.0.0.0/0")},
	}
	text, err := RenderFirewall(p.Firewall)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "firewall_mixed.nft", text)
}

func TestFingerprintChangesWithFirewall(t *testing.T) {
	fa := buildRuleset(planA().Firewall).fingerprint()
	if fa != buildRuleset(planA().Firewall).fingerprint() {
		t.Error("fingerprint is not deterministic")
	}
	if fa == buildRuleset(planB().Firewall).fingerprint() {
		t.Error("plans A and B have different firewalls but the same fingerprint")
	}
	// Order and duplicates of local prefixes do not matter.
	p := planC()
	p.Firewall.Local = pfx("10.1.1.0/24", "10.1.0.0/24", "10.1.1.0/24")
	if buildRuleset(p.Firewall).fingerprint() != buildRuleset(planC().Firewall).fingerprint() {
		t.Error("reordered local prefixes change the fingerprint")
	}
}

// Status reports the links the driver set up, established while the
// handshake is recent, by the fake's clock.
func TestFakeStatus(t *testing.T) {
	f := NewFake()
	mustApply(t, f, planA())
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	f.SetClock(func() time.Time { return now })
	s := f.State()
	for i := range wgDevice(s).Peers {
		wgDevice(s).Peers[i].LastHandshake = now.Add(-time.Minute)
		wgDevice(s).Peers[i].RxBytes = 10
	}
	f.SetState(s)
	links, err := f.Status(context.Background(), planA())
	if err != nil || len(links) != 2 || links[0].Peer != "b" || links[1].Peer != "c" ||
		!links[0].Established || !links[1].Established || links[0].RxBytes != 10 || links[0].Backend != backend.WireGuard {
		t.Errorf("Status = %+v, %v; want b and c (d has no key) established", links, err)
	}
	now = now.Add(wireguard.EstablishedWithin)
	if links, _ := f.Status(context.Background(), planA()); len(links) != 2 || links[0].Established {
		t.Errorf("Status %v later = %+v; want not established", wireguard.EstablishedWithin, links)
	}
}

// TestFakeAllowedIPsMoveWithoutReplace checks that a prefix moving from one
// peer to another (a relayed path going back to its direct link) is added
// to its new peer only: the old peer's other prefixes are not replaced, so
// they are never missing for a moment (traffic of pairs the move does not
// concern loses nothing), and both peers end as the plan says.
func TestFakeAllowedIPsMoveWithoutReplace(t *testing.T) {
	f := NewFake()
	p := planB()
	p.Peers[0].AllowedIPs = pfx("10.2.0.0/24", "10.4.1.0/24", "10.255.0.2/32") // b relays 10.4.1.0/24
	p.Peers[1].AllowedIPs = pfx("10.4.0.0/24", "10.255.0.4/32")                // d
	mustApply(t, f, p)

	p = planB()
	p.Peers[0].AllowedIPs = pfx("10.2.0.0/24", "10.255.0.2/32")                // b
	p.Peers[1].AllowedIPs = pfx("10.4.0.0/24", "10.4.1.0/24", "10.255.0.4/32") // d takes it back
	got := render(mustApply(t, f, p))
	want := "wg set fed0 peer " + keyD.String() + " allowed-ips +10.4.1.0/24\n"
	if got != want {
		t.Errorf("changes:\n%swant (no replace of b's allowed IPs):\n%s", got, want)
	}
	for _, peer := range wgDevice(f.State()).Peers {
		switch peer.PublicKey {
		case keyB:
			if w := pfx("10.2.0.0/24", "10.255.0.2/32"); !slices.Equal(peer.AllowedIPs, w) {
				t.Errorf("b ends with %v, want %v", peer.AllowedIPs, w)
			}
		case keyD:
			if w := pfx("10.4.0.0/24", "10.4.1.0/24", "10.255.0.4/32"); !slices.Equal(peer.AllowedIPs, w) {
				t.Errorf("d ends with %v, want %v", peer.AllowedIPs, w)
			}
		}
	}
	// A prefix that leaves the device entirely still takes a replace.
	p.Peers[1].AllowedIPs = pfx("10.4.0.0/24", "10.255.0.4/32")
	got = render(mustApply(t, f, p))
	want = "wg set fed0 peer " + keyD.String() + " allowed-ips 10.4.0.0/24,10.255.0.4/32\n"
	if got != want {
		t.Errorf("changes:\n%swant:\n%s", got, want)
	}
}
