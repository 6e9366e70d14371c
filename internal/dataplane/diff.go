package dataplane

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/fednet/fednet/internal/backend"
	"github.com/fednet/fednet/internal/plan"
)

// options are what diff needs beyond the current state and the plan.
type options struct {
	// publicKey is the public key of the private key the device must have.
	publicKey plan.Key
	mode      Mode
}

// op is one change to the machine. The concrete types below are the whole
// set; the fake and the Linux dataplane each execute them.
type op interface {
	// change renders the op like the command an operator would type.
	change() Change
	// link returns the interface the op needs to exist, "" for none.
	link() string
}

type (
	// linkDel deletes the tunnel interface; its addresses, routes and peers
	// go with it, and a userspace device exits.
	linkDel struct{ name string }
	// linkAdd creates the tunnel interface with a WireGuard device on it.
	linkAdd struct {
		name string
		mode Mode
	}
	// deviceSet sets the private key (to the configured one) and/or the
	// listen port.
	deviceSet struct {
		name       string
		privateKey bool
		listenPort int // -1: unchanged
	}
	// linkSet sets the MTU and/or brings the interface up.
	linkSet struct {
		name string
		mtu  int // 0: unchanged
		up   bool
	}
	addrAdd struct {
		dev    string
		prefix netip.Prefix
	}
	addrDel struct {
		dev    string
		prefix netip.Prefix
	}
	peerRemove struct {
		dev string
		key plan.Key
	}
	// peerSet adds a peer (create) or changes only the fields marked set.
	peerSet struct {
		dev    string
		key    plan.Key
		create bool
		// endpoint is "" for unchanged.
		endpoint      string
		setAllowedIPs bool
		allowedIPs    []netip.Prefix
		setKeepalive  bool
		keepalive     int
	}
	routeAdd struct{ route RouteState }
	routeDel struct{ route RouteState }
	// forwardingOn turns on IPv4 forwarding.
	forwardingOn struct{}
	// tableReplace replaces fednet's nftables table atomically.
	tableReplace struct {
		rules       ruleset
		fingerprint string
	}
	tableDel struct{ name string }
)

func (o linkDel) change() Change { return Change("ip link del " + o.name) }
func (o linkAdd) change() Change {
	if o.mode == Userspace {
		return Change("fednet wgdev " + o.name)
	}
	return Change("ip link add " + o.name + " type wireguard")
}
func (o deviceSet) change() Change {
	s := "wg set " + o.name
	if o.listenPort >= 0 {
		s += " listen-port " + strconv.Itoa(o.listenPort)
	}
	if o.privateKey {
		s += " private-key (set)"
	}
	return Change(s)
}
func (o linkSet) change() Change {
	s := "ip link set " + o.name
	if o.mtu > 0 {
		s += " mtu " + strconv.Itoa(o.mtu)
	}
	if o.up {
		s += " up"
	}
	return Change(s)
}
func (o addrAdd) change() Change {
	return Change("ip address add " + o.prefix.String() + " dev " + o.dev)
}
func (o addrDel) change() Change {
	return Change("ip address del " + o.prefix.String() + " dev " + o.dev)
}
func (o peerRemove) change() Change {
	return Change("wg set " + o.dev + " peer " + o.key.String() + " remove")
}
func (o peerSet) change() Change {
	s := "wg set " + o.dev + " peer " + o.key.String()
	if o.endpoint != "" {
		s += " endpoint " + o.endpoint
	}
	if o.setAllowedIPs && (len(o.allowedIPs) > 0 || !o.create) {
		s += " allowed-ips " + joinPrefixes(o.allowedIPs)
	}
	if o.setKeepalive {
		if o.keepalive == 0 {
			s += " persistent-keepalive off"
		} else {
			s += " persistent-keepalive " + strconv.Itoa(o.keepalive)
		}
	}
	return Change(s)
}
func (o routeAdd) change() Change {
	return Change("ip route add " + o.route.Destination.String() + " dev " + o.route.Device + " proto fednet")
}
func (o routeDel) change() Change {
	return Change("ip route del " + o.route.Destination.String() + " dev " + o.route.Device + " proto fednet")
}
func (forwardingOn) change() Change { return "sysctl -w net.ipv4.ip_forward=1" }
func (o tableReplace) change() Change {
	return Change("nft replace table inet " + o.rules.table + " (sha256:" + o.fingerprint[:8] + ")")
}
func (o tableDel) change() Change { return Change("nft delete table inet " + o.name) }

func (o linkDel) link() string      { return "" }
func (o linkAdd) link() string      { return "" }
func (o deviceSet) link() string    { return o.name }
func (o linkSet) link() string      { return o.name }
func (o addrAdd) link() string      { return o.dev }
func (o addrDel) link() string      { return o.dev }
func (o peerRemove) link() string   { return o.dev }
func (o peerSet) link() string      { return o.dev }
func (o routeAdd) link() string     { return o.route.Device }
func (o routeDel) link() string     { return "" }
func (forwardingOn) link() string   { return "" }
func (o tableReplace) link() string { return "" }
func (o tableDel) link() string     { return "" }

// diff returns the ops that bring a machine in state cur to plan p, in the
// order they must run. It is pure. Only differences produce ops: applying
// them to cur (as the fake does) yields a state whose diff is empty.
//
// Order: the firewall first, so the filter is in place before the tunnel
// opens a path; then the interface (recreated when it is of the wrong kind
// or its userspace device is gone), its device, MTU and up, addresses (old
// ones deleted before the new one is added, so that deleting a primary
// address cannot take the new secondary with it; deleting the last IPv4
// address makes the kernel drop the device's IPv4 routes, which are then
// added again), peers (removals first),
// bridged networks (see diffBridges), routes (deletions first), and
// forwarding last.
//
// An error with ops means part of the plan (a bridge whose name another
// interface holds) cannot be applied; the ops apply the rest.
//
// Peers whose public key is zero are skipped. An existing peer is changed
// only in the fields that differ: a peer whose allowed IPs changed keeps its
// endpoint and session. A plan peer without endpoint never clears the
// endpoint the device learned from the peer's packets. Forwarding is turned
// on when the plan wants it and never turned off.
func diff(cur State, p plan.Gateway, o options) ([]op, error) {
	if err := validatePlan(p); err != nil {
		return nil, err
	}
	tun := tunnelOf(p)
	name := tun.Name
	var ops []op

	if p.Firewall.Table != "" {
		rs := buildRuleset(p.Firewall)
		if fp := rs.fingerprint(); cur.Table == nil || cur.Table.Fingerprint != fp {
			ops = append(ops, tableReplace{rules: rs, fingerprint: fp})
		}
	}

	link, dev, routes := cur.Link, cur.WireGuard, cur.Routes
	if link != nil && link.Kind != KindKernel && link.Kind != KindUserspace {
		return nil, foreignLinkError(link)
	}
	if link != nil && (dev == nil ||
		o.mode == Kernel && link.Kind != KindKernel ||
		o.mode == Userspace && link.Kind != KindUserspace) {
		ops = append(ops, linkDel{name: name})
		link, dev, routes = nil, nil, routesNotOn(routes, name)
	}
	if link == nil {
		ops = append(ops, linkAdd{name: name, mode: o.mode})
		link = &LinkState{Name: name, Kind: o.mode.kind(), MTU: defaultMTU}
		dev = &WireGuardState{}
	}

	ds := deviceSet{name: name, listenPort: -1, privateKey: dev.PublicKey != o.publicKey}
	if port := tun.ListenPort; port != 0 && dev.ListenPort != port {
		ds.listenPort = port
	}
	if ds.privateKey || ds.listenPort >= 0 {
		ops = append(ops, ds)
	}

	ls := linkSet{name: name, up: !link.Up}
	if mtu := tun.MTU; mtu != 0 && link.MTU != mtu {
		ls.mtu = mtu
	}
	if ls.up || ls.mtu != 0 {
		ops = append(ops, ls)
	}

	want := tun.Address
	var kept []netip.Prefix
	for _, a := range link.Addresses {
		if a != want {
			ops = append(ops, addrDel{dev: name, prefix: a})
		} else {
			kept = append(kept, a)
		}
	}
	if hasIPv4(link.Addresses) && !hasIPv4(kept) {
		// The kernel flushes a device's IPv4 routes with its last IPv4
		// address; they are added again below.
		routes = withoutIPv4RoutesOn(routes, name)
	}
	if want.IsValid() && !slices.Contains(link.Addresses, want) {
		ops = append(ops, addrAdd{dev: name, prefix: want})
	}

	ops = append(ops, diffPeers(name, dev.Peers, p.Peers)...)
	// Bridged networks after the tunnel's address (the VXLAN devices'
	// local address) and before routes.
	l2, l2Err := diffBridges(cur, p)
	ops = append(ops, l2...)
	nb, nbErr := diffNeighbors(cur, p)
	ops = append(ops, nb...)
	ops = append(ops, diffRoutes(routes, p)...)

	if p.Forwarding && !cur.Forwarding {
		ops = append(ops, forwardingOn{})
	}
	return ops, errors.Join(l2Err, nbErr)
}

func diffPeers(dev string, have []PeerState, want []plan.Peer) []op {
	var ops []op
	current := map[plan.Key]PeerState{}
	for _, h := range have {
		current[h.PublicKey] = h
	}
	wanted := map[plan.Key]bool{}
	for _, w := range want {
		if !w.WireGuard.PublicKey.IsZero() {
			wanted[w.WireGuard.PublicKey] = true
		}
	}
	var removed []plan.Key
	for k := range current {
		if !wanted[k] {
			removed = append(removed, k)
		}
	}
	slices.SortFunc(removed, func(a, b plan.Key) int { return strings.Compare(a.String(), b.String()) })
	for _, k := range removed {
		ops = append(ops, peerRemove{dev: dev, key: k})
	}
	done := map[plan.Key]bool{}
	for _, w := range want {
		key := w.WireGuard.PublicKey
		if key.IsZero() || done[key] {
			continue
		}
		done[key] = true
		allowed := canonicalPrefixes(w.AllowedIPs)
		h, ok := current[key]
		if !ok {
			ops = append(ops, peerSet{
				dev: dev, key: key, create: true,
				endpoint:      w.Endpoint,
				setAllowedIPs: true, allowedIPs: allowed,
				setKeepalive: w.WireGuard.PersistentKeepalive != 0, keepalive: w.WireGuard.PersistentKeepalive,
			})
			continue
		}
		ps := peerSet{dev: dev, key: key}
		if w.Endpoint != "" && w.Endpoint != h.Endpoint {
			ps.endpoint = w.Endpoint
		}
		if !slices.Equal(allowed, canonicalPrefixes(h.AllowedIPs)) {
			ps.setAllowedIPs, ps.allowedIPs = true, allowed
		}
		if k := w.WireGuard.PersistentKeepalive; k != h.PersistentKeepalive {
			ps.setKeepalive, ps.keepalive = true, k
		}
		if ps.endpoint != "" || ps.setAllowedIPs || ps.setKeepalive {
			ops = append(ops, ps)
		}
	}
	return ops
}

func diffRoutes(have []RouteState, p plan.Gateway) []op {
	want := map[netip.Prefix]RouteState{}
	var order []RouteState
	for _, r := range p.Routes {
		rs := RouteState{Destination: r.Destination.Masked(), Device: r.Device}
		if rs.Device == "" {
			rs.Device = tunnelOf(p).Name
		}
		if _, dup := want[rs.Destination]; dup {
			continue
		}
		want[rs.Destination] = rs
		order = append(order, rs)
	}
	slices.SortFunc(order, func(a, b RouteState) int { return comparePrefix(a.Destination, b.Destination) })
	var ops []op
	present := map[RouteState]bool{}
	for _, h := range have {
		if w, ok := want[h.Destination]; ok && w == h {
			present[h] = true
			continue
		}
		ops = append(ops, routeDel{route: h})
	}
	for _, w := range order {
		if !present[w] {
			ops = append(ops, routeAdd{route: w})
		}
	}
	return ops
}

// down returns the ops that remove everything fednet owns from a machine in
// state cur: its bridges and VXLAN devices (ports are released, not
// deleted), the tunnel interface (with its routes and peers), fednet's
// routes on other interfaces, and the firewall table. Forwarding is left as
// it is: other software on the gateway may rely on it.
func down(cur State) ([]op, error) {
	ops := append(downNeighbors(cur), downBridges(cur)...)
	routes := cur.Routes
	var err error
	if l := cur.Link; l != nil {
		if l.Kind == KindKernel || l.Kind == KindUserspace {
			ops = append(ops, linkDel{name: l.Name})
			routes = routesNotOn(routes, l.Name)
		} else {
			err = foreignLinkError(l)
		}
	}
	for _, r := range routes {
		ops = append(ops, routeDel{route: r})
	}
	if cur.Table != nil {
		ops = append(ops, tableDel{name: cur.Table.Name})
	}
	return ops, err
}

func foreignLinkError(l *LinkState) error {
	return fmt.Errorf("interface %s exists and is a %s link, not WireGuard: fednet does not touch it; delete or rename it, or choose another interface name", l.Name, l.Kind)
}

func hasIPv4(ps []netip.Prefix) bool {
	return slices.ContainsFunc(ps, func(p netip.Prefix) bool { return p.Addr().Is4() })
}

func withoutIPv4RoutesOn(rs []RouteState, dev string) []RouteState {
	var out []RouteState
	for _, r := range rs {
		if r.Device != dev || !r.Destination.Addr().Is4() {
			out = append(out, r)
		}
	}
	return out
}

func routesNotOn(rs []RouteState, dev string) []RouteState {
	var out []RouteState
	for _, r := range rs {
		if r.Device != dev {
			out = append(out, r)
		}
	}
	return out
}

// kind returns the link kind mode creates; Auto predicts kernel.
func (m Mode) kind() string {
	if m == Userspace {
		return KindUserspace
	}
	return KindKernel
}

// validatePlan reports what in p cannot be applied, naming the field.
func validatePlan(p plan.Gateway) error {
	var errs []error
	if len(p.Tunnels) != 1 || p.Tunnels[0].Backend != backend.WireGuard {
		errs = append(errs, fmt.Errorf("tunnels: want one tunnel of backend %s; this fednet has no other", backend.WireGuard))
	}
	tun := tunnelOf(p)
	if err := validInterfaceName(tun.Name); err != nil {
		errs = append(errs, fmt.Errorf("tunnels[0].name: %w", err))
	}
	if port := tun.ListenPort; port < 0 || port > 65535 {
		errs = append(errs, fmt.Errorf("tunnels[0].listenPort %d is out of range 0-65535", port))
	}
	if mtu := tun.MTU; mtu != 0 && (mtu < 576 || mtu > 65535) {
		errs = append(errs, fmt.Errorf("tunnels[0].mtu %d is out of range 576-65535", mtu))
	}
	for _, peer := range p.Peers {
		for _, a := range peer.AllowedIPs {
			if !a.IsValid() {
				errs = append(errs, fmt.Errorf("peer %s: an allowed IP is not a valid prefix", peer.Gateway))
			}
		}
		if k := peer.WireGuard.PersistentKeepalive; k < 0 || k > 65535 {
			errs = append(errs, fmt.Errorf("peer %s: persistentKeepalive %d is out of range 0-65535", peer.Gateway, k))
		}
	}
	for _, r := range p.Routes {
		if !r.Destination.IsValid() {
			errs = append(errs, errors.New("routes: a destination is not a valid prefix"))
		}
		if r.Device != "" {
			if err := validInterfaceName(r.Device); err != nil {
				errs = append(errs, fmt.Errorf("route %s: device: %w", r.Destination, err))
			}
		}
	}
	if p.Firewall.Table != "" {
		if err := validateFirewall(p.Firewall); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, validateBridges(p)...)
	errs = append(errs, validateNeighbors(p)...)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("plan of gateway %q cannot be applied: %w", p.Name, err)
	}
	return nil
}

// tunnelOf is the plan's tunnel (validatePlan requires exactly one), or the
// zero Tunnel.
func tunnelOf(p plan.Gateway) plan.Tunnel {
	if len(p.Tunnels) == 0 {
		return plan.Tunnel{}
	}
	return p.Tunnels[0]
}

// gatewayPorts are the VXLAN ports of b that lead to other gateways.
func gatewayPorts(b plan.Bridge) []plan.VXLAN { return b.Ports(plan.ToGateways) }

// hostPorts are the neighbor tunnels of b.
func hostPorts(b plan.Bridge) []plan.VXLAN { return b.Ports(plan.ToHost) }

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
