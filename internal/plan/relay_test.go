package plan_test

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/spec"
)

// randomSpec writes a valid-looking federation of n sites (one gateway
// each) with random disabled links, link costs, routed and bridged
// networks.
func randomSpec(rng *rand.Rand, n int) string { return randomSpecHA(rng, n, false) }

// randomSpecHA is randomSpec where, with ha, about half the sites have a
// second gateway.
func randomSpecHA(rng *rand.Rand, n int, ha bool) string {
	members := func() []string {
		var m []string
		for len(m) < 2 {
			m = m[:0]
			for i := range n {
				if rng.IntN(3) > 0 {
					m = append(m, fmt.Sprintf("s%02d", i))
				}
			}
		}
		return m
	}
	var nets strings.Builder
	ports := map[string][]string{} // site → "network: port"
	for k := range 1 + rng.IntN(3) {
		fmt.Fprintf(&nets, "  - {name: r%d, id: %d, mode: routed, sites: [%s]}\n", k+1, k+1, strings.Join(members(), ", "))
	}
	for k := range 1 + rng.IntN(2) {
		m := members()
		for _, s := range m {
			ports[s] = append(ports[s], fmt.Sprintf("b%d: eth%d", k+1, k+1))
		}
		fmt.Fprintf(&nets, "  - {name: b%d, id: %d, mode: bridged, subnet: 192.168.%d.0/24, sites: [%s]}\n", k+1, 100+k, k, strings.Join(m, ", "))
	}

	var b strings.Builder
	b.WriteString("apiVersion: fednet/v1\nkind: Federation\nname: random\nsites:\n")
	for i := range n {
		s := fmt.Sprintf("s%02d", i)
		fmt.Fprintf(&b, "  - name: %s\n    provider: p\n    prefixes: [10.%d.0.0/24]\n    gateways:\n", s, i+1)
		gateways := 1
		if ha && rng.IntN(2) == 0 {
			gateways = 2
		}
		for k := range gateways {
			name, addr := s+"-gw", i+1
			if k > 0 {
				name, addr = s+"-gw2", 101+i
			}
			fmt.Fprintf(&b, "      - name: %s\n        endpoint: 198.51.100.%d:51820\n", name, addr)
			if len(ports[s]) > 0 {
				fmt.Fprintf(&b, "        bridgePorts: {%s}\n", strings.Join(ports[s], ", "))
			}
		}
	}
	b.WriteString("networks:\n" + nets.String())
	var links []string
	pOff := rng.Float64() * 0.7
	for i := range n {
		for j := i + 1; j < n; j++ {
			switch r := rng.Float64(); {
			case r < pOff:
				links = append(links, fmt.Sprintf("    - {between: [s%02d, s%02d], disabled: true}\n", i, j))
			case rng.IntN(3) == 0:
				links = append(links, fmt.Sprintf("    - {between: [s%02d, s%02d], cost: %d}\n", i, j, 1+rng.IntN(6)))
			}
		}
	}
	if len(links) > 0 {
		b.WriteString("topology:\n  links:\n" + strings.Join(links, ""))
	}
	return b.String()
}

// TestRelayRandom plans random partial meshes and walks packets and
// frames through the plans as WireGuard, nftables and the Linux bridge
// would: every two sites of a routed network reach each other within as
// many hops as there are sites, every hop passes WireGuard's source check
// and the forward chain, sites that share no routed network do not reach
// each other; every broadcast frame of a bridged network reaches every
// other member exactly once (no loop, no duplicate, no loss).
func TestRelayRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 2026))
	iterations := 400
	if testing.Short() {
		iterations = 60
	}
	var planned, rejected, relayedPackets, treeNetworks, meshNetworks int
	for it := range iterations {
		doc := randomSpec(rng, 2+rng.IntN(8))
		f, err := spec.Parse([]byte(doc))
		if err != nil {
			if !strings.Contains(err.Error(), "cannot reach member sites") {
				t.Fatalf("iteration %d: unexpected rejection: %v\n%s", it, err, doc)
			}
			rejected++
			continue
		}
		gws, err := plan.Compute(f, testKeys(f))
		if err != nil {
			t.Fatalf("iteration %d: %v\n%s", it, err, doc)
		}
		planned++
		name := fmt.Sprintf("iteration %d", it)
		relayedPackets += checkRouted(t, name, f, gws)
		tree, mesh := checkFlooding(t, name, f, gws)
		treeNetworks += tree
		meshNetworks += mesh
		if t.Failed() {
			t.Fatalf("%s: spec:\n%s", name, doc)
		}
	}
	t.Logf("%d planned, %d rejected, %d relayed packet walks, %d tree and %d mesh bridged networks",
		planned, rejected, relayedPackets, treeNetworks, meshNetworks)
	if planned == 0 || rejected == 0 || relayedPackets == 0 || treeNetworks == 0 || meshNetworks == 0 {
		t.Error("the generator missed a case")
	}
}

// checkRouted walks a packet between every two sites and returns how many
// walks were relayed.
func checkRouted(t *testing.T, name string, f *spec.Federation, gws []plan.Gateway) (relayed int) {
	t.Helper()
	bySite := map[string]plan.Gateway{}
	byName := map[string]plan.Gateway{}
	for _, g := range gws {
		bySite[g.Site] = g
		byName[g.Name] = g
	}
	for _, x := range f.Sites {
		for _, y := range f.Sites {
			if x.Name == y.Name {
				continue
			}
			src, dst := x.Prefixes[0].Addr().Next(), y.Prefixes[0].Addr().Next()
			hops, err := walk(bySite[x.Name], byName, src, dst, len(f.Sites))
			shared := false
			for _, n := range f.Networks {
				shared = shared || n.Mode == spec.Routed && slices.Contains(n.Sites, x.Name) && slices.Contains(n.Sites, y.Name)
			}
			switch {
			case shared && err != nil:
				t.Errorf("%s: %s → %s: %v", name, x.Name, y.Name, err)
			case !shared && err == nil:
				t.Errorf("%s: %s → %s share no routed network but the packet arrives over %v", name, x.Name, y.Name, hops)
			case shared && len(hops) > 2:
				relayed++
			}
		}
	}
	return relayed
}

// walk follows a packet from src (behind gateway g) to dst and returns the
// gateways it passes, or why it is dropped.
func walk(g plan.Gateway, byName map[string]plan.Gateway, src, dst netip.Addr, maxHops int) ([]string, error) {
	hops := []string{g.Name}
	if !flowAllowed(g, src, dst) {
		return hops, fmt.Errorf("%s's forward chain drops it leaving the site", g.Name)
	}
	for range maxHops {
		peer, ok := wireGuardPeer(g, dst)
		if !ok {
			return hops, fmt.Errorf("%s has no peer for %s", g.Name, dst)
		}
		next := byName[peer.Gateway]
		back, ok := findPeer(next, g.Name)
		if !ok || !containsAddr(back.AllowedIPs, src) {
			return hops, fmt.Errorf("%s drops it from %s: source %s not in that peer's allowed IPs %v", next.Name, g.Name, src, back.AllowedIPs)
		}
		if !flowAllowed(next, src, dst) {
			return hops, fmt.Errorf("%s's forward chain drops it", next.Name)
		}
		g = next
		hops = append(hops, g.Name)
		if containsAddr(g.Firewall.Local, dst) {
			return hops, nil
		}
	}
	return hops, fmt.Errorf("no arrival within %d hops: %v (a loop)", maxHops, hops)
}

// wireGuardPeer is the peer whose allowed IPs hold dst most specifically.
func wireGuardPeer(g plan.Gateway, dst netip.Addr) (plan.Peer, bool) {
	best, bits := plan.Peer{}, -1
	for _, p := range g.Peers {
		for _, a := range p.AllowedIPs {
			if a.Contains(dst) && a.Bits() > bits {
				best, bits = p, a.Bits()
			}
		}
	}
	return best, bits >= 0
}

func findPeer(g plan.Gateway, name string) (plan.Peer, bool) {
	for _, p := range g.Peers {
		if p.Gateway == name {
			return p, true
		}
	}
	return plan.Peer{}, false
}

func flowAllowed(g plan.Gateway, src, dst netip.Addr) bool {
	return slices.ContainsFunc(g.Firewall.Flows, func(fl plan.Flow) bool {
		return fl.Source.Contains(src) && fl.Destination.Contains(dst)
	})
}

func containsAddr(ps []netip.Prefix, a netip.Addr) bool {
	return slices.ContainsFunc(ps, func(p netip.Prefix) bool { return p.Contains(a) })
}

// checkFlooding sends a broadcast frame from every member of every bridged
// network and counts the copies that reach each site's segment.
func checkFlooding(t *testing.T, name string, f *spec.Federation, gws []plan.Gateway) (tree, mesh int) {
	t.Helper()
	for _, n := range f.Networks {
		if n.Mode != spec.Bridged {
			continue
		}
		bridges := map[netip.Addr]plan.Bridge{} // by the gateway's transit address
		site := map[netip.Addr]string{}
		gateway := map[netip.Addr]plan.Gateway{}
		mtus := map[int]bool{}
		for _, g := range gws {
			for _, b := range g.Bridges {
				if b.VNI != n.ID {
					continue
				}
				addr := g.TransitAddress()
				bridges[addr], site[addr], gateway[addr] = b, g.Site, g
				mtus[b.MTU] = true
				ports := map[int]bool{}
				for _, v := range b.VXLANs {
					if ports[v.UDPPort] {
						t.Errorf("%s: %s: two VXLAN devices of VNI %d on port %d: Linux refuses the second", name, g.Name, n.ID, v.UDPPort)
					}
					ports[v.UDPPort] = true
				}
				if b.Relay == slices.Contains(n.Sites, g.Site) {
					t.Errorf("%s: %s: relay %v, but member %v", name, g.Name, b.Relay, !b.Relay)
				}
			}
		}
		if len(mtus) != 1 {
			t.Errorf("%s: network %s has MTUs %v, want one", name, n.Name, mtus)
		}
		if len(bridges) > len(n.Sites) {
			tree++
		} else if len(bridges) > 0 && len(bridges[firstKey(bridges)].VXLANs) == 1 && bridges[firstKey(bridges)].VXLANs[0].UDPPort == plan.VXLANPort {
			mesh++
		}
		for from, b := range bridges {
			if b.Relay {
				continue
			}
			got := flood(bridges, gateway, from)
			for addr, br := range bridges {
				want := 1
				if addr == from || br.Relay {
					want = 0
				}
				if got[addr] != want {
					t.Errorf("%s: network %s: a broadcast from %s reaches %s's segment %d times, want %d",
						name, n.Name, site[from], site[addr], got[addr], want)
				}
			}
			for _, m := range n.Sites {
				if !slices.ContainsFunc(gws, func(g plan.Gateway) bool { return g.Site == m && len(g.Bridges) > 0 }) {
					t.Errorf("%s: network %s: member %s has no bridge", name, n.Name, m)
				}
			}
		}
	}
	return tree, mesh
}

func firstKey(m map[netip.Addr]plan.Bridge) netip.Addr {
	for k := range m {
		return k
	}
	return netip.Addr{}
}

// flood sends a broadcast into the bridge at from (from its segment) and
// returns how many copies each bridge delivers to its segment. A bridge
// sends a frame out of every port but the one it came in by; a VXLAN device
// sends a copy to each of its remotes, where the device of the same VNI
// and UDP port takes it, if a WireGuard peer carries the remote's transit
// address (copies lost on the way count under the zero address).
func flood(bridges map[netip.Addr]plan.Bridge, gateways map[netip.Addr]plan.Gateway, from netip.Addr) map[netip.Addr]int {
	type copy struct {
		at netip.Addr
		in string // the VXLAN device it came in by, "" for the segment
	}
	got := map[netip.Addr]int{}
	queue := []copy{{from, ""}}
	for steps := 0; len(queue) > 0 && steps < 10000; steps++ {
		c := queue[0]
		queue = queue[1:]
		b := bridges[c.at]
		if c.in != "" && b.Port != "" {
			got[c.at]++
		}
		for _, v := range b.VXLANs {
			if v.Name == c.in {
				continue
			}
			for _, r := range v.Remotes {
				rb, ok := bridges[r]
				if !ok {
					continue
				}
				if p, ok := wireGuardPeer(gateways[c.at], r); !ok || p.Gateway != gateways[r].Name {
					got[netip.Addr{}]++ // dropped: no tunnel to the remote
					continue
				}
				i := slices.IndexFunc(rb.VXLANs, func(w plan.VXLAN) bool { return w.UDPPort == v.UDPPort })
				if i < 0 {
					got[netip.Addr{}]++ // dropped: no device listens
					continue
				}
				queue = append(queue, copy{r, rb.VXLANs[i].Name})
			}
		}
	}
	return got
}

// TestMeshOfLooksAtExceptions checks that whether a bridged network's
// members form a mesh, found from the links the spec disables and those
// down alone, is what asking every two members finds, over random partial
// meshes with each gateway down and each link down in turn.
func TestMeshOfLooksAtExceptions(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 2026))
	iterations := 200
	if testing.Short() {
		iterations = 40
	}
	var mesh, notMesh int
	for it := range iterations {
		f, err := spec.Parse([]byte(randomSpecHA(rng, 2+rng.IntN(7), it%2 == 0)))
		if err != nil {
			continue // a network the spec's links cannot carry: rejected
		}
		cases := []plan.Inputs{{}}
		for _, s := range f.Sites {
			for _, g := range s.Gateways {
				cases = append(cases, plan.Inputs{}.WithGatewayDown(g.Name))
			}
			for _, r := range f.Sites {
				if s.Name < r.Name && f.LinkEnabled(s.Name, r.Name) {
					cases = append(cases, plan.Inputs{}.WithLinkDown(s.Name, r.Name))
				}
			}
		}
		for _, in := range cases {
			fast, checked := plan.MeshBoth(f, in)
			if !slices.Equal(fast, checked) {
				t.Fatalf("iteration %d, down %v %v: mesh by exceptions %v, by every pair %v", it, in.Down, in.LinksDown, fast, checked)
			}
			for _, m := range fast {
				if m {
					mesh++
				} else {
					notMesh++
				}
			}
		}
	}
	t.Logf("%d bridged networks a mesh, %d not", mesh, notMesh)
	if mesh == 0 || notMesh == 0 {
		t.Error("the generator missed a case")
	}
}
