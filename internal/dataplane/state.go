package dataplane

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/fednet/fednet/internal/plan"
)

// RouteProtocol is the route protocol number (rtm_protocol) fednet marks its
// routes with, so that Apply and Down find and remove only fednet's routes:
// `ip route show proto 254`. 254 (0xfe) is not assigned by the kernel
// (include/uapi/linux/rtnetlink.h) nor by iproute2's rt_protos. It is a
// protocol number, unrelated to the main routing table's id, which is also
// 254. Changes render it as "proto fednet".
const RouteProtocol = 0xfe

// Link kinds as the kernel reports them (IFLA_INFO_KIND).
const (
	// KindKernel is a kernel WireGuard interface.
	KindKernel = "wireguard"
	// KindUserspace is the TUN interface of a userspace WireGuard device
	// (fednet wgdev, wireguard-go).
	KindUserspace = "tun"
)

// defaultMTU is the MTU a new WireGuard interface has, kernel or userspace.
const defaultMTU = 1420

// State is what fednet owns on one machine, as far as Apply compares it with
// a plan. It is a value: the Linux dataplane reads it from the kernel, the
// fake keeps it in memory.
type State struct {
	// Link is the tunnel interface, nil when absent.
	Link *LinkState
	// WireGuard is the WireGuard device on Link, nil when none answers (no
	// link, or a TUN link whose userspace process is gone).
	WireGuard *WireGuardState
	// Routes are the routes marked with RouteProtocol in the main table,
	// sorted by destination.
	Routes []RouteState
	// Forwarding is net.ipv4.ip_forward.
	Forwarding bool
	// Table is fednet's nftables table, nil when absent.
	Table *TableState
	// Bridges and VXLANs are the bridges and VXLAN devices fednet owns
	// (alias AliasPrefix+network, see bridge.go), sorted by name.
	Bridges []BridgeState
	VXLANs  []VXLANState
	// Neighbors are the neighbor tunnels' VXLAN devices fednet owns (alias
	// NeighborAliasPrefix..., see neighbor.go), sorted by name.
	Neighbors []NeighborState
	// Foreign are the interfaces named as a bridge or VXLAN device in the
	// plan that exist but are not fednet's, sorted.
	Foreign []string
}

// LinkState is the tunnel interface.
type LinkState struct {
	Name string
	// Kind is KindKernel, KindUserspace, or another kernel link kind (a link
	// that is not fednet's and that fednet refuses to touch).
	Kind string
	MTU  int
	Up   bool
	// Addresses are the interface's addresses with their prefix lengths,
	// sorted; IPv6 link-local addresses are left out.
	Addresses []netip.Prefix
}

// WireGuardState is the WireGuard device.
type WireGuardState struct {
	// PublicKey is the public key of the device's private key, zero when no
	// private key is set.
	PublicKey  plan.Key
	ListenPort int
	// Peers are sorted by public key (base64).
	Peers []PeerState
}

// PeerState is one WireGuard peer.
type PeerState struct {
	PublicKey plan.Key
	// Endpoint is ip:port as the device reports it, "" for none.
	Endpoint string
	// AllowedIPs are sorted.
	AllowedIPs []netip.Prefix
	// PersistentKeepalive in seconds, 0 for off.
	PersistentKeepalive int
}

// RouteState is one route fednet owns.
type RouteState struct {
	Destination netip.Prefix
	Device      string
}

// TableState is fednet's nftables table.
type TableState struct {
	Name string
	// Fingerprint is the hex SHA-256 of the canonical rendering of the
	// plan.Firewall the table was built from, read back from the table; ""
	// when the table carries none (not built by fednet, or by a different
	// version).
	Fingerprint string
}

// Clone returns a deep copy of s.
func (s State) Clone() State {
	c := s
	if s.Link != nil {
		l := *s.Link
		l.Addresses = slices.Clone(l.Addresses)
		c.Link = &l
	}
	if s.WireGuard != nil {
		w := *s.WireGuard
		w.Peers = make([]PeerState, len(s.WireGuard.Peers))
		for i, p := range s.WireGuard.Peers {
			p.AllowedIPs = slices.Clone(p.AllowedIPs)
			w.Peers[i] = p
		}
		if len(w.Peers) == 0 {
			w.Peers = nil
		}
		c.WireGuard = &w
	}
	c.Routes = slices.Clone(s.Routes)
	if s.Table != nil {
		t := *s.Table
		c.Table = &t
	}
	c.Bridges, c.VXLANs = nil, nil
	for _, b := range s.Bridges {
		c.Bridges = append(c.Bridges, b.clone())
	}
	for _, v := range s.VXLANs {
		c.VXLANs = append(c.VXLANs, v.clone())
	}
	c.Neighbors = slices.Clone(s.Neighbors)
	c.Foreign = slices.Clone(s.Foreign)
	return c
}

// IsEmpty reports whether s has nothing fednet owns (forwarding aside, which
// fednet never turns off).
func (s State) IsEmpty() bool {
	return s.Link == nil && s.WireGuard == nil && len(s.Routes) == 0 && s.Table == nil &&
		len(s.Bridges) == 0 && len(s.VXLANs) == 0 && len(s.Neighbors) == 0
}

// normalize sorts the lists of s in place, so that equal states compare and
// render equally.
func (s *State) normalize() {
	if s.Link != nil {
		sortPrefixes(s.Link.Addresses)
	}
	if s.WireGuard != nil {
		slices.SortFunc(s.WireGuard.Peers, func(a, b PeerState) int {
			return strings.Compare(a.PublicKey.String(), b.PublicKey.String())
		})
		for i := range s.WireGuard.Peers {
			sortPrefixes(s.WireGuard.Peers[i].AllowedIPs)
		}
	}
	slices.SortFunc(s.Routes, func(a, b RouteState) int {
		if c := comparePrefix(a.Destination, b.Destination); c != 0 {
			return c
		}
		return strings.Compare(a.Device, b.Device)
	})
	slices.SortFunc(s.Bridges, func(a, b BridgeState) int { return strings.Compare(a.Name, b.Name) })
	for i := range s.Bridges {
		slices.Sort(s.Bridges[i].Ports)
	}
	slices.SortFunc(s.VXLANs, func(a, b VXLANState) int { return strings.Compare(a.Name, b.Name) })
	for i := range s.VXLANs {
		slices.SortFunc(s.VXLANs[i].Remotes, netip.Addr.Compare)
	}
	slices.SortFunc(s.Neighbors, func(a, b NeighborState) int { return strings.Compare(a.Name, b.Name) })
	slices.Sort(s.Foreign)
}

// String renders s as text, one fact a line, for tests and debugging.
func (s State) String() string {
	s = s.Clone()
	s.normalize()
	var b strings.Builder
	if l := s.Link; l != nil {
		fmt.Fprintf(&b, "link %s kind %s mtu %d up %t\n", l.Name, l.Kind, l.MTU, l.Up)
		for _, a := range l.Addresses {
			fmt.Fprintf(&b, "address %s\n", a)
		}
	}
	if w := s.WireGuard; w != nil {
		fmt.Fprintf(&b, "wireguard public-key %s listen-port %d\n", keyOrNone(w.PublicKey), w.ListenPort)
		for _, p := range w.Peers {
			fmt.Fprintf(&b, "peer %s endpoint %s allowed-ips %s persistent-keepalive %d\n",
				p.PublicKey, orNone(p.Endpoint), joinPrefixes(p.AllowedIPs), p.PersistentKeepalive)
		}
	}
	for _, r := range s.Routes {
		fmt.Fprintf(&b, "route %s dev %s\n", r.Destination, r.Device)
	}
	fmt.Fprintf(&b, "forwarding %t\n", s.Forwarding)
	if t := s.Table; t != nil {
		fmt.Fprintf(&b, "table inet %s fingerprint %s\n", t.Name, orNone(t.Fingerprint))
	}
	for _, br := range s.Bridges {
		fmt.Fprintf(&b, "bridge %s network %s mtu %d up %t ports %s\n", br.Name, br.Network, br.MTU, br.Up, orNone(strings.Join(br.Ports, ",")))
	}
	for _, v := range s.VXLANs {
		fmt.Fprintf(&b, "vxlan %s network %s id %d local %s dstport %d mtu %d up %t learning %t master %s remotes %s\n",
			v.Name, v.Network, v.VNI, v.Local, v.UDPPort, v.MTU, v.Up, v.Learning, orNone(v.Master), joinAddrs(v.Remotes))
	}
	for _, n := range s.Neighbors {
		fmt.Fprintf(&b, "neighbor %s network %s host %s id %d local %s remote %s dstport %d mtu %d up %t learning %t master %s\n",
			n.Name, n.Network, n.Host, n.VNI, n.Local, n.Remote, n.UDPPort, n.MTU, n.Up, n.Learning, orNone(n.Master))
	}
	for _, n := range s.Foreign {
		fmt.Fprintf(&b, "foreign %s\n", n)
	}
	return b.String()
}

func keyOrNone(k plan.Key) string { return orNone(k.String()) }

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func comparePrefix(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}

func sortPrefixes(ps []netip.Prefix) { slices.SortFunc(ps, comparePrefix) }

// canonicalPrefixes returns ps masked, sorted and without duplicates, in a
// new slice (nil when empty).
func canonicalPrefixes(ps []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range ps {
		out = append(out, p.Masked())
	}
	sortPrefixes(out)
	return slices.Compact(out)
}

func joinPrefixes(ps []netip.Prefix) string {
	if len(ps) == 0 {
		return `""`
	}
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}
