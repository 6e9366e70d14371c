package bench

import (
	"fmt"
	"strings"

	"github.com/fednet/fednet/internal/backend"
	"github.com/fednet/fednet/internal/spec"
)

// Pairs are the sites a lab run measures between.
type Pairs struct {
	// A and B are the measured pair: the routed, bridged and tcp443 modes
	// run between their first hosts, and the reference lab has their two
	// sites.
	A, B string
	// Backend is the tunnel backend of A and B's link.
	Backend backend.Name
	// IPsecA and IPsecB, when set, are a second pair whose link is on
	// IPsec, measured in a routed mode of its own (labelled "routed
	// (ipsec)") beside A and B's WireGuard link; empty when A and B's link
	// is IPsec itself or the spec has no IPsec link between two sites
	// with agents.
	IPsecA, IPsecB string
}

// ChoosePairs picks the sites a lab run measures between. between, when
// not empty, is the operator's pair (--between A,B): two distinct sites of
// the spec, with agents, that have a link. Otherwise the pair is the first
// two sites in spec order whose link is on WireGuard (the first two sites
// when no link is). Either way, when the pair's link is WireGuard and the
// spec has a link on IPsec between two sites with agents, the first such
// link (in spec order) is measured too.
func ChoosePairs(f *spec.Federation, between []string) (Pairs, error) {
	var agents []string
	for _, s := range f.Sites {
		if !s.IsExternal() {
			agents = append(agents, s.Name)
		}
	}
	if len(agents) < 2 {
		return Pairs{}, fmt.Errorf("bench needs a spec of at least two sites with agents (it has %d)", len(agents))
	}
	var p Pairs
	switch {
	case len(between) > 0:
		if len(between) != 2 {
			return Pairs{}, fmt.Errorf("--between: want two sites, SITE_A,SITE_B (got %q)", strings.Join(between, ","))
		}
		for _, n := range between {
			s, ok := f.Site(n)
			switch {
			case !ok:
				return Pairs{}, fmt.Errorf("--between: %q is not a site of the spec; its sites are %s", n, strings.Join(agents, ", "))
			case s.IsExternal():
				return Pairs{}, fmt.Errorf("--between: %q is an external site (no agent, no lab host to measure from); pick sites with agents: %s", n, strings.Join(agents, ", "))
			}
		}
		if !f.LinkEnabled(between[0], between[1]) {
			return Pairs{}, fmt.Errorf("--between: sites %s and %s have no link (the same site, or the topology disables it)", between[0], between[1])
		}
		p.A, p.B = between[0], between[1]
	default:
		p.A, p.B = agents[0], agents[1]
	pick:
		for i, a := range agents {
			for _, b := range agents[i+1:] {
				if f.LinkEnabled(a, b) && f.LinkBackend(a, b) == backend.WireGuard {
					p.A, p.B = a, b
					break pick
				}
			}
		}
	}
	p.Backend = f.LinkBackend(p.A, p.B)
	if p.Backend == backend.IPsec {
		return p, nil
	}
	for i, a := range agents {
		for _, b := range agents[i+1:] {
			if f.LinkEnabled(a, b) && f.LinkBackend(a, b) == backend.IPsec {
				p.IPsecA, p.IPsecB = a, b
				return p, nil
			}
		}
	}
	return p, nil
}

// linkOf returns the backend and transport of the measured pair's link as
// a mode records them: WireGuard over UDP, or IPsec (no transport).
func (p Pairs) linkOf() (backend.Name, backend.Transport) {
	if p.Backend == backend.IPsec {
		return p.Backend, ""
	}
	return p.Backend, backend.TransportUDP
}
