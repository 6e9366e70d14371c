package dataplane

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/fednet/fednet/internal/backend"
	"github.com/fednet/fednet/internal/dataplane/tunnel"
	"github.com/fednet/fednet/internal/plan"
)

// ErrRefused is wrapped by the error of a plan that Apply refuses whole,
// before it changes anything: the plan is malformed, reaches outside its
// bounds, or names something on the machine that is not fednet's.
var ErrRefused = errors.New("refused; nothing was changed")

// The ownership rules. fednet changes a machine only where it owns what it
// changes, and it checks a plan against them before anything is applied (a
// plan that breaks one is refused whole, naming the field):
//
//   - Interfaces: fednet creates its tunnel interfaces, bridges and VXLAN
//     devices and marks them (tunnel.Mark, AliasPrefix); it changes or
//     deletes only interfaces with its mark. An existing interface named
//     like a plan's tunnel, bridge or VXLAN device without the mark is
//     someone else's: the plan is refused (a tunnel driver may recognize
//     its own unmarked interface, made by a fednet from before marks:
//     tunnel.Driver.Adopt; WireGuard checks the device's key).
//   - Firewall: fednet's one nftables table is named plan.Table; a plan
//     naming another is refused, and an existing table of that name
//     without fednet's fingerprint is not replaced.
//   - Routes go only into the plan's tunnels. Every route and every allowed
//     IP lies inside the plan's bounds (Bounds.Supernet or
//     Bounds.Transit), is never a default route, and covers none of the
//     machine's own network: no address of an interface that is not
//     fednet's, no default route's gateway, no peer endpoint.
//   - Bridge ports are interfaces of Bounds.Ports (the spec's LAN
//     segments), never the interface of a default route nor the one a peer
//     endpoint is reached by (the public side).
//   - VXLAN ports send frames to other gateways inside the tunnels
//     (remotes in Bounds.Transit) or to hosts of the site (in
//     Bounds.Supernet), never anywhere else.

// checkPlan reports what in p cannot or must not be applied to a machine
// in state cur with drivers reg, or nil.
func checkPlan(cur State, p plan.Gateway, reg registry, l l2) error {
	errs := validatePlan(p, reg, l)
	errs = append(errs, checkMachine(cur, p, reg)...)
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("plan of gateway %q %w:\n%w", p.Name, ErrRefused, errors.Join(errs...))
}

// validatePlan reports what in p is malformed or outside its bounds,
// whatever the machine, naming each field.
func validatePlan(p plan.Gateway, reg registry, l l2) []error {
	var errs []error
	fail := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s %s", field, fmt.Sprintf(format, args...)))
	}
	bd := p.Bounds
	for _, f := range []struct {
		name string
		p    netip.Prefix
	}{{"bounds.supernet", bd.Supernet}, {"bounds.transit", bd.Transit}} {
		if !f.p.IsValid() || f.p.Bits() == 0 {
			fail(f.name, "%s is not a prefix fednet can keep routes inside (a default route never is)", f.p)
		}
	}

	if len(p.Tunnels) == 0 {
		fail("tunnels", "is empty: a gateway has at least one tunnel interface")
	}
	taken := map[string]string{} // interface name -> field
	backends := map[backend.Name]int{}
	for i, t := range p.Tunnels {
		field := "tunnels[" + strconv.Itoa(i) + "]."
		if err := validInterfaceName(t.Name); err != nil {
			fail(field+"name", "is not valid: %v", err)
		} else if prev, dup := taken[t.Name]; dup {
			fail(field+"name", "%s is also %s", t.Name, prev)
		} else {
			taken[t.Name] = field + "name"
		}
		if j, dup := backends[t.Backend]; dup {
			fail(field+"backend", "%s is also the backend of tunnels[%d]: one tunnel per backend", t.Backend, j)
		}
		backends[t.Backend] = i
		if port := t.ListenPort; port < 0 || port > 65535 {
			fail(field+"listenPort", "%d is out of range 0-65535", port)
		}
		if mtu := t.MTU; mtu != 0 && (mtu < 576 || mtu > 65535) {
			fail(field+"mtu", "%d is out of range 576-65535", mtu)
		}
		if a := t.Address; a.IsValid() && bd.Transit.IsValid() && !bd.Transit.Contains(a.Addr()) {
			fail(field+"address", "%s is not inside bounds.transit %s", a, bd.Transit)
		}
		drv, ok := reg[t.Backend]
		if !ok {
			fail(field+"backend", "%q has no tunnel driver in this fednet (it has: %s)", t.Backend, reg.names())
			continue
		}
		for _, err := range drv.Check(t, peersOf(p, t.Backend)) {
			fail(field[:len(field)-1], "(%s): %v", t.Backend, err)
		}
	}

	for j, peer := range p.Peers {
		field := fmt.Sprintf("peers[%d] (%s).", j, peer.Gateway)
		if _, ok := backends[peer.Backend]; !ok {
			fail(field+"backend", "%q is not the backend of a tunnel of this plan", peer.Backend)
		}
		for _, a := range peer.AllowedIPs {
			if err := checkBounded(a, bd); err != nil {
				fail(field+"allowedIPs", "%v", err)
			}
		}
	}
	for k, r := range p.Routes {
		field := "routes[" + strconv.Itoa(k) + "]"
		if err := checkBounded(r.Destination, bd); err != nil {
			fail(field+".destination", "%v", err)
		}
		if r.Device != "" && !slices.ContainsFunc(p.Tunnels, func(t plan.Tunnel) bool { return t.Name == r.Device }) {
			fail(field+".device", "%q is not a tunnel interface of this plan: fednet routes only into its own tunnels", r.Device)
		}
	}

	fw := p.Firewall
	if fw.Table != plan.Table {
		fail("firewall.table", "%q is not fednet's table: fednet owns one nftables table, inet %s, and never changes another", fw.Table, plan.Table)
	} else if err := validateFirewall(fw); err != nil {
		errs = append(errs, err)
	}
	var names []string
	for _, t := range p.Tunnels {
		names = append(names, t.Name)
	}
	slices.Sort(names)
	if got := slices.Sorted(slices.Values(fw.Tunnels)); !slices.Equal(got, names) {
		fail("firewall.tunnels", "%v are not the plan's tunnel interfaces %v", fw.Tunnels, names)
	}

	errs = append(errs, l.check(p.Bridges, taken)...)
	for i, b := range p.Bridges {
		field := "bridges[" + strconv.Itoa(i) + "]."
		if b.Port != "" && !slices.Contains(bd.Ports, b.Port) {
			fail(field+"port", "%q is not one of bounds.ports %v: a bridge port is a LAN segment interface the spec names for this gateway", b.Port, bd.Ports)
		}
		for k, v := range b.VXLANs {
			vf := field + "vxlans[" + strconv.Itoa(k) + "].remotes"
			within, what := bd.Transit, "bounds.transit (other gateways, inside the tunnels)"
			if v.Kind == plan.ToHost {
				within, what = bd.Supernet, "bounds.supernet (a host of the site)"
			}
			for _, r := range v.Remotes {
				if r.IsValid() && within.IsValid() && !within.Contains(r.Unmap()) {
					fail(vf, "%s is not inside %s %s: fednet sends a bridged network's frames nowhere else", r, what, within)
				}
			}
		}
	}
	return errs
}

// checkBounded reports why p may not be routed into a tunnel: invalid, a
// default route, or outside both bounds.
func checkBounded(p netip.Prefix, bd plan.Bounds) error {
	switch {
	case !p.IsValid():
		return errors.New("a prefix is not valid")
	case p.Bits() == 0:
		return fmt.Errorf("%s is a default route: fednet never routes everything into a tunnel", p)
	case !covers(bd.Supernet, p) && !covers(bd.Transit, p):
		return fmt.Errorf("%s is not inside bounds.supernet %s or bounds.transit %s", p, bd.Supernet, bd.Transit)
	}
	return nil
}

// covers reports whether outer contains all of inner.
func covers(outer, inner netip.Prefix) bool {
	return outer.IsValid() && inner.IsValid() && outer.Bits() <= inner.Bits() && outer.Contains(inner.Addr())
}

// checkMachine reports what in p names or reaches something on the machine
// in state cur that is not fednet's.
func checkMachine(cur State, p plan.Gateway, reg registry) []error {
	var errs []error
	fail := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s %s", field, fmt.Sprintf(format, args...)))
	}
	if t := cur.Table; t != nil && !t.Owned() {
		fail("firewall.table", "%s: nftables table inet %s exists and was not made by fednet (it has no fednet fingerprint): fednet does not replace it; if it is a leftover, delete it (nft delete table inet %s)", p.Firewall.Table, t.Name, t.Name)
	}

	for i, t := range p.Tunnels {
		ts := cur.tunnel(t.Name)
		if ts == nil || ts.Link == nil || ts.Marked() != "" {
			continue
		}
		if drv, ok := reg[t.Backend]; ok && drv.Adopt(ts.State) {
			continue
		}
		fail(fmt.Sprintf("tunnels[%d].name", i), "%s: %s; fednet does not touch it: delete or rename it, or give the tunnel another name (overlay.interface)", t.Name, foreignInterface(*ts.Link, tunnel.Mark(t.Backend)))
	}

	for i, b := range p.Bridges {
		field := "bridges[" + strconv.Itoa(i) + "]."
		check := func(f, name string) {
			if l, ok := cur.Underlay.Interface(name); ok {
				fail(field+f, "%s: %s; fednet does not touch it: delete or rename it, or choose another name", name, foreignInterface(l, AliasPrefix+b.Network))
			}
		}
		check("name", b.Name)
		for k, v := range b.VXLANs {
			check("vxlans["+strconv.Itoa(k)+"].name", v.Name)
		}
		if b.Port == "" {
			continue
		}
		for _, r := range cur.Underlay.DefaultRoutes {
			if r.Device == b.Port {
				fail(field+"port", "%s holds the default route (%s): it is the machine's uplink, never a bridge port", b.Port, r.Destination)
			}
		}
		for _, r := range cur.Underlay.Endpoints {
			if r.Device == b.Port {
				fail(field+"port", "%s is the interface peer endpoint %s is reached by (the public side), never a bridge port", b.Port, r.Destination.Addr())
			}
		}
		if cur.L2.owns(b.Port) || cur.tunnel(b.Port) != nil {
			fail(field+"port", "%s is an interface of fednet's own, not a LAN segment", b.Port)
		}
	}

	// What a route or an allowed IP must not cover.
	type hold struct {
		addr netip.Addr
		what string
	}
	var held []hold
	for _, l := range cur.Underlay.Interfaces {
		for _, a := range l.Addresses {
			held = append(held, hold{a.Addr(), "an address of interface " + l.Name})
		}
	}
	for _, r := range cur.Underlay.DefaultRoutes {
		if r.Gateway.IsValid() {
			held = append(held, hold{r.Gateway, "the gateway of the default route via " + r.Device})
		}
	}
	for _, r := range cur.Underlay.Endpoints {
		held = append(held, hold{r.Destination.Addr(), "a peer endpoint"})
	}
	covered := func(field string, pre netip.Prefix) {
		if checkBounded(pre, p.Bounds) != nil {
			return // refused already, and said why
		}
		for _, h := range held {
			if pre.Contains(h.addr.Unmap()) {
				fail(field, "%s covers %s, %s: fednet never routes the machine's own network into a tunnel", pre, h.addr, h.what)
				return
			}
		}
	}
	for j, peer := range p.Peers {
		for _, a := range peer.AllowedIPs {
			covered(fmt.Sprintf("peers[%d] (%s).allowedIPs", j, peer.Gateway), a)
		}
	}
	for k, r := range p.Routes {
		covered("routes["+strconv.Itoa(k)+"].destination", r.Destination)
	}
	return errs
}

// foreignInterface describes an interface that is not fednet's.
func foreignInterface(l tunnel.Interface, mark string) string {
	s := "interface exists and is not fednet's (a " + orNone(l.Kind) + " link"
	if l.Alias != "" {
		s += " with alias " + strconv.Quote(l.Alias)
	}
	return s + ", without fednet's mark " + mark + ")"
}

// peersOf returns the peers of p whose links use backend b.
func peersOf(p plan.Gateway, b backend.Name) []plan.Peer {
	var out []plan.Peer
	for _, peer := range p.Peers {
		if peer.Backend == b {
			out = append(out, peer)
		}
	}
	return out
}

func validInterfaceName(name string) error {
	switch {
	case name == "":
		return errors.New("interface name is empty")
	case len(name) > 15:
		return fmt.Errorf("interface name %q is longer than 15 bytes", name)
	case name == "." || name == "..":
		return fmt.Errorf("interface name %q is not allowed", name)
	}
	for _, r := range name {
		if r == '/' || r == ':' || r <= ' ' || r > '~' {
			return fmt.Errorf("interface name %q has a character that is not allowed (/, :, space or non-ASCII)", name)
		}
	}
	return nil
}

// names returns the registry's backends for messages.
func (r registry) names() string {
	var s []string
	for b := range r {
		s = append(s, string(b))
	}
	slices.Sort(s)
	return strings.Join(s, ", ")
}
