package dataplane

import (
	"flag"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/fednet/fednet/internal/backend"
	"github.com/fednet/fednet/internal/dataplane/wireguard"
	"github.com/fednet/fednet/internal/plan"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if d := cmp.Diff(string(want), got); d != "" {
		t.Errorf("%s differs (-want +got; go test -update rewrites it):\n%s", path, d)
	}
}

func key(b byte) plan.Key { return plan.Key{b, 0xfe, 0xd0} }

var (
	keyB = key(0xb0)
	keyC = key(0xc0)
	keyD = key(0xd0)
)

func pfx(s ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, x := range s {
		out = append(out, netip.MustParsePrefix(x))
	}
	return out
}

func routes(dsts ...string) []plan.Route {
	var out []plan.Route
	for _, d := range dsts {
		out = append(out, plan.Route{Destination: netip.MustParsePrefix(d), Device: "fed0"})
	}
	return out
}

func flows(pairs ...string) []plan.Flow {
	var out []plan.Flow
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out,
			plan.Flow{Network: "apps", Source: netip.MustParsePrefix(pairs[i]), Destination: netip.MustParsePrefix(pairs[i+1])},
			plan.Flow{Network: "apps", Source: netip.MustParsePrefix(pairs[i+1]), Destination: netip.MustParsePrefix(pairs[i])})
	}
	return out
}

// planA is gateway a of a three-site federation (sites a, b, c; 10.1, 10.2,
// 10.3; transit 10.255.0.0/16) while gateway d has no key yet.
func planA() plan.Gateway {
	return plan.Gateway{
		Federation: "demo", Name: "a", Site: "site-a",
		Tunnels: []plan.Tunnel{{Backend: backend.WireGuard, Name: "fed0", ListenPort: 51820, Address: netip.MustParsePrefix("10.255.0.1/16"), MTU: 1420}},
		Peers: []plan.Peer{
			{Gateway: "b", Site: "site-b", Backend: backend.WireGuard, WireGuard: plan.WireGuardPeer{PublicKey: keyB}, Endpoint: "192.0.2.2:51820", AllowedIPs: pfx("10.2.0.0/24", "10.255.0.2/32")},
			{Gateway: "c", Site: "site-c", Backend: backend.WireGuard, WireGuard: plan.WireGuardPeer{PublicKey: keyC}, Endpoint: "192.0.2.3:51820", AllowedIPs: pfx("10.3.0.0/24", "10.255.0.3/32")},
			{Gateway: "d", Site: "site-d", Backend: backend.WireGuard, AllowedIPs: pfx("10.4.0.0/24", "10.255.0.4/32")},
		},
		Routes:     routes("10.2.0.0/24", "10.3.0.0/24"),
		Forwarding: true,
		Firewall: plan.Firewall{
			Table: "fednet", Tunnels: []string{"fed0"}, Public: []backend.Port{{Protocol: backend.UDP, Port: 51820}},
			Local:   pfx("10.1.0.0/24"),
			Remote:  pfx("10.2.0.0/24", "10.3.0.0/24", "10.4.0.0/24"),
			Transit: netip.MustParsePrefix("10.255.0.0/16"),
			Flows:   flows("10.1.0.0/24", "10.2.0.0/24", "10.1.0.0/24", "10.3.0.0/24"),
			MSS:     1380,
		},
		Bounds: plan.Bounds{Supernet: netip.MustParsePrefix("10.0.0.0/8"), Transit: netip.MustParsePrefix("10.255.0.0/16"), Ports: []string{"eth1", "eth2"}},
	}
}

// wgDevice returns the WireGuard device of fed0 in s, nil for none.
func wgDevice(s State) *wireguard.Device {
	if t := s.tunnel("fed0"); t != nil {
		d, _ := t.Device.(*wireguard.Device)
		return d
	}
	return nil
}

// planB: c leaves; b gains 10.2.1.0/24 (its only change); d, behind NAT,
// gets its key; MTU and MSS drop.
func planB() plan.Gateway {
	p := planA()
	p.Tunnels[0].MTU = 1380
	p.Peers = []plan.Peer{
		{Gateway: "b", Site: "site-b", Backend: backend.WireGuard, WireGuard: plan.WireGuardPeer{PublicKey: keyB}, Endpoint: "192.0.2.2:51820", AllowedIPs: pfx("10.2.0.0/24", "10.2.1.0/24", "10.255.0.2/32")},
		{Gateway: "d", Site: "site-d", Backend: backend.WireGuard, WireGuard: plan.WireGuardPeer{PublicKey: keyD, PersistentKeepalive: 25}, AllowedIPs: pfx("10.4.0.0/24", "10.255.0.4/32")},
	}
	p.Routes = routes("10.2.0.0/24", "10.2.1.0/24", "10.4.0.0/24")
	p.Firewall.Flows = flows("10.1.0.0/24", "10.2.0.0/24", "10.1.0.0/24", "10.2.1.0/24", "10.1.0.0/24", "10.4.0.0/24")
	p.Firewall.MSS = 1340
	return p
}

// planC: c is back, d leaves, b moves to a new endpoint behind NAT, a's
// transit address and local prefixes change, forwarding is no longer
// wanted (and stays on).
func planC() plan.Gateway {
	p := planA()
	p.Tunnels[0].Address = netip.MustParsePrefix("10.255.0.11/16")
	p.Peers = []plan.Peer{
		{Gateway: "b", Site: "site-b", Backend: backend.WireGuard, WireGuard: plan.WireGuardPeer{PublicKey: keyB, PersistentKeepalive: 25}, Endpoint: "198.51.100.2:51820", AllowedIPs: pfx("10.2.0.0/24", "10.2.1.0/24", "10.255.0.2/32")},
		{Gateway: "c", Site: "site-c", Backend: backend.WireGuard, WireGuard: plan.WireGuardPeer{PublicKey: keyC}, Endpoint: "192.0.2.3:51820", AllowedIPs: pfx("10.3.0.0/24", "10.255.0.3/32")},
	}
	p.Routes = routes("10.2.0.0/24", "10.2.1.0/24", "10.3.0.0/24")
	p.Forwarding = false
	p.Firewall.Local = pfx("10.1.0.0/24", "10.1.1.0/24")
	p.Firewall.Flows = flows("10.1.0.0/24", "10.2.0.0/24", "10.1.0.0/24", "10.2.1.0/24", "10.1.0.0/24", "10.3.0.0/24",
		"10.1.1.0/24", "10.2.0.0/24")
	return p
}

var plans = map[string]func() plan.Gateway{"A": planA, "B": planB, "C": planC}

// sortedNames returns the keys of plans, sorted.
func sortedNames() []string { return sortedKeys(plans) }

// sortedKeys returns the keys of a plan table, sorted.
func sortedKeys(m map[string]func() plan.Gateway) []string {
	var names []string
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// applyRandomSequences applies rounds random sequences (2 to 7 plans) of
// the table's plans to a fresh fake each, every plan twice, failing when the
// second apply changes anything, and hands each sequence and its fake to
// check.
func applyRandomSequences(t *testing.T, seed uint64, rounds int, table map[string]func() plan.Gateway, check func(seq []string, f *Fake)) {
	t.Helper()
	names := sortedKeys(table)
	rng := rand.New(rand.NewPCG(seed, seed+1))
	for i := 0; i < rounds; i++ {
		seq := make([]string, 2+rng.IntN(6))
		for j := range seq {
			seq[j] = names[rng.IntN(len(names))]
		}
		f := NewFake()
		for _, n := range seq {
			mustApply(t, f, table[n]())
			if c := mustApply(t, f, table[n]()); len(c) != 0 {
				t.Errorf("sequence %v: applying %s again made changes:\n%s", seq, n, render(c))
			}
		}
		check(seq, f)
	}
}
