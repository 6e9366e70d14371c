package plan

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"

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
}

func newView(f *spec.Federation, in Inputs) view {
	v := view{f: f, in: in, active: map[string]*spec.Gateway{}, isUp: map[string]bool{}}
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
	return a != b && v.siteUp(a) && v.siteUp(b) && v.f.LinkEnabled(a, b) && !v.in.LinksDown[Pair(a, b)]
}

// isActive reports whether g is the active gateway of its site s.
func (v view) isActive(s string, g *spec.Gateway) bool { return v.active[s] == g }

// backendOf is the tunnel backend of the link between sites a and b.
func (v view) backendOf(a, b string) backend.Name { return overlayBackend(v.f) }

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
	keys, err := publicKeys(f, in)
	if err != nil {
		return nil, err
	}
	v := newView(f, in)
	rt := computeRouting(v)
	colors := edgeColors(v)
	var out []Gateway
	for si := range f.Sites {
		for gi := range f.Sites[si].Gateways {
			if in.Removed[f.Sites[si].Gateways[gi].Name] {
				continue
			}
			g, err := gatewayPlan(planArgs{v: v, keys: keys, rt: rt, colors: colors, site: &f.Sites[si], self: &f.Sites[si].Gateways[gi]})
			if err != nil {
				return nil, err
			}
			out = append(out, g)
		}
	}
	slices.SortFunc(out, func(a, b Gateway) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
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
	v      view
	keys   map[string]Key
	rt     routing
	colors map[Edge]int
	site   *spec.Site
	self   *spec.Gateway
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
			Remote:  remotePrefixes(f, site.Name),
			Transit: ov.Transit.Masked(),
			Flows:   []Flow{},
		},
		Bounds: Bounds{Supernet: ov.Supernet.Masked(), Transit: ov.Transit.Masked()},
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
	for _, remote := range f.Sites {
		if remote.Name != site.Name && f.LinkEnabled(site.Name, remote.Name) {
			backends = append(backends, a.v.backendOf(site.Name, remote.Name))
		}
	}
	slices.Sort(backends)
	backends = slices.Compact(backends)
	for i, b := range backends {
		info, ok := backend.Lookup(b)
		if !ok {
			return Gateway{}, fmt.Errorf("gateway %s: tunnel backend %q is not known to this fednet (known: %s)", self.Name, b, backend.List())
		}
		t := Tunnel{Backend: b, Name: ov.Interface, ListenPort: ov.ListenPort}
		if i > 0 {
			return Gateway{}, fmt.Errorf("gateway %s: links of backends %s and %s: one backend per gateway is supported", self.Name, backends[0], b)
		}
		t.Address = netip.PrefixFrom(self.TransitAddress, ov.Transit.Bits())
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
	via := map[string][]netip.Prefix{}
	for dst, next := range a.rt.next[site.Name] {
		if d, ok := f.Site(dst); ok {
			via[next] = append(via[next], d.Prefixes...)
		}
	}
	for ri := range f.Sites {
		remote := &f.Sites[ri]
		if remote.Name == site.Name || !f.LinkEnabled(site.Name, remote.Name) {
			continue
		}
		b := a.v.backendOf(site.Name, remote.Name)
		for hi := range remote.Gateways {
			h := &remote.Gateways[hi]
			if a.v.in.Removed[h.Name] {
				continue
			}
			p := Peer{
				Gateway:    h.Name,
				Site:       remote.Name,
				Backend:    b,
				Endpoint:   h.Endpoint,
				AllowedIPs: []netip.Prefix{netip.PrefixFrom(h.TransitAddress, h.TransitAddress.BitLen())},
			}
			if b == backend.WireGuard {
				p.WireGuard.PublicKey = a.keys[h.Name]
				if self.BehindNAT || h.BehindNAT {
					p.WireGuard.PersistentKeepalive = KeepaliveNAT
				}
			}
			if a.v.isActive(remote.Name, h) {
				for _, pfx := range sortedPrefixes(via[remote.Name]) {
					p.AllowedIPs = append(p.AllowedIPs, pfx)
					g.Routes = append(g.Routes, Route{Destination: pfx, Device: device(b), Via: h.Name})
				}
			}
			slices.SortFunc(p.AllowedIPs, comparePrefix)
			g.Peers = append(g.Peers, p)
		}
	}

	// Forwarded flows: between the site and every site it shares a routed
	// network with, and between the pairs it relays for.
	flows := map[[2]netip.Prefix]string{}
	allow := func(from, to *spec.Site, networks []string) {
		for _, src := range from.Prefixes {
			for _, dst := range to.Prefixes {
				for _, n := range networks {
					addFlow(flows, src.Masked(), dst.Masked(), n)
				}
			}
		}
	}
	for ti := range f.Sites {
		remote := &f.Sites[ti]
		if _, routed := a.rt.next[site.Name][remote.Name]; remote.Name == site.Name || !routed {
			continue
		}
		if shared := sharedRoutedNetworks(f, site.Name, remote.Name); len(shared) > 0 {
			allow(site, remote, shared)
			allow(remote, site, shared)
		}
	}
	for _, p := range a.rt.relayed[site.Name] {
		from, _ := f.Site(p.from)
		to, _ := f.Site(p.to)
		allow(from, to, p.networks)
	}
	slices.SortFunc(g.Peers, func(a, b Peer) int { return cmp.Compare(a.Gateway, b.Gateway) })
	slices.SortFunc(g.Routes, func(a, b Route) int { return comparePrefix(a.Destination, b.Destination) })
	for pair, n := range flows {
		g.Firewall.Flows = append(g.Firewall.Flows, Flow{Network: n, Source: pair[0], Destination: pair[1]})
	}
	slices.SortFunc(g.Firewall.Flows, func(a, b Flow) int {
		if c := comparePrefix(a.Source, b.Source); c != 0 {
			return c
		}
		return comparePrefix(a.Destination, b.Destination)
	})
	g.Forwarding = len(g.Routes) > 0

	mtu := 0
	for _, t := range g.Tunnels {
		if mtu == 0 || t.MTU < mtu {
			mtu = t.MTU
		}
	}
	g.Firewall.MSS = mtu - ipv4Header - tcpHeader
	if a.v.isActive(site.Name, self) {
		g.Bridges, err = bridges(a.v, a.colors, site)
		if err != nil {
			return Gateway{}, err
		}
		addNeighbors(a.v, site, &g)
	}
	g.Firewall.TunnelPorts = tunnelPorts(g.Bridges)
	g.Firewall.Admit = admissions(f.PublicAllowOf(self))
	return g, nil
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
func bridges(v view, colors map[Edge]int, site *spec.Site) ([]Bridge, error) {
	f := v.f
	self := v.active[site.Name]
	var out []Bridge
	for _, n := range f.Networks {
		if n.Mode != spec.Bridged {
			continue
		}
		var members []string
		for _, s := range f.Sites {
			if slices.Contains(n.Sites, s.Name) && v.siteUp(s.Name) {
				members = append(members, s.Name)
			}
		}
		mesh := true
		for i, a := range members {
			for _, b := range members[i+1:] {
				mesh = mesh && v.linkUp(a, b)
			}
		}
		var carriers []string // the sites whose tunnel MTU bounds the network's
		var tunnels []VXLAN
		relay := false
		if mesh {
			if !slices.Contains(members, site.Name) {
				continue
			}
			carriers = members
			x := VXLAN{Name: fmt.Sprintf("fvx%d", n.ID), Kind: ToGateways, Local: self.TransitAddress, UDPPort: VXLANPort, Remotes: []netip.Addr{}, To: "members"}
			for _, m := range members {
				if m != site.Name {
					x.Remotes = append(x.Remotes, v.active[m].TransitAddress)
				}
			}
			slices.SortFunc(x.Remotes, netip.Addr.Compare)
			tunnels = append(tunnels, x)
		} else {
			t, err := networkTree(v, n.Name, site.Name)
			if err != nil {
				return nil, err
			}
			if !slices.Contains(t.Members, site.Name) && !slices.Contains(t.Relays, site.Name) {
				continue
			}
			relay = !slices.Contains(t.Members, site.Name)
			carriers = append(slices.Clone(t.Members), t.Relays...)
			for _, e := range t.Edges {
				if e.A != site.Name && e.B != site.Name {
					continue
				}
				nb := other(e, site.Name)
				c := colors[Edge{A: e.A, B: e.B}]
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
		tunnel := 0
		var segs []Segment
		for ti := range f.Sites {
			s := &f.Sites[ti]
			if !slices.Contains(carriers, s.Name) || !v.siteUp(s.Name) {
				continue
			}
			if slices.Contains(members, s.Name) {
				segs = append(segs, Segment{Site: s.Name, Neighbors: neighborFamily(v, s)})
			}
			if mtu := minTunnelMTU(v, s, v.active[s.Name]); tunnel == 0 || mtu < tunnel {
				tunnel = mtu
			}
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
		b.MTU, b.MTUReason = NetworkMTU(tunnel, MTUInputs{Bridged: true, Segments: segs})
		out = append(out, b)
	}
	slices.SortFunc(out, func(a, b Bridge) int { return cmp.Compare(a.VNI, b.VNI) })
	return out, nil
}

// minTunnelMTU is the smallest MTU among the tunnels of gateway self of
// site s.
func minTunnelMTU(v view, s *spec.Site, self *spec.Gateway) int {
	mtu := 0
	seen := map[backend.Name]bool{overlayBackend(v.f): true}
	for _, r := range v.f.Sites {
		if r.Name != s.Name && v.f.LinkEnabled(s.Name, r.Name) {
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
	outerV6 := false
	for _, remote := range v.f.Sites {
		if remote.Name == s.Name || !v.f.LinkEnabled(s.Name, remote.Name) || v.backendOf(s.Name, remote.Name) != b {
			continue
		}
		for _, h := range remote.Gateways {
			if !v.in.Removed[h.Name] && linkOuterV6(self.Endpoint, h.Endpoint) {
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

func addFlow(flows map[[2]netip.Prefix]string, src, dst netip.Prefix, network string) {
	k := [2]netip.Prefix{src, dst}
	if cur, ok := flows[k]; !ok || network < cur {
		flows[k] = network
	}
}

// sharedRoutedNetworks returns the names of the routed networks that have
// both sites as members, sorted.
func sharedRoutedNetworks(f *spec.Federation, a, b string) []string {
	var names []string
	for _, n := range f.Networks {
		if n.Mode != spec.Routed {
			continue
		}
		if slices.Contains(n.Sites, a) && slices.Contains(n.Sites, b) {
			names = append(names, n.Name)
		}
	}
	slices.Sort(names)
	return names
}

// remotePrefixes returns the prefixes of every site but the named one,
// sorted.
func remotePrefixes(f *spec.Federation, site string) []netip.Prefix {
	var all []netip.Prefix
	for _, s := range f.Sites {
		if s.Name != site {
			all = append(all, s.Prefixes...)
		}
	}
	return sortedPrefixes(all)
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
