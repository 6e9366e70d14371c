package dataplane

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/fednet/fednet/internal/backend"
	"github.com/fednet/fednet/internal/plan"
)

// The firewall is built from plan.Firewall as data (ruleset), which renders
// both as nft text, hashed for the fingerprint and shown to operators, and
// as netlink expressions (nft_linux.go). The text is what `nft list table`
// prints for the table the expressions build; a kernel test checks that.
//
// Rules, in table inet <Table>:
//
//	chain input: hook input, priority filter, policy drop
//	  iifname "lo" accept
//	  ct state established,related accept
//	  ct state invalid drop
//	  iifname != "<Tunnel>" udp dport <port> drop   per TunnelPorts (gateway VXLAN)
//	  iifname != "<Tunnel>" ip saddr <host> udp dport <port> accept   per neighbor tunnel
//	  udp dport <port> drop                                           (same)
//	  udp dport <port> accept   per Public port (tcp dport <port>; meta l4proto esp)
//	  ip saddr <source> tcp dport <port> accept   per Admit source (udp alike)
//	  iifname "<Tunnel>" ip saddr <Transit> accept        other gateways
//	  iifname != "<Tunnel>" ip saddr <Local> fib saddr . iif oif exists accept
//	  icmp type echo-request limit rate 10/second accept
//	  icmpv6 type echo-request limit rate 10/second accept
//	  icmpv6 type {nd-neighbor-solicit, nd-neighbor-advert, nd-router-advert, packet-too-big} accept
//	chain forward: hook forward, priority filter, policy accept
//	  ct state established,related accept   (nothing else is stateful: failover)
//	  oifname "<Tunnel>" ip saddr <Local> ip daddr <Remote> accept   one per Flow out
//	  iifname "<Tunnel>" ip saddr <Remote> ip daddr <Local> accept   one per Flow in
//	  iifname "<Tunnel>" drop
//	  oifname "<Tunnel>" drop
//	  oifname != "<Tunnel>" ip daddr <Remote> drop                 other sites, never in clear
//
// Forwarded traffic that does not touch the tunnel is not fednet's: the
// chain lets it pass to the machine's own rules.
//	chain mss: hook forward, priority mangle (before filter), policy accept
//	  oifname "<Tunnel>" tcp flags syn tcp option maxseg size > <MSS> tcp option maxseg size set <MSS>
//	  iifname "<Tunnel>" (same)
//
// Anti-spoofing of Local sources: a Local source is accepted only when it did
// not arrive on the tunnel and when the reverse path check passes, i.e. the
// kernel would route a reply to that source out of the interface the packet
// came in on (strict reverse path filtering, `fib saddr . iif oif exists`).
// So a packet from the Internet forging a site address is dropped on a
// gateway whose site segment is on its own interface. On a one-interface
// gateway (the public and the site side share a NIC) the check cannot tell
// them apart; there the cloud's own anti-spoofing has to hold.

// chainInput etc. are the chain names of the table.
const (
	chainInput   = "input"
	chainForward = "forward"
	chainMSS     = "mss"
)

// icmpRate is the echo-request rate limit, per second and family.
const icmpRate = 10

// fingerprintPrefix starts the comment of the table's first rule; the hex
// fingerprint follows.
const fingerprintPrefix = "fednet sha256:"

type ruleset struct {
	table  string
	chains []chain
}

type chain struct {
	name     string
	hook     string // "input" or "forward"
	priority int    // 0 filter, -150 mangle
	policy   string // "accept" or "drop"
	rules    []rule
}

// rule is matches then one statement.
type rule struct {
	matches []match
	// verdict is "accept" or "drop"; "" when mssSet is the statement.
	verdict string
	// mssSet sets the TCP MSS option to this value.
	mssSet  int
	comment string
}

// match is one condition of a rule; the concrete types are below.
type match interface{ text() string }

// ifName matches the input (or output) interface name.
type ifName struct {
	out, negate bool
	name        string
}

// ctState matches conntrack states (any of them).
type ctState struct{ established, related, invalid bool }

// addr matches the source (or destination) address against a prefix.
type addr struct {
	dst    bool
	prefix netip.Prefix
}

// udpDport matches UDP packets to a port.
type udpDport struct{ port int }

// tcpDport matches TCP packets to a port.
type tcpDport struct{ port int }

// l4proto matches packets of an IP protocol.
type l4proto struct {
	proto uint8
	name  string
}

// fibReversePath matches when a route back to the source leaves by the
// input interface.
type fibReversePath struct{}

// icmpType matches ICMP (or ICMPv6) packets of one type.
type icmpType struct {
	v6   bool
	typ  uint8
	name string
}

// limitRate matches up to perSecond packets per second (burst 5).
type limitRate struct{ perSecond int }

// tcpSyn matches TCP packets with SYN set (SYN and SYN-ACK).
type tcpSyn struct{}

// mssAbove matches TCP packets with an MSS option larger than size.
type mssAbove struct{ size int }

func (m ifName) text() string {
	s := "iifname "
	if m.out {
		s = "oifname "
	}
	if m.negate {
		s += "!= "
	}
	return s + strconv.Quote(m.name)
}

func (m ctState) text() string {
	var s []string
	if m.invalid {
		s = append(s, "invalid")
	}
	if m.established {
		s = append(s, "established")
	}
	if m.related {
		s = append(s, "related")
	}
	return "ct state " + strings.Join(s, ",")
}

func (m addr) text() string {
	fam, dir := "ip", "saddr"
	if m.prefix.Addr().Is6() {
		fam = "ip6"
	}
	if m.dst {
		dir = "daddr"
	}
	switch {
	case m.prefix.Bits() == 0:
		if fam == "ip" {
			return "meta nfproto ipv4"
		}
		return "meta nfproto ipv6"
	case m.prefix.IsSingleIP():
		return fam + " " + dir + " " + m.prefix.Addr().String()
	}
	return fam + " " + dir + " " + m.prefix.Masked().String()
}

func (m udpDport) text() string     { return "udp dport " + strconv.Itoa(m.port) }
func (m tcpDport) text() string     { return "tcp dport " + strconv.Itoa(m.port) }
func (m l4proto) text() string      { return "meta l4proto " + m.name }
func (fibReversePath) text() string { return "fib saddr . iif oif exists" }
func (m icmpType) text() string {
	if m.v6 {
		return "icmpv6 type " + m.name
	}
	return "icmp type " + m.name
}
func (m limitRate) text() string { return fmt.Sprintf("limit rate %d/second", m.perSecond) }
func (tcpSyn) text() string      { return "tcp flags syn" }
func (m mssAbove) text() string  { return fmt.Sprintf("tcp option maxseg size > %d", m.size) }

// buildRuleset turns a plan's firewall into the ruleset. fw must have passed
// validateFirewall. With one tunnel interface (today's plans) the rules
// are those of the comment at the top; with several, a rule on "the
// tunnel" is repeated per tunnel, and a rule on "not the tunnel" matches
// none of them.
func buildRuleset(fw plan.Firewall) ruleset {
	// The transit device (transit.go) is one more way in and out of the
	// federation: what it unwraps came through a tunnel, and the flows
	// must hold for it exactly as for the tunnels.
	tunnels := fw.Tunnels
	if len(tunnels) > 0 {
		tunnels = append(slices.Clone(tunnels), TransitDevice)
	}
	// notTunnel matches a packet that did not come in (or, out, does not
	// leave) by any tunnel.
	notTunnel := func(out bool) []match {
		var ms []match
		for _, t := range tunnels {
			ms = append(ms, ifName{out: out, negate: true, name: t})
		}
		return ms
	}
	input := chain{name: chainInput, hook: "input", policy: "drop"}
	add := func(c *chain, verdict string, ms ...match) {
		c.rules = append(c.rules, rule{matches: ms, verdict: verdict})
	}
	// perTunnel adds the rule once per tunnel, its interface match first.
	perTunnel := func(c *chain, verdict string, out bool, ms ...match) {
		for _, t := range tunnels {
			add(c, verdict, append([]match{ifName{out: out, name: t}}, ms...)...)
		}
	}
	add(&input, "accept", ifName{name: "lo"})
	add(&input, "accept", ctState{established: true, related: true})
	add(&input, "drop", ctState{invalid: true})
	// VXLAN to other gateways comes through the tunnel only: a Linux VXLAN
	// device listens on every address, so a packet from the LAN or the
	// public side would otherwise put frames into a bridged network.
	for _, p := range fw.TunnelPorts {
		add(&input, "drop", append(notTunnel(false), udpDport{p})...)
	}
	// The transit device's VXLAN likewise, or a host could put packets
	// into the federation through it.
	if len(tunnels) > 0 {
		add(&input, "drop", append(notTunnel(false), udpDport{TransitPort})...)
	}
	// A neighbor tunnel's port takes VXLAN from its host only: anyone else
	// on the LAN could otherwise inject frames into the bridged network.
	for _, n := range fw.Neighbors {
		add(&input, "accept", append(notTunnel(false), addr{prefix: netip.PrefixFrom(n.Address.Unmap(), n.Address.Unmap().BitLen())}, udpDport{n.Port})...)
		add(&input, "drop", udpDport{n.Port})
	}
	for _, p := range fw.Public {
		add(&input, "accept", publicMatch(p))
	}
	// What the spec admits to the gateway itself besides the tunnel (SSH
	// from the operators' network): after the VXLAN and neighbor drops,
	// so it cannot open those ports.
	for _, a := range fw.Admit {
		for _, src := range canonicalPrefixes(a.Sources) {
			add(&input, "accept", addr{prefix: src}, publicMatch(backend.Port{Protocol: a.Protocol, Port: a.Port}))
		}
	}
	if fw.Transit.IsValid() {
		perTunnel(&input, "accept", false, addr{prefix: fw.Transit.Masked()})
	}
	for _, p := range canonicalPrefixes(fw.Local) {
		add(&input, "accept", append(notTunnel(false), addr{prefix: p}, fibReversePath{})...)
	}
	add(&input, "accept", icmpType{typ: 8, name: "echo-request"}, limitRate{icmpRate})
	add(&input, "accept", icmpType{v6: true, typ: 128, name: "echo-request"}, limitRate{icmpRate})
	for _, t := range []icmpType{
		{v6: true, typ: 135, name: "nd-neighbor-solicit"},
		{v6: true, typ: 136, name: "nd-neighbor-advert"},
		{v6: true, typ: 134, name: "nd-router-advert"},
		{v6: true, typ: 2, name: "packet-too-big"},
	} {
		add(&input, "accept", t)
	}

	// The forward chain governs what crosses the tunnel and nothing else:
	// a gateway that is also its site's router keeps forwarding its other
	// traffic, under the machine's own firewall (a packet must pass every
	// table's chains, so those rules still apply).
	forward := chain{name: chainForward, hook: "forward", policy: "accept"}
	// No rule depends on the connection's state beyond this accept: a
	// gateway that becomes its site's active gateway mid-connection has
	// not seen the connection start (its conntrack may call the packets
	// invalid) and must forward them by the flows below, so TCP survives
	// a failover (docs/resilience.md).
	add(&forward, "accept", ctState{established: true, related: true})
	local := map[netip.Prefix]bool{}
	for _, p := range fw.Local {
		local[p.Masked()] = true
	}
	seen := map[[2]netip.Prefix]bool{}
	for _, f := range fw.Flows {
		k := [2]netip.Prefix{f.Source.Masked(), f.Destination.Masked()}
		if seen[k] {
			continue
		}
		seen[k] = true
		// Flows leaving the site go out of the tunnel; the others come in
		// through it. A /0 side matches only the family, which the other
		// side already checks.
		var ms []match
		if k[0].Bits() > 0 || k[1].Bits() == 0 {
			ms = append(ms, addr{prefix: k[0]})
		}
		if k[1].Bits() > 0 {
			ms = append(ms, addr{dst: true, prefix: k[1]})
		}
		perTunnel(&forward, "accept", local[k[0]], ms...)
	}
	perTunnel(&forward, "drop", false)
	perTunnel(&forward, "drop", true)
	// Other sites' prefixes leave by the tunnel or not at all: without a
	// route into the tunnel they would follow the default route out in
	// clear.
	for _, p := range canonicalPrefixes(fw.Remote) {
		add(&forward, "drop", append(notTunnel(true), addr{dst: true, prefix: p})...)
	}

	rs := ruleset{table: fw.Table, chains: []chain{input, forward}}
	if fw.MSS > 0 {
		mss := chain{name: chainMSS, hook: "forward", priority: -150, policy: "accept"}
		for _, out := range []bool{true, false} {
			for _, t := range tunnels {
				mss.rules = append(mss.rules, rule{
					matches: []match{ifName{out: out, name: t}, tcpSyn{}, mssAbove{fw.MSS}},
					mssSet:  fw.MSS,
				})
			}
		}
		rs.chains = append(rs.chains, mss)
	}
	return rs
}

// publicMatch matches what a backend needs on the public side.
func publicMatch(p backend.Port) match {
	switch p.Protocol {
	case backend.TCP:
		return tcpDport{p.Port}
	case backend.ESP:
		return l4proto{proto: uint8(backend.ESP), name: "esp"}
	}
	return udpDport{p.Port}
}

// text renders the ruleset as `nft list table` prints it. With fingerprint
// set, the first rule carries it as a comment, as the kernel table does.
func (rs ruleset) text(fingerprint string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "table inet %s {\n", rs.table)
	for i, c := range rs.chains {
		if i > 0 {
			b.WriteString("\n")
		}
		prio := "filter"
		if c.priority == -150 {
			prio = "mangle"
		}
		fmt.Fprintf(&b, "\tchain %s {\n\t\ttype filter hook %s priority %s; policy %s;\n", c.name, c.hook, prio, c.policy)
		for j, r := range c.rules {
			var parts []string
			for _, m := range r.matches {
				parts = append(parts, m.text())
			}
			if r.mssSet > 0 {
				parts = append(parts, fmt.Sprintf("tcp option maxseg size set %d", r.mssSet))
			} else {
				parts = append(parts, r.verdict)
			}
			if fingerprint != "" && i == 0 && j == 0 {
				parts = append(parts, "comment "+strconv.Quote(fingerprintPrefix+fingerprint))
			}
			fmt.Fprintf(&b, "\t\t%s\n", strings.Join(parts, " "))
		}
		b.WriteString("\t}\n")
	}
	b.WriteString("}\n")
	return b.String()
}

// fingerprint returns the hex SHA-256 of the ruleset's canonical text.
func (rs ruleset) fingerprint() string {
	sum := sha256.Sum256([]byte(rs.text("")))
	return hex.EncodeToString(sum[:])
}

// RenderFirewall returns the nftables table fednet builds for fw, as nft
// prints it, with its fingerprint comment.
func RenderFirewall(fw plan.Firewall) (string, error) {
	if err := validateFirewall(fw); err != nil {
		return "", err
	}
	rs := buildRuleset(fw)
	return rs.text(rs.fingerprint()), nil
}

// validateFirewall reports what in fw cannot be rendered.
func validateFirewall(fw plan.Firewall) error {
	var errs []string
	if !validTableName(fw.Table) {
		errs = append(errs, fmt.Sprintf("table name %q is not valid: use letters, digits, - and _ (up to 64)", fw.Table))
	}
	if len(fw.Tunnels) == 0 {
		errs = append(errs, "tunnels: no tunnel interface")
	}
	for _, t := range fw.Tunnels {
		if err := validInterfaceName(t); err != nil {
			errs = append(errs, "tunnel: "+err.Error())
		}
	}
	ports := map[int]bool{} // UDP ports
	for _, p := range fw.Public {
		switch {
		case p.Protocol != backend.UDP && p.Protocol != backend.TCP && p.Protocol != backend.ESP:
			errs = append(errs, fmt.Sprintf("public: protocol %s is not one fednet opens (udp, tcp, esp)", p.Protocol))
		case p.Protocol == backend.ESP && p.Port != 0:
			errs = append(errs, fmt.Sprintf("public: esp has no ports (got %d)", p.Port))
		case p.Protocol != backend.ESP && (p.Port < 1 || p.Port > 65535):
			errs = append(errs, fmt.Sprintf("public: %s port %d is out of range 1-65535", p.Protocol, p.Port))
		case p.Protocol == backend.UDP:
			ports[p.Port] = true
		}
	}
	for _, p := range fw.TunnelPorts {
		if p < 1 || p > 65535 {
			errs = append(errs, fmt.Sprintf("tunnel-only port %d is out of range 1-65535", p))
		}
	}
	if fw.MSS < 0 || fw.MSS > 65535 {
		errs = append(errs, fmt.Sprintf("MSS %d is out of range 0-65535", fw.MSS))
	}
	for _, p := range fw.Local {
		if !p.IsValid() {
			errs = append(errs, "a local prefix is not valid")
		}
	}
	for _, p := range fw.Remote {
		if !p.IsValid() {
			errs = append(errs, "a remote prefix is not valid")
		}
	}
	for _, n := range fw.Neighbors {
		switch {
		case !n.Address.IsValid():
			errs = append(errs, fmt.Sprintf("neighbor port %d has no valid address", n.Port))
		case n.Port < 1 || n.Port > 65535:
			errs = append(errs, fmt.Sprintf("neighbor %s: port %d is out of range 1-65535", n.Address, n.Port))
		case ports[n.Port]:
			errs = append(errs, fmt.Sprintf("neighbor %s: port %d is used twice", n.Address, n.Port))
		}
		ports[n.Port] = true
	}
	for _, a := range fw.Admit {
		switch {
		case a.Protocol != backend.TCP && a.Protocol != backend.UDP:
			errs = append(errs, fmt.Sprintf("admit: protocol %s is not one fednet admits (tcp, udp)", a.Protocol))
		case a.Port < 1 || a.Port > 65535:
			errs = append(errs, fmt.Sprintf("admit: %s port %d is out of range 1-65535", a.Protocol, a.Port))
		case len(a.Sources) == 0:
			errs = append(errs, fmt.Sprintf("admit: %s port %d has no source prefix", a.Protocol, a.Port))
		}
		for _, p := range a.Sources {
			if !p.IsValid() {
				errs = append(errs, fmt.Sprintf("admit: %s port %d has an invalid source prefix", a.Protocol, a.Port))
			}
		}
	}
	for _, f := range fw.Flows {
		if !f.Source.IsValid() || !f.Destination.IsValid() {
			errs = append(errs, fmt.Sprintf("flow of network %q has an invalid prefix", f.Network))
		} else if f.Source.Addr().Is4() != f.Destination.Addr().Is4() {
			errs = append(errs, fmt.Sprintf("flow %s -> %s of network %q mixes IPv4 and IPv6", f.Source, f.Destination, f.Network))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("firewall: %s", strings.Join(errs, "; "))
	}
	return nil
}

func validTableName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}
