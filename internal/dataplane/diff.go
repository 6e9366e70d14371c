package dataplane

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/fednet/fednet/internal/dataplane/tunnel"
	"github.com/fednet/fednet/internal/plan"
)

// diff returns the ops that bring a machine in state cur to plan p, in the
// order they must run, or the error of a plan it refuses (checkPlan: then
// no op). It is pure. Only differences produce ops: applying them to cur
// (as the fake does) yields a state whose diff is empty.
//
// Order: the firewall first, so the filter is in place before a tunnel
// opens a path; fednet's tunnels the plan no longer has go; then per
// tunnel, its driver's setup (the interface, recreated when the driver
// says so, and its device), the mark of an adopted interface, MTU and up,
// addresses (old ones deleted before the new one is added, so that
// deleting a primary address cannot take the new secondary with it), and
// the driver's peers; bridged networks (see kernelL2.diff); routes
// (deletions first); forwarding last. Deleting an interface or its last
// IPv4 address makes the kernel drop routes through it; they are added
// again, since routes are diffed against the state the earlier ops leave
// (sim). Forwarding is turned on when the plan wants it and never turned
// off.
func diff(cur State, p plan.Gateway, reg registry, l l2) ([]op, error) {
	if err := checkPlan(cur, p, reg, l); err != nil {
		return nil, err
	}
	var ops []op
	sim := cur.Clone()
	emit := func(os ...op) {
		for _, o := range os {
			ops = append(ops, o)
			o.apply(&sim)
		}
	}

	rs := buildRuleset(p.Firewall)
	if fp := rs.fingerprint(); cur.Table == nil || cur.Table.Fingerprint != fp {
		emit(tableReplace{rules: rs, fingerprint: fp})
	}

	named := map[string]bool{}
	for _, t := range p.Tunnels {
		named[t.Name] = true
	}
	for _, t := range cur.Tunnels {
		if !named[t.Name] && t.Marked() != "" {
			emit(downTunnel(t, reg)...)
		}
	}

	for _, t := range p.Tunnels {
		drv := reg[t.Backend]
		if ts := sim.tunnel(t.Name); ts != nil && ts.Link != nil {
			if m := ts.Marked(); m != "" && m != t.Backend {
				// fednet's tunnel of another backend: its driver takes it
				// down, this one makes it anew.
				emit(downTunnel(*ts, reg)...)
			}
		}
		var st tunnel.State
		if ts := sim.tunnel(t.Name); ts != nil {
			st = ts.State
		}
		d := drv.Diff(st.Clone(), t, peersOf(p, t.Backend))
		emit(wrap(t, d.Setup)...)
		ts := sim.tunnel(t.Name)
		if ts == nil || ts.Link == nil {
			return nil, fmt.Errorf("dataplane: the %s driver's setup of tunnel %s leaves no interface", t.Backend, t.Name)
		}
		link := ts.Link
		if link.Alias != tunnel.Mark(t.Backend) {
			emit(tunnelMark{name: t.Name, backend: t.Backend})
		}
		emit(setLink(t.Name, link.MTU, link.Up, t.MTU)...)
		emit(diffAddresses(t.Name, slices.Clone(link.Addresses), t.Address)...)
		emit(wrap(t, d.Peers)...)
	}

	emit(l.diff(sim.L2, p.Bridges)...)
	emit(diffRoutes(sim.Routes, p)...)
	if p.Forwarding && !sim.Forwarding {
		emit(forwardingOn{})
	}
	return ops, nil
}

// wrap returns the driver's ops of tunnel t as the core's.
func wrap(t plan.Tunnel, ops []tunnel.Op) []op {
	var out []op
	for _, o := range ops {
		out = append(out, driverOp{backend: t.Backend, name: t.Name, op: o})
	}
	return out
}

// downTunnel returns the ops that remove fednet's tunnel t: its driver's,
// or a plain deletion when its backend has no driver here.
func downTunnel(t TunnelState, reg registry) []op {
	b := t.Marked()
	if b == "" {
		b = t.Backend
	}
	drv, ok := reg[b]
	if !ok {
		return []op{linkDelete{name: t.Name}}
	}
	return wrap(plan.Tunnel{Backend: b, Name: t.Name}, drv.Down(t.State))
}

func diffRoutes(have []RouteState, p plan.Gateway) []op {
	want := map[netip.Prefix]RouteState{}
	var order []RouteState
	for _, r := range p.Routes {
		rs := RouteState{Destination: r.Destination.Masked(), Device: r.Device}
		if rs.Device == "" {
			rs.Device = p.Tunnels[0].Name
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
// deleted), its tunnel interfaces (with their routes and peers), fednet's
// routes on other interfaces, and its firewall table. A tunnel interface
// without fednet's mark is deleted only when its driver adopts it
// (tunnel.Driver.Adopt); another, and a table named like fednet's that
// fednet did not build, are left and reported. Forwarding is left as it
// is: other software on the gateway may rely on it.
func down(cur State, reg registry, l l2) ([]op, error) {
	var errs []error
	ops := l.down(cur.L2)
	sim := cur.Clone()
	for _, t := range cur.Tunnels {
		if t.Link == nil {
			continue
		}
		if t.Marked() == "" {
			if drv, ok := reg[t.Backend]; !ok || !drv.Adopt(t.State) {
				errs = append(errs, fmt.Errorf("tunnel %s: %s; fednet leaves it alone", t.Name, foreignInterface(*t.Link, tunnel.Mark(t.Backend))))
				continue
			}
		}
		for _, o := range downTunnel(t, reg) {
			ops = append(ops, o)
			o.apply(&sim)
		}
	}
	for _, r := range sim.Routes {
		ops = append(ops, routeDel{route: r})
	}
	if t := cur.Table; t != nil {
		if t.Owned() {
			ops = append(ops, tableDel{name: t.Name})
		} else {
			errs = append(errs, fmt.Errorf("nftables table inet %s was not made by fednet (no fednet fingerprint); fednet leaves it alone", t.Name))
		}
	}
	return ops, errors.Join(errs...)
}
