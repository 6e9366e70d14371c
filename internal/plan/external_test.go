package plan_test

import (
	"net/netip"
	"reflect"
	"slices"
	"testing"

	"github.com/fednet/fednet/internal/backend"
	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/spec"
)

// TestExternalSites checks what the interop example's golden file could
// hide: the external sites' prefixes reach exactly the sites of their
// networks, through their via gateway, and a failed via cuts them off.
func TestExternalSites(t *testing.T) {
	f := load(t, "interop.yaml")
	in := testKeys(f)
	gws, err := plan.Compute(f, in)
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]plan.Gateway{}
	for _, g := range gws {
		by[g.Name] = g
	}
	if len(gws) != 4 {
		t.Fatalf("%d plans, want one per fednet gateway (4): external sites have none", len(gws))
	}
	vpc, osLab := netip.MustParsePrefix("10.1.1.0/24"), netip.MustParsePrefix("10.4.0.0/24")
	routeOf := func(g plan.Gateway, p netip.Prefix) (plan.Route, bool) {
		i := slices.IndexFunc(g.Routes, func(r plan.Route) bool { return r.Destination == p })
		if i < 0 {
			return plan.Route{}, false
		}
		return g.Routes[i], true
	}
	// Each via gateway holds its site's connection, on ipsec0: aws-vpc
	// (route-based, any local selector), os-lab (a CHILD_SA per pair).
	for _, x := range []struct {
		via, site string
		prefix    netip.Prefix
		children  []plan.ChildSA
	}{
		{"aws-gw", "aws-vpc", vpc, []plan.ChildSA{{LocalTS: prefixes("0.0.0.0/0"), RemoteTS: []netip.Prefix{vpc}}}},
		{"onprem-gw", "os-lab", osLab, []plan.ChildSA{{LocalTS: prefixes("10.5.0.0/24"), RemoteTS: []netip.Prefix{osLab}}}},
	} {
		g := by[x.via]
		i := slices.IndexFunc(g.Peers, func(p plan.Peer) bool { return p.Gateway == x.site })
		if i < 0 {
			t.Fatalf("%s has no peer for external site %s", x.via, x.site)
		}
		p := g.Peers[i]
		if p.Backend != backend.IPsec || !p.IPsec.Initiator || !slices.Equal(p.AllowedIPs, []netip.Prefix{x.prefix}) ||
			!slices.EqualFunc(p.IPsec.Children, x.children, func(a, b plan.ChildSA) bool {
				return slices.Equal(a.LocalTS, b.LocalTS) && slices.Equal(a.RemoteTS, b.RemoteTS)
			}) {
			t.Errorf("%s's peer %s: %+v; want ipsec, initiator, allowed %s, children %v", x.via, x.site, p, x.prefix, x.children)
		}
		if r, ok := routeOf(g, x.prefix); !ok || r.Device != "ipsec0" || r.Via != x.site {
			t.Errorf("%s routes %s as %+v; want into ipsec0 to %s", x.via, x.prefix, r, x.site)
		}
	}
	// The other gateways route an external site's prefix to its via
	// gateway exactly when they share a network with it.
	for _, g := range []string{"azure-gw", "onprem-gw", "hotel-gw", "aws-gw"} {
		for _, x := range []struct {
			prefix netip.Prefix
			via    string
			shares bool
		}{{vpc, "aws-gw", true}, {osLab, "onprem-gw", false}} {
			if g == x.via {
				continue // checked above
			}
			r, ok := routeOf(by[g], x.prefix)
			if ok != x.shares || ok && r.Via != x.via {
				t.Errorf("%s: route to %s %+v (present %v); want one via %s: %v", g, x.prefix, r, ok, x.via, x.shares)
			}
		}
	}
	// aws-gw forwards between aws-vpc and the sites of network apps,
	// never to os-lab (which shares no network with it).
	aws := by["aws-gw"]
	if !slices.ContainsFunc(aws.Firewall.Flows, func(fl plan.Flow) bool { return fl.Source == vpc && fl.Destination.String() == "10.6.0.0/24" }) {
		t.Errorf("aws-gw does not forward aws-vpc -> hotel (both in apps; relayed)")
	}
	for _, fl := range aws.Firewall.Flows {
		if (fl.Source == vpc || fl.Destination == vpc) && (fl.Source == osLab || fl.Destination == osLab) {
			t.Errorf("aws-gw forwards between the two external sites: %+v", fl)
		}
	}
	// With aws-gw down, nobody routes to aws-vpc.
	down, err := plan.Compute(f, in.WithGatewayDown("aws-gw"))
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range down {
		if r, ok := routeOf(g, vpc); ok {
			t.Errorf("with aws-gw down, %s still routes %s: %+v", g.Name, vpc, r)
		}
	}
	if got := plan.ExternalReach(f, in, "aws-vpc"); !slices.Equal(got, prefixes("10.1.0.0/24", "10.2.0.0/24", "10.5.0.0/24", "10.6.0.0/24")) {
		t.Errorf("ExternalReach(aws-vpc) = %v", got)
	}
	if got := plan.ExternalReach(f, in, "os-lab"); !slices.Equal(got, prefixes("10.5.0.0/24")) {
		t.Errorf("ExternalReach(os-lab) = %v", got)
	}
}

func prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

// TestUpdateWithExternalSites checks that Update plans a federation with
// external sites whole (their prefixes are relayed through the via gateway,
// which its direct-path edits do not cover): removing one external site
// gives Compute's plans. The example's IPsec link is dropped so that
// nothing else makes Update plan whole.
func TestUpdateWithExternalSites(t *testing.T) {
	prevF := load(t, "interop.yaml")
	prevF.Topology.Links = nil
	in := testKeys(prevF)
	prev, err := plan.Compute(prevF, in)
	if err != nil {
		t.Fatal(err)
	}
	f := load(t, "interop.yaml")
	f.Topology.Links = nil
	i := slices.IndexFunc(f.Sites, func(s spec.Site) bool { return s.External != nil })
	if i < 0 {
		t.Fatal("interop.yaml has no external site")
	}
	gone := f.Sites[i].Name
	f.Sites = slices.Delete(f.Sites, i, i+1)
	for n := range f.Networks {
		f.Networks[n].Sites = slices.DeleteFunc(f.Networks[n].Sites, func(s string) bool { return s == gone })
	}
	want, err := plan.Compute(f, in)
	if err != nil {
		t.Fatalf("the example without %s: %v", gone, err)
	}
	got, edits, err := plan.Update(prevF, in, prev, f, in)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Update's plans without %s differ from Compute's", gone)
	}
	for n, e := range edits {
		if e != nil {
			t.Errorf("%s: an edit across a federation with external sites; want the plan made whole", got[n].Name)
		}
	}
}
