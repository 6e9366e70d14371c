package spec

import (
	"encoding/base64"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/fednet/fednet/internal/backend"
)

// Limits the validator enforces.
const (
	// MinTunnelMTU is the smallest MTU the WireGuard interface may have:
	// IPv6 needs 1280.
	MinTunnelMTU = 1280
	// WireGuardOverhead is the worst-case bytes WireGuard adds to a packet
	// (IPv6 outer header 40, UDP 8, WireGuard 32).
	WireGuardOverhead = 80
	// MinUnderlayMTU is the smallest underlayMTU accepted, so that the tunnel
	// MTU stays at least MinTunnelMTU.
	MinUnderlayMTU = MinTunnelMTU + WireGuardOverhead
	// MaxNetworkID is the largest network id (a 24-bit VXLAN VNI).
	MaxNetworkID = 1<<24 - 1
	// MaxHostsPerSite bounds lab.hostsPerSite.
	MaxHostsPerSite = 50
)

// validate checks the whole defaulted, numbered Federation and records every
// problem. It also assigns transit addresses.
func (c *checker) validate() {
	c.document()
	c.overlay()
	sites := c.sites()
	c.externals()
	c.transit()
	c.networks(sites)
	c.bridgePorts()
	c.topology(sites)
	c.ipsec()
	c.egressPrices()
	c.clouds()
	c.publicAllows()
	c.lab()
}

func (c *checker) document() {
	f := c.f
	switch {
	case f.APIVersion == "":
		c.add("apiVersion", "apiVersion is missing; want apiVersion: %s", APIVersion)
	case f.APIVersion != APIVersion:
		c.add("apiVersion", "%q is not a supported apiVersion; want %s", f.APIVersion, APIVersion)
	}
	switch {
	case f.Kind == "":
		c.add("kind", "kind is missing; want kind: %s", Kind)
	case f.Kind != Kind:
		c.add("kind", "%q is not a supported kind; want %s", f.Kind, Kind)
	}
	c.name("name", "federation", f.Name, "demo")
}

// name checks a name of the given kind (federation, site, gateway, network).
func (c *checker) name(path, kind, name, example string) bool {
	if name == "" {
		c.add(path, "the %s has no name; want name: followed by lowercase letters, digits and '-', like %s", kind, example)
		return false
	}
	if !validName(name) {
		c.add(path, "%q is not a valid %s name; want 1 to 63 lowercase letters, digits and '-', starting and ending with a letter or digit, like %s", name, kind, example)
		return false
	}
	return true
}

// ValidName reports whether s is a valid name for a site, network,
// gateway or host: a DNS label (1..63 of [a-z0-9-], not starting or
// ending with -).
func ValidName(s string) bool { return validName(s) }

// validName reports whether s is a DNS label: 1..63 of [a-z0-9-], not
// starting or ending with '-'. Names end up in file names, interface and
// namespace names and URLs, so they are kept plain.
func validName(s string) bool {
	if len(s) == 0 || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}

func (c *checker) overlay() {
	o := c.f.Overlay
	if p := o.ListenPort; p < 1 || p > 65535 {
		c.add("overlay.listenPort", "%d is not a UDP port; want 1..65535 (default %d)", p, DefaultListenPort)
	}
	if m := o.UnderlayMTU; m < MinUnderlayMTU || m > 65535 {
		c.add("overlay.underlayMTU", "%d is out of range; want %d..65535: WireGuard takes up to %d bytes, and the tunnel must still carry %d-byte packets (default %d)",
			m, MinUnderlayMTU, WireGuardOverhead, MinTunnelMTU, DefaultUnderlayMTU)
	}
	switch {
	case !validInterface(o.Interface):
		c.add("overlay.interface", "%q is not a usable interface name; want 1 to 15 letters, digits, '-', '_' or '.', like %s", o.Interface, DefaultInterface)
	case systemInterface(o.Interface):
		c.add("overlay.interface", "%q is a name the system gives its own interfaces (loopback, Ethernet, wireless); fednet creates the tunnel interface itself and never takes over an existing one: choose a name of its own, like %s", o.Interface, DefaultInterface)
	}
	if _, ok := backend.Lookup(o.Backend); !ok {
		c.add("overlay.backend", "%q is not a tunnel backend; want one of: %s (default %s)", o.Backend, backend.List(), backend.Default)
	}
	if m := o.Fallback.TCP443; m != FallbackAuto && m != FallbackOff {
		c.add("overlay.fallback.tcp443", "%q is not a fallback mode; want %s (default: a link whose UDP is blocked moves to TLS over TCP) or %s", m, FallbackAuto, FallbackOff)
	}
	if p := o.Fallback.Port; p < 1 || p > 65535 {
		c.add("overlay.fallback.port", "%d is not a TCP port; want 1..65535 (default %d)", p, DefaultFallbackPort)
	}
}

// systemNames match the names Linux, udev and systemd give to loopback,
// Ethernet and wireless interfaces: an overlay interface by such a name
// would be someone else's interface.
var systemNames = regexp.MustCompile(`^(lo|eth[0-9]+|en[bopsx][0-9a-z]+|wl[0-9a-z]+|ww[0-9a-z]+|ib[0-9]+)$`)

// systemInterface reports whether name is one the system gives its own
// interfaces.
func systemInterface(name string) bool { return systemNames.MatchString(name) }

// validInterface reports whether s is a Linux interface name fednet accepts.
func validInterface(s string) bool {
	if len(s) == 0 || len(s) > 15 || s == "." || s == ".." {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

// siteIndex maps site names to their index in f.Sites (first one wins).
type siteIndex map[string]int

// ownedPrefix is one site prefix with where it came from.
type ownedPrefix struct {
	p    netip.Prefix
	site int
	path string
}

func (c *checker) sites() siteIndex {
	f := c.f
	sites := siteIndex{}
	gateways := map[string]string{}  // name -> path
	endpoints := map[string]string{} // normalized endpoint -> path
	var prefixes []ownedPrefix
	if len(f.Sites) == 0 && !c.ps.isBad("sites") {
		c.add("sites", "the federation has no sites; want a sites: list with at least one site")
	}
	for i := range f.Sites {
		s := &f.Sites[i]
		path := fmt.Sprintf("sites[%d]", i)
		if c.ps.isBad(path) {
			continue
		}
		c.uniqueName("sites", i, "site", s.Name, "aws-eu", sites)
		if s.Fabric != "" && s.Fabric != FabricDropsUnknownMACs {
			c.add(path+".fabric", "%q is not a fabric; want fabric: %s (a cloud fabric that drops frames from unknown MAC addresses), or leave fabric out for an ordinary LAN", s.Fabric, FabricDropsUnknownMACs)
		}
		if s.Index < 0 || s.Index > 255 {
			c.add(path+".index", "%d is out of range; want 0..255 (the B of 10.A.B.0/24)", s.Index)
		}
		for k, p := range s.Prefixes {
			if !p.IsValid() {
				continue
			}
			ppath := fmt.Sprintf("%s.prefixes[%d]", path, k)
			if c.computed[i] {
				ppath = path + ".prefixes"
			}
			if sn := f.Overlay.Supernet; sn.IsValid() && !(sn.Bits() <= p.Bits() && sn.Contains(p.Addr())) {
				if c.computed[i] {
					c.add(ppath, "site %s has no prefixes and its numbering-plan prefix %s (provider %s, index %d) is not inside overlay.supernet %s; give the site explicit prefixes inside the supernet",
						s.Name, p, s.Provider, s.Index, sn)
				} else {
					c.add(ppath, "%s is not inside overlay.supernet %s; want a prefix inside it, or widen the supernet", p, sn)
				}
			}
			if t := f.Overlay.Transit; t.IsValid() && t.Overlaps(p) {
				c.add(ppath, "%s overlaps overlay.transit %s, which holds the gateways' tunnel addresses; move the site or set overlay.transit to a prefix no site uses", p, t)
			}
			prefixes = append(prefixes, ownedPrefix{p, i, ppath})
		}
		if len(s.Gateways) == 0 && s.External == nil && !c.ps.isBad(path+".gateways") {
			c.add(path+".gateways", "site %s has no gateway; want a gateways: list with at least one gateway (name and endpoint, or behindNAT: true)", s.Name)
		}
		for j := range s.Gateways {
			c.gateway(i, j, gateways, endpoints)
		}
		c.virtualAddress(i)
	}
	c.overlaps(prefixes)
	return sites
}

// virtualAddress checks the virtual address of site i: an address of the
// site's segment, not the network or broadcast address, and, at a site
// with two or more gateways, none of their own LAN addresses (the active
// gateway holds it besides its own).
func (c *checker) virtualAddress(i int) {
	s := &c.f.Sites[i]
	path := fmt.Sprintf("sites[%d].virtualAddress", i)
	a := s.VirtualAddress
	if !a.IsValid() || !c.set[path] {
		return
	}
	var in *netip.Prefix
	for k := range s.Prefixes {
		if s.Prefixes[k].IsValid() && s.Prefixes[k].Contains(a) {
			in = &s.Prefixes[k]
			break
		}
	}
	switch {
	case in == nil && len(s.Prefixes) > 0:
		c.add(path, "%s is not in any prefix of site %s (%s); want an address of the site's segment that the site's hosts use as next hop, or leave virtualAddress out for %s", a, s.Name, joinPrefixes(s.Prefixes), lastUsable(s.Prefixes[0]))
	case in != nil && a.Is4() && in.Bits() <= 30 && (a == in.Addr() || a == lastAddr(*in)):
		c.add(path, "%s is the network or broadcast address of %s; want a host address, like %s", a, *in, lastUsable(*in))
	case len(s.Gateways) == 1 && s.Gateways[0].LANAddress.IsValid() && a != s.Gateways[0].LANAddress:
		c.add(path, "site %s has one gateway, so its virtual address is that gateway's lanAddress %s; leave virtualAddress out, or give the site a second gateway", s.Name, s.Gateways[0].LANAddress)
	default:
		for _, g := range s.Gateways {
			if len(s.Gateways) > 1 && g.LANAddress == a {
				c.add(path, "%s is also the lanAddress of gateway %s; the virtual address moves between the site's gateways, so it must be none of their own addresses", a, g.Name)
				break
			}
		}
	}
}

// overlaps reports every site prefix that overlaps an earlier one. Prefixes
// either nest or are disjoint, so after sorting by address each overlapping
// prefix lies inside the widest one seen before it.
func (c *checker) overlaps(ps []ownedPrefix) {
	sort.SliceStable(ps, func(i, j int) bool {
		a, b := ps[i].p, ps[j].p
		if a.Addr() != b.Addr() {
			return a.Addr().Less(b.Addr())
		}
		if a.Bits() != b.Bits() {
			return a.Bits() < b.Bits()
		}
		return c.f.Line(ps[i].path) < c.f.Line(ps[j].path)
	})
	var cover *ownedPrefix
	for i := range ps {
		cur := &ps[i]
		if cover != nil && cover.p.Overlaps(cur.p) {
			c.overlap(*cover, *cur)
		}
		if cover == nil || cover.p.Addr().Is4() != cur.p.Addr().Is4() || lastAddr(cover.p).Less(lastAddr(cur.p)) {
			cover = cur
		}
	}
}

func (c *checker) overlap(a, b ownedPrefix) {
	if c.f.Line(b.path) < c.f.Line(a.path) {
		a, b = b, a
	}
	sa, sb := c.f.Sites[a.site], c.f.Sites[b.site]
	hint := "; give the sites prefixes that do not overlap"
	if c.computed[a.site] && c.computed[b.site] {
		hint = "; both come from the numbering plan, so give the sites different provider/index pairs or explicit prefixes"
	}
	if a.site == b.site {
		c.add(b.path, "%s overlaps %s, another prefix of site %s; list each segment once", b.p, a.p, sb.Name)
		return
	}
	c.add(b.path, "%s of site %s overlaps %s of site %s (line %d)%s", b.p, sb.Name, a.p, sa.Name, c.f.Line(a.path), hint)
}

func (c *checker) gateway(i, j int, gateways, endpoints map[string]string) {
	f := c.f
	s := &f.Sites[i]
	g := &s.Gateways[j]
	path := fmt.Sprintf("sites[%d].gateways[%d]", i, j)
	if c.ps.isBad(path) {
		return
	}
	if c.name(path+".name", "gateway", g.Name, "aws-gw") {
		if other, dup := gateways[g.Name]; dup {
			c.add(path+".name", "gateway name %q is already used by %s (line %d); gateway names must be unique across the federation", g.Name, other, f.Line(other))
		} else {
			gateways[g.Name] = path
		}
	}
	switch {
	case g.Endpoint == "" && !g.BehindNAT:
		c.add(path+".endpoint", "gateway %s has neither endpoint nor behindNAT; want endpoint: host:port (e.g. 198.51.100.10:%d) if peers can reach it, or behindNAT: true if not", g.Name, DefaultListenPort)
	case g.Endpoint != "" && g.BehindNAT:
		c.add(path+".behindNAT", "gateway %s has both an endpoint and behindNAT: true; keep endpoint if peers can reach it, or behindNAT if they cannot, not both", g.Name)
	case g.Endpoint != "":
		norm, msg := checkEndpoint(g.Endpoint)
		if msg != "" {
			c.add(path+".endpoint", "%q %s; want e.g. 198.51.100.10:%d or gw.example.com:%d", g.Endpoint, msg, DefaultListenPort, DefaultListenPort)
		} else if other, dup := endpoints[norm]; dup {
			c.add(path+".endpoint", "%s is already the endpoint of %s (line %d); each gateway needs its own host:port", g.Endpoint, other, f.Line(other+".endpoint"))
		} else {
			endpoints[norm] = path
		}
	}
	if g.PublicKey != "" {
		if msg := checkKey(g.PublicKey); msg != "" {
			c.add(path+".publicKey", "%s; want the 44-character base64 output of `wg pubkey`, or leave publicKey out", msg)
		}
	}
	if a := g.LANAddress; a.IsValid() && c.set[path+".lanAddress"] {
		var in *netip.Prefix
		for k := range s.Prefixes {
			if s.Prefixes[k].IsValid() && s.Prefixes[k].Contains(a) {
				in = &s.Prefixes[k]
				break
			}
		}
		switch {
		case in == nil && len(s.Prefixes) > 0:
			c.add(path+".lanAddress", "%s is not in any prefix of site %s (%s); want an address of the site's segment, or leave lanAddress out for %s", a, s.Name, joinPrefixes(s.Prefixes), lastUsable(s.Prefixes[0]))
		case in != nil && a.Is4() && in.Bits() <= 30 && (a == in.Addr() || a == lastAddr(*in)):
			c.add(path+".lanAddress", "%s is the network or broadcast address of %s; want a host address, like %s", a, *in, lastUsable(*in))
		default:
			for k := range j {
				if s.Gateways[k].LANAddress == a {
					c.add(path+".lanAddress", "%s is already the lanAddress of gateway %s (line %d); each gateway needs its own", a, s.Gateways[k].Name, f.Line(fmt.Sprintf("sites[%d].gateways[%d]", i, k)))
					break
				}
			}
		}
	}
}

func joinPrefixes(ps []netip.Prefix) string {
	var parts []string
	for _, p := range ps {
		if p.IsValid() {
			parts = append(parts, p.String())
		}
	}
	return strings.Join(parts, ", ")
}

// checkEndpoint checks a host:port endpoint. It returns a normalized form for
// duplicate detection, or a message (to follow the quoted endpoint) saying
// what is wrong.
func checkEndpoint(s string) (string, string) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return "", "is not host:port"
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return "", fmt.Sprintf("has port %q; want a port 1..65535", port)
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" || a.IsUnspecified() || a.IsMulticast() {
			return "", fmt.Sprintf("has address %s, which peers cannot send to", host)
		}
		return netip.AddrPortFrom(a.Unmap(), uint16(n)).String(), ""
	}
	if !validHostname(host) {
		return "", fmt.Sprintf("has host %q, which is neither an IP address nor a DNS name", host)
	}
	return strings.ToLower(strings.TrimSuffix(host, ".")) + ":" + strconv.Itoa(n), ""
}

// validHostname reports whether s is a DNS name: dot-separated labels of
// letters, digits and '-', not all-numeric at the end (that would be a
// mistyped IPv4 address).
func validHostname(s string) bool {
	s = strings.TrimSuffix(s, ".")
	if len(s) == 0 || len(s) > 253 {
		return false
	}
	labels := strings.Split(s, ".")
	for _, l := range labels {
		if len(l) == 0 || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for _, r := range l {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
				return false
			}
		}
	}
	if _, err := strconv.Atoi(labels[len(labels)-1]); err == nil {
		return false
	}
	return true
}

// checkKey checks a base64 WireGuard public key (32 bytes), the same rule as
// plan.ParseKey. It returns "" or what is wrong.
func checkKey(s string) string {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return fmt.Sprintf("%q is not base64", s)
	}
	if len(b) != 32 {
		return fmt.Sprintf("%q decodes to %d bytes, not the 32 of a WireGuard key", s, len(b))
	}
	return ""
}

// uniqueName checks the name of entry i of list (a kind such as "site")
// and that no earlier entry, recorded in seen, has it; it records a new one.
func (c *checker) uniqueName(list string, i int, kind, name, example string, seen map[string]int) {
	path := fmt.Sprintf("%s[%d].name", list, i)
	if !c.name(path, kind, name, example) {
		return
	}
	if j, dup := seen[name]; dup {
		c.add(path, "%s name %q is already used by %s[%d] (line %d); %s names must be unique", kind, name, list, j, c.f.Line(fmt.Sprintf("%s[%d]", list, j)), kind)
		return
	}
	seen[name] = i
}

func (c *checker) networks(sites siteIndex) {
	f := c.f
	names := map[string]int{}
	ids := map[int]int{}
	comp := c.components()
	for i := range f.Networks {
		n := &f.Networks[i]
		path := fmt.Sprintf("networks[%d]", i)
		if c.ps.isBad(path) {
			continue
		}
		c.uniqueName("networks", i, "network", n.Name, "apps", names)
		if !c.ps.isBad(path + ".id") {
			switch j, dup := ids[n.ID]; {
			case n.ID < 1 || n.ID > MaxNetworkID:
				if !c.set[path+".id"] {
					c.add(path+".id", "network %s has no id; want id: a number 1..%d, unique per network", n.Name, MaxNetworkID)
				} else {
					c.add(path+".id", "%d is out of range; want 1..%d (the id is a 24-bit VXLAN VNI)", n.ID, MaxNetworkID)
				}
			case dup:
				c.add(path+".id", "id %d is already used by network %s (networks[%d], line %d); network ids must be unique", n.ID, f.Networks[j].Name, j, f.Line(fmt.Sprintf("networks[%d]", j)))
			default:
				ids[n.ID] = i
			}
		}
		switch n.Mode {
		case Routed, Bridged:
		case "":
			c.add(path+".mode", "network %s has no mode; want mode: routed or mode: bridged", n.Name)
		default:
			c.add(path+".mode", "%q is not a network mode; want routed or bridged", n.Mode)
		}
		c.subnet(path, n)
		if len(n.Sites) == 0 && !c.ps.isBad(path+".sites") {
			c.add(path+".sites", "network %s has no sites; want sites: [site-a, site-b]", n.Name)
		}
		var members []string
		seen := map[string]int{}
		for k, name := range n.Sites {
			spath := fmt.Sprintf("%s.sites[%d]", path, k)
			if _, ok := sites[name]; !ok {
				c.add(spath, "unknown site %q; known sites: %s", name, c.siteList(sites))
				continue
			}
			if first, dup := seen[name]; dup {
				c.add(spath, "site %s is already listed in this network (sites[%d]); list each site once", name, first)
				continue
			}
			seen[name] = k
			members = append(members, name)
		}
		switch n.Mode {
		case Routed, Bridged:
			c.reachable(path, n, members, comp)
		}
		if n.Mode == Bridged {
			c.portsPresent(n, members, sites)
		}
	}
}

// subnet checks a network's optional stretched subnet: bridged networks
// only, clear of every site prefix and of the transit prefix.
func (c *checker) subnet(path string, n *Network) {
	p := n.Subnet
	if !p.IsValid() {
		return
	}
	path += ".subnet"
	if n.Mode == Routed {
		c.add(path, "network %s is routed: its addresses are its sites' prefixes, so it takes no subnet; remove subnet, or make the network mode: bridged", n.Name)
		return
	}
	if t := c.f.Overlay.Transit; t.IsValid() && t.Overlaps(p) {
		c.add(path, "%s overlaps overlay.transit %s, which holds the gateways' tunnel addresses; give the network a subnet outside it", p, t)
	}
	for _, s := range c.f.Sites {
		for _, sp := range s.Prefixes {
			if sp.IsValid() && sp.Overlaps(p) {
				c.add(path, "%s overlaps %s of site %s; a bridged network's subnet is its own segment, so give it a subnet no site prefix uses", p, sp, s.Name)
			}
		}
	}
}

// portsPresent requires a bridgePorts entry for bridged network n on every
// gateway of every member site: the site's active gateway joins the
// site's segment to the network, and any of them may become active. At a
// site whose fabric drops unknown MACs the port is optional: the site's
// hosts join through neighbor tunnels, and frames from other sites' MACs
// would not cross the fabric anyway.
func (c *checker) portsPresent(n *Network, members []string, sites siteIndex) {
	for _, name := range members {
		i := sites[name]
		s := &c.f.Sites[i]
		if s.DropsUnknownMACs() {
			continue
		}
		for j := range s.Gateways {
			g := &s.Gateways[j]
			if _, ok := g.BridgePorts[n.Name]; ok {
				continue
			}
			also := ""
			if len(s.Gateways) > 1 {
				also = " (every gateway of the site needs one: any of them may become active)"
			}
			c.add(fmt.Sprintf("sites[%d].gateways[%d].bridgePorts", i, j), "site %s is in bridged network %s but its gateway %s has no port for it%s; add bridgePorts: {%s: IFACE}, IFACE being the gateway's interface on the network's segment at this site (like eth1)",
				s.Name, n.Name, g.Name, also, n.Name)
		}
	}
}

// bridgePorts checks every gateway's bridgePorts: each names a bridged
// network of the gateway's site, with a valid interface that is neither
// the tunnel interface nor the port of another network.
func (c *checker) bridgePorts() {
	f := c.f
	networks := map[string]*Network{}
	members := map[string]map[string]bool{} // by network, made when a port names it
	for i := range f.Networks {
		if _, dup := networks[f.Networks[i].Name]; !dup {
			networks[f.Networks[i].Name] = &f.Networks[i]
		}
	}
	isMember := func(n *Network, site string) bool {
		m, ok := members[n.Name]
		if !ok {
			m = make(map[string]bool, len(n.Sites))
			for _, s := range n.Sites {
				m[s] = true
			}
			members[n.Name] = m
		}
		return m[site]
	}
	for i := range f.Sites {
		s := &f.Sites[i]
		for j := range s.Gateways {
			g := &s.Gateways[j]
			if len(g.BridgePorts) == 0 {
				continue
			}
			used := map[string]string{} // interface -> network
			for _, name := range sortedKeys(g.BridgePorts) {
				port := g.BridgePorts[name]
				path := fmt.Sprintf("sites[%d].gateways[%d].bridgePorts.%s", i, j, name)
				n, ok := networks[name]
				switch {
				case !ok:
					c.add(path, "unknown network %q; want the name of a bridged network that site %s is a member of", name, s.Name)
					continue
				case n.Mode != Bridged:
					c.add(path, "network %s is %s, not bridged: it needs no port; remove this entry", name, n.Mode)
					continue
				case !isMember(n, s.Name):
					c.add(path, "site %s is not a member of network %s; remove this entry or add %s to the network's sites", s.Name, name, s.Name)
					continue
				}
				switch other, dup := used[port]; {
				case !validInterface(port):
					c.add(path, "%q is not a usable interface name; want 1 to 15 letters, digits, '-', '_' or '.', like eth1", port)
				case port == f.Overlay.Interface:
					c.add(path, "%s is the WireGuard interface (overlay.interface); want the gateway's interface on the network's segment, like eth1", port)
				case dup:
					c.add(path, "%s is already the port of network %s on this gateway; each bridged network needs its own interface", port, other)
				default:
					used[port] = name
				}
			}
		}
	}
}

// reachable requires every member site of a network to reach every other
// over enabled links, directly or through other sites: the planner relays
// routed traffic along the cheapest chain of links and bridged frames along
// the network's relay tree (docs/topology.md), but it cannot cross a gap.
func (c *checker) reachable(path string, n *Network, members []string, comp map[string]int) {
	groups := map[int][]string{}
	for _, m := range members {
		groups[comp[m]] = append(groups[comp[m]], m)
	}
	if len(groups) < 2 {
		return
	}
	var largest []string
	for _, g := range groups {
		if len(g) > len(largest) || len(g) == len(largest) && g[0] < largest[0] {
			largest = g
		}
	}
	var cut []string
	for _, m := range members {
		if !slices.Contains(largest, m) {
			cut = append(cut, m)
		}
	}
	c.add(path+".sites", "member sites %s cannot reach member sites %s of network %s: topology.links disables every chain of links between them; enable a link between the two groups or take the sites out of the network",
		strings.Join(cut, ", "), strings.Join(largest, ", "), n.Name)
}

// components labels every site with the connected component it belongs to
// over enabled links. In a mesh a site reaches every other site except those
// whose link is disabled, so the search walks the complement of the disabled
// links: each step scans only the still unvisited sites.
func (c *checker) components() map[string]int {
	disabled := map[[2]string]bool{}
	for _, l := range c.f.Topology.Links {
		if l.Disabled && len(l.Between) == 2 {
			disabled[[2]string{l.Between[0], l.Between[1]}] = true
			disabled[[2]string{l.Between[1], l.Between[0]}] = true
		}
	}
	vias := c.f.externalVias()
	var unvisited []string
	seen := map[string]bool{}
	for _, s := range c.f.Sites {
		if s.Name != "" && !seen[s.Name] {
			seen[s.Name] = true
			unvisited = append(unvisited, s.Name)
		}
	}
	comp := map[string]int{}
	for id := 0; len(unvisited) > 0; id++ {
		queue := []string{unvisited[0]}
		unvisited = unvisited[1:]
		comp[queue[0]] = id
		for len(queue) > 0 {
			u := queue[0]
			queue = queue[1:]
			rest := unvisited[:0]
			for _, v := range unvisited {
				if disabled[[2]string{u, v}] || vias != nil && !externalAllows(vias, u, v) {
					rest = append(rest, v)
					continue
				}
				comp[v] = id
				queue = append(queue, v)
			}
			unvisited = rest
		}
	}
	return comp
}

// siteList names the known sites for an "unknown site" message.
func (c *checker) siteList(sites siteIndex) string {
	names := sortedKeys(sites)
	if len(names) == 0 {
		return "none (the spec defines no valid sites)"
	}
	if len(names) > 10 {
		return strings.Join(names[:10], ", ") + fmt.Sprintf(" and %d more", len(names)-10)
	}
	return strings.Join(names, ", ")
}

func (c *checker) topology(sites siteIndex) {
	f := c.f
	if f.Topology.Mode != "mesh" {
		c.add("topology.mode", "%q is not a topology mode; want mesh (every pair of sites linked unless topology.links disables it)", f.Topology.Mode)
	}
	pairs := map[[2]string]int{}
	for k := range f.Topology.Links {
		l := &f.Topology.Links[k]
		path := fmt.Sprintf("topology.links[%d]", k)
		if c.ps.isBad(path) {
			continue
		}
		if l.Cost < 1 {
			c.add(path+".cost", "cost %d is too low; want 1 or more (default 1)", l.Cost)
		}
		if len(l.Between) != 2 {
			if !c.ps.isBad(path + ".between") {
				c.add(path+".between", "names %d sites; want exactly two, like between: [aws-eu, lab]", len(l.Between))
			}
			continue
		}
		ok := true
		for x, name := range l.Between {
			if _, known := sites[name]; !known {
				c.add(fmt.Sprintf("%s.between[%d]", path, x), "unknown site %q; known sites: %s", name, c.siteList(sites))
				ok = false
			}
		}
		if !ok {
			continue
		}
		a, b := l.Between[0], l.Between[1]
		if a == b {
			c.add(path+".between", "names site %s twice; want two different sites", a)
			continue
		}
		key := [2]string{min(a, b), max(a, b)}
		if first, dup := pairs[key]; dup {
			c.add(path, "the link between %s and %s is already given in topology.links[%d] (line %d); merge the two entries", a, b, first, f.Line(fmt.Sprintf("topology.links[%d]", first)))
			continue
		}
		pairs[key] = k
	}
	c.natPairs(sites, pairs)
}

// natPairs rejects every enabled link between two sites whose gateways are
// all behind NAT: neither side can start the handshake.
func (c *checker) natPairs(sites siteIndex, pairs map[[2]string]int) {
	f := c.f
	var nat []int
	for _, i := range sites {
		if f.Sites[i].BehindNAT() {
			nat = append(nat, i)
		}
	}
	sort.Ints(nat)
	for x := range nat {
		for y := x + 1; y < len(nat); y++ {
			a, b := f.Sites[nat[x]].Name, f.Sites[nat[y]].Name
			path := fmt.Sprintf("sites[%d]", nat[y])
			if k, ok := pairs[[2]string{min(a, b), max(a, b)}]; ok {
				if f.Topology.Links[k].Disabled {
					continue
				}
				path = fmt.Sprintf("topology.links[%d]", k)
			}
			if !c.add(path, "every gateway of sites %s and %s is behind NAT, so nothing can reach either side of their link; disable the link (add {between: [%s, %s], disabled: true} to topology.links) or give one gateway a public endpoint",
				a, b, a, b) {
				return
			}
		}
	}
}

func (c *checker) lab() {
	l := c.f.Lab
	if l == nil {
		return
	}
	if l.HostsPerSite < 0 || l.HostsPerSite > MaxHostsPerSite {
		c.add("lab.hostsPerSite", "%d is out of range; want 0..%d (default 2)", l.HostsPerSite, MaxHostsPerSite)
	}
	gateways := map[string]bool{}
	for _, s := range c.f.Sites {
		for _, g := range s.Gateways {
			gateways[g.Name] = true
		}
	}
	for _, name := range sortedKeys(l.PublicAddresses) {
		path := "lab.publicAddresses." + name
		if !gateways[name] {
			c.add(path, "unknown gateway %q; want the name of a gateway defined under sites", name)
			continue
		}
		if a := l.PublicAddresses[name]; a.IsValid() && (a.IsUnspecified() || a.IsMulticast()) {
			c.add(path, "%s cannot be a gateway's address; want a unicast address of the lab's internet", a)
		}
	}
}
