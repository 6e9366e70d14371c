package faults

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/fednet/fednet/internal/plan"
)

// Pair is one pair of hosts at different sites that the suite probes: an
// echo from From to To crosses the path between them both ways.
type Pair struct {
	From, To         string // host names
	FromSite, ToSite string
	// Address is To's address the probes go to.
	Address netip.Addr
	// Network is the bridged network the two share, empty for a routed
	// pair.
	Network string
}

// String names the pair "from -> to".
func (p Pair) String() string { return p.From + " -> " + p.To }

// Blast is what a fault fails: pairs whose path, as the plans route it,
// crosses one of Gateways or one of Links, or that have a host at one of
// Sites, are concerned; the others must not notice the fault.
type Blast struct {
	Gateways []string
	Links    []plan.SitePair
	Sites    []string
	// Networks are bridged networks whose VXLAN ports the fault's
	// rerouting rebuilds (a link of a full mesh goes, the network moves
	// onto a relay tree): all their pairs are concerned.
	Networks []string
	// SitesDown are sites the fault takes down as a whole (also in
	// Sites): their pairs are measured apart (Result.SiteDown*).
	SitesDown []string
}

// down reports whether pair p has a host at a site b takes down.
func (b Blast) down(p Pair) bool {
	return slices.Contains(b.SitesDown, p.FromSite) || slices.Contains(b.SitesDown, p.ToSite)
}

// Path returns the gateways a pair's packets cross, in order, as plans
// (every gateway's, by name) route them: for a routed pair from the active
// gateway of the source site along the routes to the active gateway of
// the destination site; for a bridged pair along the network's VXLAN ports
// between the bridges of the two sites' active gateways.
func Path(plans map[string]plan.Gateway, p Pair) ([]string, error) {
	if p.Network != "" {
		return bridgedPath(plans, p)
	}
	src, ok := activeGateway(plans, p.FromSite, "")
	if !ok {
		return nil, fmt.Errorf("%s: site %s has no active gateway", p, p.FromSite)
	}
	path := []string{src.Name}
	for g := src; g.Site != p.ToSite; {
		if len(path) > len(plans) {
			return nil, fmt.Errorf("%s: the routes loop: %v", p, path)
		}
		next := ""
		for _, r := range g.Routes {
			if r.Destination.Contains(p.Address) {
				next = r.Via
				break
			}
		}
		n, ok := plans[next]
		if !ok {
			return nil, fmt.Errorf("%s: %s has no route to %s", p, g.Name, p.Address)
		}
		path = append(path, n.Name)
		g = n
	}
	return path, nil
}

// activeGateway returns the active gateway of site (with a bridge of
// network, when network is set).
func activeGateway(plans map[string]plan.Gateway, site, network string) (plan.Gateway, bool) {
	for _, name := range sortedNames(plans) {
		g := plans[name]
		if g.Site != site || !g.LAN.Active {
			continue
		}
		if network == "" || slices.ContainsFunc(g.Bridges, func(b plan.Bridge) bool { return b.Network == network }) {
			return g, true
		}
	}
	return plan.Gateway{}, false
}

// bridgedPath finds the path of a bridged pair through the network's
// VXLAN ports (breadth first: the ports form a tree or a full mesh).
func bridgedPath(plans map[string]plan.Gateway, p Pair) ([]string, error) {
	src, ok1 := activeGateway(plans, p.FromSite, p.Network)
	dst, ok2 := activeGateway(plans, p.ToSite, p.Network)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("%s: sites %s and %s do not both bridge network %s", p, p.FromSite, p.ToSite, p.Network)
	}
	byTransit := map[netip.Addr]string{}
	for name, g := range plans {
		byTransit[g.TransitAddress()] = name
	}
	prev := map[string]string{src.Name: ""}
	queue := []string{src.Name}
	for len(queue) > 0 && prev[dst.Name] == "" && dst.Name != src.Name {
		g := plans[queue[0]]
		queue = queue[1:]
		for _, b := range g.Bridges {
			if b.Network != p.Network {
				continue
			}
			for _, v := range b.Ports(plan.ToGateways) {
				for _, r := range v.Remotes {
					n, ok := byTransit[r]
					if _, seen := prev[n]; ok && !seen {
						prev[n] = g.Name
						queue = append(queue, n)
					}
				}
			}
		}
	}
	if _, ok := prev[dst.Name]; !ok {
		return nil, fmt.Errorf("%s: network %s has no VXLAN path from %s to %s", p, p.Network, src.Name, dst.Name)
	}
	var path []string
	for n := dst.Name; n != ""; n = prev[n] {
		path = append(path, n)
	}
	slices.Reverse(path)
	return path, nil
}

// Concerned reports whether the fault b concerns pair p, whose packets
// cross the gateways path (see Path); site gives each gateway's site.
func (b Blast) Concerned(p Pair, path []string, site func(gateway string) string) bool {
	if slices.Contains(b.Sites, p.FromSite) || slices.Contains(b.Sites, p.ToSite) {
		return true
	}
	if p.Network != "" && slices.Contains(b.Networks, p.Network) {
		return true
	}
	for i, g := range path {
		if slices.Contains(b.Gateways, g) {
			return true
		}
		if i > 0 && slices.Contains(b.Links, plan.Pair(site(path[i-1]), site(g))) {
			return true
		}
	}
	return false
}

func sortedNames(plans map[string]plan.Gateway) []string {
	names := make([]string, 0, len(plans))
	for n := range plans {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
