// Package cloud computes what a site's cloud provider must do so that the
// federation works there: which remote prefixes the site's route tables
// send to the active gateway, which gateways forward (AWS's
// source/destination check off, Azure's and GCP's IP forwarding on,
// OpenStack's allowed address pairs), and which peers the public side's
// security group admits on the tunnel ports. It is pure: the spec and the
// plan go in, Needs comes out; the providers' packages (cloud/aws, and
// cloud/script for Azure, GCP and OpenStack) turn Needs into calls or
// scripts.
package cloud

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/fednet/fednet/internal/backend"
	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/spec"
)

// Needs is what one site's cloud must provide. It is a value, sorted, so
// the same spec and inputs always give the same Needs.
type Needs struct {
	Federation string
	Site       string
	Kind       spec.CloudKind
	// Active is the gateway the site's routes point at: the planner's
	// active gateway of the site (plan.Inputs.Active, else its first
	// gateway that is neither removed nor down).
	Active string
	// Gateways are every gateway of the site, in spec order, with its
	// LAN address: each must be allowed to forward, so that a failover
	// moves only the routes.
	Gateways []Gateway
	// Routes are the remote prefixes the site's hosts reach through the
	// active gateway: the destinations of its plan's routes (every site
	// it shares a routed network with, directly or relayed). Sorted.
	Routes []netip.Prefix
	// Ingress is what the public side must admit: the tunnel ports from
	// every peer's endpoint. Sorted by protocol, port, source.
	Ingress []Ingress
}

// Gateway is one gateway of the site.
type Gateway struct {
	Name string
	// LAN is the gateway's address on the site segment: the next hop of
	// the routes where a provider routes by address (Azure, OpenStack).
	LAN netip.Addr
}

// ActiveGateway returns the active gateway.
func (n Needs) ActiveGateway() Gateway {
	for _, g := range n.Gateways {
		if g.Name == n.Active {
			return g
		}
	}
	return Gateway{}
}

// Ingress admits one protocol and port from one source prefix.
type Ingress struct {
	Protocol backend.Protocol
	// Port is 0 for protocols without ports (ESP).
	Port   int
	Source netip.Prefix
	// Peers are the gateways whose endpoints Source stands for, sorted;
	// for 0.0.0.0/0 the peers behind NAT, whose addresses are unknown.
	Peers []string
}

// Anywhere is the source of peers behind NAT: their address is not known,
// so the tunnel port is open to all (WireGuard answers no packet that does
// not carry a valid handshake from a configured peer).
var Anywhere = netip.MustParsePrefix("0.0.0.0/0")

// Resolver resolves the host of a DNS endpoint. Compute calls it for
// peers whose endpoint is a name; a nil Resolver makes such a peer an
// error.
type Resolver func(host string) ([]netip.Addr, error)

// Options are Compute's inputs beyond the spec.
type Options struct {
	// Inputs are the planner's inputs (active gateways, removed and failed
	// gateways); the zero value plans the spec as written.
	Inputs plan.Inputs
	// Resolve resolves DNS endpoints.
	Resolve Resolver
}

// Compute returns the Needs of the named site, which must have a cloud
// block. f must have passed spec.Parse.
func Compute(f *spec.Federation, site string, opt Options) (Needs, error) {
	s, ok := f.Site(site)
	if !ok {
		var names []string
		for _, x := range f.Sites {
			names = append(names, x.Name)
		}
		return Needs{}, fmt.Errorf("no site %q in federation %s; sites are %s", site, f.Name, strings.Join(names, ", "))
	}
	if s.Cloud.Kind() == "" {
		return Needs{}, fmt.Errorf("site %s has no cloud block; add cloud: with its %s identifiers to the site (docs/cloud.md)", site, providerWord(s.Provider))
	}
	n := Needs{Federation: f.Name, Site: site, Kind: s.Cloud.Kind(), Active: active(s, opt.Inputs)}
	if n.Active == "" {
		return Needs{}, fmt.Errorf("site %s has no gateway that is neither removed nor down; there is nothing to route to", site)
	}
	plans, err := plan.Compute(f, opt.Inputs)
	if err != nil {
		return Needs{}, fmt.Errorf("planning site %s: %w", site, err)
	}
	byName := map[string]plan.Gateway{}
	for _, p := range plans {
		byName[p.Name] = p
	}
	for _, g := range s.Gateways {
		n.Gateways = append(n.Gateways, Gateway{Name: g.Name, LAN: g.LANAddress})
	}
	for _, r := range byName[n.Active].Routes {
		n.Routes = append(n.Routes, r.Destination)
	}
	slices.SortFunc(n.Routes, comparePrefix)
	n.Routes = slices.Compact(n.Routes)

	type key struct {
		proto  backend.Protocol
		port   int
		source netip.Prefix
	}
	ingress := map[key][]string{}
	for _, g := range s.Gateways {
		p, ok := byName[g.Name]
		if !ok {
			continue // removed
		}
		for _, port := range p.Firewall.Public {
			for _, peer := range p.Peers {
				sources, err := peerSources(peer, opt.Resolve)
				if err != nil {
					return Needs{}, fmt.Errorf("site %s: %w", site, err)
				}
				for _, src := range sources {
					k := key{port.Protocol, port.Port, src}
					ingress[k] = append(ingress[k], peer.Gateway)
				}
			}
		}
	}
	for k, peers := range ingress {
		slices.Sort(peers)
		n.Ingress = append(n.Ingress, Ingress{Protocol: k.proto, Port: k.port, Source: k.source, Peers: slices.Compact(peers)})
	}
	slices.SortFunc(n.Ingress, func(a, b Ingress) int {
		return cmp.Or(cmp.Compare(a.Protocol, b.Protocol), cmp.Compare(a.Port, b.Port), comparePrefix(a.Source, b.Source))
	})
	return n, nil
}

// active is the planner's rule for a site's active gateway.
func active(s *spec.Site, in plan.Inputs) string {
	first := ""
	for _, g := range s.Gateways {
		if in.Removed[g.Name] || in.Down[g.Name] {
			continue
		}
		if g.Name == in.Active[s.Name] {
			return g.Name
		}
		if first == "" {
			first = g.Name
		}
	}
	return first
}

// peerSources are the source prefixes a peer's packets come from: its
// endpoint's address, the addresses its DNS name resolves to, or
// Anywhere when it is behind NAT.
func peerSources(p plan.Peer, resolve Resolver) ([]netip.Prefix, error) {
	if p.Endpoint == "" {
		return []netip.Prefix{Anywhere}, nil
	}
	ap, err := netip.ParseAddrPort(p.Endpoint)
	if err == nil {
		a := ap.Addr().Unmap()
		return []netip.Prefix{netip.PrefixFrom(a, a.BitLen())}, nil
	}
	host := p.Endpoint
	if i := strings.LastIndexByte(host, ':'); i >= 0 {
		host = host[:i]
	}
	if resolve == nil {
		return nil, fmt.Errorf("peer %s has the DNS endpoint %s, which must be resolved to open the security group to it", p.Gateway, p.Endpoint)
	}
	addrs, err := resolve(host)
	if err != nil {
		return nil, fmt.Errorf("resolving the endpoint of peer %s (%s): %w", p.Gateway, host, err)
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("the endpoint of peer %s (%s) resolves to no address", p.Gateway, host)
	}
	var out []netip.Prefix
	for _, a := range addrs {
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

func providerWord(p string) string {
	if spec.CloudKind(p) == spec.CloudAWS || spec.CloudKind(p) == spec.CloudAzure || spec.CloudKind(p) == spec.CloudGCP || spec.CloudKind(p) == spec.CloudOpenStack {
		return p
	}
	return "provider's"
}

func comparePrefix(a, b netip.Prefix) int {
	return cmp.Or(a.Addr().Compare(b.Addr()), cmp.Compare(a.Bits(), b.Bits()))
}

// String renders n for `fednet cloud plan`: what the provider must do,
// in words, independent of the provider's identifiers.
func (n Needs) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "site %s (%s, federation %s): active gateway %s\n", n.Site, n.Kind, n.Federation, n.Active)
	var names []string
	for _, g := range n.Gateways {
		names = append(names, g.Name)
	}
	fmt.Fprintf(&b, "  forwarding allowed on: %s\n", strings.Join(names, ", "))
	if len(n.Routes) == 0 {
		fmt.Fprintf(&b, "  routes: none (the site shares no routed network with another site)\n")
	}
	for _, r := range n.Routes {
		fmt.Fprintf(&b, "  route %s -> %s (%s)\n", r, n.Active, n.ActiveGateway().LAN)
	}
	for _, in := range n.Ingress {
		what := "peer"
		if len(in.Peers) > 1 {
			what = "peers"
		}
		if in.Source == Anywhere {
			what = "behind NAT, address unknown:"
		}
		fmt.Fprintf(&b, "  ingress %s from %s (%s %s)\n", backend.Port{Protocol: in.Protocol, Port: in.Port}, in.Source, what, strings.Join(in.Peers, ", "))
	}
	return b.String()
}
