package plan

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"

	"github.com/fednet/fednet/internal/spec"
)

// Inputs are what the planner needs beyond the spec.
type Inputs struct {
	// PublicKeys by gateway name; a key here wins over the spec's publicKey.
	PublicKeys map[string]Key
	// Removed names gateways that were revoked: they get no plan and
	// appear in no other gateway's plan, though the spec still lists them.
	Removed map[string]bool
	// Hosts joined bridged networks through neighbor tunnels (see
	// neighbors.go); they appear in their site's first gateway's plan.
	Hosts []Host
}

// Table is the name of the nftables table fednet owns on every gateway.
const Table = "fednet"

// KeepaliveNAT is the persistent keepalive, in seconds, on links where a
// side is behind NAT: short enough to keep common NAT mappings (30 s and
// up) open.
const KeepaliveNAT = 25

// Encapsulation overheads in bytes.
const (
	wireGuardOverhead = 32 // 16-byte data header + 16-byte Poly1305 tag
	udpHeader         = 8
	ipv4Header        = 20
	ipv6Header        = 40
	tcpHeader         = 20
)

// Compute returns the plan of every gateway of f, sorted by gateway name.
// f must have passed spec.Parse (defaults filled, validated); Compute
// reports what it cannot plan instead of guessing.
func Compute(f *spec.Federation, in Inputs) ([]Gateway, error) {
	keys, err := publicKeys(f, in)
	if err != nil {
		return nil, err
	}
	rt := computeRouting(f, in.Removed)
	colors := edgeColors(f)
	var out []Gateway
	for si := range f.Sites {
		for gi := range f.Sites[si].Gateways {
			if in.Removed[f.Sites[si].Gateways[gi].Name] {
				continue
			}
			g, err := gatewayPlan(f, keys, in.Removed, rt, colors, si, gi)
			if err != nil {
				return nil, err
			}
			addNeighbors(f, in.Hosts, si, &g)
			out = append(out, g)
		}
	}
	slices.SortFunc(out, func(a, b Gateway) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

// ForGateway returns the plan of the named gateway.
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

func gatewayPlan(f *spec.Federation, keys map[string]Key, removed map[string]bool, rt routing, colors map[Edge]int, si, gi int) (g Gateway, err error) {
	site := f.Sites[si]
	self := site.Gateways[gi]
	if !self.TransitAddress.IsValid() {
		return Gateway{}, fmt.Errorf("gateway %s has no transit address; was the spec parsed with spec.Parse?", self.Name)
	}
	ov := f.Overlay
	g = Gateway{
		Federation: f.Name,
		Name:       self.Name,
		Site:       site.Name,
		Interface: Interface{
			Name:       ov.Interface,
			ListenPort: ov.ListenPort,
			Address:    netip.PrefixFrom(self.TransitAddress, ov.Transit.Bits()),
		},
		Peers:  []Peer{},
		Routes: []Route{},
		Firewall: Firewall{
			Table:      Table,
			Tunnel:     ov.Interface,
			ListenPort: ov.ListenPort,
			Local:      sortedPrefixes(site.Prefixes),
			Remote:     remotePrefixes(f, si),
			Transit:    ov.Transit.Masked(),
			Flows:      []Flow{},
		},
	}

	// Each destination site's prefixes go to the first gateway of the next
	// site on the way (the site itself when the link is direct): WireGuard
	// routes each prefix to exactly one peer. Further gateways carry their
	// transit address until failover is planned.
	via := map[string][]netip.Prefix{}
	for dst, next := range rt.next[site.Name] {
		if d, ok := f.Site(dst); ok {
			via[next] = append(via[next], d.Prefixes...)
		}
	}
	for ti, remote := range f.Sites {
		if ti == si || !f.LinkEnabled(site.Name, remote.Name) {
			continue
		}
		for hi, h := range remote.Gateways {
			if removed[h.Name] {
				continue
			}
			p := Peer{
				Gateway:    h.Name,
				Site:       remote.Name,
				PublicKey:  keys[h.Name],
				Endpoint:   h.Endpoint,
				AllowedIPs: []netip.Prefix{netip.PrefixFrom(h.TransitAddress, h.TransitAddress.BitLen())},
			}
			if self.BehindNAT || h.BehindNAT {
				p.PersistentKeepalive = KeepaliveNAT
			}
			if hi == 0 {
				for _, pfx := range sortedPrefixes(via[remote.Name]) {
					p.AllowedIPs = append(p.AllowedIPs, pfx)
					g.Routes = append(g.Routes, Route{Destination: pfx, Device: ov.Interface, Via: h.Name})
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
	for ti, remote := range f.Sites {
		if _, routed := rt.next[site.Name][remote.Name]; ti == si || !routed {
			continue
		}
		if shared := sharedRoutedNetworks(f, site.Name, remote.Name); len(shared) > 0 {
			allow(&f.Sites[si], &f.Sites[ti], shared)
			allow(&f.Sites[ti], &f.Sites[si], shared)
		}
	}
	for _, p := range rt.relayed[site.Name] {
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

	g.Interface.MTU, g.Interface.MTUReason = gatewayTunnelMTU(f, removed, si, gi)
	g.Firewall.MSS = g.Interface.MTU - ipv4Header - tcpHeader
	if gi == 0 {
		g.Bridges, err = bridges(f, removed, colors, si)
		if err != nil {
			return Gateway{}, err
		}
	}
	g.Firewall.TunnelPorts = tunnelPorts(g.Bridges)
	return g, nil
}

// tunnelPorts are the UDP ports of the VXLAN devices to other gateways,
// sorted. A Linux VXLAN device listens on every address of the machine, so
// without a rule a machine on the site's LAN could send frames into a
// bridged network; these ports take packets from the tunnel only.
func tunnelPorts(bridges []Bridge) []int {
	var ports []int
	for _, b := range bridges {
		for _, v := range b.VXLANs {
			ports = append(ports, v.UDPPort)
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

// bridges returns the bridges of the first gateway of f.Sites[si], one per
// bridged network the site is a member of or relays for, sorted by VNI.
// Only first gateways join bridged networks, as only they carry routed
// prefixes.
//
// When every two member sites have a link, the bridge has one VXLAN device
// that replicates frames to the first gateway of every other member. Else
// the frames follow the network's relay tree (NetworkTree): one device per
// tree neighbor, on the port of that tree link, and the Linux bridge
// forwards between them (it never sends a frame back out of the port it
// came in by, and a tree has no loop, so no frame is seen twice). Every
// gateway of a network gets the same MTU, from the smallest tunnel MTU
// among the sites that carry it: an Ethernet segment needs one MTU.
func bridges(f *spec.Federation, removed map[string]bool, colors map[Edge]int, si int) ([]Bridge, error) {
	site := f.Sites[si]
	self := site.Gateways[0]
	up := func(s *spec.Site) bool { return len(s.Gateways) > 0 && !removed[s.Gateways[0].Name] }
	var out []Bridge
	for _, n := range f.Networks {
		if n.Mode != spec.Bridged {
			continue
		}
		var members []string
		for _, s := range f.Sites {
			if slices.Contains(n.Sites, s.Name) && up(&s) {
				members = append(members, s.Name)
			}
		}
		mesh := true
		for i, a := range members {
			for _, b := range members[i+1:] {
				mesh = mesh && f.LinkEnabled(a, b)
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
			v := VXLAN{Name: fmt.Sprintf("fvx%d", n.ID), Local: self.TransitAddress, UDPPort: VXLANPort, Remotes: []netip.Addr{}, To: "members"}
			for _, m := range members {
				if s, _ := f.Site(m); m != site.Name {
					v.Remotes = append(v.Remotes, s.Gateways[0].TransitAddress)
				}
			}
			slices.SortFunc(v.Remotes, netip.Addr.Compare)
			tunnels = append(tunnels, v)
		} else {
			t, err := NetworkTree(f, n.Name)
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
				nb, _ := f.Site(other(e, site.Name))
				if !up(nb) {
					continue // a removed gateway cuts the tree until the spec changes
				}
				c := colors[Edge{A: e.A, B: e.B}]
				if c >= maxRelayPorts {
					return nil, fmt.Errorf("network %s: site %s has more than %d relay tree links; fednet numbers at most %d per site", n.Name, site.Name, maxRelayPorts, maxRelayPorts)
				}
				tunnels = append(tunnels, VXLAN{
					Name: fmt.Sprintf("fvx%d-%d", n.ID, c), Local: self.TransitAddress, UDPPort: RelayPortBase + c,
					Remotes: []netip.Addr{nb.Gateways[0].TransitAddress}, To: nb.Name,
				})
			}
			slices.SortFunc(tunnels, func(a, b VXLAN) int { return cmp.Compare(a.Name, b.Name) })
		}
		tunnel := 0
		var segs []Segment
		for ti, s := range f.Sites {
			if !slices.Contains(carriers, s.Name) || !up(&s) {
				continue
			}
			if slices.Contains(members, s.Name) {
				segs = append(segs, Segment{Site: s.Name, Neighbors: neighborFamily(&f.Sites[ti])})
			}
			if mtu, _ := gatewayTunnelMTU(f, removed, ti, 0); tunnel == 0 || mtu < tunnel {
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

// gatewayTunnelMTU is the MTU of the WireGuard interface of gateway gi of
// f.Sites[si]: the underlay less WireGuard with the outer header of its
// worst link (IPv6 if any enabled link to a gateway not removed may run over
// IPv6).
func gatewayTunnelMTU(f *spec.Federation, removed map[string]bool, si, gi int) (int, string) {
	site := f.Sites[si]
	self := site.Gateways[gi]
	outerV6 := false
	for ti, remote := range f.Sites {
		if ti == si || !f.LinkEnabled(site.Name, remote.Name) {
			continue
		}
		for _, h := range remote.Gateways {
			if !removed[h.Name] && linkOuterV6(self.Endpoint, h.Endpoint) {
				outerV6 = true
			}
		}
	}
	return tunnelMTU(f.Overlay.UnderlayMTU, outerV6)
}

// tunnelMTU is the largest inner packet that fits the underlay after
// WireGuard encapsulation, with the outer header of the worst link.
func tunnelMTU(underlay int, outerV6 bool) (int, string) {
	outer, fam := ipv4Header, "IPv4"
	if outerV6 {
		outer, fam = ipv6Header, "IPv6"
	}
	mtu := underlay - outer - udpHeader - wireGuardOverhead
	return mtu, fmt.Sprintf("underlay %d - outer %s %d - UDP %d - WireGuard %d = %d",
		underlay, fam, outer, udpHeader, wireGuardOverhead, mtu)
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

// remotePrefixes returns the prefixes of every site but f.Sites[si], sorted.
func remotePrefixes(f *spec.Federation, si int) []netip.Prefix {
	var all []netip.Prefix
	for i, s := range f.Sites {
		if i != si {
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
