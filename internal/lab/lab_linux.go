//go:build linux

package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// netnsDir is where `ip netns` keeps named network namespaces.
const netnsDir = "/run/netns"

// marker is the file that marks a directory as a lab state directory;
// Down removes only directories that hold it.
const marker = ".fednet-lab"

// Up builds the lab described by cfg and returns it; it needs root. It
// fails if a lab of that name exists (remove it with Down first). On
// failure it removes whatever it built. ctx bounds the whole build.
func Up(ctx context.Context, cfg Config) (*Lab, error) {
	l, err := newLab(cfg)
	if err != nil {
		return nil, err
	}
	for _, tool := range []string{"ip", "unshare", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("lab needs %s (Debian packages iproute2, util-linux, mount): %w", tool, err)
		}
	}
	existing, err := listNamespaces(l.Name)
	if err != nil {
		return nil, err
	}
	if len(existing) > 0 {
		return nil, fmt.Errorf("lab %q already exists (%d namespaces such as %s); remove it first with `fednet lab down` (lab.Down)", l.Name, len(existing), existing[0])
	}
	if err := makeStateDir(l); err != nil {
		return nil, err
	}
	if err := l.build(ctx); err != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		return nil, errors.Join(fmt.Errorf("building lab %q: %w", l.Name, err), teardown(cctx, l.Name, l.Dir))
	}
	return l, nil
}

// Open returns a lab that Up built from the same cfg earlier, possibly in
// another program (`fednet lab up`, then `fednet lab exec`): the layout
// computed from cfg, checked against the namespaces that exist. Processes
// that program started are not tracked by the returned Lab, but Down ends
// them all the same.
func Open(ctx context.Context, cfg Config) (*Lab, error) {
	l, err := newLab(cfg)
	if err != nil {
		return nil, err
	}
	nss, err := listNamespaces(l.Name)
	if err != nil {
		return nil, err
	}
	if len(nss) == 0 {
		return nil, fmt.Errorf("lab %q does not exist; build it with `fednet lab up` (lab.Up)", l.Name)
	}
	have := map[string]bool{}
	for _, ns := range nss {
		have[ns] = true
	}
	var missing []string
	for _, n := range l.nodes {
		if !have[n.Namespace] {
			missing = append(missing, n.Namespace)
		}
		delete(have, n.Namespace)
	}
	if len(missing) > 0 || len(have) > 0 {
		extra := slices.Sorted(maps.Keys(have))
		return nil, fmt.Errorf("lab %q does not match the spec (missing namespaces %v, unexpected %v); rebuild it: down, then up", l.Name, missing, extra)
	}
	return l, ctx.Err()
}

// Down removes lab name: it ends every process running in the lab's
// namespaces (SIGTERM, then SIGKILL after StopTimeout), deletes the
// namespaces and removes the default state directory (DefaultDir). It
// needs nothing from the program that built the lab, so it also cleans up
// after a crash, and removing a lab that does not exist is not an error.
// A lab built with a custom Config.Dir: use (*Lab).Down, or remove the
// directory yourself.
func Down(ctx context.Context, name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	return teardown(ctx, name, DefaultDir(name))
}

// Down stops the processes the lab started, then removes the lab as the
// package-level Down does, including its state directory. Safe to call
// more than once.
func (l *Lab) Down(ctx context.Context) error {
	l.mu.Lock()
	procs := slices.Clone(l.procs)
	l.mu.Unlock()
	var errs []error
	for _, p := range procs {
		if err := p.Stop(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, teardown(ctx, l.Name, l.Dir))
	return errors.Join(errs...)
}

// teardown kills every process in the lab's namespaces, deletes the
// namespaces and removes dir if it is a lab state directory.
func teardown(ctx context.Context, name, dir string) error {
	var errs []error
	nss, err := listNamespaces(name)
	if err != nil {
		errs = append(errs, err)
	}
	ids := nsIDs(nss)
	if err := killIn(ctx, ids); err != nil {
		errs = append(errs, err)
	}
	for _, ns := range nss {
		if err := netns.DeleteNamed(ns); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("deleting namespace %s: %w", ns, err))
		}
	}
	// A process that was entering a namespace while it was deleted keeps
	// the namespace alive without a name; find it by the namespace's
	// identity.
	if err := killIn(ctx, ids); err != nil {
		errs = append(errs, err)
	}
	if err := removeStateDir(dir); err != nil {
		errs = append(errs, err)
	}
	if left, err := listNamespaces(name); err == nil && len(left) > 0 {
		errs = append(errs, fmt.Errorf("namespaces left after removing lab %q: %s", name, strings.Join(left, " ")))
	}
	return errors.Join(errs...)
}

// listNamespaces returns the sorted names of lab name's namespaces.
func listNamespaces(name string) ([]string, error) {
	entries, err := os.ReadDir(netnsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing network namespaces: %w", err)
	}
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), nsPrefix(name)) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// nsID identifies a network namespace (device and inode of its nsfs file).
type nsID struct{ dev, ino uint64 }

func statNS(path string) (nsID, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return nsID{}, err
	}
	return nsID{uint64(st.Dev), st.Ino}, nil
}

// nsIDs identifies the named namespaces (skipping vanished ones).
func nsIDs(nss []string) map[nsID]string {
	ids := map[nsID]string{}
	for _, ns := range nss {
		if id, err := statNS(filepath.Join(netnsDir, ns)); err == nil {
			ids[id] = ns
		}
	}
	return ids
}

// pidsIn returns, per namespace name, the processes (thread-group leaders)
// in the namespaces ids, as `ip netns pids` does. It never lists the
// calling process.
func pidsIn(ids map[nsID]string) (map[string][]int, error) {
	out := map[string][]int{}
	if len(ids) == 0 {
		return out, nil
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("listing processes: %w", err)
	}
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		id, err := statNS("/proc/" + e.Name() + "/ns/net")
		if err != nil {
			continue // exited, or a zombie
		}
		if ns, ok := ids[id]; ok {
			out[ns] = append(out[ns], pid)
		}
	}
	return out, nil
}

// killIn ends every process in the namespaces ids: SIGTERM, SIGKILL after
// StopTimeout (or once ctx ends), and waits (bounded) until none is left.
// It rescans, so children started meanwhile are caught too.
func killIn(ctx context.Context, ids map[nsID]string) error {
	if len(ids) == 0 {
		return nil
	}
	start := time.Now()
	termed, killed := map[int]bool{}, map[int]bool{}
	for {
		byNS, err := pidsIn(ids)
		if err != nil {
			return err
		}
		var pids []int
		for _, p := range byNS {
			pids = append(pids, p...)
		}
		if len(pids) == 0 {
			return nil
		}
		elapsed := time.Since(start)
		if elapsed > 2*StopTimeout {
			slices.Sort(pids)
			return fmt.Errorf("processes still running in lab namespaces after SIGKILL: %v", pids)
		}
		for _, pid := range pids {
			switch {
			case !termed[pid]:
				termed[pid] = true
				_ = syscall.Kill(pid, syscall.SIGTERM)
			case !killed[pid] && (elapsed > StopTimeout || ctx.Err() != nil):
				killed[pid] = true
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// makeStateDir creates the lab's state directory: l.Dir must not exist,
// be empty, or be the leftover of an earlier lab (it holds the marker).
func makeStateDir(l *Lab) error {
	entries, err := os.ReadDir(l.Dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return fmt.Errorf("lab state directory: %w", err)
	case len(entries) == 0:
	default:
		if _, err := os.Stat(filepath.Join(l.Dir, marker)); err != nil {
			return fmt.Errorf("lab state directory %s is not empty and is not a lab's; choose another (Config.Dir)", l.Dir)
		}
		if err := os.RemoveAll(l.Dir); err != nil {
			return fmt.Errorf("removing stale lab state directory: %w", err)
		}
	}
	dirs := []string{l.Dir, filepath.Join(l.Dir, "logs"), filepath.Join(l.Dir, "captures")}
	for _, g := range l.gateways {
		dirs = append(dirs, g.Dir, g.WireGuardDir())
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("creating lab state directory: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(l.Dir, marker), []byte(l.Name+"\n"), 0o600); err != nil {
		return fmt.Errorf("creating lab state directory: %w", err)
	}
	return nil
}

// removeStateDir removes dir if it is a lab state directory (holds the
// marker); a missing directory is fine.
func removeStateDir(dir string) error {
	if dir == "" {
		return nil
	}
	if _, err := os.Stat(filepath.Join(dir, marker)); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("lab state directory: %w", err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("removing lab state directory: %w", err)
	}
	return nil
}

// rootNS is the namespace the program started in, read before any thread
// joins a lab namespace: /proc/self/ns/net later names the main thread's
// namespace, and the main thread may be one that inNamespace moved (Go
// parks, rather than ends, a locked main thread whose goroutine exits).
var rootNS, rootNSErr = statNS("/proc/self/ns/net")

// nsHandle is an open lab namespace: its file and a netlink socket in it.
type nsHandle struct {
	ns netns.NsHandle
	nl *netlink.Handle
}

// openNS opens a lab namespace; it refuses the namespace of the calling
// process, so nothing the lab does can land in the root namespace.
func openNS(name string) (*nsHandle, error) {
	if !strings.HasPrefix(name, Prefix) {
		return nil, fmt.Errorf("namespace %s is not a lab namespace", name)
	}
	id, err := statNS(filepath.Join(netnsDir, name))
	if err != nil {
		return nil, fmt.Errorf("namespace %s: %w", name, err)
	}
	if rootNSErr != nil || rootNS == id {
		return nil, fmt.Errorf("namespace %s is this process's own namespace; refusing to touch it", name)
	}
	ns, err := netns.GetFromName(name)
	if err != nil {
		return nil, fmt.Errorf("opening namespace %s: %w", name, err)
	}
	nl, err := netlink.NewHandleAt(ns)
	if err != nil {
		ns.Close()
		return nil, fmt.Errorf("netlink in namespace %s: %w", name, err)
	}
	return &nsHandle{ns: ns, nl: nl}, nil
}

func (h *nsHandle) close() {
	h.nl.Close()
	h.ns.Close()
}

// inNamespace runs fn on a fresh OS thread that has joined ns. The thread
// is never returned to the Go scheduler: it ends with fn's goroutine.
func inNamespace(ns netns.NsHandle, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		if err := netns.Set(ns); err != nil {
			errc <- fmt.Errorf("entering namespace: %w", err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// Do runs fn on an OS thread inside the node's network namespace and
// returns its error. Sockets fn opens stay in that namespace and may be
// used from any goroutine afterwards; goroutines fn starts do not run in
// the namespace. fn does not see the gateway's private /run/wireguard.
func (n *Node) Do(fn func() error) error {
	ns, err := netns.GetFromName(n.Namespace)
	if err != nil {
		return fmt.Errorf("opening namespace of %s: %w", n.Name, err)
	}
	defer ns.Close()
	return inNamespace(ns, fn)
}

// sysctl writes /proc/sys values; run it inside a namespace.
func sysctl(kv ...string) error {
	for i := 0; i+1 < len(kv); i += 2 {
		if err := os.WriteFile("/proc/sys/"+kv[i], []byte(kv[i+1]), 0); err != nil {
			return fmt.Errorf("sysctl %s=%s: %w", kv[i], kv[i+1], err)
		}
	}
	return nil
}

// runIP runs ip with args, stdin as its input, bounded by ctx and a
// minute.
func runIP(ctx context.Context, stdin string, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, tail(out.String(), 1000))
	}
	return nil
}

// build creates the lab's namespaces, links, addresses and routes.
func (l *Lab) build(ctx context.Context) error {
	var batch strings.Builder
	for _, n := range l.nodes {
		fmt.Fprintf(&batch, "netns add %s\n", n.Namespace)
	}
	if err := runIP(ctx, batch.String(), "-batch", "-"); err != nil {
		return fmt.Errorf("creating namespaces: %w", err)
	}
	b := &builder{l: l, h: map[*Node]*nsHandle{}, ports: map[*Node][]switchPort{}}
	defer b.close()
	bridgedHosts := map[*Node]bool{}
	for _, seg := range l.segments {
		for _, h := range seg.hosts {
			bridgedHosts[h] = seg.network != ""
		}
	}
	for _, n := range l.nodes {
		if err := ctx.Err(); err != nil {
			return err
		}
		h, err := openNS(n.Namespace)
		if err != nil {
			return err
		}
		b.h[n] = h
		kv := nodeSysctls(n, bridgedHosts[n])
		switch n.Role {
		case RoleInternet:
			// The router forwards between gateways on one bridge; it must
			// not tell them to talk directly (ICMP redirects).
			kv = append(kv, "net/ipv4/ip_forward", "1",
				"net/ipv4/conf/all/send_redirects", "0", "net/ipv4/conf/default/send_redirects", "0")
		case RoleGateway:
			kv = append(kv, "net/ipv4/conf/all/accept_redirects", "0", "net/ipv4/conf/default/accept_redirects", "0")
		case RoleExternal:
			// A provider's VPN gateway routes between its site and the
			// tunnel.
			kv = append(kv, "net/ipv4/ip_forward", "1", "net/ipv4/conf/all/accept_redirects", "0", "net/ipv4/conf/default/accept_redirects", "0")
		}
		if err := inNamespace(h.ns, func() error { return sysctl(kv...) }); err != nil {
			return fmt.Errorf("%s: %w", n.Namespace, err)
		}
		lo, err := h.nl.LinkByName("lo")
		if err == nil {
			err = h.nl.LinkSetUp(lo)
		}
		if err != nil {
			return fmt.Errorf("%s: bringing lo up: %w", n.Namespace, err)
		}
		if n.Role == RoleInternet || n.Role == RoleSwitch {
			if err := b.bridge(n); err != nil {
				return err
			}
		}
	}
	mtu := l.Federation.Overlay.UnderlayMTU
	if mtu == 0 {
		mtu = DefaultMTU
	}
	for _, g := range append(l.Gateways(), l.externals...) {
		if err := ctx.Err(); err != nil {
			return err
		}
		port := "g" + strconv.Itoa(g.gwIndex)
		if g.Role == RoleExternal {
			port = "x" + strconv.Itoa(g.gwIndex)
		}
		pub, err := b.veth(g, PublicInterface, l.Internet, port, mtu)
		if err != nil {
			return err
		}
		if err := b.addr(g, pub, g.Public); err != nil {
			return err
		}
		if err := b.route(g, pub, netip.MustParsePrefix("0.0.0.0/0"), g.Via, netlink.FLAG_ONLINK); err != nil {
			return err
		}
		lan, err := b.veth(g, LANInterface, l.switches[g.Site], "gw"+strconv.Itoa(g.portIndex), DefaultMTU)
		if err != nil {
			return err
		}
		if err := b.addr(g, lan, g.LAN); err != nil {
			return err
		}
		if g.Role == RoleExternal {
			// A provider's network never sends private addresses to the
			// internet: what its VPN does not carry is unreachable (the
			// tunnel's routes, in charon's table 220, come first).
			r := &netlink.Route{Dst: prefixNet(l.Supernet), Type: syscall.RTN_UNREACHABLE}
			if err := b.h[g].nl.RouteAdd(r); err != nil {
				return fmt.Errorf("%s: adding unreachable %s: %w", g.Namespace, l.Supernet, err)
			}
			// Its own network stays local even when the tunnel's routes
			// (table 220, consulted before main) cover everything, as a
			// route-based VPN's 0.0.0.0/0 does.
			rule := netlink.NewRule()
			rule.Dst, rule.Table, rule.Priority = prefixNet(g.LAN.Masked()), syscall.RT_TABLE_MAIN, 100
			if err := b.h[g].nl.RuleAdd(rule); err != nil {
				return fmt.Errorf("%s: adding rule to %s lookup main: %w", g.Namespace, g.LAN.Masked(), err)
			}
		}
	}
	for i, m := range l.Managers {
		pub, err := b.veth(m, PublicInterface, l.Internet, "mgr"+strconv.Itoa(i), mtu)
		if err != nil {
			return err
		}
		if err := b.addr(m, pub, m.Public); err != nil {
			return err
		}
		if err := b.route(m, pub, netip.MustParsePrefix("0.0.0.0/0"), m.Via, netlink.FLAG_ONLINK); err != nil {
			return err
		}
	}
	for _, s := range l.Sites() {
		for _, h := range l.hosts[s] {
			if err := ctx.Err(); err != nil {
				return err
			}
			eth, err := b.veth(h, HostInterface, l.switches[s], "h"+strconv.Itoa(h.portIndex), DefaultMTU)
			if err != nil {
				return err
			}
			if err := b.addr(h, eth, h.LAN); err != nil {
				return err
			}
			if err := b.route(h, eth, l.Supernet, h.Via); err != nil {
				return err
			}
		}
	}
	for _, seg := range l.segments {
		if err := b.segment(ctx, seg); err != nil {
			return err
		}
	}
	for _, n := range l.nodes {
		if n.Role == RoleSwitch && l.fabrics[n.Site].DropUnknownMACs {
			if err := b.dropUnknownMACs(n); err != nil {
				return err
			}
		}
	}
	return nil
}

// nodeSysctls returns the sysctls every node of its role gets, before its
// interfaces exist. They only ever touch the node's own namespace.
//
// The lab is IPv4 only (no IPv6 link-local chatter on its wires), except
// for hosts on bridged networks: a stretched segment carries IPv6 neighbor
// discovery and link-local traffic across sites, which tests and the demo
// exercise. Their addresses are derived from unique MACs, so duplicate
// address detection is off and link-local addresses work at once. Hosts
// answer broadcast pings, so `ping -b` shows who shares a segment.
func nodeSysctls(n *Node, bridgedHost bool) []string {
	kv := []string{"net/ipv6/conf/all/disable_ipv6", "1", "net/ipv6/conf/default/disable_ipv6", "1"}
	if bridgedHost {
		kv = []string{"net/ipv6/conf/all/disable_ipv6", "0", "net/ipv6/conf/default/disable_ipv6", "0",
			"net/ipv6/conf/all/accept_dad", "0", "net/ipv6/conf/default/accept_dad", "0"}
	}
	if n.Role == RoleHost {
		kv = append(kv, "net/ipv4/icmp_echo_ignore_broadcasts", "0")
	}
	return kv
}

// segment wires an extra or bridged segment: the gateways' ports (with an
// address on extra segments only) and the hosts (with the supernet route
// on extra segments only).
func (b *builder) segment(ctx context.Context, seg *segment) error {
	port, err := b.veth(seg.gw, seg.port, seg.sw, "gw0", seg.mtu)
	if err != nil {
		return err
	}
	if seg.addr.IsValid() {
		if err := b.addr(seg.gw, port, seg.addr); err != nil {
			return err
		}
	}
	for k, g := range seg.others {
		if _, err := b.veth(g, seg.port, seg.sw, "gw"+strconv.Itoa(k+1), seg.mtu); err != nil {
			return err
		}
	}
	for _, h := range seg.hosts {
		if err := ctx.Err(); err != nil {
			return err
		}
		eth, err := b.veth(h, HostInterface, seg.sw, "h"+strconv.Itoa(h.portIndex), seg.mtu)
		if err != nil {
			return err
		}
		if err := b.addr(h, eth, h.LAN); err != nil {
			return err
		}
		if h.Via.IsValid() {
			if err := b.route(h, eth, b.l.Supernet, h.Via); err != nil {
				return err
			}
		}
	}
	return nil
}

// builder holds open namespaces while a lab is built.
type builder struct {
	l *Lab
	h map[*Node]*nsHandle
	// ports lists, per switch or internet node, its bridge ports and the
	// MAC of the interface attached to each.
	ports map[*Node][]switchPort
}

// switchPort is a bridge port and the MAC of the interface at its other
// end.
type switchPort struct {
	name string
	mac  net.HardwareAddr
}

func (b *builder) close() {
	for _, h := range b.h {
		h.close()
	}
}

// bridge creates the node's bridge, with the routers' addresses on the
// internet's.
func (b *builder) bridge(n *Node) error {
	h := b.h[n]
	br := &netlink.Bridge{LinkAttrs: netlink.NewLinkAttrs()}
	br.Name = BridgeInterface
	if err := h.nl.LinkAdd(br); err != nil {
		return fmt.Errorf("%s: adding bridge: %w", n.Namespace, err)
	}
	if err := h.nl.LinkSetUp(br); err != nil {
		return fmt.Errorf("%s: bringing bridge up: %w", n.Namespace, err)
	}
	if n.Role == RoleInternet {
		for _, r := range Routers {
			if err := b.addr(n, br, r); err != nil {
				return err
			}
		}
	}
	return nil
}

// veth creates a veth named name in node n whose peer, named port, is a
// port of the bridge in node sw. Both ends are up.
func (b *builder) veth(n *Node, name string, sw *Node, port string, mtu int) (netlink.Link, error) {
	hn, hs := b.h[n], b.h[sw]
	attrs := netlink.NewLinkAttrs()
	attrs.Name = name
	attrs.MTU = mtu
	v := &netlink.Veth{LinkAttrs: attrs, PeerName: port, PeerNamespace: netlink.NsFd(int(hs.ns))}
	what := fmt.Sprintf("veth %s in %s to %s in %s", name, n.Namespace, port, sw.Namespace)
	if err := hn.nl.LinkAdd(v); err != nil {
		return nil, fmt.Errorf("adding %s: %w", what, err)
	}
	br, err := hs.nl.LinkByName(BridgeInterface)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", sw.Namespace, err)
	}
	p, err := hs.nl.LinkByName(port)
	if err == nil {
		err = hs.nl.LinkSetAlias(p, n.Name)
	}
	if err == nil {
		err = hs.nl.LinkSetMaster(p, br)
	}
	if err == nil && sw.Role == RoleInternet {
		// Gateways reach each other only through the router.
		err = hs.nl.LinkSetIsolated(p, true)
	}
	if err == nil {
		err = hs.nl.LinkSetUp(p)
	}
	if err != nil {
		return nil, fmt.Errorf("attaching %s: %w", what, err)
	}
	link, err := hn.nl.LinkByName(name)
	if err == nil {
		err = hn.nl.LinkSetUp(link)
	}
	if err != nil {
		return nil, fmt.Errorf("bringing up %s: %w", what, err)
	}
	b.ports[sw] = append(b.ports[sw], switchPort{name: port, mac: link.Attrs().HardwareAddr})
	return link, nil
}

func (b *builder) addr(n *Node, link netlink.Link, p netip.Prefix) error {
	a := &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}}
	if err := b.h[n].nl.AddrAdd(link, a); err != nil {
		return fmt.Errorf("%s: adding address %s to %s: %w", n.Namespace, p, link.Attrs().Name, err)
	}
	return nil
}

func prefixNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

func (b *builder) route(n *Node, link netlink.Link, dst netip.Prefix, via netip.Addr, flags ...netlink.NextHopFlag) error {
	r := &netlink.Route{
		LinkIndex: link.Attrs().Index,
		Dst:       &net.IPNet{IP: dst.Addr().AsSlice(), Mask: net.CIDRMask(dst.Bits(), dst.Addr().BitLen())},
		Gw:        via.AsSlice(),
	}
	for _, f := range flags {
		r.Flags |= int(f)
	}
	if err := b.h[n].nl.RouteAdd(r); err != nil {
		return fmt.Errorf("%s: adding route %s via %s: %w", n.Namespace, dst, via, err)
	}
	return nil
}

// Start runs a long-lived program in node n in the background (see
// (*Node).Command), with standard output and error going to a log file
// under the state directory's logs/. Stop the process with its Stop method;
// (*Lab).Down and Down end it too. The process is in its own process
// group, so a terminal's Ctrl-C does not reach it.
func (l *Lab) Start(n *Node, name string, args ...string) (*Process, error) {
	logPath := l.logPath(n, name)
	logFile, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("starting %s in %s: %w", name, n.Name, err)
	}
	cmd := n.Command(context.Background(), name, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s in %s: %w", name, n.Name, err)
	}
	p := &Process{
		Node: n,
		Args: append([]string{name}, args...),
		PID:  cmd.Process.Pid,
		Log:  logPath,
		cmd:  cmd,
		done: make(chan struct{}),
	}
	go p.wait(logFile)
	l.mu.Lock()
	l.procs = append(l.procs, p)
	l.mu.Unlock()
	// The record is for people reading the state directory; Down finds
	// processes by namespace, never by this (possibly stale) list.
	if f, err := os.OpenFile(filepath.Join(l.Dir, "pids"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600); err == nil {
		fmt.Fprintf(f, "%d %s %s\n", p.PID, n.Namespace, strings.Join(p.Args, " "))
		f.Close()
	}
	return p, nil
}

// logPath returns a fresh log file path for program name in node n.
func (l *Lab) logPath(n *Node, name string) string {
	base := strings.TrimPrefix(n.Namespace, nsPrefix(l.Name)) + "." + filepath.Base(name)
	l.mu.Lock()
	defer l.mu.Unlock()
	p := filepath.Join(l.Dir, "logs", base+".log")
	for i := 2; l.logs[p] || exists(p); i++ {
		p = filepath.Join(l.Dir, "logs", base+"."+strconv.Itoa(i)+".log")
	}
	l.logs[p] = true
	return p
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// Status reports what exists of lab name: its namespaces, the processes
// in them, and whether its default state directory exists. It changes
// nothing.
func Status(ctx context.Context, name string) (State, error) {
	if err := checkName(name); err != nil {
		return State{}, err
	}
	st := State{Name: name}
	if exists(filepath.Join(DefaultDir(name), marker)) {
		st.Dir = DefaultDir(name)
	}
	nss, err := listNamespaces(name)
	if err != nil {
		return st, err
	}
	byNS, err := pidsIn(nsIDs(nss))
	if err != nil {
		return st, err
	}
	for _, ns := range nss {
		s := NamespaceState{Name: ns}
		pids := byNS[ns]
		slices.Sort(pids)
		for _, pid := range pids {
			comm, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
			s.Processes = append(s.Processes, ProcessInfo{PID: pid, Command: strings.TrimSpace(strings.ReplaceAll(string(comm), "\x00", " "))})
		}
		st.Namespaces = append(st.Namespaces, s)
	}
	return st, ctx.Err()
}
