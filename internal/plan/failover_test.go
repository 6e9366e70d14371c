package plan_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/spec"
)

// renderInputs is render with given inputs (keys added).
func renderInputs(t *testing.T, f *spec.Federation, in plan.Inputs) []byte {
	t.Helper()
	in.PublicKeys = testKeys(f).PublicKeys
	gws, err := plan.Compute(f, in)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, g := range gws {
		b.WriteString(g.String() + "\n")
	}
	return b.Bytes()
}

// TestGoldenFailover renders examples/ha.yaml as planned by default (the
// site's first gateway active), with its second gateway active, and with a
// link down, so a review sees exactly what a failover changes.
func TestGoldenFailover(t *testing.T) {
	f := load(t, "ha.yaml")
	golden(t, "ha.txt", renderInputs(t, f, plan.Inputs{}))
	golden(t, "ha-active-gw2.txt", renderInputs(t, f, plan.Inputs{}.WithActive("lab", "onprem-gw2")))
	golden(t, "ha-link-down.txt", renderInputs(t, f, plan.Inputs{}.WithLinkDown("aws-eu", "azure-we")))
}

// The active gateway decides who carries a site's prefixes and bridged
// networks; the standby keeps its tunnels and its own routes, so only the
// remote gateways' allowed IPs and routes move on a takeover. A failed
// gateway is never active, and naming it changes nothing.
func TestActiveGateway(t *testing.T) {
	f := load(t, "ha.yaml")
	plans := func(in plan.Inputs) map[string]plan.Gateway {
		in.PublicKeys = testKeys(f).PublicKeys
		gws, err := plan.Compute(f, in)
		if err != nil {
			t.Fatal(err)
		}
		return byName(gws)
	}
	lab := netip.MustParsePrefix("10.5.0.0/24")
	carrier := func(m map[string]plan.Gateway) string {
		var who []string
		for _, remote := range []string{"aws-gw", "azure-gw", "gcp-gw"} {
			for _, p := range m[remote].Peers {
				if slices.Contains(p.AllowedIPs, lab) {
					who = append(who, p.Gateway)
				}
			}
			for _, r := range m[remote].Routes {
				if r.Destination == lab && r.Via != who[len(who)-1] {
					t.Errorf("%s routes %s via %s but its allowed IPs are %s's", remote, lab, r.Via, who[len(who)-1])
				}
			}
		}
		slices.Sort(who)
		who = slices.Compact(who)
		if len(who) != 1 {
			t.Fatalf("lab's prefix is carried by %v, want exactly one gateway", who)
		}
		return who[0]
	}

	def := plans(plan.Inputs{})
	if got := carrier(def); got != "onprem-gw1" {
		t.Errorf("by default lab's prefix goes to %s, want onprem-gw1 (the first)", got)
	}
	if !def["onprem-gw1"].LAN.Active || def["onprem-gw2"].LAN.Active || def["onprem-gw2"].LAN.Virtual != netip.MustParsePrefix("10.5.0.254/24") {
		t.Errorf("LAN: gw1 %+v, gw2 %+v; want gw1 active with the virtual address 10.5.0.254/24", def["onprem-gw1"].LAN, def["onprem-gw2"].LAN)
	}
	if len(def["onprem-gw1"].Bridges) != 1 || len(def["onprem-gw2"].Bridges) != 0 {
		t.Errorf("bridges: gw1 %d, gw2 %d; want only the active gateway in lan", len(def["onprem-gw1"].Bridges), len(def["onprem-gw2"].Bridges))
	}
	for _, remote := range []string{"aws-gw", "azure-gw", "gcp-gw"} {
		if _, ok := findPeer(def[remote], "onprem-gw2"); !ok {
			t.Errorf("%s has no peer onprem-gw2: the standby's tunnel must stay up", remote)
		}
	}
	if !slices.Equal(def["onprem-gw1"].Routes, def["onprem-gw2"].Routes) {
		t.Errorf("standby routes %v differ from the active's %v", def["onprem-gw2"].Routes, def["onprem-gw1"].Routes)
	}

	for name, in := range map[string]plan.Inputs{
		"gw2 active":                 plan.Inputs{}.WithActive("lab", "onprem-gw2"),
		"gw1 down":                   plan.Inputs{}.WithGatewayDown("onprem-gw1"),
		"gw1 named but down":         plan.Inputs{}.WithActive("lab", "onprem-gw1").WithGatewayDown("onprem-gw1"),
		"gw1 removed":                {Removed: map[string]bool{"onprem-gw1": true}},
		"another site's gw is named": plan.Inputs{}.WithActive("lab", "aws-gw").WithGatewayDown("onprem-gw1"),
	} {
		t.Run(name, func(t *testing.T) {
			m := plans(in)
			if got := carrier(m); got != "onprem-gw2" {
				t.Errorf("lab's prefix goes to %s, want onprem-gw2", got)
			}
			if !m["onprem-gw2"].LAN.Active || m["onprem-gw1"].LAN.Active {
				t.Errorf("LAN: gw1 active %v, gw2 active %v; want gw2", m["onprem-gw1"].LAN.Active, m["onprem-gw2"].LAN.Active)
			}
			if len(m["onprem-gw2"].Bridges) != 1 || len(m["onprem-gw1"].Bridges) != 0 {
				t.Errorf("bridges: gw1 %d, gw2 %d; want only gw2 in lan", len(m["onprem-gw1"].Bridges), len(m["onprem-gw2"].Bridges))
			}
			for _, g := range m {
				for _, b := range g.Bridges {
					for _, v := range b.VXLANs {
						if slices.Contains(v.Remotes, def["onprem-gw1"].TransitAddress()) {
							t.Errorf("%s still floods lan to onprem-gw1", g.Name)
						}
					}
				}
			}
		})
	}

	// Only the remote gateways' plans and the two lab gateways' change on
	// a takeover.
	gw2 := plans(plan.Inputs{}.WithActive("lab", "onprem-gw2"))
	for name, g := range def {
		if g.String() != gw2[name].String() && !strings.HasPrefix(name, "onprem-gw") {
			for _, p := range g.Peers {
				if p.Site == "lab" {
					continue
				}
				q, _ := findPeer(gw2[name], p.Gateway)
				if !slices.Equal(p.AllowedIPs, q.AllowedIPs) {
					t.Errorf("%s: peer %s's allowed IPs changed on lab's takeover: %v -> %v", name, p.Gateway, p.AllowedIPs, q.AllowedIPs)
				}
			}
		}
	}
}

// With a link down, traffic between its two sites relays through a third
// site, the tunnel itself stays configured, and the way back is the same.
func TestLinkDown(t *testing.T) {
	f := load(t, "ha.yaml")
	in := testKeys(f).WithLinkDown("aws-eu", "azure-we")
	gws, err := plan.Compute(f, in)
	if err != nil {
		t.Fatal(err)
	}
	m := byName(gws)
	if _, ok := findPeer(m["aws-gw"], "azure-gw"); !ok {
		t.Error("aws-gw lost its peer azure-gw: a link that is down keeps its tunnel")
	}
	hops, err := walk(m["aws-gw"], m, netip.MustParseAddr("10.1.0.1"), netip.MustParseAddr("10.2.0.1"), 4)
	if err != nil || len(hops) != 3 {
		t.Fatalf("aws -> azure with their link down: hops %v, %v; want one relay", hops, err)
	}
	back, err := walk(m["azure-gw"], m, netip.MustParseAddr("10.2.0.1"), netip.MustParseAddr("10.1.0.1"), 4)
	slices.Reverse(back)
	if err != nil || !slices.Equal(back, hops) {
		t.Errorf("the way back %v (%v) is not the way there %v reversed", back, err, hops)
	}
}

// TestFailoverRandom plans random partial meshes, some sites with two
// gateways, under every single failure (each gateway down, each link down)
// and walks packets and frames through the plans: every two sites of a
// routed network that the failure leaves connected reach each other, with
// every hop passing WireGuard's source check and the forward chain; sites
// that share no network never do; every broadcast of a bridged network
// reaches every other member the failure leaves connected exactly once.
func TestFailoverRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 2026))
	iterations := 120
	if testing.Short() {
		iterations = 20
	}
	var failures, relayed, twoGateways int
	for it := range iterations {
		doc := randomSpecHA(rng, 2+rng.IntN(6), true)
		f, err := spec.Parse([]byte(doc))
		if err != nil {
			if !strings.Contains(err.Error(), "cannot reach member sites") {
				t.Fatalf("iteration %d: unexpected rejection: %v\n%s", it, err, doc)
			}
			continue
		}
		var cases []plan.Inputs
		for _, s := range f.Sites {
			if len(s.Gateways) > 1 {
				twoGateways++
			}
			for _, g := range s.Gateways {
				cases = append(cases, plan.Inputs{}.WithGatewayDown(g.Name))
			}
		}
		for i, a := range f.Sites {
			for _, b := range f.Sites[i+1:] {
				if f.LinkEnabled(a.Name, b.Name) {
					cases = append(cases, plan.Inputs{}.WithLinkDown(a.Name, b.Name))
				}
			}
		}
		for ci, in := range cases {
			in.PublicKeys = testKeys(f).PublicKeys
			gws, err := plan.Compute(f, in)
			if err != nil {
				t.Fatalf("iteration %d case %d (%+v): %v\n%s", it, ci, in, err, doc)
			}
			failures++
			name := fmt.Sprintf("iteration %d, down %v %v", it, in.Down, in.LinksDown)
			relayed += checkFailure(t, name, f, in, gws)
			if t.Failed() {
				t.Fatalf("%s: spec:\n%s", name, doc)
			}
		}
	}
	t.Logf("%d failure cases planned (%d sites with two gateways), %d relayed walks", failures, twoGateways, relayed)
	if failures == 0 || relayed == 0 || twoGateways == 0 {
		t.Error("the generator missed a case")
	}
}

// checkFailure checks the plans gws of f under the failure in in.
func checkFailure(t *testing.T, name string, f *spec.Federation, in plan.Inputs, gws []plan.Gateway) (relayed int) {
	t.Helper()
	byName := map[string]plan.Gateway{}
	for _, g := range gws {
		byName[g.Name] = g
	}
	// The active gateway of each site: its first that is not down.
	active := map[string]plan.Gateway{}
	for _, s := range f.Sites {
		for _, g := range s.Gateways {
			if !in.Down[g.Name] {
				active[s.Name] = byName[g.Name]
				break
			}
		}
	}
	// Components of the sites over links that are up.
	comp := map[string]string{}
	var find func(s string) string
	find = func(s string) string {
		if p, ok := comp[s]; ok && p != s {
			r := find(p)
			comp[s] = r
			return r
		}
		return s
	}
	for i, a := range f.Sites {
		for _, b := range f.Sites[i+1:] {
			_, upA := active[a.Name]
			_, upB := active[b.Name]
			if upA && upB && f.LinkEnabled(a.Name, b.Name) && !in.LinksDown[plan.Pair(a.Name, b.Name)] {
				comp[find(a.Name)] = find(b.Name)
			}
		}
	}
	connected := func(a, b string) bool {
		_, upA := active[a]
		_, upB := active[b]
		return upA && upB && find(a) == find(b)
	}
	for _, x := range f.Sites {
		for _, y := range f.Sites {
			gx, ok := active[x.Name]
			if x.Name == y.Name || !ok {
				continue
			}
			shared := false
			for _, n := range f.Networks {
				shared = shared || n.Mode == spec.Routed && slices.Contains(n.Sites, x.Name) && slices.Contains(n.Sites, y.Name)
			}
			hops, err := walk(gx, byName, x.Prefixes[0].Addr().Next(), y.Prefixes[0].Addr().Next(), len(f.Sites))
			switch {
			case shared && connected(x.Name, y.Name) && err != nil:
				t.Errorf("%s: %s -> %s: %v", name, x.Name, y.Name, err)
			case !shared && err == nil:
				t.Errorf("%s: %s -> %s share no routed network but the packet arrives over %v", name, x.Name, y.Name, hops)
			case err == nil && hops[len(hops)-1] != active[y.Name].Name:
				t.Errorf("%s: %s -> %s arrives at %s, not the active gateway %s", name, x.Name, y.Name, hops[len(hops)-1], active[y.Name].Name)
			case err == nil && len(hops) > 2:
				relayed++
			}
		}
	}
	for _, n := range f.Networks {
		if n.Mode != spec.Bridged {
			continue
		}
		bridges := map[netip.Addr]plan.Bridge{}
		site := map[netip.Addr]string{}
		gateway := map[netip.Addr]plan.Gateway{}
		for _, g := range gws {
			for _, b := range g.Bridges {
				if b.VNI == n.ID {
					if g.Name != active[g.Site].Name {
						t.Errorf("%s: %s is not its site's active gateway but has network %s's bridge", name, g.Name, n.Name)
					}
					bridges[g.TransitAddress()], site[g.TransitAddress()], gateway[g.TransitAddress()] = b, g.Site, g
				}
			}
		}
		for from, b := range bridges {
			if b.Relay {
				continue
			}
			got := flood(bridges, gateway, from)
			for addr, br := range bridges {
				want := 0
				if addr != from && !br.Relay && connected(site[from], site[addr]) {
					want = 1
				}
				if got[addr] != want {
					t.Errorf("%s: network %s: a broadcast from %s reaches %s's segment %d times, want %d", name, n.Name, site[from], site[addr], got[addr], want)
				}
			}
		}
		for _, m := range n.Sites {
			if _, up := active[m]; !up {
				continue
			}
			for _, o := range n.Sites {
				if o != m && connected(m, o) && !slices.ContainsFunc(gws, func(g plan.Gateway) bool { return g.Site == m && len(g.Bridges) > 0 }) {
					t.Errorf("%s: network %s: member %s is connected to %s but has no bridge", name, n.Name, m, o)
				}
			}
		}
	}
	return relayed
}
