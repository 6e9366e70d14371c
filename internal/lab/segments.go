package lab

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"

	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/spec"
)

// Fabric says how a site's switches behave. The zero value is a plain
// learning bridge.
type Fabric struct {
	// DropUnknownMACs makes every switch of the site (its segment, extra
	// segments and bridged segments) drop a frame entering a port whose
	// source MAC is not the MAC of the interface attached there, as AWS
	// and OpenNebula fabrics do. Gateway ports are no exception: a gateway
	// that bridges other machines' frames onto such a fabric loses them.
	DropUnknownMACs bool
}

// siteFabrics returns the lab's fabrics: cfg's, with DropUnknownMACs set
// for every site whose spec declares fabric: dropsUnknownMACs, so a spec
// that says so is tested on such a fabric.
func siteFabrics(f *spec.Federation, cfg map[string]Fabric) map[string]Fabric {
	out := maps.Clone(cfg)
	if out == nil {
		out = map[string]Fabric{}
	}
	for _, s := range f.Sites {
		if s.DropsUnknownMACs() {
			fab := out[s.Name]
			fab.DropUnknownMACs = true
			out[s.Name] = fab
		}
	}
	return out
}

// BridgedNetwork places hosts on a bridged network: one subnet stretched
// across sites. Each member site gets a switch of its own for the network,
// with hosts and a port of each of the site's gateways (BridgedPort) that
// has no address: joining the sites' segments is the gateway's job (the
// dataplane's bridge and VXLAN), not the lab's. Until then hosts of
// different sites do not reach each other.
type BridgedNetwork struct {
	// Name is the network's name, usually a spec network's.
	Name string
	// Subnet is the stretched subnet (IPv4). Host i (from 1) of the j-th
	// member site (from 0) gets address Subnet + j*BridgedStride + i, so
	// addresses never collide across sites.
	Subnet netip.Prefix
	// Sites are the member sites.
	Sites []string
	// HostsPerSite is the number of hosts per member site, at most
	// BridgedStride-1 (default: the lab's hosts per site).
	HostsPerSite int
	// MTU is the MTU of the hosts' interfaces and of the gateway's port on
	// the network's segments, as an operator sets it on the machines of a
	// bridged network (DHCP option 26, cloud-init). 0 means the MTU the
	// planner computes for the spec network of this Name (every member
	// gateway's Bridge.MTU), or 1500 when the spec has no bridged network
	// of that name. A host whose MTU exceeds the network's loses its larger
	// frames at the gateway's bridge without any error, which is why the
	// lab follows the plan by default.
	MTU int
}

// BridgedStride is the block of host addresses of one member site of a
// bridged network.
const BridgedStride = 16

// segment is a switch beyond a site's own segment: an extra segment of a
// site (network empty) or a site's part of a bridged network.
type segment struct {
	site    string
	network string // bridged network name; empty for an extra segment
	index   int    // extra segment number k (from 2); 0 for bridged
	prefix  netip.Prefix
	sw      *Node
	gw      *Node        // the site's first gateway, which has a port here
	others  []*Node      // bridged segments: the site's other gateways, each with a port here too
	port    string       // the gateways' interface on this segment
	addr    netip.Prefix // the gateway's address; invalid on bridged segments
	hosts   []*Node
	mtu     int // of the hosts' and the gateway's interfaces
}

// layoutSegments adds the switches and hosts of cfg.Segments and
// cfg.Bridged to l after the sites are laid out, and checks cfg.Fabrics.
//
// Extra segments are explicit: a site's further spec prefixes
// (Site.Prefixes[1:]) are not built unless listed in Config.Segments, so a
// spec's lab stays the same whatever its prefixes. A listed segment may be
// one of the site's spec prefixes or any other IPv4 prefix that overlaps no
// spec prefix of another site and no other segment of the site.
func layoutSegments(l *Lab, cfg Config, hosts int, addNode func(*Node), fail func(string, ...any)) {
	pre := nsPrefix(l.Name)
	sites := map[string]bool{}
	for _, s := range l.Federation.Sites {
		sites[s.Name] = true
	}
	for _, name := range sortedKeys(cfg.Fabrics) {
		if !sites[name] {
			fail("lab config Fabrics[%q]: no such site in the spec", name)
		}
	}
	// firstGW returns the site's first gateway with a LAN address, or nil
	// (newLab reported why).
	firstGW := func(site string) *Node {
		for _, g := range l.SiteGateways(site) {
			if g.LAN.IsValid() {
				return g
			}
		}
		return nil
	}
	for _, site := range sortedKeys(cfg.Segments) {
		if !sites[site] {
			fail("lab config Segments[%q]: no such site in the spec", site)
			continue
		}
		gw := firstGW(site)
		if gw == nil {
			continue
		}
		taken := []netip.Prefix{gw.LAN.Masked()}
		for k, p := range cfg.Segments[site] {
			path := fmt.Sprintf("lab config Segments[%q][%d] %s", site, k, p)
			if !p.IsValid() || !p.Addr().Is4() {
				fail("%s: want an IPv4 prefix", path)
				continue
			}
			p = p.Masked()
			if other, ok := overlapping(p, taken); ok {
				fail("%s: overlaps segment %s of the site; give each segment its own prefix", path, other)
				continue
			}
			if other, owner, ok := foreignPrefix(l, site, p); ok {
				fail("%s: overlaps prefix %s of site %q", path, other, owner)
				continue
			}
			taken = append(taken, p)
			n := k + 2
			gwAddr := netip.PrefixFrom(lastAddr(p).Prev(), p.Bits())
			seg := &segment{
				site:   site,
				index:  n,
				prefix: p,
				gw:     gw,
				port:   "lan" + strconv.Itoa(n-1),
				addr:   gwAddr,
				mtu:    DefaultMTU,
			}
			seg.sw = &Node{Name: fmt.Sprintf("%s-s%d-lan", site, n), Role: RoleSwitch, Site: site, Namespace: fmt.Sprintf("%slan-%s-s%d", pre, site, n)}
			addNode(seg.sw)
			a := p.Addr()
			for i := 1; i <= hosts; i++ {
				a = a.Next()
				if !p.Contains(a) || a == gwAddr.Addr() || a == lastAddr(p) {
					fail("%s: no room for %d hosts besides the gateway", path, hosts)
					break
				}
				h := &Node{
					Name:      fmt.Sprintf("%s-s%d-h%d", site, n, i),
					Role:      RoleHost,
					Site:      site,
					Namespace: fmt.Sprintf("%sh-%s-s%d-%d", pre, site, n, i),
					LAN:       netip.PrefixFrom(a, p.Bits()),
					Via:       gwAddr.Addr(),
					portIndex: i,
				}
				seg.hosts = append(seg.hosts, h)
				addNode(h)
			}
			l.segments = append(l.segments, seg)
		}
	}
	names := map[string]bool{}
	var planned plannedMTUs
	for bi, bn := range cfg.Bridged {
		path := fmt.Sprintf("lab config Bridged[%d] (%s)", bi, bn.Name)
		switch {
		case !specNameRE.MatchString(bn.Name):
			fail("%s: name %q: use letters, digits, '.', '_' or '-' (at most 63)", path, bn.Name)
			continue
		case names[bn.Name]:
			fail("%s: another bridged network has this name", path)
			continue
		case !bn.Subnet.IsValid() || !bn.Subnet.Addr().Is4():
			fail("%s: Subnet %s: want an IPv4 prefix", path, bn.Subnet)
			continue
		case len(bn.Sites) == 0:
			fail("%s: Sites: no member site", path)
			continue
		}
		names[bn.Name] = true
		n := bn.HostsPerSite
		if n == 0 {
			n = hosts
		}
		if n < 0 || n >= BridgedStride {
			fail("%s: %d hosts per site; use 0 to %d (HostsPerSite)", path, n, BridgedStride-1)
			continue
		}
		mtu := bn.MTU
		if mtu == 0 {
			var err error
			if mtu, err = planned.mtu(l.Federation, bn.Name); err != nil {
				fail("%s: MTU: %v; set MTU", path, err)
				continue
			}
		}
		if mtu < minMTU || mtu > maxMTU {
			fail("%s: MTU %d: use %d to %d", path, mtu, minMTU, maxMTU)
			continue
		}
		subnet := bn.Subnet.Masked()
		members := map[string]bool{}
		for j, site := range bn.Sites {
			if !sites[site] {
				fail("%s: Sites[%d] %q: no such site in the spec", path, j, site)
				continue
			}
			if members[site] {
				fail("%s: Sites[%d] %q: listed twice", path, j, site)
				continue
			}
			members[site] = true
			gw := firstGW(site)
			if gw == nil {
				continue
			}
			seg := &segment{
				site:    site,
				network: bn.Name,
				prefix:  subnet,
				gw:      gw,
				port:    "b" + strconv.Itoa(bi+1),
				mtu:     mtu,
			}
			// Every gateway of the site has its port, so that whichever is
			// active can bridge the segment (a standby's port stays idle).
			for _, g := range l.SiteGateways(site) {
				if g != gw && g.LAN.IsValid() {
					seg.others = append(seg.others, g)
				}
			}
			seg.sw = &Node{Name: bn.Name + "-" + site + "-br", Role: RoleSwitch, Site: site, Namespace: pre + "br-" + bn.Name + "-" + site}
			addNode(seg.sw)
			for i := 1; i <= n; i++ {
				a, ok := addrAt(subnet, j*BridgedStride+i)
				if !ok {
					fail("%s: Subnet %s has no room for host %d of member site %d (%s); use a larger subnet", path, subnet, i, j, site)
					break
				}
				h := &Node{
					Name:      fmt.Sprintf("%s-%s-h%d", bn.Name, site, i),
					Role:      RoleHost,
					Site:      site,
					Namespace: fmt.Sprintf("%sbh-%s-%s-%d", pre, bn.Name, site, i),
					LAN:       netip.PrefixFrom(a, subnet.Bits()),
					portIndex: i,
				}
				seg.hosts = append(seg.hosts, h)
				addNode(h)
			}
			l.segments = append(l.segments, seg)
		}
	}
}

// Bounds of BridgedNetwork.MTU: IPv6's minimum link MTU (the lab's
// bridged hosts speak IPv6 link-local) and the largest veth MTU.
const (
	minMTU = 1280
	maxMTU = 65535
)

// plannedMTUs computes the federation's plans once, on first use, for the
// MTUs of its bridged networks.
type plannedMTUs struct {
	done  bool
	plans []plan.Gateway
	err   error
}

// mtu returns the MTU the planner gives bridged network name (the same on
// every member gateway), or DefaultMTU when the spec has no such bridged
// network.
func (p *plannedMTUs) mtu(f *spec.Federation, name string) (int, error) {
	if !slices.ContainsFunc(f.Networks, func(n spec.Network) bool { return n.Name == name && n.Mode == spec.Bridged }) {
		return DefaultMTU, nil
	}
	if !p.done {
		p.done = true
		p.plans, p.err = plan.Compute(f, plan.Inputs{})
	}
	if p.err != nil {
		return 0, fmt.Errorf("planning the spec for network %s's MTU: %w", name, p.err)
	}
	for _, g := range p.plans {
		for _, b := range g.Bridges {
			if b.Network == name {
				return b.MTU, nil
			}
		}
	}
	return DefaultMTU, nil
}

// addrAt returns the address off positions after p's network address if it
// is a host address of p.
func addrAt(p netip.Prefix, off int) (netip.Addr, bool) {
	b := p.Masked().Addr().As4()
	v := uint64(b[0])<<24 | uint64(b[1])<<16 | uint64(b[2])<<8 | uint64(b[3]) + uint64(off)
	if v > 0xffffffff {
		return netip.Addr{}, false
	}
	a := netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	if !p.Contains(a) || a == lastAddr(p) || a == p.Masked().Addr() {
		return netip.Addr{}, false
	}
	return a, true
}

// overlapping returns the first of ps that overlaps p.
func overlapping(p netip.Prefix, ps []netip.Prefix) (netip.Prefix, bool) {
	for _, q := range ps {
		if q.Overlaps(p) {
			return q, true
		}
	}
	return netip.Prefix{}, false
}

// foreignPrefix returns a spec prefix of a site other than site that
// overlaps p.
func foreignPrefix(l *Lab, site string, p netip.Prefix) (netip.Prefix, string, bool) {
	for _, s := range l.Federation.Sites {
		if s.Name == site {
			continue
		}
		if q, ok := overlapping(p, s.Prefixes); ok {
			return q, s.Name, true
		}
	}
	return netip.Prefix{}, "", false
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// SegmentHosts returns the hosts of a site's segment k: 1 is the site's
// own segment (Hosts), 2 and up the extra segments of Config.Segments in
// order. Nil when there is no such segment.
func (l *Lab) SegmentHosts(site string, k int) []*Node {
	if k == 1 {
		return l.Hosts(site)
	}
	if s := l.extraSegment(site, k); s != nil {
		return slices.Clone(s.hosts)
	}
	return nil
}

// SegmentPort returns the interface of the site's first gateway on the
// site's extra segment k (2 and up: "lan1", "lan2", ...) and its address
// there, the segment's last usable address. ok is false when there is no
// such segment.
func (l *Lab) SegmentPort(site string, k int) (port string, addr netip.Prefix, ok bool) {
	if s := l.extraSegment(site, k); s != nil {
		return s.port, s.addr, true
	}
	return "", netip.Prefix{}, false
}

func (l *Lab) extraSegment(site string, k int) *segment {
	for _, s := range l.segments {
		if s.network == "" && s.site == site && s.index == k {
			return s
		}
	}
	return nil
}

// BridgedHosts returns the hosts of a site on a bridged network
// (Config.Bridged), or nil.
func (l *Lab) BridgedHosts(network, site string) []*Node {
	for _, s := range l.segments {
		if s.network == network && s.site == site {
			return slices.Clone(s.hosts)
		}
	}
	return nil
}

// BridgedMTU returns the MTU of the hosts on a bridged network
// (Config.Bridged; see BridgedNetwork.MTU and SetBridgedMTU), or 0 for an
// unknown network.
func (l *Lab) BridgedMTU(network string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.segments {
		if s.network == network {
			return s.mtu
		}
	}
	return 0
}

// BridgedPort returns the interface ("b1", "b2", ... by the network's
// place in Config.Bridged) through which gateway is attached to its site's
// segment of a bridged network, without an address: the port a plan's
// bridge enslaves. Every gateway of a member site has one. Empty when the
// gateway has none.
func (l *Lab) BridgedPort(network, gateway string) string {
	for _, s := range l.segments {
		if s.network == network && (s.gw.Name == gateway || slices.ContainsFunc(s.others, func(g *Node) bool { return g.Name == gateway })) {
			return s.port
		}
	}
	return ""
}
