package plan

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"

	"github.com/fednet/fednet/internal/spec"
)

// Neighbor tunnels (NetFed §4.1): at a site whose fabric drops frames from
// unknown MAC addresses (spec fabric: dropsUnknownMACs), frames of other
// sites' hosts never reach the site's hosts through the gateway's bridge
// port. Each host there joins a bridged network through a unicast VXLAN
// tunnel over the site's LAN to its site's first gateway: the host's frames
// travel inside UDP between the host's and the gateway's own addresses,
// which the fabric forwards.
//
// Linux refuses two VXLAN devices with the same VNI and the same UDP port in
// one network namespace, whatever their local addresses, and the network's
// VXLAN device to the other gateways already has VNI = network id on port
// 4789. So each neighbor tunnel gets its own UDP port on the gateway,
// NeighborPort(slot): the manager gives every host a slot, unique among
// the hosts of its site and stable until the host leaves.

// NeighborPortBase is the UDP port of the neighbor tunnel in slot 0; slot
// s uses NeighborPortBase+s.
const NeighborPortBase = 4790

// MaxNeighborSlots bounds the hosts joined at one site: ports
// NeighborPortBase .. NeighborPortBase+MaxNeighborSlots-1 (4790-5789).
const MaxNeighborSlots = 1000

// NeighborPort returns the UDP port of the neighbor tunnel in slot.
func NeighborPort(slot int) int { return NeighborPortBase + slot }

// neighborDevice names the gateway's VXLAN device of the tunnel in slot
// (at most 15 bytes: "fnb" and up to 3 digits).
func neighborDevice(slot int) string { return fmt.Sprintf("fnb%d", slot) }

// HostDevice names the host's VXLAN device of bridged network vni ("fvx"
// and up to 8 digits).
func HostDevice(vni int) string { return fmt.Sprintf("fvx%d", vni) }

// Host is a host that joined a bridged network through a neighbor tunnel;
// the manager keeps them and passes them in Inputs.Hosts.
type Host struct {
	// Name is unique among the hosts of a federation.
	Name    string
	Site    string
	Network string
	// Address is the host's address on the site's LAN: the tunnel's
	// remote end on the gateway.
	Address netip.Addr
	// Slot is the host's slot at its site, 0..MaxNeighborSlots-1, unique
	// among the site's hosts.
	Slot int
}

// NeighborRule is one neighbor tunnel in the gateway's firewall: UDP to
// Port is accepted from Address only.
type NeighborRule struct {
	Address netip.Addr `json:"address"`
	Port    int        `json:"port"`
}

// HostTunnel is the host's end of its neighbor tunnel: what `fednet host
// join` sets up.
type HostTunnel struct {
	Host    string `json:"host"`
	Network string `json:"network"`
	// VNI is the network id.
	VNI int `json:"vni"`
	// Device is the VXLAN device to create on the host.
	Device string `json:"device"`
	// Local is the host's LAN address, Remote its gateway's.
	Local  netip.Addr `json:"local"`
	Remote netip.Addr `json:"remote"`
	// Gateway names the gateway at the other end.
	Gateway string `json:"gateway"`
	UDPPort int    `json:"udpPort"`
	// MTU is the network's MTU, to set on the device; MTUReason shows how
	// it was computed.
	MTU       int    `json:"mtu"`
	MTUReason string `json:"mtuReason"`
}

// hostUsable reports why host h cannot have a neighbor tunnel in f, or "".
// The manager checks the same when a host enrolls; a spec change can make
// a joined host unusable, and the planner then leaves it out (a bad host
// entry never stops a gateway's plan).
func hostUsable(f *spec.Federation, h Host) string {
	if why := siteNetworkUsable(f, h.Site, h.Network); why != "" {
		return why
	}
	site, _ := f.Site(h.Site)
	if !h.Address.IsValid() {
		return "the host has no address"
	}
	a := h.Address.Unmap()
	var in netip.Prefix
	for _, p := range site.Prefixes {
		if p.Contains(a) {
			in = p.Masked()
			break
		}
	}
	if !in.IsValid() {
		return fmt.Sprintf("host address %s is not in a prefix of site %s (%s)", a, site.Name, joinPrefixes(sortedPrefixes(site.Prefixes)))
	}
	if a == in.Addr() {
		return fmt.Sprintf("host address %s is the network address of %s", a, in)
	}
	if a.Is4() && in.Bits() < 31 && a == lastAddr(in) {
		return fmt.Sprintf("host address %s is the broadcast address of %s", a, in)
	}
	for _, g := range site.Gateways {
		if g.LANAddress.Unmap() == a {
			return fmt.Sprintf("host address %s is gateway %s's LAN address", a, g.Name)
		}
	}
	if h.Slot < 0 || h.Slot >= MaxNeighborSlots {
		return fmt.Sprintf("slot %d is out of range 0-%d", h.Slot, MaxNeighborSlots-1)
	}
	return ""
}

// lastAddr is the last address of p (the IPv4 broadcast address).
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 1 << (7 - i%8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// siteNetworkUsable reports why hosts of site cannot join network through
// neighbor tunnels in f, or "".
func siteNetworkUsable(f *spec.Federation, siteName, network string) string {
	site, ok := f.Site(siteName)
	if !ok {
		return fmt.Sprintf("site %q is not in the spec", siteName)
	}
	if !site.DropsUnknownMACs() {
		return fmt.Sprintf("site %s does not declare fabric: %s; its hosts sit on bridged networks directly", site.Name, spec.FabricDropsUnknownMACs)
	}
	ni := slices.IndexFunc(f.Networks, func(n spec.Network) bool { return n.Name == network })
	if ni < 0 {
		return fmt.Sprintf("network %q is not in the spec", network)
	}
	n := &f.Networks[ni]
	if n.Mode != spec.Bridged || !slices.Contains(n.Sites, site.Name) {
		return fmt.Sprintf("network %s is not a bridged network of site %s", n.Name, site.Name)
	}
	if !slices.ContainsFunc(site.Gateways, func(g spec.Gateway) bool { return g.LANAddress.IsValid() }) {
		return fmt.Sprintf("site %s has no gateway with a LAN address", site.Name)
	}
	return ""
}

// CheckSiteNetwork reports why hosts of site cannot join network through
// neighbor tunnels in f (naming what to change), or nil.
func CheckSiteNetwork(f *spec.Federation, site, network string) error {
	if why := siteNetworkUsable(f, site, network); why != "" {
		return fmt.Errorf("hosts of site %s cannot join network %s through neighbor tunnels: %s", site, network, why)
	}
	return nil
}

// CheckHost reports why host h cannot join through a neighbor tunnel in f
// (naming what to change), or nil. It does not look at other hosts: the
// planner gives an address or slot that two hosts claim to the first by
// name, and the manager refuses a second claim at join.
func CheckHost(f *spec.Federation, h Host) error {
	if why := hostUsable(f, h); why != "" {
		return fmt.Errorf("host %s cannot join network %s at site %s: %s", h.Name, h.Network, h.Site, why)
	}
	return nil
}

// SkippedHosts reports, one error each, the hosts of in.Hosts that no plan
// has a neighbor tunnel for, and why, for the manager to log.
func SkippedHosts(f *spec.Federation, in Inputs) []error {
	_, skipped := admitted(f, in.Hosts)
	return skipped
}

// admitted returns the hosts that get a neighbor tunnel, sorted by name,
// and an error for each that does not: it cannot join (CheckHost), or an
// earlier host by name holds its slot (among the site's hosts of its
// network) or its address (among the site's hosts).
func admitted(f *spec.Federation, hosts []Host) ([]Host, []error) {
	var ok []Host
	var skipped []error
	slots := map[[2]string]map[int]string{}
	addrs := map[string]map[netip.Addr]string{}
	for _, h := range sortedHosts(hosts) {
		if err := CheckHost(f, h); err != nil {
			skipped = append(skipped, err)
			continue
		}
		k := [2]string{h.Site, h.Network}
		if slots[k] == nil {
			slots[k] = map[int]string{}
		}
		if addrs[h.Site] == nil {
			addrs[h.Site] = map[netip.Addr]string{}
		}
		if first, taken := slots[k][h.Slot]; taken {
			skipped = append(skipped, fmt.Errorf("host %s: slot %d at site %s is host %s's", h.Name, h.Slot, h.Site, first))
			continue
		}
		if first, taken := addrs[h.Site][h.Address.Unmap()]; taken {
			skipped = append(skipped, fmt.Errorf("host %s: address %s at site %s is host %s's", h.Name, h.Address, h.Site, first))
			continue
		}
		slots[k][h.Slot] = h.Name
		addrs[h.Site][h.Address.Unmap()] = h.Name
		ok = append(ok, h)
	}
	return ok, skipped
}

// neighbors returns the neighbor tunnels of bridged network network on
// gateway self (the active gateway of site), sorted by UDP port: one per
// admitted host of the site and network.
func neighbors(hosts []Host, f *spec.Federation, site *spec.Site, self *spec.Gateway, network string) []VXLAN {
	var out []VXLAN
	ok, _ := admitted(f, hosts)
	for _, h := range ok {
		if h.Site != site.Name || h.Network != network {
			continue
		}
		out = append(out, VXLAN{
			Name:    neighborDevice(h.Slot),
			Kind:    ToHost,
			Local:   virtualAddress(site, self),
			UDPPort: NeighborPort(h.Slot),
			Remotes: []netip.Addr{h.Address.Unmap()},
			To:      h.Name,
		})
	}
	slices.SortFunc(out, func(a, b VXLAN) int { return cmp.Compare(a.UDPPort, b.UDPPort) })
	return out
}

// neighborPorts lists the firewall openings of the neighbor tunnels of
// bridges, sorted by port.
func neighborPorts(bridges []Bridge) []NeighborRule {
	var out []NeighborRule
	for _, b := range bridges {
		for _, v := range b.VXLANs {
			if v.Kind == ToHost && len(v.Remotes) == 1 {
				out = append(out, NeighborRule{Address: v.Remotes[0], Port: v.UDPPort})
			}
		}
	}
	slices.SortFunc(out, func(a, b NeighborRule) int { return cmp.Compare(a.Port, b.Port) })
	return out
}

// virtualAddress is site's virtual address, where its active gateway self
// receives neighbor tunnels, so that hosts keep their tunnel across a
// takeover; self's own LAN address when the spec gives none.
func virtualAddress(site *spec.Site, self *spec.Gateway) netip.Addr {
	if site.VirtualAddress.IsValid() {
		return site.VirtualAddress
	}
	return self.LANAddress
}

func sortedHosts(hosts []Host) []Host {
	out := slices.Clone(hosts)
	slices.SortFunc(out, func(a, b Host) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// neighborFamily is the underlay family of neighbor tunnels at site s (its
// active gateway's LAN address), or 0 when the site has none: its fabric
// forwards any frame.
func neighborFamily(v view, s *spec.Site) Family {
	if !s.DropsUnknownMACs() {
		return 0
	}
	if g := v.active[s.Name]; g != nil && g.LANAddress.Unmap().Is4() {
		return IPv4
	}
	return IPv6
}

// ForHost returns the host end of the neighbor tunnel of host name: the
// network's VNI and MTU (the plan of the host's gateway), the active
// gateway's LAN address and the host's port. It fails when the host is not
// in in.Hosts or cannot join (the error says why).
func ForHost(f *spec.Federation, in Inputs, name string) (HostTunnel, error) {
	i := slices.IndexFunc(in.Hosts, func(h Host) bool { return h.Name == name })
	if i < 0 {
		return HostTunnel{}, fmt.Errorf("no host %q has joined", name)
	}
	h := in.Hosts[i]
	if err := CheckHost(f, h); err != nil {
		return HostTunnel{}, err
	}
	gw := newView(f, in).active[h.Site]
	if gw == nil {
		return HostTunnel{}, fmt.Errorf("host %s: site %s has no gateway that is neither removed nor down", h.Name, h.Site)
	}
	g, err := ForGateway(f, in, gw.Name)
	if err != nil {
		return HostTunnel{}, err
	}
	if t, ok := HostTunnelOf(g, h.Name); ok {
		return t, nil
	}
	return HostTunnel{}, fmt.Errorf("host %s: its slot %d or address %s at site %s is another host's", h.Name, h.Slot, h.Address, h.Site)
}

// HostTunnelOf returns the host end of host's neighbor tunnel in g, the
// plan of its gateway; false when g has no tunnel to host.
func HostTunnelOf(g Gateway, host string) (HostTunnel, bool) {
	for _, b := range g.Bridges {
		for _, v := range b.VXLANs {
			if v.Kind == ToHost && v.To == host && len(v.Remotes) == 1 {
				return HostTunnel{
					Host: host, Network: b.Network, VNI: b.VNI, Device: HostDevice(b.VNI),
					Local: v.Remotes[0], Remote: v.Local, Gateway: g.Name, UDPPort: v.UDPPort,
					MTU: b.MTU, MTUReason: b.MTUReason,
				}, true
			}
		}
	}
	return HostTunnel{}, false
}

// addNeighbors adds to g, the plan of the active gateway of site, the
// neighbor tunnels of its bridges (as VXLAN ports to hosts) and their
// firewall openings.
func addNeighbors(v view, site *spec.Site, g *Gateway) {
	if len(v.in.Hosts) == 0 || len(g.Bridges) == 0 {
		return
	}
	self := v.active[site.Name]
	for i := range g.Bridges {
		b := &g.Bridges[i]
		if b.Relay {
			continue
		}
		if ns := neighbors(v.in.Hosts, v.f, site, self, b.Network); len(ns) > 0 {
			b.VXLANs = append(b.VXLANs, ns...)
			slices.SortFunc(b.VXLANs, func(x, y VXLAN) int { return cmp.Compare(x.Name, y.Name) })
		}
	}
	g.Firewall.Neighbors = neighborPorts(g.Bridges)
}
