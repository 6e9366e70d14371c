package dataplane

import (
	"net/netip"
	"slices"
	"strconv"

	"github.com/fednet/fednet/internal/backend"
	"github.com/fednet/fednet/internal/dataplane/tunnel"
)

// op is one change to the machine. Each op renders itself, says what it
// changes and applies itself to a State (the fake, and the core's
// predictions); the Linux dataplane executes it (linuxOp, *_linux.go).
// Tunnel drivers' ops come wrapped in driverOp.
type op interface {
	// change renders the op like the command an operator would type.
	change() Change
	// target says what the op changes.
	target() tunnel.Target
	// apply changes s as the machine would.
	apply(s *State)
}

// needs returns the interface o needs to exist, "" for none: ops on an
// interface whose creation failed are skipped.
func needs(o op) string {
	if t := o.target(); !t.Creates && !t.Deletes {
		return t.Interface
	}
	return ""
}

// creates returns the interface o creates, "" for none.
func creates(o op) string {
	if t := o.target(); t.Creates {
		return t.Interface
	}
	return ""
}

// driverOp is an op of the tunnel driver of backend on the tunnel name.
type driverOp struct {
	backend backend.Name
	name    string
	op      tunnel.Op
}

func (o driverOp) change() Change        { return o.op.Change() }
func (o driverOp) target() tunnel.Target { return o.op.Target() }

// apply applies the driver's op to its tunnel; deleting the interface
// takes the routes through it along.
func (o driverOp) apply(s *State) {
	t := s.tunnel(o.name)
	if t == nil {
		s.Tunnels = append(s.Tunnels, TunnelState{Name: o.name, Backend: o.backend})
		t = &s.Tunnels[len(s.Tunnels)-1]
	}
	had := t.Link != nil
	o.op.Apply(&t.State)
	if t.Link == nil {
		if had {
			s.Routes = routesNotOn(s.Routes, o.name)
		}
		s.Tunnels = slices.DeleteFunc(s.Tunnels, func(x TunnelState) bool { return x.Name == o.name && x.Link == nil })
	}
}

// The core's own ops.
type (
	// tunnelMark marks a tunnel interface that fednet adopted (made by a
	// fednet from before marks) as the tunnel of backend.
	tunnelMark struct {
		name    string
		backend backend.Name
	}
	// linkDelete deletes a tunnel interface marked for a backend that has
	// no driver here.
	linkDelete struct{ name string }
	// linkSet sets the MTU and/or brings an interface up: a tunnel, a
	// bridge or a VXLAN port.
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

func (o tunnelMark) change() Change {
	return Change("ip link set " + o.name + " alias " + tunnel.Mark(o.backend))
}
func (o linkDelete) change() Change { return Change("ip link del " + o.name) }
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

func (o tunnelMark) target() tunnel.Target { return tunnel.Target{Interface: o.name} }
func (o linkDelete) target() tunnel.Target { return tunnel.Target{Interface: o.name, Deletes: true} }
func (o linkSet) target() tunnel.Target    { return tunnel.Target{Interface: o.name} }
func (o addrAdd) target() tunnel.Target    { return tunnel.Target{Interface: o.dev} }
func (o addrDel) target() tunnel.Target    { return tunnel.Target{Interface: o.dev} }
func (o routeAdd) target() tunnel.Target {
	return tunnel.Target{Interface: o.route.Device, Prefixes: []netip.Prefix{o.route.Destination}}
}

// A route is deleted by destination and device whatever the device: the
// route is fednet's (RouteProtocol), and a missing device is no error.
func (o routeDel) target() tunnel.Target   { return tunnel.Target{} }
func (forwardingOn) target() tunnel.Target { return tunnel.Target{} }
func (o tableReplace) target() tunnel.Target {
	return tunnel.Target{Table: o.rules.table}
}
func (o tableDel) target() tunnel.Target { return tunnel.Target{Table: o.name} }

func (o tunnelMark) apply(s *State) {
	if t := s.tunnel(o.name); t != nil && t.Link != nil {
		t.Link.Alias = tunnel.Mark(o.backend)
		t.Backend = o.backend
	}
}
func (o linkDelete) apply(s *State) {
	s.Tunnels = slices.DeleteFunc(s.Tunnels, func(t TunnelState) bool { return t.Name == o.name })
	s.Routes = routesNotOn(s.Routes, o.name)
}
func (o linkSet) apply(s *State) {
	var mtu *int
	var up *bool
	if t := s.tunnel(o.name); t != nil && t.Link != nil {
		mtu, up = &t.Link.MTU, &t.Link.Up
	} else if b := s.L2.bridge(o.name); b != nil {
		mtu, up = &b.MTU, &b.Up
	} else if v := s.L2.vxlan(o.name); v != nil {
		mtu, up = &v.MTU, &v.Up
	} else {
		return
	}
	if o.mtu > 0 {
		*mtu = o.mtu
	}
	if o.up {
		*up = true
	}
}
func (o addrAdd) apply(s *State) {
	if t := s.tunnel(o.dev); t != nil && t.Link != nil {
		t.Link.Addresses = append(t.Link.Addresses, o.prefix)
		sortPrefixes(t.Link.Addresses)
	}
}

// apply models the kernel: deleting a link's last IPv4 address drops the
// link's IPv4 routes.
func (o addrDel) apply(s *State) {
	t := s.tunnel(o.dev)
	if t == nil || t.Link == nil {
		return
	}
	t.Link.Addresses = slices.DeleteFunc(t.Link.Addresses, func(a netip.Prefix) bool { return a == o.prefix })
	if o.prefix.Addr().Is4() && !hasIPv4(t.Link.Addresses) {
		s.Routes = withoutIPv4RoutesOn(s.Routes, o.dev)
	}
}
func (o routeAdd) apply(s *State) { s.Routes = append(s.Routes, o.route) }
func (o routeDel) apply(s *State) {
	s.Routes = slices.DeleteFunc(s.Routes, func(r RouteState) bool { return r == o.route })
}
func (forwardingOn) apply(s *State) { s.Forwarding = true }
func (o tableReplace) apply(s *State) {
	s.Table = &TableState{Name: o.rules.table, Fingerprint: o.fingerprint}
}
func (o tableDel) apply(s *State) { s.Table = nil }

// setLink returns the linkSet that brings interface name up and gives it
// MTU want (0: leave it), from its current mtu and up; nil when nothing
// differs.
func setLink(name string, mtu int, up bool, want int) []op {
	ls := linkSet{name: name, up: !up}
	if want != 0 && mtu != want {
		ls.mtu = want
	}
	if !ls.up && ls.mtu == 0 {
		return nil
	}
	return []op{ls}
}

// diffAddresses returns the ops that leave dev with want as its only
// address (none when want is invalid): the others are deleted first, so
// that deleting a primary address cannot take the new secondary with it.
func diffAddresses(dev string, have []netip.Prefix, want netip.Prefix) []op {
	var ops []op
	for _, a := range have {
		if a != want {
			ops = append(ops, addrDel{dev: dev, prefix: a})
		}
	}
	if want.IsValid() && !slices.Contains(have, want) {
		ops = append(ops, addrAdd{dev: dev, prefix: want})
	}
	return ops
}
