package spec

import (
	"fmt"
	"net/netip"
	"reflect"
	"sort"
	"strings"

	"github.com/fednet/fednet/internal/backend"
)

// Parse reads a federation spec from YAML, fills in defaults, applies the
// numbering plan, assigns transit addresses and validates the result.
//
// On success the returned Federation is complete: every default is filled
// (overlay settings, topology mode "mesh", link cost 1, lab hostsPerSite 2
// when a lab section exists), every site has Prefixes, and every gateway has
// a LANAddress and a TransitAddress. Line reports the YAML line of any field.
//
// On failure Parse returns a nil Federation and an *Error listing every
// problem found, each with its line, its field path and what would be valid.
// Parse never panics, whatever the input, and does no I/O.
//
// Numbering plan (seed 000 §3.2.3.1): a site without prefixes gets
// 10.A.B.0/24, where A is its provider's octet (DefaultProviders, overridden
// or extended by the spec's providers map) and B is its index. A gateway
// without lanAddress gets the last usable address of its site's first prefix
// (10.A.B.254); further gateways of the same site get the next lower free
// addresses, in list order.
//
// Transit addresses: a gateway's transitAddress, when given, is kept (it must
// lie inside overlay.transit, be neither its network nor its broadcast
// address, and be unique). Every other gateway, taken in sorted name order,
// gets the address at offset 1 + FNV-1a-32(name) mod (size-2) inside the
// transit prefix, where size is the number of addresses in it; if that
// address is taken, the next free one (wrapping around, skipping the network
// and broadcast addresses). An address therefore depends only on the
// gateway's name and the transit prefix: adding or removing a gateway moves
// no other gateway, except one whose address collided with another's (rare in
// a large transit prefix); pin transitAddress where even that must not
// happen.
func Parse(data []byte) (*Federation, error) {
	ps := &problems{bad: map[string]bool{}}
	root := readYAML(data, ps)
	if root == nil {
		return nil, ps.err()
	}
	// About one field per 20 bytes of YAML: made that large at once, the
	// map of a thousand sites' lines is not grown a dozen times.
	size := min(len(data)/20, maxNodes)
	lines := make(map[string]int, size)
	lines[""] = root.Line
	d := &decoder{ps: ps, lines: lines, set: make(map[string]bool, size)}
	f := &Federation{}
	d.decode(root, "", reflect.ValueOf(f).Elem())
	f.lines = d.lines
	if d.nodes > maxNodes {
		return nil, ps.err()
	}

	c := &checker{f: f, ps: ps, set: d.set}
	c.defaults()
	c.number()
	c.externalDefaults()
	c.validate()
	if err := ps.err(); err != nil {
		return nil, err
	}
	return f, nil
}

// checker fills defaults into and validates one decoded Federation.
type checker struct {
	f   *Federation
	ps  *problems
	set map[string]bool
	// computed[i] reports whether site i's prefix came from the numbering
	// plan rather than the spec.
	computed map[int]bool
	// providers is DefaultProviders merged with the spec's valid providers.
	providers map[string]int
}

// add records a problem at path, on the line of path (or of its nearest
// ancestor that has one).
func (c *checker) add(path, format string, args ...any) bool {
	return c.ps.add(c.f.Line(path), path, format, args...)
}

// defaults fills every field that was left out.
func (c *checker) defaults() {
	f := c.f
	o := &f.Overlay
	if !o.Supernet.IsValid() && !c.ps.isBad("overlay.supernet") {
		o.Supernet = DefaultSupernet
	}
	if !o.Transit.IsValid() && !c.ps.isBad("overlay.transit") {
		o.Transit = DefaultTransit
	}
	if !c.set["overlay.listenPort"] {
		o.ListenPort = DefaultListenPort
	}
	if !c.set["overlay.underlayMTU"] {
		o.UnderlayMTU = DefaultUnderlayMTU
	}
	if o.Interface == "" {
		o.Interface = DefaultInterface
	}
	if o.Backend == "" {
		o.Backend = backend.Default
	}
	if o.Fallback.TCP443 == "" {
		o.Fallback.TCP443 = FallbackAuto
	}
	if !c.set["overlay.fallback.port"] {
		o.Fallback.Port = DefaultFallbackPort
	}
	if f.Topology.Mode == "" {
		f.Topology.Mode = "mesh"
	}
	for i := range f.Topology.Links {
		if !c.set[fmt.Sprintf("topology.links[%d].cost", i)] {
			f.Topology.Links[i].Cost = 1
		}
	}
	c.ipsecDefaults()
	if f.Lab != nil && !c.set["lab.hostsPerSite"] {
		f.Lab.HostsPerSite = 2
	}
}

// number applies the numbering plan: prefixes for sites without any, and LAN
// addresses for gateways without one.
func (c *checker) number() {
	f := c.f
	c.providers = map[string]int{}
	for name, a := range DefaultProviders {
		c.providers[name] = a
	}
	for _, name := range sortedKeys(f.Providers) {
		a := f.Providers[name]
		path := "providers." + name
		if a < 1 || a > 254 {
			c.add(path, "octet %d is out of range; want 1..254 (the A of 10.A.B.0/24)", a)
			continue
		}
		c.providers[name] = a
	}
	c.computed = map[int]bool{}
	for i := range f.Sites {
		s := &f.Sites[i]
		path := fmt.Sprintf("sites[%d]", i)
		if len(s.Prefixes) > 0 || c.ps.isBad(path) || c.ps.isBad(path+".prefixes") {
			continue
		}
		if s.Index < 0 || s.Index > 255 {
			continue // reported by validate
		}
		a, ok := c.providers[s.Provider]
		if !ok {
			what := fmt.Sprintf("unknown provider %q", s.Provider)
			if s.Provider == "" {
				what = "provider is missing"
			}
			c.add(path+".provider", "%s and the site has no prefixes, so the numbering plan cannot give it one; known providers: %s; add the provider to providers: (e.g. providers: {%s: 7}) or give the site prefixes:",
				what, c.knownProviders(), providerExample(s.Provider))
			continue
		}
		s.Prefixes = []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(a), byte(s.Index), 0}), 24)}
		c.computed[i] = true
	}
	for i := range f.Sites {
		c.lanAddresses(i)
	}
}

func providerExample(name string) string {
	if name == "" || strings.ContainsAny(name, " :{},[]") {
		return "myprovider"
	}
	return name
}

// knownProviders lists the providers with their octets, sorted by name.
func (c *checker) knownProviders() string {
	var parts []string
	for _, name := range sortedKeys(c.providers) {
		parts = append(parts, fmt.Sprintf("%s (%d)", name, c.providers[name]))
	}
	return strings.Join(parts, ", ")
}

// lanAddresses gives every gateway of site i without a lanAddress the highest
// free usable address of the site's first prefix, after the site's virtual
// address when it has two or more gateways; then the virtual address of a
// site with one gateway is that gateway's LAN address.
func (c *checker) lanAddresses(i int) {
	s := &c.f.Sites[i]
	if len(s.Prefixes) == 0 || !s.Prefixes[0].IsValid() {
		return
	}
	p := s.Prefixes[0]
	ha := len(s.Gateways) > 1
	defer func() {
		if !ha && len(s.Gateways) == 1 && !s.VirtualAddress.IsValid() {
			s.VirtualAddress = s.Gateways[0].LANAddress
		}
	}()
	taken := map[netip.Addr]bool{}
	for _, g := range s.Gateways {
		if g.LANAddress.IsValid() {
			taken[g.LANAddress] = true
		}
	}
	next := lastUsable(p)
	if ha && !s.VirtualAddress.IsValid() && !c.ps.isBad(fmt.Sprintf("sites[%d].virtualAddress", i)) {
		for next.IsValid() && taken[next] {
			next = prevUsable(p, next)
		}
		s.VirtualAddress = next
	}
	if ha && s.VirtualAddress.IsValid() {
		taken[s.VirtualAddress] = true
	}
	for j := range s.Gateways {
		g := &s.Gateways[j]
		if g.LANAddress.IsValid() || c.ps.isBad(fmt.Sprintf("sites[%d].gateways[%d].lanAddress", i, j)) {
			continue
		}
		for next.IsValid() && taken[next] {
			next = prevUsable(p, next)
		}
		if !next.IsValid() {
			c.add(fmt.Sprintf("sites[%d].gateways[%d].lanAddress", i, j), "no free address left in %s for this gateway; give the site a bigger first prefix or the gateway a lanAddress", p)
			return
		}
		g.LANAddress = next
		taken[next] = true
	}
}

// lastUsable returns the last address of p a host may use: the one below the
// broadcast address for IPv4 prefixes of /30 and bigger, the last address
// otherwise.
func lastUsable(p netip.Prefix) netip.Addr {
	last := lastAddr(p)
	if p.Addr().Is4() && p.Bits() <= 30 {
		return last.Prev()
	}
	return last
}

// prevUsable returns the usable address of p below a, or the zero Addr when
// there is none.
func prevUsable(p netip.Prefix, a netip.Addr) netip.Addr {
	prev := a.Prev()
	if !prev.IsValid() || !p.Contains(prev) {
		return netip.Addr{}
	}
	if p.Addr().Is4() && p.Bits() <= 30 && prev == p.Addr() {
		return netip.Addr{}
	}
	return prev
}

// lastAddr returns the last address of p.
func lastAddr(p netip.Prefix) netip.Addr {
	p = p.Masked()
	if p.Addr().Is4() {
		b := p.Addr().As4()
		v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
		v |= uint32(uint64(1)<<(32-p.Bits()) - 1)
		return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	}
	b := p.Addr().As16()
	for i := p.Bits(); i < 128; i++ {
		b[i/8] |= 1 << (7 - i%8)
	}
	return netip.AddrFrom16(b)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
