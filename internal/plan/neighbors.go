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

// Neighbor is the gateway's end of one neighbor tunnel: a VXLAN device
// with the network's VNI from the gateway's LAN address to one host,
// enslaved to the network's bridge (Bridge.Name) so the host reaches the
// other sites and the other hosts of its own site.
type Neighbor struct {
	Host string `json:"host"`
	// VXLAN is the device's name (fnb<slot>).
	VXLAN string `json:"vxlan"`
	// Local is the gateway's LAN address, Remote the host's.
	Local  netip.Addr `json:"local"`
	Remote netip.Addr `json:"remote"`
	// UDPPort is NeighborPort(slot), both the port the device listens on
	// and the one it sends to.
	UDPPort int `json:"udpPort"`
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
// a joined host unusable, and the planner then leaves it out.
func hostUsable(f *spec.Federation, h Host) string {
	if why := siteNetworkUsable(f, h.Site, h.Network); why != "" {
		return why
	}
	site := &f.Sites[slices.IndexFunc(f.Sites, func(s spec.Site) bool { return s.Name == h.Site })]
	if !h.Address.IsValid() || h.Address.Unmap().Is4() != site.Gateways[0].LANAddress.Unmap().Is4() {
		return fmt.Sprintf("host address %s is not of the family of gateway %s's LAN address %s", h.Address, site.Gateways[0].Name, site.Gateways[0].LANAddress)
	}
	if h.Slot < 0 || h.Slot >= MaxNeighborSlots {
		return fmt.Sprintf("slot %d is out of range 0-%d", h.Slot, MaxNeighborSlots-1)
	}
	return ""
}

// siteNetworkUsable reports why hosts of site cannot join network through
// neighbor tunnels in f, or "".
func siteNetworkUsable(f *spec.Federation, siteName, network string) string {
	si := slices.IndexFunc(f.Sites, func(s spec.Site) bool { return s.Name == siteName })
	if si < 0 {
		return fmt.Sprintf("site %q is not in the spec", siteName)
	}
	site := &f.Sites[si]
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
	if len(site.Gateways) == 0 || !site.Gateways[0].LANAddress.IsValid() {
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
// (naming what to change), or nil.
func CheckHost(f *spec.Federation, h Host) error {
	if why := hostUsable(f, h); why != "" {
		return fmt.Errorf("host %s cannot join network %s at site %s: %s", h.Name, h.Network, h.Site, why)
	}
	return nil
}

// neighbors returns the neighbor tunnels of bridged network n on the first
// gateway of f.Sites[si], sorted by device name's slot. Hosts that cannot
// join (see hostUsable) and hosts of a slot taken by an earlier host (by
// name) are left out.
func neighbors(f *spec.Federation, hosts []Host, si int, network string) []Neighbor {
	site := f.Sites[si]
	var out []Neighbor
	taken := map[int]bool{}
	for _, h := range sortedHosts(hosts) {
		if h.Site != site.Name || h.Network != network || hostUsable(f, h) != "" || taken[h.Slot] {
			continue
		}
		taken[h.Slot] = true
		out = append(out, Neighbor{
			Host:    h.Name,
			VXLAN:   neighborDevice(h.Slot),
			Local:   site.Gateways[0].LANAddress,
			Remote:  h.Address,
			UDPPort: NeighborPort(h.Slot),
		})
	}
	slices.SortFunc(out, func(a, b Neighbor) int { return cmp.Compare(a.UDPPort, b.UDPPort) })
	return out
}

// neighborPorts lists the firewall openings of the neighbor tunnels of
// bridges, sorted by port.
func neighborPorts(bridges []Bridge) []NeighborRule {
	var out []NeighborRule
	for _, b := range bridges {
		for _, n := range b.Neighbors {
			out = append(out, NeighborRule{Address: n.Remote, Port: n.UDPPort})
		}
	}
	slices.SortFunc(out, func(a, b NeighborRule) int { return cmp.Compare(a.Port, b.Port) })
	return out
}

func sortedHosts(hosts []Host) []Host {
	out := slices.Clone(hosts)
	slices.SortFunc(out, func(a, b Host) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// neighborFamily is the underlay family of neighbor tunnels at site s (its
// first gateway's LAN address), or 0 when the site has none: its fabric
// forwards any frame.
func neighborFamily(s *spec.Site) Family {
	if !s.DropsUnknownMACs() {
		return 0
	}
	if len(s.Gateways) > 0 && s.Gateways[0].LANAddress.Unmap().Is4() {
		return IPv4
	}
	return IPv6
}

// ForHost returns the host end of the neighbor tunnel of host name: the
// network's VNI and MTU (the plan of the host's gateway), the gateway's
// LAN address and the host's port. It fails when the host is not in
// in.Hosts or cannot join (the error says why).
func ForHost(f *spec.Federation, in Inputs, name string) (HostTunnel, error) {
	i := slices.IndexFunc(in.Hosts, func(h Host) bool { return h.Name == name })
	if i < 0 {
		return HostTunnel{}, fmt.Errorf("no host %q has joined", name)
	}
	h := in.Hosts[i]
	if err := CheckHost(f, h); err != nil {
		return HostTunnel{}, err
	}
	si := slices.IndexFunc(f.Sites, func(s spec.Site) bool { return s.Name == h.Site })
	gw := f.Sites[si].Gateways[0]
	if in.Removed[gw.Name] {
		return HostTunnel{}, fmt.Errorf("host %s: gateway %s of site %s was removed", h.Name, gw.Name, h.Site)
	}
	g, err := ForGateway(f, in, gw.Name)
	if err != nil {
		return HostTunnel{}, err
	}
	if t, ok := HostTunnelOf(g, h.Name); ok {
		return t, nil
	}
	return HostTunnel{}, fmt.Errorf("host %s: slot %d at site %s is another host's", h.Name, h.Slot, h.Site)
}

// HostTunnelOf returns the host end of host's neighbor tunnel in g, the
// plan of its gateway; false when g has no tunnel to host.
func HostTunnelOf(g Gateway, host string) (HostTunnel, bool) {
	for _, b := range g.Bridges {
		for _, n := range b.Neighbors {
			if n.Host == host {
				return HostTunnel{
					Host: host, Network: b.Network, VNI: b.VNI, Device: HostDevice(b.VNI),
					Local: n.Remote, Remote: n.Local, Gateway: g.Name, UDPPort: n.UDPPort,
					MTU: b.MTU, MTUReason: b.MTUReason,
				}, true
			}
		}
	}
	return HostTunnel{}, false
}

// addNeighbors adds to g, the plan of a gateway of f.Sites[si], the
// neighbor tunnels of its bridges and their firewall openings. Only a
// site's first gateway has bridges.
func addNeighbors(f *spec.Federation, hosts []Host, si int, g *Gateway) {
	if len(hosts) == 0 || len(g.Bridges) == 0 {
		return
	}
	for i := range g.Bridges {
		if ns := neighbors(f, hosts, si, g.Bridges[i].Network); len(ns) > 0 {
			g.Bridges[i].Neighbors = ns
		}
	}
	g.Firewall.Neighbors = neighborPorts(g.Bridges)
}
