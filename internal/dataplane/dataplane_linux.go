package dataplane

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/fednet/fednet/internal/backend"
	"github.com/fednet/fednet/internal/dataplane/tunnel"
	"github.com/fednet/fednet/internal/plan"
)

const ipForward = "/proc/sys/net/ipv4/ip_forward"

// linuxOp is an op that runs on Linux; it returns the change it made.
type linuxOp interface {
	exec(ctx context.Context, d *linuxDataplane) (Change, error)
}

// linuxDataplane changes the network namespace the process runs in.
type linuxDataplane struct {
	reg      registry
	machines map[backend.Name]tunnel.Machine
	logf     func(string, ...any)

	mu sync.Mutex // serializes Apply and Down
	// guard syncs the guard of the site's hosts (syncGuard; tests fail
	// it); guardErr is its last failure, logged once.
	guard    func([]guard) ([]Change, error)
	guardErr string
}

// NewLinux returns the dataplane of this machine: the network namespace the
// process runs in. It reads the kernel through netlink, nftables and the
// tunnel drivers and changes it the same way. Without a WireGuard private
// key it takes plans down and reports status, and refuses to apply. Apply
// and Down are safe for concurrent use; they are serialized.
func NewLinux(cfg Config) (Dataplane, error) {
	return newLinux(cfg)
}

func newLinux(cfg Config) (*linuxDataplane, error) {
	ms, err := builtIn(cfg)
	if err != nil {
		return nil, fmt.Errorf("dataplane: %w", err)
	}
	ms = append(ms, cfg.Drivers...)
	d := &linuxDataplane{machines: map[backend.Name]tunnel.Machine{}, logf: cfg.Logf, guard: syncGuard}
	var drivers []tunnel.Driver
	for _, m := range ms {
		d.machines[m.Backend()] = m
		drivers = append(drivers, m)
	}
	if d.reg, err = newRegistry(drivers...); err != nil {
		return nil, err
	}
	if d.logf == nil {
		d.logf = func(string, ...any) {}
	}
	return d, nil
}

// Apply implements Dataplane.
func (d *linuxDataplane) Apply(ctx context.Context, p plan.Gateway) ([]Change, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	p, resolveErr := resolveEndpoints(ctx, p)
	errs := []error{resolveErr}
	var changes []Change
	failed := map[Change]bool{} // not retried in the second round
	done := map[backend.Name][]tunnel.Op{}
	tunnels := map[string]bool{}
	for _, t := range p.Tunnels {
		tunnels[t.Name] = true
	}
	planned := false // diff took the plan (a refused plan changes nothing)
	// Creating a tunnel interface changes what the rest must do (its MTU,
	// its device); rather than trust a prediction, read the kernel again
	// after creating it and diff anew. The second round never recreates it.
	for round := 0; round < 2; round++ {
		cur, err := d.read(ctx, p)
		if err != nil {
			errs = append(errs, err)
			break
		}
		ops, err := diff(cur, p, d.reg, kernelL2{})
		if err != nil {
			errs = append(errs, err)
			break
		}
		planned = true
		again := false
		unusable := map[string]bool{}
		for _, o := range ops {
			if err := ctx.Err(); err != nil {
				errs = append(errs, err)
				return changes, errors.Join(errs...)
			}
			t := o.target()
			recreate := tunnels[t.Interface] && (t.Creates || t.Deletes)
			if round == 1 && recreate {
				if !unusable[t.Interface] {
					errs = append(errs, fmt.Errorf("interface %s is still not a working tunnel after creating it", t.Interface))
					unusable[t.Interface] = true
				}
				continue
			}
			if unusable[needs(o)] || failed[o.change()] {
				continue
			}
			c, err := o.(linuxOp).exec(ctx, d)
			if err != nil {
				errs = append(errs, err)
				failed[o.change()] = true
				if recreate || t.Creates {
					unusable[t.Interface] = true
				}
				continue
			}
			changes = append(changes, c)
			if dop, ok := o.(driverOp); ok {
				done[dop.backend] = append(done[dop.backend], dop.op)
			}
			if tunnels[t.Interface] && t.Creates {
				again = true
				break
			}
		}
		if !again {
			break
		}
	}
	for _, t := range p.Tunnels {
		if m, ok := d.machines[t.Backend]; ok && len(done[t.Backend]) > 0 {
			m.Settle(ctx, t, peersOf(p, t.Backend), done[t.Backend])
		}
	}
	if planned {
		// The guard is a protection, not the plan: a kernel without
		// bridge-family nftables runs the plan without it (logged once).
		gc, err := d.guard(guardsOf(p))
		changes = append(changes, gc...)
		if msg := fmt.Sprint(err); err != nil && msg != d.guardErr {
			d.logf("dataplane: %v; bridged networks run without it (a frame of a site's host that comes back round can teach the site's switch the host behind this gateway)", err)
			d.guardErr = msg
		} else if err == nil {
			d.guardErr = ""
		}
	}
	// The virtual address last: a gateway takes the site's hosts once it
	// forwards for them.
	vc, err := syncVirtual(p)
	changes = append(changes, vc...)
	errs = append(errs, err)
	return changes, errors.Join(errs...)
}

// OnEvent implements Supervised: every driver that supervises its tunnels
// gets f.
func (d *linuxDataplane) OnEvent(f func(TunnelEvent)) {
	for _, m := range d.machines {
		if s, ok := m.(tunnel.Supervisor); ok {
			s.OnEvent(f)
		}
	}
}

// Down implements Dataplane. It leaves IPv4 forwarding as it is: other
// software on the machine may rely on it.
func (d *linuxDataplane) Down(ctx context.Context, p plan.Gateway) ([]Change, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	cur, err := d.read(ctx, p)
	if err != nil {
		return nil, err
	}
	ops, downErr := down(cur, d.reg, kernelL2{})
	changes, vipErr := releaseVirtual(p)
	gc, guardErr := syncGuard(nil)
	changes = append(changes, gc...)
	// The transit device (transit.go) and the bridged shapes' separation
	// (shapes_linux.go), which the agent's failover makes.
	errs := []error{downErr, vipErr, guardErr, DownTransit(), SeparateShapes(nil)}
	for _, o := range ops {
		c, err := o.(linuxOp).exec(ctx, d)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		changes = append(changes, c)
	}
	return changes, errors.Join(errs...)
}

// Status implements Dataplane.
func (d *linuxDataplane) Status(ctx context.Context, p plan.Gateway) ([]LinkState, error) {
	return status(p, d.reg, time.Now(), func(t plan.Tunnel) (tunnel.State, error) {
		link, err := netlink.LinkByName(t.Name)
		var notFound netlink.LinkNotFoundError
		switch {
		case errors.As(err, &notFound):
			return tunnel.State{}, nil
		case err != nil:
			return tunnel.State{}, fmt.Errorf("reading interface %s: %w", t.Name, err)
		}
		iface := interfaceOf(link)
		m, ok := d.machines[t.Backend]
		if !ok {
			return tunnel.State{Link: &iface}, nil
		}
		dev, err := m.Read(ctx, iface)
		st := tunnel.State{Link: &iface, Device: dev}
		if err == nil && iface.Alias != tunnel.Mark(t.Backend) && !m.Adopt(st) {
			// Someone else's interface says nothing of fednet's links.
			return tunnel.State{}, fmt.Errorf("interface %s: %s", t.Name, foreignInterface(iface, tunnel.Mark(t.Backend)))
		}
		return st, err
	})
}

// read returns the machine's state as far as plan p is concerned: every
// tunnel interface p names or fednet marked (with its device, read by its
// driver), fednet's bridged networks, its routes, forwarding, the table
// plan.Table, and the underlay (the other interfaces, the default routes,
// the routes to p's peer endpoints).
func (d *linuxDataplane) read(ctx context.Context, p plan.Gateway) (State, error) {
	var s State
	links, err := netlink.LinkList()
	if err != nil {
		return s, fmt.Errorf("listing interfaces: %w", err)
	}
	names := map[int]string{}
	for _, l := range links {
		names[l.Attrs().Index] = l.Attrs().Name
	}
	planned := map[string]backend.Name{}
	for _, t := range p.Tunnels {
		planned[t.Name] = t.Backend
	}
	l2, l2Owned, err := readL2(links, names)
	if err != nil {
		return s, err
	}
	s.L2 = l2
	for _, l := range links {
		a := l.Attrs()
		if l2Owned[a.Index] {
			continue
		}
		iface := interfaceOf(l)
		if err := readAddresses(l, &iface); err != nil {
			return s, err
		}
		b, isPlanned := planned[a.Name]
		marked := strings.HasPrefix(a.Alias, tunnel.MarkPrefix)
		if !marked {
			s.Underlay.Interfaces = append(s.Underlay.Interfaces, iface)
		}
		if !isPlanned && !marked {
			continue
		}
		ts := TunnelState{Name: a.Name, Backend: b, State: tunnel.State{Link: &iface}}
		if !isPlanned {
			ts.Backend = ts.Marked()
		}
		if m, ok := d.machines[ts.Backend]; ok {
			dev, err := m.Read(ctx, iface)
			if err != nil {
				return s, err
			}
			ts.Device = dev
		}
		s.Tunnels = append(s.Tunnels, ts)
	}
	if s.Routes, err = readRoutes(names); err != nil {
		return s, err
	}
	fwd, err := os.ReadFile(ipForward)
	if err != nil {
		return s, fmt.Errorf("reading IPv4 forwarding: %w", err)
	}
	s.Forwarding = strings.TrimSpace(string(fwd)) == "1"
	if s.Table, err = readTable(plan.Table); err != nil {
		return s, fmt.Errorf("reading nftables table inet %s: %w", plan.Table, err)
	}
	if s.Underlay.DefaultRoutes, err = readDefaultRoutes(names); err != nil {
		return s, err
	}
	s.Underlay.Endpoints = readEndpointRoutes(p, names)
	s.normalize()
	return s, nil
}

// interfaceOf returns the interface without its addresses.
func interfaceOf(link netlink.Link) tunnel.Interface {
	a := link.Attrs()
	kind := link.Type()
	if tt, ok := link.(*netlink.Tuntap); ok {
		kind = "tap"
		if tt.Mode == netlink.TUNTAP_MODE_TUN {
			kind = "tun"
		}
	}
	return tunnel.Interface{Name: a.Name, Kind: kind, Alias: a.Alias, MTU: a.MTU, Up: a.Flags&net.FlagUp != 0}
}

func readAddresses(link netlink.Link, iface *tunnel.Interface) error {
	addrs, err := netlink.AddrList(link, netlink.FAMILY_ALL)
	if err != nil {
		return fmt.Errorf("reading addresses of %s: %w", iface.Name, err)
	}
	for _, a := range addrs {
		p, ok := prefixOf(a.IPNet)
		if !ok || p.Addr().Is6() && p.Addr().IsLinkLocalUnicast() {
			continue
		}
		iface.Addresses = append(iface.Addresses, p)
	}
	sortPrefixes(iface.Addresses)
	return nil
}

func readRoutes(names map[int]string) ([]RouteState, error) {
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_ALL,
		&netlink.Route{Protocol: RouteProtocol}, netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		return nil, fmt.Errorf("listing fednet routes (proto %d): %w", RouteProtocol, err)
	}
	var out []RouteState
	for _, r := range routes {
		dst, ok := routeDst(r)
		if !ok {
			continue
		}
		out = append(out, RouteState{Destination: dst, Device: names[r.LinkIndex]})
	}
	return out, nil
}

func routeDst(r netlink.Route) (netip.Prefix, bool) {
	if r.Dst == nil {
		if r.Family == unix.AF_INET6 {
			return netip.MustParsePrefix("::/0"), true
		}
		return netip.MustParsePrefix("0.0.0.0/0"), true
	}
	return prefixOf(r.Dst)
}

// readDefaultRoutes returns the main table's default routes, one per next
// hop.
func readDefaultRoutes(names map[int]string) ([]UnderlayRoute, error) {
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("listing routes: %w", err)
	}
	var out []UnderlayRoute
	for _, r := range routes {
		dst, ok := routeDst(r)
		if !ok || dst.Bits() != 0 {
			continue
		}
		hops := []*netlink.NexthopInfo{{LinkIndex: r.LinkIndex, Gw: r.Gw}}
		if len(r.MultiPath) > 0 {
			hops = r.MultiPath
		}
		for _, h := range hops {
			u := UnderlayRoute{Destination: dst, Device: names[h.LinkIndex]}
			if gw, ok := netip.AddrFromSlice(h.Gw); ok {
				u.Gateway = gw.Unmap()
			}
			out = append(out, u)
		}
	}
	return out, nil
}

// readEndpointRoutes returns, for each peer endpoint of p that is an
// address, the interface the kernel routes it by; endpoints it has no
// route to are left out.
func readEndpointRoutes(p plan.Gateway, names map[int]string) []UnderlayRoute {
	var out []UnderlayRoute
	for _, peer := range p.Peers {
		ap, err := netip.ParseAddrPort(peer.Endpoint)
		if err != nil {
			continue
		}
		a := ap.Addr().Unmap()
		u := UnderlayRoute{Destination: netip.PrefixFrom(a, a.BitLen())}
		if routes, err := netlink.RouteGet(a.AsSlice()); err == nil && len(routes) > 0 {
			u.Device = names[routes[0].LinkIndex]
			if gw, ok := netip.AddrFromSlice(routes[0].Gw); ok {
				u.Gateway = gw.Unmap()
			}
		}
		out = append(out, u)
	}
	return out
}

// The core ops' exec.

func (o driverOp) exec(ctx context.Context, d *linuxDataplane) (Change, error) {
	m, ok := d.machines[o.backend]
	if !ok {
		return o.change(), fmt.Errorf("%s: backend %q has no driver here", o.change(), o.backend)
	}
	return m.Exec(ctx, o.op)
}

func (o tunnelMark) exec(context.Context, *linuxDataplane) (Change, error) {
	err := withLinks(func(l ...netlink.Link) error { return netlink.LinkSetAlias(l[0], tunnel.Mark(o.backend)) }, o.name)
	return wrapExec(o, "marking "+o.name+" as fednet's", err)
}

func (o linkDelete) exec(context.Context, *linuxDataplane) (Change, error) {
	return wrapExec(o, "deleting interface "+o.name, delLinkIfPresent(o.name))
}

func (o linkSet) exec(context.Context, *linuxDataplane) (Change, error) {
	link, err := netlink.LinkByName(o.name)
	if err != nil {
		return o.change(), fmt.Errorf("setting %s: %w", o.name, err)
	}
	if o.mtu > 0 {
		if err := netlink.LinkSetMTU(link, o.mtu); err != nil {
			return o.change(), fmt.Errorf("setting MTU of %s to %d: %w", o.name, o.mtu, err)
		}
	}
	if o.up {
		if err := netlink.LinkSetUp(link); err != nil {
			return o.change(), fmt.Errorf("bringing %s up: %w", o.name, err)
		}
	}
	return o.change(), nil
}

func (o addrAdd) exec(context.Context, *linuxDataplane) (Change, error) {
	return wrapExec(o, fmt.Sprintf("adding address %s to %s", o.prefix, o.dev), changeAddr(o.dev, o.prefix, netlink.AddrAdd))
}

func (o addrDel) exec(context.Context, *linuxDataplane) (Change, error) {
	return wrapExec(o, fmt.Sprintf("deleting address %s from %s", o.prefix, o.dev), changeAddr(o.dev, o.prefix, netlink.AddrDel))
}

func (o routeAdd) exec(context.Context, *linuxDataplane) (Change, error) {
	r, err := route(o.route)
	if err == nil {
		err = netlink.RouteAdd(r)
	}
	return wrapExec(o, fmt.Sprintf("adding route %s dev %s", o.route.Destination, o.route.Device), err)
}

func (o routeDel) exec(context.Context, *linuxDataplane) (Change, error) {
	r, err := route(o.route)
	if err == nil {
		err = netlink.RouteDel(r)
	}
	var notFound netlink.LinkNotFoundError
	if errors.As(err, &notFound) || errors.Is(err, unix.ESRCH) {
		err = nil // gone already
	}
	return wrapExec(o, fmt.Sprintf("deleting route %s dev %s", o.route.Destination, o.route.Device), err)
}

func (o forwardingOn) exec(context.Context, *linuxDataplane) (Change, error) {
	return wrapExec(o, "turning on IPv4 forwarding", os.WriteFile(ipForward, []byte("1\n"), 0o644))
}

func (o tableReplace) exec(context.Context, *linuxDataplane) (Change, error) {
	return wrapExec(o, "replacing nftables table inet "+o.rules.table, replaceTable(o.rules, o.fingerprint))
}

func (o tableDel) exec(context.Context, *linuxDataplane) (Change, error) {
	return wrapExec(o, "deleting nftables table inet "+o.name, deleteTable(o.name))
}

func changeAddr(dev string, p netip.Prefix, f func(netlink.Link, *netlink.Addr) error) error {
	link, err := netlink.LinkByName(dev)
	if err != nil {
		return err
	}
	n := ipNet(p)
	return f(link, &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: n.Mask}})
}

func route(r RouteState) (*netlink.Route, error) {
	link, err := netlink.LinkByName(r.Device)
	if err != nil {
		return nil, err
	}
	n := ipNet(r.Destination)
	nr := &netlink.Route{LinkIndex: link.Attrs().Index, Dst: &n, Protocol: RouteProtocol}
	if r.Destination.Addr().Is4() {
		nr.Scope = netlink.SCOPE_LINK
	}
	return nr, nil
}

var (
	prefixOf = tunnel.PrefixOf
	ipNet    = tunnel.IPNet
)

// resolveEndpoints returns p with every peer endpoint as ip:port, resolving
// host names; a peer whose endpoint does not resolve keeps the endpoint its
// device has (Endpoint "").
func resolveEndpoints(ctx context.Context, p plan.Gateway) (plan.Gateway, error) {
	peers := slices.Clone(p.Peers)
	var errs []error
	for i, peer := range peers {
		if peer.Endpoint == "" {
			continue
		}
		ep, err := resolveEndpoint(ctx, peer.Endpoint)
		if err != nil {
			errs = append(errs, fmt.Errorf("peer %s: endpoint %q: %w", peer.Gateway, peer.Endpoint, err))
		}
		peers[i].Endpoint = ep
	}
	p.Peers = peers
	return p, errors.Join(errs...)
}

func resolveEndpoint(ctx context.Context, s string) (string, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()).String(), nil
	}
	host, portStr, err := net.SplitHostPort(s)
	if err != nil {
		return "", err
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return "", fmt.Errorf("port %q is not a number 0-65535", portStr)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return "", err
	}
	if len(addrs) == 0 {
		return "", fmt.Errorf("host %s has no address", host)
	}
	// Prefer IPv4, as wg does for names with both.
	best := addrs[0]
	for _, a := range addrs {
		if a.Unmap().Is4() {
			best = a
			break
		}
	}
	return netip.AddrPortFrom(best.Unmap(), uint16(port)).String(), nil
}
