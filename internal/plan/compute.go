package plan

import (
	"cmp"
	"fmt"
	"iter"
	"maps"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/fednet/fednet/internal/backend"
	"github.com/fednet/fednet/internal/spec"
)

// Inputs are what the planner needs beyond the spec. The zero Inputs plan
// the spec as written: every gateway with the key the spec gives, the
// first gateway of each site active, every enabled link up.
type Inputs struct {
	// PublicKeys by gateway name; a key here wins over the spec's publicKey.
	PublicKeys map[string]Key
	// Removed names gateways that were revoked: they get no plan and
	// appear in no other gateway's plan, though the spec still lists them.
	Removed map[string]bool
	// Hosts joined bridged networks through neighbor tunnels (see
	// neighbors.go); they appear in their site's active gateway's plan.
	Hosts []Host
	// Active names, by site, the gateway that carries the site's traffic:
	// remote gateways route the site's prefixes to it, and it alone joins
	// the site's bridged networks. A site that is not listed, or whose
	// named gateway is not one of its own, is removed or is down, has its
	// first gateway that is neither removed nor down active.
	Active map[string]string
	// Down names gateways that failed (machine, uplink or data plane).
	// They keep their plans and their tunnels (the other gateways still
	// list them as peers, so they come back at once), but are never
	// active. A site whose gateways are all down or removed is cut off:
	// no gateway routes to it or relays through it.
	Down map[string]bool
	// LinksDown names links between sites that are down: routed traffic
	// and bridged frames take other paths of enabled links where there
	// are any. The tunnels stay configured, so the link comes back when
	// this says so.
	LinksDown map[SitePair]bool
}

// SitePair names the link between two sites; A sorts before B (use
// Pair).
type SitePair struct{ A, B string }

// Pair returns the SitePair of the link between sites a and b.
func Pair(a, b string) SitePair {
	if b < a {
		a, b = b, a
	}
	return SitePair{a, b}
}

// WithGatewayDown returns a copy of in in which gateway name is down: the
// inputs of "the plan if gateway name fails". in is not changed.
func (in Inputs) WithGatewayDown(name string) Inputs {
	out := in
	out.Down = maps.Clone(in.Down)
	if out.Down == nil {
		out.Down = map[string]bool{}
	}
	out.Down[name] = true
	return out
}

// WithLinkDown returns a copy of in in which the link between sites a and
// b is down. in is not changed.
func (in Inputs) WithLinkDown(a, b string) Inputs {
	out := in
	out.LinksDown = maps.Clone(in.LinksDown)
	if out.LinksDown == nil {
		out.LinksDown = map[SitePair]bool{}
	}
	out.LinksDown[Pair(a, b)] = true
	return out
}

// WithActive returns a copy of in in which gateway name is the active
// gateway of site. in is not changed.
func (in Inputs) WithActive(site, name string) Inputs {
	out := in
	out.Active = maps.Clone(in.Active)
	if out.Active == nil {
		out.Active = map[string]string{}
	}
	out.Active[site] = name
	return out
}

// Table is the name of the nftables table fednet owns on every gateway.
const Table = "fednet"

// KeepaliveNAT is the persistent keepalive, in seconds, on links where a
// side is behind NAT: short enough to keep common NAT mappings (30 s and
// up) open.
const KeepaliveNAT = 25

// Encapsulation overheads in bytes; a backend's own are in package
// backend.
const (
	udpHeader  = 8
	ipv4Header = 20
	ipv6Header = 40
	tcpHeader  = 20
)

// view is a federation as the planner sees it under some Inputs: which
// gateways are usable, which one is active at each site, which links are
// up.
type view struct {
	f  *spec.Federation
	in Inputs
	// active maps a site name to its active gateway; sites without one
	// (all gateways removed or down) are absent.
	active map[string]*spec.Gateway
	// up are the names of the sites with an active gateway, sorted, and
	// isUp the same as a set.
	up   []string
	isUp map[string]bool
	// idx indexes f once, so that lookups by name cost O(1) rather than a
	// scan of every site or link (see index).
	idx *index
}

// index is what a view looks up by name: sites, topology entries, the
// routed networks of each site, and results the planner computes once per
// Compute and asks for from every gateway's plan. Lazily filled parts are
// not safe for concurrent use; a view belongs to one Compute.
type index struct {
	sites map[string]*spec.Site
	// siteIndex is the index in f.Sites of each site (the first, as
	// sites).
	siteIndex map[string]int
	// first is, for each index in f.Sites, siteIndex of that site's name;
	// routedAt is routed by index in f.Sites.
	first    []int
	routedAt [][]string
	// links holds the first topology.links entry of each site pair, as
	// spec's lookups find it.
	links map[SitePair]*spec.Link
	// routed lists, by site, the routed networks it is a member of,
	// sorted and unique.
	routed map[string][]string
	// v6 names the gateways whose endpoint may be IPv6 (linkOuterV6).
	v6 map[*spec.Gateway]bool
	// vias maps each external site to its via gateway's site (nil: none;
	// external.go).
	vias map[string]string

	prefixes []sitePrefix // every site's prefixes, sorted (remotePrefixes)
	// prefixList is prefixes' prefixes alone; prefixesAt, by index in
	// f.Sites (of the first site of a name), the positions of that site's
	// prefixes in it, in order.
	prefixList []netip.Prefix
	prefixesAt [][]int
	gateways   int // every site's gateways
	forestOnce sync.Once
	forest     *forest // spanningForest
	colorsOnce sync.Once
	colors     map[Edge]int // edgeColors

	mu        sync.Mutex                // guards bridgeNet
	bridgeNet map[bridgeKey]*bridgeOnce // per network (and part): see bridges
}

// forest is a spanning forest (spanningForest) with the root of each
// site's tree.
type forest struct {
	adj   map[string][]Edge
	roots map[string]string
}

// root returns the root of site's tree (the same for every site of one
// tree).
func (sf *forest) root(site string) string { return sf.roots[site] }

func newIndex(f *spec.Federation) *index {
	x := &index{sites: map[string]*spec.Site{}, siteIndex: map[string]int{}, links: map[SitePair]*spec.Link{}, routed: map[string][]string{},
		v6: map[*spec.Gateway]bool{}, bridgeNet: map[bridgeKey]*bridgeOnce{}, first: make([]int, len(f.Sites))}
	x.prefixes = []sitePrefix{}
	x.vias = f.ExternalVias()
	for i := range f.Sites {
		s := &f.Sites[i]
		if _, dup := x.sites[s.Name]; !dup {
			x.sites[s.Name] = s
			x.siteIndex[s.Name] = i
		}
		x.first[i] = x.siteIndex[s.Name]
		x.gateways += len(s.Gateways)
		for _, p := range s.Prefixes {
			x.prefixes = append(x.prefixes, sitePrefix{p.Masked(), s.Name, x.siteIndex[s.Name]})
		}
		for gi := range s.Gateways {
			if linkOuterV6(s.Gateways[gi].Endpoint) {
				x.v6[&s.Gateways[gi]] = true
			}
		}
	}
	for i := range f.Topology.Links {
		l := &f.Topology.Links[i]
		if len(l.Between) != 2 {
			continue
		}
		if _, dup := x.links[Pair(l.Between[0], l.Between[1])]; !dup {
			x.links[Pair(l.Between[0], l.Between[1])] = l
		}
	}
	for _, n := range f.Networks {
		if n.Mode != spec.Routed {
			continue
		}
		for _, s := range n.Sites {
			x.routed[s] = append(x.routed[s], n.Name)
		}
	}
	for s, names := range x.routed {
		slices.Sort(names)
		x.routed[s] = slices.Compact(names)
	}
	x.routedAt = make([][]string, len(f.Sites))
	for i := range f.Sites {
		x.routedAt[i] = x.routed[f.Sites[i].Name]
	}
	slices.SortFunc(x.prefixes, func(a, b sitePrefix) int { return comparePrefix(a.p, b.p) })
	x.prefixList = make([]netip.Prefix, len(x.prefixes))
	x.prefixesAt = make([][]int, len(f.Sites))
	for i, sp := range x.prefixes {
		x.prefixList[i] = sp.p
		x.prefixesAt[sp.index] = append(x.prefixesAt[sp.index], i)
	}
	return x
}

// site returns the site called name (spec.Federation.Site).
func (v view) site(name string) (*spec.Site, bool) {
	s, ok := v.idx.sites[name]
	return s, ok
}

// pairEnabled is spec.Federation.LinkEnabled, in O(1), for two distinct
// sites of the spec.
func (v view) pairEnabled(a, b string) bool {
	if v.idx.vias != nil && !spec.ExternalAllows(v.idx.vias, a, b) {
		return false
	}
	if len(v.idx.links) == 0 {
		return true
	}
	if l := v.idx.links[Pair(a, b)]; l != nil {
		return !l.Disabled
	}
	return true
}

// linkCost is spec.Federation.LinkCost in O(1).
func (v view) linkCost(a, b string) int {
	if len(v.idx.links) == 0 {
		return 1
	}
	if l := v.idx.links[Pair(a, b)]; l != nil && l.Cost > 0 {
		return l.Cost
	}
	return 1
}

// sharedRouted returns the names of the routed networks that have both
// sites as members, sorted.
func (v view) sharedRouted(a, b string) []string {
	var out []string
	eachCommon(v.idx.routed[a], v.idx.routed[b], func(n string) bool {
		out = append(out, n)
		return true
	})
	return out
}

// firstShared returns the first name of both sorted lists, "" for none:
// of the routed networks of two sites, the first in name order that has
// both as members.
func firstShared(x, y []string) string {
	first := ""
	eachCommon(x, y, func(n string) bool {
		first = n
		return false
	})
	return first
}

// eachCommon calls f with every name of both sorted lists, in order,
// until f returns false.
func eachCommon(x, y []string, f func(string) bool) {
	for i, j := 0, 0; i < len(x) && j < len(y); {
		switch c := cmp.Compare(x[i], y[j]); {
		case c < 0:
			i++
		case c > 0:
			j++
		default:
			if !f(x[i]) {
				return
			}
			i++
			j++
		}
	}
}

func newView(f *spec.Federation, in Inputs) view {
	v := view{f: f, in: in, active: map[string]*spec.Gateway{}, isUp: map[string]bool{}, idx: newIndex(f)}
	for si := range f.Sites {
		s := &f.Sites[si]
		if _, dup := v.active[s.Name]; dup {
			continue
		}
		var first, named *spec.Gateway
		for gi := range s.Gateways {
			g := &s.Gateways[gi]
			if in.Removed[g.Name] || in.Down[g.Name] {
				continue
			}
			if first == nil {
				first = g
			}
			if g.Name == in.Active[s.Name] {
				named = g
			}
		}
		if named != nil {
			first = named
		}
		if first != nil {
			v.active[s.Name] = first
			v.up = append(v.up, s.Name)
			v.isUp[s.Name] = true
		}
	}
	v.externalsUp()
	slices.Sort(v.up)
	return v
}

// specView is the federation as the spec writes it, whether or not its
// sites have gateways: every site and every enabled link up. NetworkTree
// sees it so.
func specView(f *spec.Federation) view {
	v := newView(f, Inputs{})
	v.up = siteNames(f)
	for _, s := range v.up {
		v.isUp[s] = true
	}
	return v
}

// siteUp reports whether site s is up: it has an active gateway.
func (v view) siteUp(s string) bool { return v.isUp[s] }

// linkUp reports whether the link between sites a and b carries traffic:
// enabled in the spec, not down, and both sites up.
func (v view) linkUp(a, b string) bool {
	return a != b && v.siteUp(a) && v.siteUp(b) && v.pairEnabled(a, b) && (len(v.in.LinksDown) == 0 || !v.in.LinksDown[Pair(a, b)])
}

// isActive reports whether g is the active gateway of its site s.
func (v view) isActive(s string, g *spec.Gateway) bool { return v.active[s] == g }

// backendOf is the tunnel backend of the link between sites a and b
// (spec.Federation.LinkBackend, in O(1)).
func (v view) backendOf(a, b string) backend.Name {
	if v.idx.vias != nil {
		if _, ok := v.idx.vias[a]; ok {
			return backend.IPsec
		}
		if _, ok := v.idx.vias[b]; ok {
			return backend.IPsec
		}
	}
	if l := v.idx.links[Pair(a, b)]; l != nil && l.Backend != "" {
		return l.Backend
	}
	return overlayBackend(v.f)
}

// overlayBackend is the federation's tunnel backend (spec.Parse fills in
// the default; a Federation built by hand may leave it out).
func overlayBackend(f *spec.Federation) backend.Name {
	if f.Overlay.Backend == "" {
		return backend.Default
	}
	return f.Overlay.Backend
}

// Compute returns the plan of every gateway of f, sorted by gateway name.
// f must have passed spec.Parse (defaults filled, validated); Compute
// reports what it cannot plan instead of guessing.
func Compute(f *spec.Federation, in Inputs) ([]Gateway, error) {
	return ComputeOnly(f, in, nil)
}

// job is one gateway to plan, with its site.
type job struct {
	site *spec.Site
	self *spec.Gateway
}

// gatewayJobs lists the gateways of f that get a plan (those in.Removed
// does not name), in spec order.
func gatewayJobs(f *spec.Federation, in Inputs) []job {
	var jobs []job
	for si := range f.Sites {
		for gi := range f.Sites[si].Gateways {
			if !in.Removed[f.Sites[si].Gateways[gi].Name] {
				jobs = append(jobs, job{&f.Sites[si], &f.Sites[si].Gateways[gi]})
			}
		}
	}
	return jobs
}

// inParallel runs fn(0) ... fn(n-1) on every CPU (in one goroutine for
// small n).
func inParallel(n int, fn func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), max(1, n/16)) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				fn(i)
			}
		})
	}
	wg.Wait()
}

// ForGateway returns the plan of the named gateway. The plan of a gateway
// under a failure is ForGateway with the failure in the inputs
// (Inputs.WithGatewayDown, Inputs.WithLinkDown): an agent computes it
// itself, without the manager.
func ForGateway(f *spec.Federation, in Inputs, name string) (Gateway, error) {
	all, err := Compute(f, in)
	if err != nil {
		return Gateway{}, err
	}
	for _, g := range all {
		if g.Name == name {
			return g, nil
		}
	}
	var names []string
	for _, g := range all {
		names = append(names, g.Name)
	}
	return Gateway{}, fmt.Errorf("no gateway %q in federation %q; gateways are %v", name, f.Name, names)
}

func publicKeys(f *spec.Federation, in Inputs) (map[string]Key, error) {
	keys := make(map[string]Key)
	for _, s := range f.Sites {
		for _, g := range s.Gateways {
			if k, ok := in.PublicKeys[g.Name]; ok {
				keys[g.Name] = k
				continue
			}
			if g.PublicKey == "" {
				continue
			}
			k, err := ParseKey(g.PublicKey)
			if err != nil {
				return nil, fmt.Errorf("gateway %s: publicKey: %w", g.Name, err)
			}
			keys[g.Name] = k
		}
	}
	return keys, nil
}

// planArgs are what gatewayPlan needs: the federation seen under the
// inputs, the keys, the relay plan and the relay links' numbers, and the
// gateway to plan with its site.
type planArgs struct {
	v    view
	keys map[string]Key
	rt   routing
	site *spec.Site
	self *spec.Gateway
	// partial limits the peers, routes and flows to those of the remote
	// sites only lists (by index in f.Sites, in order; none: no entries),
	// for Update; the rest of the plan is whole.
	partial bool
	only    []int
	// remotePrefixes, when not nil, is the plan's Firewall.Remote, known
	// to be what view.remotePrefixes would make (Update: the plan
	// before's, when no site's prefixes changed).
	remotePrefixes []netip.Prefix
}

// remotes yields the indexes in f.Sites of the remote sites the plan
// covers: every one, or those only lists (without a walk of every site:
// Update plans a thousand gateways for a site or two).
func (a planArgs) remotes() iter.Seq[int] {
	return func(yield func(int) bool) {
		if a.partial {
			for _, ri := range a.only {
				if !yield(ri) {
					return
				}
			}
			return
		}
		for ri := range a.v.f.Sites {
			if !yield(ri) {
				return
			}
		}
	}
}

func gatewayPlan(a planArgs) (g Gateway, err error) {
	f, site, self := a.v.f, a.site, a.self
	if !self.TransitAddress.IsValid() {
		return Gateway{}, fmt.Errorf("gateway %s has no transit address; was the spec parsed with spec.Parse?", self.Name)
	}
	ov := f.Overlay
	g = Gateway{
		Version:    Version,
		Federation: f.Name,
		Name:       self.Name,
		Site:       site.Name,
		Peers:      []Peer{},
		Routes:     []Route{},
		Firewall: Firewall{
			Table:   Table,
			Local:   sortedPrefixes(site.Prefixes),
			Remote:  a.remotePrefixes,
			Transit: ov.Transit.Masked(),
			Flows:   []Flow{},
		},
		Bounds: Bounds{Supernet: ov.Supernet.Masked(), Transit: ov.Transit.Masked()},
	}
	if g.Firewall.Remote == nil {
		g.Firewall.Remote = a.v.remotePrefixes(site.Name)
	}
	g.LAN = LAN{Address: onSegment(site, self.LANAddress), Virtual: onSegment(site, site.VirtualAddress), Active: a.v.isActive(site.Name, self)}
	if !g.LAN.Virtual.IsValid() && len(site.Gateways) == 1 {
		g.LAN.Virtual = g.LAN.Address
	}
	for _, port := range self.BridgePorts {
		g.Bounds.Ports = append(g.Bounds.Ports, port)
	}
	slices.Sort(g.Bounds.Ports)
	g.Bounds.Ports = slices.Compact(g.Bounds.Ports)

	// The tunnels: one per backend of the gateway's links, and the
	// federation's backend even without links, so the gateway has its
	// transit address.
	backends := []backend.Name{overlayBackend(f)}
	for ri := range f.Sites {
		if len(a.v.idx.links) == 0 && a.v.idx.vias == nil {
			break // every link is of the federation's backend (backendOf)
		}
		if remote := &f.Sites[ri]; remote.Name != site.Name && a.v.pairEnabled(site.Name, remote.Name) {
			if b := a.v.backendOf(site.Name, remote.Name); !slices.Contains(backends, b) {
				backends = append(backends, b)
			}
		}
	}
	backends = tunnelOrder(backends)
	for i, b := range backends {
		info, ok := backend.Lookup(b)
		if !ok {
			return Gateway{}, fmt.Errorf("gateway %s: tunnel backend %q is not known to this fednet (known: %s)", self.Name, b, backend.List())
		}
		t := tunnelOf(ov, info)
		t.Address = netip.PrefixFrom(self.TransitAddress, ov.Transit.Bits())
		if i > 0 {
			if prev := slices.IndexFunc(g.Tunnels, func(x Tunnel) bool { return x.Name == t.Name }); prev >= 0 {
				return Gateway{}, fmt.Errorf("gateway %s: the tunnels of backends %s and %s would both be interface %s; set overlay.interface to another name", self.Name, g.Tunnels[prev].Backend, b, t.Name)
			}
			// Only the first tunnel holds the transit prefix; the others
			// hold the address alone and route their peers' (below).
			t.Address = netip.PrefixFrom(self.TransitAddress, self.TransitAddress.BitLen())
		}
		t.MTU, t.MTUReason = tunnelMTUOf(a.v, site, self, b)
		g.Firewall.Public = append(g.Firewall.Public, info.Public(t.ListenPort)...)
		// The UDP-blocked fallback carries WireGuard's packets in a TLS
		// stream; TCP segments the stream, so it does not lower the MTU.
		if port := ov.TCPFallbackPort(); port != 0 && b == backend.WireGuard {
			t.FallbackPort = port
			g.Firewall.Public = append(g.Firewall.Public, backend.Port{Protocol: backend.TCP, Port: port})
		}
		g.Tunnels = append(g.Tunnels, t)
		g.Firewall.Tunnels = append(g.Firewall.Tunnels, t.Name)
	}
	slices.Sort(g.Firewall.Tunnels)
	slices.SortFunc(g.Firewall.Public, func(x, y backend.Port) int {
		if c := cmp.Compare(x.Protocol, y.Protocol); c != 0 {
			return c
		}
		return cmp.Compare(x.Port, y.Port)
	})
	device := func(b backend.Name) string {
		t, _ := g.Tunnel(b)
		return t.Name
	}

	// Each destination site's prefixes go to the active gateway of the next
	// site on the way (the site itself when the link is direct): a tunnel
	// routes each prefix to exactly one peer. The other gateways of a site
	// carry their transit address only, so their tunnels stay up and a
	// failover moves the prefixes alone.
	// A plan computed for a few remote sites (Update) reads what it routes
	// by each of them alone (viaOne), rather than by every site.
	var via [][]netip.Prefix
	if !a.partial || a.v.idx.vias != nil {
		via = a.rt.via(a.v, site.Name)
	}
	routedBy := func(ri int) []netip.Prefix {
		if via != nil || !a.partial {
			if via == nil {
				return nil
			}
			return via[a.v.idx.first[ri]]
		}
		return a.rt.viaOne(a.v, site.Name, a.v.idx.first[ri])
	}
	if !a.partial {
		g.Peers = make([]Peer, 0, a.v.idx.gateways)
		g.Routes = make([]Route, 0, len(a.v.idx.prefixes))
	}
	// The peers' allowed IPs share one array (each capped at its length,
	// so that appending to one never writes into the next).
	var ips []netip.Prefix
	if !a.partial {
		ips = make([]netip.Prefix, 0, a.v.idx.gateways+len(a.v.idx.prefixes))
	}
	for ri := range a.remotes() {
		remote := &f.Sites[ri]
		if remote.Name == site.Name || !a.v.pairEnabled(site.Name, remote.Name) {
			continue
		}
		b := a.v.backendOf(site.Name, remote.Name)
		if remote.External != nil {
			if p, ok := externalPeer(a, remote, via, ri); ok {
				for _, pfx := range p.AllowedIPs {
					g.Routes = append(g.Routes, Route{Destination: pfx, Device: device(b), Via: p.Gateway})
				}
				g.Peers = append(g.Peers, p)
			}
			continue
		}
		for hi := range remote.Gateways {
			h := &remote.Gateways[hi]
			if a.v.in.Removed[h.Name] {
				continue
			}
			start := len(ips)
			ips = append(ips, netip.PrefixFrom(h.TransitAddress, h.TransitAddress.BitLen()))
			p := Peer{
				Gateway:  h.Name,
				Site:     remote.Name,
				Backend:  b,
				Endpoint: h.Endpoint,
			}
			switch b {
			case backend.WireGuard:
				p.WireGuard.PublicKey = a.keys[h.Name]
				if self.BehindNAT || h.BehindNAT {
					p.WireGuard.PersistentKeepalive = KeepaliveNAT
				}
			case backend.IPsec:
				p.IPsec = ipsecPeer(f, self, h)
			}
			if b != backends[0] {
				// The transit prefix is on-link through the first tunnel;
				// a peer on another backend is reached through its own.
				g.Routes = append(g.Routes, Route{Destination: ips[start], Device: device(b), Via: h.Name})
			}
			if a.v.isActive(remote.Name, h) {
				for _, pfx := range sortedPrefixes(routedBy(ri)) {
					ips = append(ips, pfx)
					g.Routes = append(g.Routes, Route{Destination: pfx, Device: device(b), Via: h.Name})
				}
			}
			p.AllowedIPs = ips[start:len(ips):len(ips)]
			slices.SortFunc(p.AllowedIPs, comparePrefix)
			g.Peers = append(g.Peers, p)
		}
	}

	if a.partial {
		g.Firewall.Flows = flowsOnly(a.v, a.rt, site, a.only)
	} else {
		g.Firewall.Flows = flows(a.v, a.rt, site)
	}
	slices.SortFunc(g.Peers, func(a, b Peer) int { return cmp.Compare(a.Gateway, b.Gateway) })
	slices.SortFunc(g.Routes, func(a, b Route) int { return comparePrefix(a.Destination, b.Destination) })
	g.Forwarding = len(g.Routes) > 0

	mtu := 0
	for _, t := range g.Tunnels {
		if mtu == 0 || t.MTU < mtu {
			mtu = t.MTU
		}
	}
	g.Firewall.MSS = mtu - ipv4Header - tcpHeader
	if a.v.isActive(site.Name, self) {
		g.Bridges, err = bridges(a.v, site)
		if err != nil {
			return Gateway{}, err
		}
		addNeighbors(a.v, site, &g)
	}
	g.Firewall.TunnelPorts = tunnelPorts(g.Bridges)
	g.Firewall.Admit = admissions(f.PublicAllowOf(self))
	return g, nil
}

// flows are the forwarded flows of a gateway of site: between the site and
// every site it routes and shares a routed network with, and between the
// pairs it relays for; sorted by source then destination. A pair of
// prefixes that several networks allow is listed once, with the network
// that sorts first. They are made in that order, walking the prefixes of
// every site in order, rather than sorted afterwards: a gateway of a large
// federation has thousands.
func flows(v view, rt routing, site *spec.Site) []Flow {
	f := v.f
	self, ok := rt.pos[site.Name]
	if !ok {
		self = -1
	}
	me := v.idx.siteIndex[site.Name]
	// net[i] is the network of flows between site and f.Sites[i] (the
	// first of those they share), "" for none.
	net := make([]string, len(f.Sites))
	mine := v.idx.routed[site.Name]
	for ti := range f.Sites {
		if v.idx.first[ti] == me || !rt.routes(self, ti) {
			continue
		}
		net[ti] = firstShared(mine, v.idx.routedAt[ti])
	}
	type relay struct {
		to  int
		net string
	}
	relays := map[int][]relay{} // by the source site's index
	for _, p := range rt.relayed[site.Name] {
		relays[v.idx.siteIndex[p.from]] = append(relays[v.idx.siteIndex[p.from]], relay{v.idx.siteIndex[p.to], slices.Min(p.networks)})
	}
	own := make([]netip.Prefix, 0, len(v.idx.prefixesAt[me]))
	for _, at := range v.idx.prefixesAt[me] {
		own = append(own, v.idx.prefixList[at])
	}
	out := make([]Flow, 0, 2*len(v.idx.prefixes))
	var buf []Flow
	for _, src := range v.idx.prefixes {
		si := src.index
		if si == me {
			for _, dst := range v.idx.prefixes {
				if n := net[dst.index]; n != "" {
					out = append(out, Flow{Network: n, Source: src.p, Destination: dst.p})
				}
			}
			continue
		}
		buf = buf[:0]
		if n := net[si]; n != "" {
			for _, dst := range own {
				buf = append(buf, Flow{Network: n, Source: src.p, Destination: dst})
			}
		}
		for _, r := range relays[si] {
			for _, dst := range f.Sites[r.to].Prefixes {
				buf = append(buf, Flow{Network: r.net, Source: src.p, Destination: dst.Masked()})
			}
		}
		if len(buf) > 1 {
			slices.SortFunc(buf, compareFlow)
		}
		out = append(out, buf...)
	}
	return sortedFlows(out)
}

// flowsOnly are flows with the remote sites of the indexes in f.Sites
// that only lists alone, in a federation where no pair is relayed (Update
// plans so only then): the same entries as flows makes with those sites,
// found from their prefixes alone rather than a walk of every site's.
func flowsOnly(v view, rt routing, site *spec.Site, only []int) []Flow {
	self, ok := rt.pos[site.Name]
	if !ok {
		self = -1
	}
	me := v.idx.siteIndex[site.Name]
	mine := v.idx.routed[site.Name]
	net := make(map[int]string, len(only)) // as in flows, for the sites of only
	at := slices.Clone(v.idx.prefixesAt[me])
	for _, ti := range only {
		if v.idx.first[ti] == me || !rt.routes(self, ti) {
			continue
		}
		if n := firstShared(mine, v.idx.routedAt[ti]); n != "" {
			net[ti] = n
			at = append(at, v.idx.prefixesAt[ti]...)
		}
	}
	// The prefixes of the site and of those sites, in the order flows
	// walks them.
	slices.Sort(at)
	at = slices.Compact(at)
	var out []Flow
	for _, i := range at {
		src := v.idx.prefixes[i]
		if src.index == me {
			for _, j := range at {
				if n, ok := net[v.idx.prefixes[j].index]; ok {
					out = append(out, Flow{Network: n, Source: src.p, Destination: v.idx.prefixList[j]})
				}
			}
			continue
		}
		if n, ok := net[src.index]; ok {
			for _, j := range v.idx.prefixesAt[me] {
				out = append(out, Flow{Network: n, Source: src.p, Destination: v.idx.prefixList[j]})
			}
		}
	}
	return sortedFlows(out)
}

// sortedFlows returns out sorted, each pair of prefixes once. Prefixes
// shared between sites (which validation refuses) could leave the order
// of the walk unfinished; it is sorted then, so the result never depends
// on the walk.
func sortedFlows(out []Flow) []Flow {
	if !slices.IsSortedFunc(out, compareFlow) {
		slices.SortFunc(out, compareFlow)
	}
	return slices.CompactFunc(out, func(a, b Flow) bool { return a.Source == b.Source && a.Destination == b.Destination })
}

// compareFlow orders flows by source, destination, then network.
func compareFlow(a, b Flow) int {
	if c := comparePrefix(a.Source, b.Source); c != 0 {
		return c
	}
	if c := comparePrefix(a.Destination, b.Destination); c != 0 {
		return c
	}
	return cmp.Compare(a.Network, b.Network)
}

// admissions are a gateway's public-side admissions from the spec's, in
// spec order; nil when there are none.
func admissions(list []spec.Admission) []Admission {
	var out []Admission
	for _, a := range list {
		proto := backend.TCP
		if a.Protocol == spec.AdmitUDP {
			proto = backend.UDP
		}
		out = append(out, Admission{Protocol: proto, Port: a.Port, Sources: sortedPrefixes(a.Sources)})
	}
	return out
}

// onSegment is a with the prefix length of the prefix of site s that holds
// it, or the invalid prefix.
func onSegment(s *spec.Site, a netip.Addr) netip.Prefix {
	for _, p := range s.Prefixes {
		if a.IsValid() && p.Contains(a) {
			return netip.PrefixFrom(a, p.Bits())
		}
	}
	return netip.Prefix{}
}

// tunnelPorts are the UDP ports of the VXLAN ports to other gateways,
// sorted. A Linux VXLAN device listens on every address of the machine, so
// without a rule a machine on the site's LAN could send frames into a
// bridged network; these ports take packets from the tunnels only.
func tunnelPorts(bridges []Bridge) []int {
	var ports []int
	for _, b := range bridges {
		for _, v := range b.VXLANs {
			if v.Kind == ToGateways {
				ports = append(ports, v.UDPPort)
			}
		}
	}
	slices.Sort(ports)
	return slices.Compact(ports)
}

// VXLANPort is the UDP port of the bridged networks' VXLAN (IANA's).
const VXLANPort = 4789

// RelayPortBase plus a relay tree link's number (edgeColors) is the UDP
// port of the VXLAN devices on that link.
// Neighbor tunnels use the ports below it (NeighborPortBase...).
const RelayPortBase = NeighborPortBase + MaxNeighborSlots

// maxRelayPorts bounds the relay tree link numbers, and with them the
// ports RelayPortBase... and the two digits of a device name's suffix.
const maxRelayPorts = 100

// bridges returns the bridges of the active gateway of site, one per
// bridged network the site is a member of or relays for, sorted by VNI.
// Only active gateways join bridged networks, as only they carry routed
// prefixes.
//
// When every two member sites have a link that is up, the bridge has one
// VXLAN port that replicates frames to the active gateway of every other
// member. Else the frames follow the network's relay tree (over the links
// that are up): one port per tree neighbor, on the port of that tree link,
// and the Linux bridge forwards between them (it never sends a frame back
// out of the port it came in by, and a tree has no loop, so no frame is
// seen twice). Every gateway of a network gets the same MTU, from the
// smallest tunnel MTU among the sites that carry it: an Ethernet segment
// needs one MTU.
func bridges(v view, site *spec.Site) ([]Bridge, error) {
	self := v.active[site.Name]
	var out []Bridge
	for _, n := range v.f.Networks {
		if n.Mode != spec.Bridged {
			continue
		}
		net := v.bridgeNetwork(n)
		var tunnels []VXLAN
		relay := false
		carried := net
		if net.mesh {
			if !net.isMember[site.Name] {
				continue
			}
			x := VXLAN{Name: fmt.Sprintf("fvx%d", n.ID), Kind: ToGateways, Local: self.TransitAddress, UDPPort: VXLANPort, Remotes: make([]netip.Addr, 0, len(net.remotes)), To: "members"}
			for _, r := range net.remotes {
				if r.site != site.Name {
					x.Remotes = append(x.Remotes, r.addr)
				}
			}
			tunnels = append(tunnels, x)
		} else {
			part, err := v.bridgePart(n, net, site.Name)
			if err != nil {
				return nil, err
			}
			t := part.tree
			if !slices.Contains(t.Members, site.Name) && !slices.Contains(t.Relays, site.Name) {
				continue
			}
			relay = !slices.Contains(t.Members, site.Name)
			carried = part
			for _, e := range t.Edges {
				if e.A != site.Name && e.B != site.Name {
					continue
				}
				nb := other(e, site.Name)
				c := v.colors()[Edge{A: e.A, B: e.B}]
				if c >= maxRelayPorts {
					return nil, fmt.Errorf("network %s: site %s has more than %d relay tree links; fednet numbers at most %d per site", n.Name, site.Name, maxRelayPorts, maxRelayPorts)
				}
				tunnels = append(tunnels, VXLAN{
					Name: fmt.Sprintf("fvx%d-%d", n.ID, c), Kind: ToGateways, Local: self.TransitAddress, UDPPort: RelayPortBase + c,
					Remotes: []netip.Addr{v.active[nb].TransitAddress}, To: nb,
				})
			}
			slices.SortFunc(tunnels, func(a, b VXLAN) int { return cmp.Compare(a.Name, b.Name) })
		}
		b := Bridge{
			Network: n.Name,
			VNI:     n.ID,
			Name:    fmt.Sprintf("fbr%d", n.ID),
			Relay:   relay,
			VXLANs:  tunnels,
		}
		if !relay {
			b.Port = self.BridgePorts[n.Name]
		}
		b.MTU, b.MTUReason = carried.mtu, carried.mtuReason
		out = append(out, b)
	}
	slices.SortFunc(out, func(a, b Bridge) int { return cmp.Compare(a.VNI, b.VNI) })
	return out, nil
}

// bridgeKey names a bridged network, or one part of it (the sites one
// site reaches over links that are up: its root in the spanning forest).
type bridgeKey struct{ network, part string }

// bridgeNet is what every gateway's bridge of one bridged network shares,
// computed once per Compute: the members that are up, whether every two
// of them have a link that is up (mesh), in a mesh the members' active
// transit addresses, and otherwise (per part) the relay tree; and the MTU
// of the sites that carry it.
type bridgeNet struct {
	members  []string // up, in spec order
	isMember map[string]bool
	mesh     bool
	remotes  []siteAddr // mesh: every member's active transit address, sorted
	tree     Tree       // a part of a network that is not a mesh

	mtu       int
	mtuReason string
}

// siteAddr is the transit address of a site's active gateway.
type siteAddr struct {
	addr netip.Addr
	site string
}

// bridgeNetwork returns what the bridges of network n share.
func (v view) bridgeNetwork(n spec.Network) bridgeNet {
	// Made once per planning (the gateways planned at once wait for it):
	// at 1000 sites it is a million link and MTU checks.
	return v.idx.once(bridgeKey{network: n.Name}, func() bridgeNet { return v.newBridgeNetwork(n) })
}

// newBridgeNetwork computes bridgeNetwork(n).
func (v view) newBridgeNetwork(n spec.Network) bridgeNet {
	inSpec := map[string]bool{}
	for _, s := range n.Sites {
		inSpec[s] = true
	}
	b := bridgeNet{isMember: map[string]bool{}, mesh: true}
	for _, s := range v.f.Sites {
		if inSpec[s.Name] && v.siteUp(s.Name) {
			b.members = append(b.members, s.Name)
			b.isMember[s.Name] = true
		}
	}
	b.mesh = v.meshOf(b.members, b.isMember)
	if b.mesh {
		for _, m := range b.members {
			b.remotes = append(b.remotes, siteAddr{v.active[m].TransitAddress, m})
		}
		slices.SortFunc(b.remotes, func(x, y siteAddr) int { return x.addr.Compare(y.addr) })
		b.mtu, b.mtuReason = v.bridgeMTU(b.isMember, b.isMember)
	}
	return b
}

// meshOf reports whether every two of members (sites that are up, the
// keys of isMember) have a link that is up. Without external sites,
// every two sites have an enabled link but where the spec disables one,
// and it is up but where the inputs say it is down: then only those links
// are looked at, and a thousand members cost no half a million checks.
func (v view) meshOf(members []string, isMember map[string]bool) bool {
	if v.idx.vias != nil {
		return v.meshChecked(members)
	}
	// between reports whether p is a link (as Pair names it) between two
	// members, which linkUp would be asked of.
	between := func(p SitePair) bool {
		return p == Pair(p.A, p.B) && p.A != p.B && isMember[p.A] && isMember[p.B]
	}
	for p, l := range v.idx.links {
		if l.Disabled && between(p) {
			return false
		}
	}
	for p, down := range v.in.LinksDown {
		if down && between(p) {
			return false
		}
	}
	return true
}

// meshChecked is meshOf asking linkUp of every two members.
func (v view) meshChecked(members []string) bool {
	for i, x := range members {
		for _, y := range members[i+1:] {
			if !v.linkUp(x, y) {
				return false
			}
		}
	}
	return true
}

// bridgeOnce is the bridgeNet of one key, made once.
type bridgeOnce struct {
	once sync.Once
	made atomic.Bool // b is set
	b    bridgeNet
}

// once returns the bridgeNet of key, made by build the first time it is
// asked for (a second caller meanwhile waits for it).
func (x *index) once(key bridgeKey, build func() bridgeNet) bridgeNet {
	x.mu.Lock()
	e, ok := x.bridgeNet[key]
	if !ok {
		e = &bridgeOnce{}
		x.bridgeNet[key] = e
	}
	x.mu.Unlock()
	e.once.Do(func() {
		e.b = build()
		e.made.Store(true)
	})
	return e.b
}

// cached returns the bridgeNet of key, made before.
func (x *index) cached(key bridgeKey) (bridgeNet, bool) {
	x.mu.Lock()
	e, ok := x.bridgeNet[key]
	x.mu.Unlock()
	if !ok || !e.made.Load() {
		return bridgeNet{}, false
	}
	return e.b, true
}

// cache keeps the bridgeNet of key, unless one is kept already (two
// goroutines may compute the same one; both get the same value).
func (x *index) cache(key bridgeKey, b bridgeNet) {
	x.once(key, func() bridgeNet { return b })
}

// bridgePart returns the relay tree of the part of network n (not a mesh)
// that site reaches, with the MTU of the sites it carries.
func (v view) bridgePart(n spec.Network, net bridgeNet, site string) (bridgeNet, error) {
	key := bridgeKey{network: n.Name, part: v.spanning().root(site)}
	if b, ok := v.idx.cached(key); ok {
		return b, nil
	}
	t, err := networkTree(v, n.Name, site)
	if err != nil {
		return bridgeNet{}, err
	}
	b := net
	b.tree = t
	carriers := map[string]bool{}
	for _, s := range t.Members {
		carriers[s] = true
	}
	for _, s := range t.Relays {
		carriers[s] = true
	}
	b.mtu, b.mtuReason = v.bridgeMTU(carriers, net.isMember)
	v.idx.cache(key, b)
	return b, nil
}

// bridgeMTU is the MTU of a bridged network carried by the sites carriers
// with the member segments of members: every gateway of a network gets the
// same MTU, from the smallest tunnel MTU among the sites that carry it (an
// Ethernet segment needs one MTU).
func (v view) bridgeMTU(carriers, members map[string]bool) (int, string) {
	tunnel := 0
	var segs []Segment
	for ti := range v.f.Sites {
		s := &v.f.Sites[ti]
		if !carriers[s.Name] || !v.siteUp(s.Name) {
			continue
		}
		if members[s.Name] {
			segs = append(segs, Segment{Site: s.Name, Neighbors: neighborFamily(v, s)})
		}
		if mtu := minTunnelMTU(v, s, v.active[s.Name]); tunnel == 0 || mtu < tunnel {
			tunnel = mtu
		}
	}
	return NetworkMTU(tunnel, MTUInputs{Bridged: true, Segments: segs})
}

// minTunnelMTU is the smallest MTU among the tunnels of gateway self of
// site s.
func minTunnelMTU(v view, s *spec.Site, self *spec.Gateway) int {
	mtu := 0
	seen := map[backend.Name]bool{overlayBackend(v.f): true}
	for ri := range v.f.Sites {
		if len(v.idx.links) == 0 && v.idx.vias == nil {
			break // every link is of the federation's backend (backendOf)
		}
		if r := &v.f.Sites[ri]; r.Name != s.Name && v.pairEnabled(s.Name, r.Name) {
			seen[v.backendOf(s.Name, r.Name)] = true
		}
	}
	for b := range seen {
		if m, _ := tunnelMTUOf(v, s, self, b); mtu == 0 || m < mtu {
			mtu = m
		}
	}
	return mtu
}

// tunnelMTUOf is the MTU of gateway self's tunnel of backend b: the
// underlay less the backend's encapsulation with the outer header of its
// worst link (IPv6 if any enabled link of that backend to a gateway not
// removed may run over IPv6).
func tunnelMTUOf(v view, s *spec.Site, self *spec.Gateway, b backend.Name) (int, string) {
	selfV6 := linkOuterV6(self.Endpoint)
	outerV6 := false
	for ri := range v.f.Sites {
		if !selfV6 && len(v.idx.v6) == 0 {
			break // no link of IPv4 ends may be carried over IPv6
		}
		remote := &v.f.Sites[ri]
		if remote.Name == s.Name || !v.pairEnabled(s.Name, remote.Name) || v.backendOf(s.Name, remote.Name) != b {
			continue
		}
		for hi := range remote.Gateways {
			h := &remote.Gateways[hi]
			if !v.in.Removed[h.Name] && (selfV6 || v.idx.v6[h]) {
				outerV6 = true
			}
		}
	}
	info, _ := backend.Lookup(b)
	return tunnelMTU(v.f.Overlay.UnderlayMTU, outerV6, info)
}

// tunnelMTU is the largest inner packet that fits the underlay after the
// backend's encapsulation, with the outer header of the worst link.
func tunnelMTU(underlay int, outerV6 bool, b backend.Info) (int, string) {
	outer, fam := ipv4Header, "IPv4"
	if outerV6 {
		outer, fam = ipv6Header, "IPv6"
	}
	mtu := underlay - outer - b.Bytes()
	why := fmt.Sprintf("underlay %d - outer %s %d", underlay, fam, outer)
	for _, t := range b.Overhead {
		why += fmt.Sprintf(" - %s %d", t.Label, t.Bytes)
	}
	return mtu, fmt.Sprintf("%s = %d", why, mtu)
}

// linkOuterV6 reports whether a link may be carried over IPv6: the outer
// family is that of the endpoint a side dials; a name that is not an IP
// literal might resolve to IPv6, so it counts as IPv6.
func linkOuterV6(endpoints ...string) bool {
	for _, ep := range endpoints {
		if ep == "" {
			continue
		}
		ap, err := netip.ParseAddrPort(ep)
		if err != nil || !ap.Addr().Unmap().Is4() {
			return true
		}
	}
	return false
}

// remotePrefixes returns the prefixes of every site but the named one,
// sorted.
func (v view) remotePrefixes(site string) []netip.Prefix {
	all := v.idx.prefixList
	i, ok := v.idx.siteIndex[site]
	if !ok {
		return slices.Clone(all)
	}
	// The runs of the sorted list between the site's own prefixes,
	// copied whole.
	out := make([]netip.Prefix, 0, len(all)-len(v.idx.prefixesAt[i]))
	from := 0
	for _, at := range v.idx.prefixesAt[i] {
		out = append(out, all[from:at]...)
		from = at + 1
	}
	return append(out, all[from:]...)
}

// sitePrefix is a masked prefix of a site (its index in the spec's
// sites: the first of that name).
type sitePrefix struct {
	p     netip.Prefix
	site  string
	index int
}

func sortedPrefixes(in []netip.Prefix) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(in))
	for _, p := range in {
		out = append(out, p.Masked())
	}
	slices.SortFunc(out, comparePrefix)
	return out
}

func comparePrefix(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return cmp.Compare(a.Bits(), b.Bits())
}
