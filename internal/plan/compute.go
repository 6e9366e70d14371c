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
	var out []Gateway
	for si := range f.Sites {
		for gi := range f.Sites[si].Gateways {
			if in.Removed[f.Sites[si].Gateways[gi].Name] {
				continue
			}
			g, err := gatewayPlan(f, keys, in.Removed, si, gi)
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

func gatewayPlan(f *spec.Federation, keys map[string]Key, removed map[string]bool, si, gi int) (Gateway, error) {
	site := f.Sites[si]
	self := site.Gateways[gi]
	if !self.TransitAddress.IsValid() {
		return Gateway{}, fmt.Errorf("gateway %s has no transit address; was the spec parsed with spec.Parse?", self.Name)
	}
	ov := f.Overlay
	g := Gateway{
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

	flows := map[[2]netip.Prefix]string{}
	for ti, remote := range f.Sites {
		if ti == si || !f.LinkEnabled(site.Name, remote.Name) {
			continue
		}
		shared := sharedRoutedNetworks(f, site.Name, remote.Name)
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
			// The site's prefixes go to its first gateway only: WireGuard
			// routes each prefix to exactly one peer. Further gateways carry
			// their transit address until failover is planned.
			if hi == 0 && len(shared) > 0 {
				for _, pfx := range sortedPrefixes(remote.Prefixes) {
					p.AllowedIPs = append(p.AllowedIPs, pfx)
					g.Routes = append(g.Routes, Route{Destination: pfx, Device: ov.Interface, Via: h.Name})
					for _, local := range site.Prefixes {
						for _, n := range shared {
							addFlow(flows, local.Masked(), pfx, n)
							addFlow(flows, pfx, local.Masked(), n)
						}
					}
				}
			}
			slices.SortFunc(p.AllowedIPs, comparePrefix)
			g.Peers = append(g.Peers, p)
		}
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
		g.Bridges = bridges(f, removed, si)
	}
	return g, nil
}

// VXLANPort is the UDP port of the bridged networks' VXLAN (IANA's).
const VXLANPort = 4789

// bridges returns the bridges of the first gateway of f.Sites[si], one per
// bridged network of the site, sorted by VNI. Only first gateways join
// bridged networks, as only they carry routed prefixes. Frames are
// replicated to the first gateway of every other member site (the spec
// requires a direct link between every two member sites), and every member
// gets the same MTU, computed from the smallest tunnel MTU among them: an
// Ethernet segment needs one MTU.
func bridges(f *spec.Federation, removed map[string]bool, si int) []Bridge {
	site := f.Sites[si]
	self := site.Gateways[0]
	var out []Bridge
	for _, n := range f.Networks {
		if n.Mode != spec.Bridged || !slices.Contains(n.Sites, site.Name) {
			continue
		}
		b := Bridge{
			Network: n.Name,
			VNI:     n.ID,
			Name:    fmt.Sprintf("fbr%d", n.ID),
			VXLAN:   fmt.Sprintf("fvx%d", n.ID),
			Port:    self.BridgePorts[n.Name],
			Local:   self.TransitAddress,
			Remotes: []netip.Addr{},
			UDPPort: VXLANPort,
		}
		tunnel := 0
		var segs []Segment
		for ti, s := range f.Sites {
			if !slices.Contains(n.Sites, s.Name) || len(s.Gateways) == 0 || removed[s.Gateways[0].Name] {
				continue
			}
			segs = append(segs, Segment{Site: s.Name, Neighbors: neighborFamily(&f.Sites[ti])})
			if mtu, _ := gatewayTunnelMTU(f, removed, ti, 0); tunnel == 0 || mtu < tunnel {
				tunnel = mtu
			}
			if ti != si {
				b.Remotes = append(b.Remotes, s.Gateways[0].TransitAddress)
			}
		}
		slices.SortFunc(b.Remotes, netip.Addr.Compare)
		b.MTU, b.MTUReason = NetworkMTU(tunnel, MTUInputs{Bridged: true, Segments: segs})
		out = append(out, b)
	}
	slices.SortFunc(out, func(a, b Bridge) int { return cmp.Compare(a.VNI, b.VNI) })
	return out
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
