package dataplane

import (
	"bytes"
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
	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/fednet/fednet/internal/plan"
)

const ipForward = "/proc/sys/net/ipv4/ip_forward"

// linuxDataplane changes the network namespace the process runs in.
type linuxDataplane struct {
	cfg  Config
	pub  plan.Key
	logf func(string, ...any)

	mu sync.Mutex // serializes Apply and Down

	pidsMu sync.Mutex
	pids   []int // userspace devices started, for tests
}

// NewLinux returns the dataplane of this machine: the network namespace the
// process runs in. It reads the kernel through netlink, wgctrl and
// nftables and changes it the same way. Apply and Down are safe for
// concurrent use; they are serialized.
func NewLinux(cfg Config) (Dataplane, error) {
	return newLinux(cfg)
}

func newLinux(cfg Config) (*linuxDataplane, error) {
	if cfg.PrivateKey.IsZero() {
		return nil, errors.New("dataplane: Config.PrivateKey is required")
	}
	if cfg.WireGuard < Auto || cfg.WireGuard > Userspace {
		return nil, fmt.Errorf("dataplane: Config.WireGuard %v is not valid: use Auto, Kernel or Userspace", cfg.WireGuard)
	}
	if len(cfg.WGDevCommand) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("dataplane: finding this executable for the userspace WireGuard command: %w", err)
		}
		cfg.WGDevCommand = []string{exe, "wgdev"}
	}
	cfg.WGDevCommand = slices.Clone(cfg.WGDevCommand)
	logf := cfg.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	return &linuxDataplane{
		cfg:  cfg,
		pub:  plan.Key(wgtypes.Key(cfg.PrivateKey).PublicKey()),
		logf: logf,
	}, nil
}

// Apply implements Dataplane.
func (d *linuxDataplane) Apply(ctx context.Context, p plan.Gateway) ([]Change, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := validatePlan(p); err != nil {
		return nil, err
	}
	p, resolveErr := resolveEndpoints(ctx, p)
	errs := []error{resolveErr}
	var changes []Change
	failed := map[Change]bool{} // not retried in the second round
	var created []plan.Key      // peers added
	rekeyed := false            // our own key changed: every link is new
	var diffErr error           // part of the plan cannot be applied
	// Creating the interface changes what the rest must do (its MTU, its
	// device); rather than trust a prediction, read the kernel again after
	// creating it and diff anew. The second round never recreates it.
	for round := 0; round < 2; round++ {
		cur, err := d.read(ctx, tunnelOf(p).Name, p.Firewall.Table, p.Bridges)
		if err != nil {
			errs = append(errs, err)
			break
		}
		ops, err := diff(cur, p, options{publicKey: d.pub, mode: d.cfg.WireGuard})
		if ops == nil && err != nil {
			errs = append(errs, err)
			break
		}
		diffErr = err
		again := false
		unusable := map[string]bool{}
		for _, o := range ops {
			if err := ctx.Err(); err != nil {
				errs = append(errs, err)
				return changes, errors.Join(errs...)
			}
			_, isAdd := o.(linkAdd)
			_, isDel := o.(linkDel)
			if round == 1 && (isAdd || isDel) {
				if !unusable[tunnelOf(p).Name] {
					errs = append(errs, fmt.Errorf("interface %s is still not a working WireGuard interface after creating it", tunnelOf(p).Name))
					unusable[tunnelOf(p).Name] = true
				}
				continue
			}
			if unusable[o.link()] || failed[o.change()] {
				continue
			}
			c, err := d.exec(ctx, o)
			if err != nil {
				errs = append(errs, err)
				failed[o.change()] = true
				if isAdd || isDel {
					unusable[tunnelOf(p).Name] = true
				}
				if n := creates(o); n != "" {
					unusable[n] = true
				}
				continue
			}
			changes = append(changes, c)
			if ps, ok := o.(peerSet); ok && ps.create {
				created = append(created, ps.key)
			}
			if ds, ok := o.(deviceSet); ok && ds.privateKey {
				rekeyed = true
			}
			if isAdd {
				again = true
				break
			}
		}
		if !again {
			break
		}
	}
	if rekeyed {
		created = nil
		for _, peer := range p.Peers {
			created = append(created, peer.WireGuard.PublicKey)
		}
	}
	d.initiate(p, created)
	errs = append(errs, diffErr)
	return changes, errors.Join(errs...)
}

// initiate starts the handshake with each new peer (every peer after our
// own key changed) whose public key sorts above ours, by sending one datagram to the peer's transit address through
// the tunnel. When both sides of a new link get traffic at once, both send
// a handshake initiation, each answers the other's, and each drops the
// answer to its own: the link then waits for WireGuard's 15-second retry.
// With only the lower key initiating (before any traffic), new links come
// up in one round trip. The datagram goes to the discard port; the peer's
// firewall admits it from the tunnel and nothing listens there. Best
// effort: a failure only costs the race its usual retry.
func (d *linuxDataplane) initiate(p plan.Gateway, created []plan.Key) {
	for _, k := range created {
		if bytes.Compare(d.pub[:], k[:]) >= 0 {
			continue
		}
		for _, peer := range p.Peers {
			if peer.WireGuard.PublicKey != k {
				continue
			}
			for _, a := range peer.AllowedIPs {
				if !a.IsSingleIP() || !p.Firewall.Transit.Contains(a.Addr()) {
					continue
				}
				conn, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(a.Addr(), discardPort)))
				if err == nil {
					_, err = conn.Write([]byte("fednet: handshake"))
					conn.Close()
				}
				if err != nil {
					d.logf("starting the handshake with peer %s (%s): %v", peer.Gateway, a.Addr(), err)
				}
			}
		}
	}
}

// discardPort is the UDP port (RFC 863) the handshake datagram goes to.
const discardPort = 9

// Down implements Dataplane. It leaves IPv4 forwarding as it is: other
// software on the machine may rely on it.
func (d *linuxDataplane) Down(ctx context.Context, p plan.Gateway) ([]Change, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	name := tunnelOf(p).Name
	if validInterfaceName(name) != nil {
		name = ""
	}
	table := p.Firewall.Table
	if !validTableName(table) {
		table = ""
	}
	cur, err := d.read(ctx, name, table, nil)
	if err != nil {
		return nil, err
	}
	ops, downErr := down(cur)
	errs := []error{downErr}
	var changes []Change
	for _, o := range ops {
		c, err := d.exec(ctx, o)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		changes = append(changes, c)
	}
	return changes, errors.Join(errs...)
}

// read returns the current state of the interface name (none when "") and
// the nftables table (none when ""), and fednet's bridges and VXLAN devices
// (with the interfaces of bridges that are not fednet's as Foreign).
func (d *linuxDataplane) read(ctx context.Context, name, table string, bridges []plan.Bridge) (State, error) {
	var s State
	if name != "" {
		link, err := netlink.LinkByName(name)
		var notFound netlink.LinkNotFoundError
		switch {
		case errors.As(err, &notFound):
		case err != nil:
			return s, fmt.Errorf("reading interface %s: %w", name, err)
		default:
			s.Link = linkState(link)
			if err := readAddresses(link, s.Link); err != nil {
				return s, err
			}
			if s.Link.Kind == KindKernel || s.Link.Kind == KindUserspace {
				dev, err := readDevice(name)
				switch {
				case err != nil && s.Link.Kind == KindKernel:
					return s, fmt.Errorf("reading WireGuard device %s: %w", name, err)
				case err != nil:
					d.logf("dataplane: %s is a TUN interface but no userspace WireGuard device answers (%v); it will be recreated", name, err)
				default:
					s.WireGuard = dev
				}
			}
		}
	}
	if err := readBridges(&s, bridges); err != nil {
		return s, err
	}
	if err := readNeighbors(&s, bridges); err != nil {
		return s, err
	}
	routes, err := readRoutes()
	if err != nil {
		return s, err
	}
	s.Routes = routes
	fwd, err := os.ReadFile(ipForward)
	if err != nil {
		return s, fmt.Errorf("reading IPv4 forwarding: %w", err)
	}
	s.Forwarding = strings.TrimSpace(string(fwd)) == "1"
	if table != "" {
		t, err := readTable(table)
		if err != nil {
			return s, fmt.Errorf("reading nftables table inet %s: %w", table, err)
		}
		s.Table = t
	}
	s.normalize()
	return s, nil
}

func linkState(link netlink.Link) *LinkState {
	a := link.Attrs()
	kind := link.Type()
	if tt, ok := link.(*netlink.Tuntap); ok {
		kind = "tap"
		if tt.Mode == netlink.TUNTAP_MODE_TUN {
			kind = KindUserspace
		}
	}
	return &LinkState{Name: a.Name, Kind: kind, MTU: a.MTU, Up: a.Flags&net.FlagUp != 0}
}

func readAddresses(link netlink.Link, ls *LinkState) error {
	addrs, err := netlink.AddrList(link, netlink.FAMILY_ALL)
	if err != nil {
		return fmt.Errorf("reading addresses of %s: %w", ls.Name, err)
	}
	for _, a := range addrs {
		p, ok := prefixOf(a.IPNet)
		if !ok || p.Addr().Is6() && p.Addr().IsLinkLocalUnicast() {
			continue
		}
		ls.Addresses = append(ls.Addresses, p)
	}
	return nil
}

// wgTimeout bounds one wgctrl call (a variable for tests). wgctrl sets no deadline on the UAPI
// socket, so a hung userspace device would otherwise hang Apply.
var wgTimeout = 5 * time.Second

// withTimeout runs f and returns its error, or an error after wgTimeout
// (leaving f to finish in the background).
func withTimeout(what string, f func() error) error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	timer := time.NewTimer(wgTimeout)
	defer timer.Stop()
	select {
	case err := <-done:
		return err
	case <-timer.C:
		return fmt.Errorf("%s: no answer within %v", what, wgTimeout)
	}
}

// wgDevice returns the WireGuard device name through wgctrl, bounded by
// wgTimeout.
func wgDevice(name string) (*wgtypes.Device, error) {
	var dev *wgtypes.Device
	err := withTimeout("reading WireGuard device "+name, func() error {
		c, err := wgctrl.New()
		if err != nil {
			return err
		}
		defer c.Close()
		d, err := c.Device(name)
		dev = d
		return err
	})
	if err != nil {
		return nil, err
	}
	return dev, nil
}

func readDevice(name string) (*WireGuardState, error) {
	dev, err := wgDevice(name)
	if err != nil {
		return nil, err
	}
	w := &WireGuardState{ListenPort: dev.ListenPort}
	if dev.PrivateKey != (wgtypes.Key{}) {
		w.PublicKey = plan.Key(dev.PublicKey)
	}
	for _, p := range dev.Peers {
		ps := PeerState{
			PublicKey:           plan.Key(p.PublicKey),
			PersistentKeepalive: int(p.PersistentKeepaliveInterval / time.Second),
		}
		if p.Endpoint != nil {
			ap := p.Endpoint.AddrPort()
			ps.Endpoint = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()).String()
		}
		for _, a := range p.AllowedIPs {
			if pre, ok := prefixOf(&a); ok {
				ps.AllowedIPs = append(ps.AllowedIPs, pre)
			}
		}
		w.Peers = append(w.Peers, ps)
	}
	return w, nil
}

func readRoutes() ([]RouteState, error) {
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_ALL,
		&netlink.Route{Protocol: RouteProtocol}, netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		return nil, fmt.Errorf("listing fednet routes (proto %d): %w", RouteProtocol, err)
	}
	names := map[int]string{}
	var out []RouteState
	for _, r := range routes {
		var dst netip.Prefix
		if r.Dst == nil {
			if r.Family == unix.AF_INET6 {
				dst = netip.MustParsePrefix("::/0")
			} else {
				dst = netip.MustParsePrefix("0.0.0.0/0")
			}
		} else if p, ok := prefixOf(r.Dst); ok {
			dst = p
		} else {
			continue
		}
		name, ok := names[r.LinkIndex]
		if !ok && r.LinkIndex != 0 {
			if l, err := netlink.LinkByIndex(r.LinkIndex); err == nil {
				name = l.Attrs().Name
			}
			names[r.LinkIndex] = name
		}
		out = append(out, RouteState{Destination: dst, Device: name})
	}
	return out, nil
}

// exec runs one op and returns the change it made.
func (d *linuxDataplane) exec(ctx context.Context, o op) (Change, error) {
	c := o.change()
	if ok, err := execBridge(o); ok {
		return c, err
	}
	if ok, err := execNeighbor(o); ok {
		return c, err
	}
	switch o := o.(type) {
	case linkAdd:
		return d.addLink(ctx, o)
	case linkDel:
		return c, d.delLink(ctx, o.name)
	case deviceSet:
		cfg := wgtypes.Config{}
		if o.privateKey {
			k := wgtypes.Key(d.cfg.PrivateKey)
			cfg.PrivateKey = &k
		}
		if o.listenPort >= 0 {
			cfg.ListenPort = &o.listenPort
		}
		if err := configure(o.name, cfg); err != nil {
			return c, fmt.Errorf("configuring WireGuard device %s (%s): %w", o.name, c, err)
		}
	case linkSet:
		link, err := netlink.LinkByName(o.name)
		if err != nil {
			return c, fmt.Errorf("setting %s: %w", o.name, err)
		}
		if o.mtu > 0 {
			if err := netlink.LinkSetMTU(link, o.mtu); err != nil {
				return c, fmt.Errorf("setting MTU of %s to %d: %w", o.name, o.mtu, err)
			}
		}
		if o.up {
			if err := netlink.LinkSetUp(link); err != nil {
				return c, fmt.Errorf("bringing %s up: %w", o.name, err)
			}
		}
	case addrAdd:
		if err := changeAddr(o.dev, o.prefix, netlink.AddrAdd); err != nil {
			return c, fmt.Errorf("adding address %s to %s: %w", o.prefix, o.dev, err)
		}
	case addrDel:
		if err := changeAddr(o.dev, o.prefix, netlink.AddrDel); err != nil {
			return c, fmt.Errorf("deleting address %s from %s: %w", o.prefix, o.dev, err)
		}
	case peerRemove:
		err := configure(o.dev, wgtypes.Config{Peers: []wgtypes.PeerConfig{{PublicKey: wgtypes.Key(o.key), Remove: true}}})
		if err != nil {
			return c, fmt.Errorf("removing peer %s from %s: %w", o.key, o.dev, err)
		}
	case peerSet:
		pc := wgtypes.PeerConfig{PublicKey: wgtypes.Key(o.key)}
		if o.endpoint != "" {
			ap, err := netip.ParseAddrPort(o.endpoint)
			if err != nil {
				return c, fmt.Errorf("setting peer %s on %s: endpoint: %w", o.key, o.dev, err)
			}
			pc.Endpoint = net.UDPAddrFromAddrPort(ap)
		}
		if o.setAllowedIPs {
			pc.ReplaceAllowedIPs = true
			pc.AllowedIPs = []net.IPNet{}
			for _, a := range o.allowedIPs {
				pc.AllowedIPs = append(pc.AllowedIPs, ipNet(a))
			}
		}
		if o.setKeepalive {
			ka := time.Duration(o.keepalive) * time.Second
			pc.PersistentKeepaliveInterval = &ka
		}
		if err := configure(o.dev, wgtypes.Config{Peers: []wgtypes.PeerConfig{pc}}); err != nil {
			return c, fmt.Errorf("setting peer %s on %s: %w", o.key, o.dev, err)
		}
	case routeAdd:
		r, err := route(o.route)
		if err == nil {
			err = netlink.RouteAdd(r)
		}
		if err != nil {
			return c, fmt.Errorf("adding route %s dev %s: %w", o.route.Destination, o.route.Device, err)
		}
	case routeDel:
		r, err := route(o.route)
		if err == nil {
			err = netlink.RouteDel(r)
		}
		var notFound netlink.LinkNotFoundError
		if errors.As(err, &notFound) || errors.Is(err, unix.ESRCH) {
			err = nil // gone already
		}
		if err != nil {
			return c, fmt.Errorf("deleting route %s dev %s: %w", o.route.Destination, o.route.Device, err)
		}
	case forwardingOn:
		if err := os.WriteFile(ipForward, []byte("1\n"), 0o644); err != nil {
			return c, fmt.Errorf("turning on IPv4 forwarding: %w", err)
		}
	case tableReplace:
		if err := replaceTable(o.rules, o.fingerprint); err != nil {
			return c, fmt.Errorf("replacing nftables table inet %s: %w", o.rules.table, err)
		}
	case tableDel:
		if err := deleteTable(o.name); err != nil {
			return c, fmt.Errorf("deleting nftables table inet %s: %w", o.name, err)
		}
	default:
		return c, fmt.Errorf("dataplane: unknown op %T", o)
	}
	return c, nil
}

func configure(name string, cfg wgtypes.Config) error {
	return withTimeout("configuring WireGuard device "+name, func() error {
		c, err := wgctrl.New()
		if err != nil {
			return err
		}
		defer c.Close()
		return c.ConfigureDevice(name, cfg)
	})
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

func (d *linuxDataplane) delLink(ctx context.Context, name string) error {
	link, err := netlink.LinkByName(name)
	var notFound netlink.LinkNotFoundError
	if errors.As(err, &notFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("deleting interface %s: %w", name, err)
	}
	if err := netlink.LinkDel(link); err != nil {
		return fmt.Errorf("deleting interface %s: %w", name, err)
	}
	if linkState(link).Kind == KindUserspace {
		d.retireUserspace(ctx, name)
	}
	return nil
}

// addLink creates the interface: kernel WireGuard, or the userspace device.
func (d *linuxDataplane) addLink(ctx context.Context, o linkAdd) (Change, error) {
	if o.mode != Userspace {
		err := netlink.LinkAdd(&netlink.Wireguard{LinkAttrs: netlink.LinkAttrs{Name: o.name}})
		if err == nil {
			return linkAdd{name: o.name, mode: Kernel}.change(), nil
		}
		if o.mode == Kernel || !kernelLacksWireGuard(err) {
			return o.change(), fmt.Errorf("creating WireGuard interface %s: %w", o.name, err)
		}
		d.logf("dataplane: the kernel has no WireGuard (%v); starting userspace WireGuard for %s", err, o.name)
	}
	if err := d.startUserspace(ctx, o.name); err != nil {
		return linkAdd{name: o.name, mode: Userspace}.change(), err
	}
	return linkAdd{name: o.name, mode: Userspace}.change(), nil
}

// kernelLacksWireGuard reports whether err from creating a wireguard link
// means the kernel does not know the link kind.
func kernelLacksWireGuard(err error) bool {
	return errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENODEV) || errors.Is(err, unix.EPROTONOSUPPORT)
}

func waitUntil(ctx context.Context, timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func prefixOf(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, bits := n.Mask.Size()
	if bits == 0 {
		return netip.Prefix{}, false
	}
	if bits == 32 {
		a = a.Unmap()
	}
	return netip.PrefixFrom(a, ones), true
}

func ipNet(p netip.Prefix) net.IPNet {
	p = p.Masked()
	return net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// resolveEndpoints returns p with every peer endpoint as ip:port, resolving
// host names; a peer whose endpoint does not resolve keeps the endpoint its
// device has (Endpoint "").
func resolveEndpoints(ctx context.Context, p plan.Gateway) (plan.Gateway, error) {
	peers := slices.Clone(p.Peers)
	var errs []error
	for i, peer := range peers {
		if peer.Endpoint == "" || peer.WireGuard.PublicKey.IsZero() {
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
