package plan_test

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/fednet/fednet/internal/backend"
	"github.com/fednet/fednet/internal/plan"
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
	// The via gateway holds both connections, on ipsec0.
	aws := by["aws-gw"]
	for _, x := range []struct {
		site   string
		prefix netip.Prefix
		local  []netip.Prefix
		childs int
	}{
		{"aws-vpc", vpc, prefixes("10.1.0.0/24", "10.2.0.0/24", "10.5.0.0/24", "10.6.0.0/24"), 1},
		{"os-lab", osLab, prefixes("10.5.0.0/24", "10.6.0.0/24"), 2},
	} {
		i := slices.IndexFunc(aws.Peers, func(p plan.Peer) bool { return p.Gateway == x.site })
		if i < 0 {
			t.Fatalf("aws-gw has no peer for external site %s", x.site)
		}
		p := aws.Peers[i]
		if p.Backend != backend.IPsec || !p.IPsec.Initiator || !slices.Equal(p.AllowedIPs, []netip.Prefix{x.prefix}) ||
			!slices.Equal(p.IPsec.LocalTS, x.local) || len(p.IPsec.Children) != x.childs {
			t.Errorf("aws-gw's peer %s: %+v; want ipsec, initiator, allowed %s, local %v, %d children", x.site, p, x.prefix, x.local, x.childs)
		}
		if r, ok := routeOf(aws, x.prefix); !ok || r.Device != "ipsec0" || r.Via != x.site {
			t.Errorf("aws-gw routes %s as %+v; want into ipsec0 to %s", x.prefix, r, x.site)
		}
	}
	// The other gateways route an external site's prefix to the via
	// gateway exactly when they share a network with it.
	for _, g := range []string{"azure-gw", "onprem-gw", "hotel-gw"} {
		for _, x := range []struct {
			prefix netip.Prefix
			shares bool
		}{{vpc, true}, {osLab, g != "azure-gw"}} {
			r, ok := routeOf(by[g], x.prefix)
			if ok != x.shares || ok && r.Via != "aws-gw" {
				t.Errorf("%s: route to %s %+v (present %v); want one via aws-gw: %v", g, x.prefix, r, ok, x.shares)
			}
		}
	}
	// The via gateway forwards between the external sites and the sites
	// they share a network with, never between the two external sites.
	for _, fl := range aws.Firewall.Flows {
		if (fl.Source == vpc || fl.Destination == vpc) && (fl.Source == osLab || fl.Destination == osLab) {
			t.Errorf("aws-gw forwards between the two external sites: %+v", fl)
		}
	}
	// With aws-gw down, nobody routes to the external sites.
	down, err := plan.Compute(f, in.WithGatewayDown("aws-gw"))
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range down {
		for _, p := range []netip.Prefix{vpc, osLab} {
			if r, ok := routeOf(g, p); ok {
				t.Errorf("with aws-gw down, %s still routes %s: %+v", g.Name, p, r)
			}
		}
	}
	if got := plan.ExternalReach(f, in, "os-lab"); !slices.Equal(got, prefixes("10.5.0.0/24", "10.6.0.0/24")) {
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
