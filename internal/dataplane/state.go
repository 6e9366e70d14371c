package dataplane

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/fednet/fednet/internal/backend"
	"github.com/fednet/fednet/internal/dataplane/tunnel"
)

// RouteProtocol is the route protocol number (rtm_protocol) fednet marks its
// routes with, so that Apply and Down find and remove only fednet's routes:
// `ip route show proto 254`. 254 (0xfe) is not assigned by the kernel
// (include/uapi/linux/rtnetlink.h) nor by iproute2's rt_protos. It is a
// protocol number, unrelated to the main routing table's id, which is also
// 254. Changes render it as "proto fednet".
const RouteProtocol = 0xfe

// State is the machine as far as Apply compares it with a plan: what fednet
// owns, and what it must know of the rest to stay out of it (Underlay). It
// is a value: the Linux dataplane reads it from the kernel, the fake keeps
// it in memory.
type State struct {
	// Tunnels are the tunnel interfaces: those the plan names (whoever
	// made them) and every other interface marked as a fednet tunnel
	// (tunnel.Mark), sorted by name.
	Tunnels []TunnelState
	// Routes are the routes marked with RouteProtocol in the main table,
	// sorted by destination.
	Routes []RouteState
	// Forwarding is net.ipv4.ip_forward.
	Forwarding bool
	// Table is the nftables table named plan.Table, nil when absent.
	Table *TableState
	// L2 is fednet's bridged networks.
	L2 L2State
	// Underlay is the rest of the machine; String leaves it out.
	Underlay Underlay
}

// TunnelState is one tunnel interface and the device behind it.
type TunnelState struct {
	// Name is the interface's name.
	Name string
	// Backend is the backend of the plan's tunnel of this name, or, for a
	// tunnel the plan does not name, the one its mark says.
	Backend backend.Name
	tunnel.State
}

// Marked returns the backend in the interface's mark, "" when it has no
// fednet mark (or no interface exists).
func (t TunnelState) Marked() backend.Name {
	if t.Link == nil {
		return ""
	}
	b, _ := strings.CutPrefix(t.Link.Alias, tunnel.MarkPrefix)
	if b == t.Link.Alias {
		return ""
	}
	return backend.Name(b)
}

// RouteState is one route fednet owns.
type RouteState struct {
	Destination netip.Prefix
	Device      string
}

// TableState is the nftables table named plan.Table.
type TableState struct {
	Name string
	// Fingerprint is the hex SHA-256 of the canonical rendering of the
	// plan.Firewall the table was built from, read back from the comment of
	// its first rule; "" when the table carries no fednet comment: then it
	// is not fednet's, and fednet neither replaces nor deletes it.
	Fingerprint string
}

// Owned reports whether fednet built the table (it carries a fingerprint).
func (t *TableState) Owned() bool { return t != nil && t.Fingerprint != "" }

// Underlay is what fednet knows of the machine beyond what it owns: what
// the ownership checks keep a plan away from.
type Underlay struct {
	// Interfaces are the interfaces that carry no fednet mark, with their
	// addresses, sorted by name.
	Interfaces []tunnel.Interface
	// DefaultRoutes are the machine's default routes (0.0.0.0/0, ::/0).
	DefaultRoutes []UnderlayRoute
	// Endpoints are the routes a packet to each peer endpoint of the plan
	// takes (Destination the endpoint's address).
	Endpoints []UnderlayRoute
}

// UnderlayRoute is one route of the underlay.
type UnderlayRoute struct {
	Destination netip.Prefix
	// Device is the interface the route leaves by.
	Device string
	// Gateway is the next hop, invalid for an on-link route.
	Gateway netip.Addr
}

// Interface returns the underlay interface name, false when there is none.
func (u Underlay) Interface(name string) (tunnel.Interface, bool) {
	i := slices.IndexFunc(u.Interfaces, func(i tunnel.Interface) bool { return i.Name == name })
	if i < 0 {
		return tunnel.Interface{}, false
	}
	return u.Interfaces[i], true
}

// Clone returns a deep copy of s.
func (s State) Clone() State {
	c := s
	c.Tunnels = nil
	for _, t := range s.Tunnels {
		c.Tunnels = append(c.Tunnels, TunnelState{Name: t.Name, Backend: t.Backend, State: t.State.Clone()})
	}
	c.Routes = slices.Clone(s.Routes)
	if s.Table != nil {
		t := *s.Table
		c.Table = &t
	}
	c.L2 = s.L2.clone()
	c.Underlay.Interfaces = nil
	for _, i := range s.Underlay.Interfaces {
		c.Underlay.Interfaces = append(c.Underlay.Interfaces, i.Clone())
	}
	c.Underlay.DefaultRoutes = slices.Clone(s.Underlay.DefaultRoutes)
	c.Underlay.Endpoints = slices.Clone(s.Underlay.Endpoints)
	return c
}

// IsEmpty reports whether s has nothing fednet owns (forwarding aside, which
// fednet never turns off).
func (s State) IsEmpty() bool {
	owned := slices.ContainsFunc(s.Tunnels, func(t TunnelState) bool { return t.Link != nil })
	return !owned && len(s.Routes) == 0 && s.Table == nil && s.L2.isEmpty()
}

// Tunnel returns the tunnel interface name, false when s has none.
func (s State) Tunnel(name string) (TunnelState, bool) {
	if t := s.tunnel(name); t != nil && t.Link != nil {
		return *t, true
	}
	return TunnelState{}, false
}

// tunnel returns the tunnel named name, nil when s has none.
func (s *State) tunnel(name string) *TunnelState {
	for i := range s.Tunnels {
		if s.Tunnels[i].Name == name {
			return &s.Tunnels[i]
		}
	}
	return nil
}

// normalize sorts the lists of s in place, so that equal states compare and
// render equally.
func (s *State) normalize() {
	slices.SortFunc(s.Tunnels, func(a, b TunnelState) int { return strings.Compare(a.Name, b.Name) })
	for _, t := range s.Tunnels {
		if t.Link != nil {
			sortPrefixes(t.Link.Addresses)
		}
	}
	slices.SortFunc(s.Routes, func(a, b RouteState) int {
		if c := comparePrefix(a.Destination, b.Destination); c != 0 {
			return c
		}
		return strings.Compare(a.Device, b.Device)
	})
	s.L2.normalize()
	slices.SortFunc(s.Underlay.Interfaces, func(a, b tunnel.Interface) int { return strings.Compare(a.Name, b.Name) })
}

// String renders s as text, one fact a line, for tests and debugging. The
// underlay is left out.
func (s State) String() string {
	s = s.Clone()
	s.normalize()
	var b strings.Builder
	for _, t := range s.Tunnels {
		l := t.Link
		if l == nil {
			continue
		}
		fmt.Fprintf(&b, "tunnel %s backend %s kind %s alias %s mtu %d up %t\n", t.Name, t.Backend, l.Kind, orNone(l.Alias), l.MTU, l.Up)
		for _, a := range l.Addresses {
			fmt.Fprintf(&b, "address %s\n", a)
		}
		if t.Device != nil {
			b.WriteString(t.Device.String())
		}
	}
	for _, r := range s.Routes {
		fmt.Fprintf(&b, "route %s dev %s\n", r.Destination, r.Device)
	}
	fmt.Fprintf(&b, "forwarding %t\n", s.Forwarding)
	if t := s.Table; t != nil {
		fmt.Fprintf(&b, "table inet %s fingerprint %s\n", t.Name, orNone(t.Fingerprint))
	}
	s.L2.render(&b)
	return b.String()
}

var (
	orNone            = tunnel.OrNone
	comparePrefix     = tunnel.ComparePrefix
	canonicalPrefixes = tunnel.CanonicalPrefixes
)

func sortPrefixes(ps []netip.Prefix) { slices.SortFunc(ps, comparePrefix) }

func hasIPv4(ps []netip.Prefix) bool {
	return slices.ContainsFunc(ps, func(p netip.Prefix) bool { return p.Addr().Is4() })
}

func withoutIPv4RoutesOn(rs []RouteState, dev string) []RouteState {
	return slices.DeleteFunc(slices.Clone(rs), func(r RouteState) bool { return r.Device == dev && r.Destination.Addr().Is4() })
}

func routesNotOn(rs []RouteState, dev string) []RouteState {
	return slices.DeleteFunc(slices.Clone(rs), func(r RouteState) bool { return r.Device == dev })
}
