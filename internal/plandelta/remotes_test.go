package plandelta_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/plandelta"
	"github.com/fednet/fednet/internal/spec"
)

// TestRemotesEdits: with a bridged network over every site, a delta whose
// head leaves out the VXLAN remotes the base has (WithRemotesEdits) is a
// fraction of the delta with them, travels as JSON, and rebuilds the new
// plan exactly, checked against its sum; where the base has no such port
// (the network is new) the delta is as it was, unless the remotes may be
// edited from the peers' transit addresses, which then rebuild them as
// exactly; a base without that port is refused, and so is a delta from
// the peers read by an agent that does not know them.
func TestRemotesEdits(t *testing.T) {
	const n = 40
	bridged := func(n int) string {
		var names []string
		for i := range n {
			names = append(names, fmt.Sprintf("s%03d", i))
		}
		return "  - {name: lan, id: 100, mode: bridged, subnet: 192.168.0.0/24, sites: [" + strings.Join(names, ", ") + "]}\n"
	}
	base := federation(t, n, nil, bridged(n))
	cases := []struct {
		name  string
		from  *spec.Federation
		to    *spec.Federation
		in    plan.Inputs
		peers bool // edit new ports' remotes from the peers
		edits bool
	}{
		{"gateway removed", base, base, plan.Inputs{Removed: map[string]bool{"g007": true}}, true, true},
		{"site added", base, federation(t, n+1, nil, bridged(n+1)), plan.Inputs{}, true, true},
		{"network added", federation(t, n, nil, ""), base, plan.Inputs{}, false, false},
		{"network added, from the peers", federation(t, n, nil, ""), base, plan.Inputs{}, true, true},
		{"network added, a gateway gone, from the peers", federation(t, n, nil, ""), base, plan.Inputs{Removed: map[string]bool{"g007": true}}, true, true},
		{"nothing", base, base, plan.Inputs{}, true, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			old := plans(t, c.from, plan.Inputs{})
			for name, want := range plans(t, c.to, c.in) {
				from, ok := old[name]
				if !ok || name == "g007" {
					continue
				}
				dg := plandelta.NewDigest(want)
				d, ok := plandelta.Diff(from, want, [32]byte{})
				if !ok {
					t.Fatalf("%s: no delta", name)
				}
				d.Sum, d.SumVersion = fmt.Sprintf("%x", dg.Sum), plandelta.SumVersion
				var transits func() []netip.Addr
				if c.peers {
					transits = func() []netip.Addr {
						return plandelta.PeerTransits(want.Firewall.Transit, slices.Values([][]plan.Peer{want.Peers}), len(want.Peers))
					}
				}
				e := d.WithRemotesEdits(from, transits)
				if got := e.RemotesEdits != nil; got != c.edits {
					t.Fatalf("%s: remotes edited %v, want %v", name, got, c.edits)
				}
				newPort := len(from.Bridges) == 0
				if e.FromPeers() != (c.edits && newPort) {
					t.Fatalf("%s: remotes edited from the peers %v, want %v", name, e.FromPeers(), c.edits && newPort)
				}
				remotes := len(js(t, want.Bridges[0].VXLANs[0].Remotes))
				if c.edits && len(js(t, e)) > len(js(t, d))-remotes*3/4 {
					t.Errorf("%s: the delta with remotes edited is %d bytes, without %d (the remotes: %d)", name, len(js(t, e)), len(js(t, d)), remotes)
				}
				if d.Head.Bridges[0].VXLANs[0].Remotes == nil {
					t.Fatalf("%s: WithRemotesEdits changed the delta it was called on", name)
				}
				var back plandelta.Delta
				if err := json.Unmarshal([]byte(js(t, e)), &back); err != nil {
					t.Fatal(err)
				}
				got, _, err := plandelta.ApplyDigest(from, plandelta.NewDigest(from), back)
				if err != nil || js(t, got) != js(t, want) {
					t.Fatalf("%s: rebuilt from the delta with remotes edited: %v (same plan %v)", name, err, err == nil && js(t, got) == js(t, want))
				}
				switch {
				case c.edits && !newPort:
					other := from
					other.Bridges = nil
					if _, err := plandelta.Apply(other, back); err == nil {
						t.Fatalf("%s: a delta editing remotes applied to a base without the port", name)
					}
				case c.edits:
					// An agent that predates edits from the peers reads
					// them as edits of the base's port, which it lacks.
					old := back
					old.RemotesEdits = slices.Clone(back.RemotesEdits)
					for i := range old.RemotesEdits {
						old.RemotesEdits[i].Peers = false
					}
					if _, err := plandelta.Apply(from, old); !errors.Is(err, plandelta.ErrMismatch) {
						t.Fatalf("%s: a delta editing remotes from the peers, read as from the base: %v, want ErrMismatch", name, err)
					}
				}
			}
		})
	}
}

// TestPeerTransits: the single addresses of the transit prefix among the
// peers' allowed IPs, sorted, each once; prefixes and addresses outside
// the transit prefix are not transit addresses.
func TestPeerTransits(t *testing.T) {
	transit := netip.MustParsePrefix("100.96.0.0/16")
	pfx := func(s ...string) []netip.Prefix {
		var out []netip.Prefix
		for _, x := range s {
			out = append(out, netip.MustParsePrefix(x))
		}
		return out
	}
	peers := []plan.Peer{
		{Gateway: "a", AllowedIPs: pfx("10.1.0.0/24", "100.96.0.9/32")},
		{Gateway: "b", AllowedIPs: pfx("100.96.0.3/32", "100.96.1.0/24")},
		{Gateway: "c", AllowedIPs: pfx("100.96.0.9/32", "192.0.2.1/32")},
		{Gateway: "d"},
	}
	got := plandelta.PeerTransits(transit, slices.Values([][]plan.Peer{peers}), len(peers))
	want := []netip.Addr{netip.MustParseAddr("100.96.0.3"), netip.MustParseAddr("100.96.0.9")}
	if !slices.Equal(got, want) {
		t.Errorf("PeerTransits = %v, want %v", got, want)
	}
	if got := plandelta.PeerTransits(transit, slices.Values([][]plan.Peer{peers[:2]}), len(peers[:2])); !slices.IsSortedFunc(got, netip.Addr.Compare) || len(got) != 2 {
		t.Errorf("PeerTransits of two peers out of order = %v, want them sorted", got)
	}
	// IPv6 transit addresses sort as netip.Addr.
	mixed := []plan.Peer{
		{Gateway: "a", AllowedIPs: pfx("fd00::9/128", "100.96.0.200/32")},
		{Gateway: "b", AllowedIPs: pfx("fd00::3/128", "100.96.0.7/32")},
	}
	wide := netip.MustParsePrefix("::/0")
	got = plandelta.PeerTransits(wide, slices.Values([][]plan.Peer{mixed}), len(mixed))
	if !slices.IsSortedFunc(got, netip.Addr.Compare) || len(got) != 2 {
		t.Errorf("PeerTransits of IPv6 addresses = %v, want two, sorted", got)
	}
	for _, x := range []netip.Prefix{transit, netip.MustParsePrefix("0.0.0.0/0")} {
		four := []plan.Peer{{Gateway: "a", AllowedIPs: pfx("100.96.0.200/32", "100.96.1.3/32", "100.96.0.7/32")}}
		if got := plandelta.PeerTransits(x, slices.Values([][]plan.Peer{four}), len(four)); !slices.Equal(got, []netip.Addr{netip.MustParseAddr("100.96.0.7"), netip.MustParseAddr("100.96.0.200"), netip.MustParseAddr("100.96.1.3")}) {
			t.Errorf("PeerTransits(%s) of IPv4 addresses out of order = %v, want them sorted as numbers", x, got)
		}
	}
}

// BenchmarkPeerTransits: a thousand peers whose transit addresses are not
// in the order of their names.
func BenchmarkPeerTransits(b *testing.B) {
	transit := netip.MustParsePrefix("100.96.0.0/16")
	peers := make([]plan.Peer, 1000)
	for i := range peers {
		j := (i * 7919) % 1000
		peers[i] = plan.Peer{Gateway: fmt.Sprintf("g%04d", i), AllowedIPs: []netip.Prefix{
			netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(j >> 8), byte(j), 0}), 24),
			netip.PrefixFrom(netip.AddrFrom4([4]byte{100, 96, byte(j >> 8), byte(j)}), 32)}}
	}
	for b.Loop() {
		if got := plandelta.PeerTransits(transit, slices.Values([][]plan.Peer{peers}), len(peers)); len(got) != 1000 {
			b.Fatalf("%d transit addresses", len(got))
		}
	}
}
