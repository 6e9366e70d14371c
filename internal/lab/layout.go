package lab

import (
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"

	"github.com/fednet/fednet/internal/spec"
)

// Prefix starts the name of every network namespace a lab creates:
// Prefix + lab name + "-" + role part (see Node.Namespace).
const Prefix = "fnlab-"

// Defaults for Config fields left empty.
const (
	DefaultName         = "lab"
	DefaultHostsPerSite = 2
	// DefaultMTU is the MTU of the lab's segments and hosts unless a
	// bridged network's MTU says otherwise (BridgedNetwork.MTU): Ethernet's.
	DefaultMTU = 1500
	// StateRoot holds the default state directory of every lab:
	// StateRoot/<name>.
	StateRoot = "/run/fednet-lab"
)

// Interface names inside lab namespaces. Each lives in its own namespace,
// so the names repeat across nodes.
const (
	// BridgeInterface is the bridge of the internet and of every switch.
	BridgeInterface = "br0"
	// PublicInterface is a gateway's veth on the internet bridge.
	PublicInterface = "pub0"
	// LANInterface is a gateway's veth on its site's switch.
	LANInterface = "lan0"
	// HostInterface is a host's veth on its site's switch.
	HostInterface = "eth0"
)

// Routers are the internet namespace's addresses, one per public range,
// with the range's prefix length. A gateway holds its public address as a
// /32 and sends everything to the router of its range (a default route,
// on-link), as cloud instances do; the internet namespace routes between
// gateways, also within one range, so every packet a gateway sends enters
// the router exactly once (which is where StartCapture listens). Gateway
// ports on the internet bridge are isolated from each other.
var Routers = []netip.Prefix{
	netip.MustParsePrefix("198.51.100.1/24"),
	netip.MustParsePrefix("203.0.113.1/24"),
}

// maxHostsPerSite bounds Config.HostsPerSite: a lab is a testbed, not a
// data centre.
const maxHostsPerSite = 64

// Config says which lab to build.
type Config struct {
	// Federation is a parsed spec (spec.Parse filled site prefixes and
	// gateway LAN addresses). Required.
	Federation *spec.Federation
	// Name tells labs apart on one machine: lowercase letters and digits,
	// at most 16 (default "lab").
	Name string
	// Dir is the state directory: keys, plans, logs, pids, captures
	// (default StateRoot/<Name>). It must not exist or be empty; Down
	// removes it only if the lab created it.
	Dir string
	// HostsPerSite overrides the spec's lab.hostsPerSite (default 2).
	HostsPerSite int
	// Manager adds a node "manager" on the internet, with a public address
	// of its own, for `fednet manager` (Lab.Manager).
	Manager bool
	// Managers, above 1, adds that many manager nodes ("manager",
	// "manager2", ...; Lab.Managers), for several managers sharing an etcd
	// cluster whose members run beside them.
	Managers int

	// The settings below are lab-only: they describe the machines and
	// fabrics around the gateways, not the federation (see docs/lab.md).

	// Fabrics, by site name, changes how a site's switches behave. A site
	// whose spec says fabric: dropsUnknownMACs drops unknown MACs whatever
	// this map says.
	Fabrics map[string]Fabric
	// Segments, by site name, adds segments to a site beyond the one of its
	// first gateway's LAN address (see Segment numbering in segments.go).
	Segments map[string][]netip.Prefix
	// Bridged places hosts on bridged networks: one segment per member
	// site, all in one subnet (see BridgedNetwork).
	Bridged []BridgedNetwork
}

// Role says what a node stands for.
type Role int

// Node roles.
const (
	RoleInternet Role = iota + 1
	RoleSwitch
	RoleGateway
	RoleHost
	RoleManager
	// RoleExternal stands in for an external site's VPN gateway (the
	// provider's, spec sites[].external): on the internet at the site's
	// endpoint and on the site's segment, with no agent.
	RoleExternal
)

// String returns the role's lowercase name.
func (r Role) String() string {
	switch r {
	case RoleInternet:
		return "internet"
	case RoleSwitch:
		return "switch"
	case RoleGateway:
		return "gateway"
	case RoleHost:
		return "host"
	case RoleManager:
		return "manager"
	case RoleExternal:
		return "external"
	}
	return "role(" + strconv.Itoa(int(r)) + ")"
}

// Node is one network namespace of a lab. Its fields are set by Up and
// never change; a Node is safe for concurrent use.
type Node struct {
	// Name is the gateway's spec name for gateways, "<site>-h<i>" for hosts
	// (i from 1), "<site>-lan" for switches and "internet". Extra segments
	// (Config.Segments) have switches "<site>-s<k>-lan" and hosts
	// "<site>-s<k>-h<i>" (k from 2); bridged segments (Config.Bridged)
	// "<network>-<site>-br" and "<network>-<site>-h<i>".
	Name string
	Role Role
	// Site is the spec site the node belongs to; empty for the internet.
	Site string
	// Namespace is the network namespace: Prefix + lab + "-inet",
	// "-lan-<site>", "-gw-<gateway>" or "-h-<site>-<i>"; for extra segments
	// "-lan-<site>-s<k>" and "-h-<site>-s<k>-<i>"; for bridged segments
	// "-br-<network>-<site>" and "-bh-<network>-<site>-<i>".
	Namespace string
	// LAN is the node's address on its site segment with the segment's
	// prefix length (gateways and hosts).
	LAN netip.Prefix
	// Public is a gateway's address on the internet, as a /32 (see
	// Routers).
	Public netip.Prefix
	// Via is the node's next hop: for a gateway the router of its public
	// range (default route), for a host its site's virtual address (route
	// for the overlay supernet; the active gateway holds it), on an extra segment that
	// gateway's address there; invalid for hosts on bridged segments.
	Via netip.Addr
	// Dir is a gateway's state directory, <lab dir>/gw-<name>, for its key,
	// plan and private /run/wireguard; the manager's data directory,
	// <lab dir>/manager; empty for other roles.
	Dir string

	// gwIndex numbers gateways across the lab (internet bridge port names);
	// portIndex numbers gateways and hosts within a site (switch port names).
	gwIndex, portIndex int
}

// WireGuardDir is the directory that commands in a gateway node see as
// /run/wireguard (where userspace WireGuard puts its control sockets);
// empty for other roles.
func (n *Node) WireGuardDir() string {
	if n.Role != RoleGateway {
		return ""
	}
	return filepath.Join(n.Dir, "wireguard")
}

// String returns the node's name.
func (n *Node) String() string { return n.Name }

// Lab is a built testbed. Its accessors are safe for concurrent use.
type Lab struct {
	// Name is the lab's name; Prefix+Name+"-" starts its namespaces.
	Name string
	// Dir is the state directory.
	Dir string
	// Federation is the spec the lab was built from; do not modify it.
	Federation *spec.Federation
	// Internet is the namespace holding the internet bridge and routers.
	Internet *Node
	// Supernet is the overlay supernet hosts route to their gateway.
	Supernet netip.Prefix
	// Manager is the manager's node when Config.Manager was set, else nil.
	// Like a gateway it has a public address (Public, Via).
	Manager *Node
	// Managers are every manager node (Manager first); one with
	// Config.Manager, Config.Managers of them when that is above 1.
	Managers []*Node

	nodes     []*Node // internet, then per site: switch, gateways (or VPN gateway), hosts
	gateways  []*Node // spec order
	externals []*Node // the external sites' VPN gateways, spec order
	hosts     map[string][]*Node
	switches  map[string]*Node
	segments  []*segment // extra and bridged segments, in layout order
	fabrics   map[string]Fabric

	mu    sync.Mutex
	procs []*Process // started by Start, guarded by mu
	logs  map[string]bool
}

// Nodes returns every node: the internet, then per site (spec order) its
// switch, gateways and hosts, then the switches and hosts of extra and
// bridged segments, then the manager.
func (l *Lab) Nodes() []*Node { return append([]*Node(nil), l.nodes...) }

// Gateways returns the gateway nodes in spec order.
func (l *Lab) Gateways() []*Node { return append([]*Node(nil), l.gateways...) }

// Externals returns the nodes standing in for the external sites' VPN
// gateways, in spec order: named "<site>-vpn", on the internet at the
// site's endpoint and at the last usable address of the site's first
// prefix (its hosts' next hop).
func (l *Lab) Externals() []*Node { return append([]*Node(nil), l.externals...) }

// External returns the VPN gateway node of external site site, or nil.
func (l *Lab) External(site string) *Node {
	for _, n := range l.externals {
		if n.Site == site {
			return n
		}
	}
	return nil
}

// Gateway returns the node of the named gateway, or nil.
func (l *Lab) Gateway(name string) *Node {
	for _, g := range l.gateways {
		if g.Name == name {
			return g
		}
	}
	return nil
}

// Node returns the node with the given Name ("aws-gw", "aws-eu-h1",
// "aws-eu-lan", "internet"), or nil.
func (l *Lab) Node(name string) *Node {
	for _, n := range l.nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// SiteGateways returns the gateway nodes of a site in spec order.
func (l *Lab) SiteGateways(site string) []*Node {
	var out []*Node
	for _, g := range l.gateways {
		if g.Site == site {
			out = append(out, g)
		}
	}
	return out
}

// Hosts returns the host nodes of a site in address order (nil for an
// unknown site).
func (l *Lab) Hosts(site string) []*Node { return append([]*Node(nil), l.hosts[site]...) }

// Switch returns the switch node of a site, or nil.
func (l *Lab) Switch(site string) *Node { return l.switches[site] }

// Sites returns the site names in spec order.
func (l *Lab) Sites() []string {
	out := make([]string, 0, len(l.Federation.Sites))
	for _, s := range l.Federation.Sites {
		out = append(out, s.Name)
	}
	return out
}

var (
	labNameRE  = regexp.MustCompile(`^[a-z0-9]{1,16}$`)
	specNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)
)

// checkName validates a lab name. Lab names carry no '-', so the prefix
// Prefix+name+"-" of one lab never matches another lab's namespaces.
func checkName(name string) error {
	if !labNameRE.MatchString(name) {
		return fmt.Errorf("lab name %q: use 1 to 16 lowercase letters and digits", name)
	}
	return nil
}

// nsPrefix starts every namespace name of lab name.
func nsPrefix(name string) string { return Prefix + name + "-" }

// DefaultDir returns the default state directory of lab name.
func DefaultDir(name string) string { return filepath.Join(StateRoot, name) }

// publicRange returns the router prefix of the public range holding a, if
// any.
func publicRange(a netip.Addr) (netip.Prefix, bool) {
	for _, r := range Routers {
		if r.Masked().Contains(a) {
			return r, true
		}
	}
	return netip.Prefix{}, false
}

// usable reports whether a is a host address of the public range p (not
// the network, broadcast or router address).
func usable(p netip.Prefix, a netip.Addr) bool {
	return a != p.Addr() && a != p.Masked().Addr() && a != lastAddr(p)
}

// lastAddr returns the last (broadcast) address of an IPv4 prefix.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	for i := p.Bits(); i < 32; i++ {
		b[i/8] |= 1 << (7 - i%8)
	}
	return netip.AddrFrom4(b)
}

// newLab lays a lab out from cfg without touching the machine: node names,
// namespaces, addresses. It reports every problem it finds.
func newLab(cfg Config) (*Lab, error) {
	f := cfg.Federation
	if f == nil {
		return nil, fmt.Errorf("lab config: no federation spec")
	}
	name := cfg.Name
	if name == "" {
		name = DefaultName
	}
	if err := checkName(name); err != nil {
		return nil, err
	}
	dir := cfg.Dir
	if dir == "" {
		dir = DefaultDir(name)
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("lab state directory %q: %w", cfg.Dir, err)
	}
	hosts := DefaultHostsPerSite
	if f.Lab != nil && f.Lab.HostsPerSite != 0 {
		hosts = f.Lab.HostsPerSite
	}
	if cfg.HostsPerSite != 0 {
		hosts = cfg.HostsPerSite
	}
	if hosts < 0 || hosts > maxHostsPerSite {
		return nil, fmt.Errorf("lab.hostsPerSite: %d hosts per site; use 0 to %d", hosts, maxHostsPerSite)
	}
	supernet := f.Overlay.Supernet
	if !supernet.IsValid() {
		supernet = spec.DefaultSupernet
	}
	if !supernet.Addr().Is4() {
		return nil, fmt.Errorf("overlay.supernet %s: the lab supports IPv4 only", supernet)
	}
	pre := nsPrefix(name)
	l := &Lab{
		Name:       name,
		Dir:        dir,
		Federation: f,
		Supernet:   supernet.Masked(),
		hosts:      map[string][]*Node{},
		switches:   map[string]*Node{},
		logs:       map[string]bool{},
	}
	l.Internet = &Node{Name: "internet", Role: RoleInternet, Namespace: pre + "inet"}
	l.nodes = append(l.nodes, l.Internet)

	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	namespaces := map[string]bool{l.Internet.Namespace: true}
	addNode := func(n *Node) {
		if namespaces[n.Namespace] {
			fail("%s %q: namespace %s is taken by another node; rename the site or gateway", n.Role, n.Name, n.Namespace)
			return
		}
		namespaces[n.Namespace] = true
		l.nodes = append(l.nodes, n)
	}
	if len(f.Sites) == 0 {
		fail("sites: the spec has no site")
	}
	type pending struct {
		n    *Node
		path string
	}
	var needPublic []pending
	publicOwner := map[netip.Addr]string{}
	gwNames := map[string]bool{}
	for si, s := range f.Sites {
		path := fmt.Sprintf("sites[%d]", si)
		if !specNameRE.MatchString(s.Name) {
			fail("%s.name %q: the lab needs letters, digits, '.', '_' or '-' (at most 63)", path, s.Name)
			continue
		}
		sw := &Node{Name: s.Name + "-lan", Role: RoleSwitch, Site: s.Name, Namespace: pre + "lan-" + s.Name}
		l.switches[s.Name] = sw
		addNode(sw)
		if len(s.Prefixes) == 0 {
			fail("%s (%s): no prefixes; build the lab from a spec that went through spec.Parse", path, s.Name)
			continue
		}
		if len(s.Gateways) == 0 && s.External == nil {
			fail("%s (%s): no gateway", path, s.Name)
			continue
		}
		lanAddrs := map[netip.Addr]bool{}
		var firstLAN netip.Prefix
		port := 0
		if x := s.External; x != nil {
			p := s.Prefixes[0].Masked()
			n := &Node{Name: s.Name + "-vpn", Role: RoleExternal, Site: s.Name, Namespace: pre + "ext-" + s.Name,
				Dir: filepath.Join(dir, "ext-"+s.Name), LAN: netip.PrefixFrom(lastAddr(p).Prev(), p.Bits()), gwIndex: len(l.externals), portIndex: port}
			port++
			r, ok := publicRange(x.Endpoint)
			switch {
			case !ok || !usable(r, x.Endpoint):
				fail("%s.external.endpoint %s: the lab needs a host address in %s or %s", path, x.Endpoint, Routers[0].Masked(), Routers[1].Masked())
			case publicOwner[x.Endpoint] != "":
				fail("%s.external.endpoint %s is also %q's", path, x.Endpoint, publicOwner[x.Endpoint])
			default:
				publicOwner[x.Endpoint] = n.Name
				n.Public, n.Via = netip.PrefixFrom(x.Endpoint, 32), r.Addr()
			}
			firstLAN = n.LAN
			lanAddrs[n.LAN.Addr()] = true
			l.externals = append(l.externals, n)
			addNode(n)
		}
		for gi, g := range s.Gateways {
			gpath := fmt.Sprintf("%s.gateways[%d]", path, gi)
			if !specNameRE.MatchString(g.Name) {
				fail("%s.name %q: the lab needs letters, digits, '.', '_' or '-' (at most 63)", gpath, g.Name)
				continue
			}
			if gwNames[g.Name] {
				fail("%s.name %q: another gateway has this name", gpath, g.Name)
				continue
			}
			gwNames[g.Name] = true
			n := &Node{
				Name:      g.Name,
				Role:      RoleGateway,
				Site:      s.Name,
				Namespace: pre + "gw-" + g.Name,
				Dir:       filepath.Join(dir, "gw-"+g.Name),
				gwIndex:   len(l.gateways),
				portIndex: port,
			}
			port++
			lan, err := lanPrefix(s, g.LANAddress)
			if err != nil {
				fail("%s.lanAddress: %w", gpath, err)
			} else {
				n.LAN = lan
				lanAddrs[lan.Addr()] = true
				if !firstLAN.IsValid() {
					firstLAN = lan
				}
			}
			pub, found, err := explicitPublic(f, g)
			switch {
			case err != nil:
				fail("%s: %w", gpath, err)
			case found:
				if other, dup := publicOwner[pub]; dup {
					fail("%s: public address %s is also gateway %q's; give each gateway its own (lab.publicAddresses)", gpath, pub, other)
				}
				publicOwner[pub] = g.Name
				r, _ := publicRange(pub)
				n.Public = netip.PrefixFrom(pub, 32)
				n.Via = r.Addr()
			default:
				needPublic = append(needPublic, pending{n, gpath})
			}
			l.gateways = append(l.gateways, n)
			addNode(n)
		}
		if !firstLAN.IsValid() {
			continue
		}
		segment := firstLAN.Masked()
		// Hosts route the overlay to the site's virtual address, which the
		// active gateway holds (its own LAN address at a one-gateway site).
		via := firstLAN.Addr()
		if v := s.VirtualAddress; v.IsValid() && segment.Contains(v) {
			via = v
			lanAddrs[v] = true
		}
		a := segment.Addr().Next()
		for i := 1; i <= hosts; i++ {
			for lanAddrs[a] {
				a = a.Next()
			}
			if !segment.Contains(a) || a == lastAddr(segment) {
				fail("%s (%s): segment %s has no room for %d hosts besides the gateways", path, s.Name, segment, hosts)
				break
			}
			h := &Node{
				Name:      fmt.Sprintf("%s-h%d", s.Name, i),
				Role:      RoleHost,
				Site:      s.Name,
				Namespace: fmt.Sprintf("%sh-%s-%d", pre, s.Name, i),
				LAN:       netip.PrefixFrom(a, segment.Bits()),
				Via:       via,
				portIndex: port,
			}
			port++
			l.hosts[s.Name] = append(l.hosts[s.Name], h)
			addNode(h)
			a = a.Next()
		}
	}
	// Gateways without an explicit public address take free ones, in spec
	// order, so the same spec always yields the same lab.
	free := freePublic(publicOwner)
	for _, p := range needPublic {
		a, ok := free()
		if !ok {
			fail("%s: no free public address left in the lab's ranges", p.path)
			continue
		}
		r, _ := publicRange(a)
		p.n.Public = netip.PrefixFrom(a, 32)
		p.n.Via = r.Addr()
	}
	l.fabrics = siteFabrics(f, cfg.Fabrics)
	layoutSegments(l, cfg, hosts, addNode, fail)
	managers := cfg.Managers
	if cfg.Manager && managers < 1 {
		managers = 1
	}
	for i := range managers {
		name, ns := "manager", pre+"mgr"
		if i > 0 {
			name, ns = fmt.Sprintf("manager%d", i+1), fmt.Sprintf("%smgr%d", pre, i+1)
		}
		m := &Node{Name: name, Role: RoleManager, Namespace: ns, Dir: filepath.Join(dir, name)}
		a, ok := free()
		if !ok {
			fail("%s: no free public address left in the lab's ranges", name)
			break
		}
		r, _ := publicRange(a)
		m.Public, m.Via = netip.PrefixFrom(a, 32), r.Addr()
		if i == 0 {
			l.Manager = m
		}
		l.Managers = append(l.Managers, m)
		addNode(m)
	}
	for _, n := range l.nodes {
		if len(n.Namespace) > 255 {
			fail("%s %q: namespace name %s is too long", n.Role, n.Name, n.Namespace)
		}
	}
	if len(errs) > 0 {
		return nil, joinErrors("lab layout", errs)
	}
	return l, nil
}

// lanPrefix returns a gateway's LAN address with the length of the site
// prefix that holds it.
func lanPrefix(s spec.Site, a netip.Addr) (netip.Prefix, error) {
	if !a.IsValid() {
		return netip.Prefix{}, fmt.Errorf("not set; build the lab from a spec that went through spec.Parse")
	}
	if !a.Is4() {
		return netip.Prefix{}, fmt.Errorf("%s: the lab supports IPv4 only", a)
	}
	for _, p := range s.Prefixes {
		if p.Contains(a) {
			if a == p.Masked().Addr() || a == lastAddr(p) {
				return netip.Prefix{}, fmt.Errorf("%s is the network or broadcast address of %s", a, p)
			}
			return netip.PrefixFrom(a, p.Bits()), nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("%s lies in none of site %q's prefixes %v", a, s.Name, s.Prefixes)
}

// explicitPublic returns the public address the spec gives a gateway: its
// endpoint's IP when that lies in a lab range, else lab.publicAddresses.
// found is false when the gateway may take a free address (behind NAT).
func explicitPublic(f *spec.Federation, g spec.Gateway) (a netip.Addr, found bool, err error) {
	var endpointIP netip.Addr
	if g.Endpoint != "" {
		if host, _, err := net.SplitHostPort(g.Endpoint); err == nil {
			endpointIP, _ = netip.ParseAddr(host)
		}
	}
	if _, ok := publicRange(endpointIP); ok {
		a = endpointIP
	} else if f.Lab != nil {
		a, found = f.Lab.PublicAddresses[g.Name]
		if found {
			if _, ok := publicRange(a); !ok || !a.Is4() {
				return a, false, fmt.Errorf("lab.publicAddresses[%s] %s: use an address in %s or %s", g.Name, a, Routers[0].Masked(), Routers[1].Masked())
			}
		}
	}
	if a.IsValid() {
		r, _ := publicRange(a)
		if !usable(r, a) {
			return a, false, fmt.Errorf("public address %s is the network, broadcast or lab router address of %s; pick another", a, r.Masked())
		}
		return a, true, nil
	}
	if g.BehindNAT {
		return a, false, nil
	}
	return a, false, fmt.Errorf("endpoint %q is not in the lab's public ranges %s and %s; set lab.publicAddresses[%s] to an address there",
		g.Endpoint, Routers[0].Masked(), Routers[1].Masked(), g.Name)
}

// freePublic returns a generator of public addresses not in used, first
// range first.
func freePublic(used map[netip.Addr]string) func() (netip.Addr, bool) {
	ri := 0
	next := Routers[0].Masked().Addr()
	return func() (netip.Addr, bool) {
		for ri < len(Routers) {
			r := Routers[ri]
			next = next.Next()
			if !r.Masked().Contains(next) {
				ri++
				if ri < len(Routers) {
					next = Routers[ri].Masked().Addr()
				}
				continue
			}
			if _, taken := used[next]; !taken && usable(r, next) {
				used[next] = ""
				return next, true
			}
		}
		return netip.Addr{}, false
	}
}

// joinErrors returns one error listing errs, one per line.
func joinErrors(what string, errs []error) error {
	if len(errs) == 1 {
		return fmt.Errorf("%s: %w", what, errs[0])
	}
	return &listError{what: what, errs: errs}
}

type listError struct {
	what string
	errs []error
}

func (e *listError) Error() string {
	s := fmt.Sprintf("%s: %d problems:", e.what, len(e.errs))
	for _, err := range e.errs {
		s += "\n  " + err.Error()
	}
	return s
}

func (e *listError) Unwrap() []error { return e.errs }
