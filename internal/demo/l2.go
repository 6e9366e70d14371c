package demo

import (
	"context"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/fednet/fednet/internal/lab"
	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/spec"
)

// Checks of bridged (layer-2) networks and of the MTU, shared by the demo
// and the end-to-end tests. They run iputils ping and iproute2 in lab
// hosts and report what the host saw.

// replyFromRE matches a ping reply line and captures its source and
// sequence number ("64 bytes from 192.168.50.17: icmp_seq=1 ..." or
// "64 bytes from fe80::1%eth0: icmp_seq=1 ...").
var replyFromRE = regexp.MustCompile(`(?m)^\d+ bytes from ([0-9a-zA-Z.:%]+?):? icmp_seq=(\d+)`)

// Answers are the replies to a broadcast or multicast ping.
type Answers struct {
	// By counts the pings each source answered.
	By map[netip.Addr]int
	// Repeated counts replies from a source to a ping it had answered
	// already: a second machine with the same address heard the ping,
	// or a frame looped.
	Repeated int
}

// Responders pings a broadcast (IPv4, with -b) or multicast (IPv6, like
// ff02::1%eth0) address for about a second (five pings) from a host and
// returns who answered. The host itself answers too. Lab hosts answer
// broadcast pings (icmp_echo_ignore_broadcasts=0); IPv6 hosts always
// answer ff02::1.
func Responders(ctx context.Context, from *lab.Node, group netip.Addr) (Answers, error) {
	// A deadline, not a count: ping stops counting at the first reply to
	// each ping, so -c would end the run before the remote answers to
	// the last one arrive.
	args := []string{"-n", "-i", "0.2", "-w", "1"}
	if group.Is4() {
		args = append(args, "-b")
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := from.Run(ctx, "ping", append(args, group.String())...)
	a := Answers{By: map[netip.Addr]int{}}
	seen := map[string]bool{}
	for _, m := range replyFromRE.FindAllStringSubmatch(out, -1) {
		src, perr := netip.ParseAddr(m[1])
		if perr != nil {
			continue
		}
		src = src.WithZone("")
		if k := src.String() + " " + m[2]; seen[k] {
			a.Repeated++
			continue
		} else {
			seen[k] = true
		}
		a.By[src]++
	}
	if len(a.By) == 0 && err != nil {
		return a, err
	}
	return a, nil
}

// LinkLocal returns the IPv6 link-local address of a host's interface
// (lab.HostInterface), with the interface as its zone.
func LinkLocal(ctx context.Context, h *lab.Node) (netip.Addr, error) {
	out, err := h.Run(ctx, "ip", "-6", "-o", "addr", "show", "dev", lab.HostInterface, "scope", "link")
	if err != nil {
		return netip.Addr{}, err
	}
	for _, f := range strings.Fields(out) {
		if p, err := netip.ParsePrefix(f); err == nil && p.Addr().IsLinkLocalUnicast() {
			return p.Addr().WithZone(lab.HostInterface), nil
		}
	}
	return netip.Addr{}, fmt.Errorf("%s has no IPv6 link-local address on %s: %s", h, lab.HostInterface, strings.TrimSpace(out))
}

// MAC returns the hardware address of a host's interface.
func MAC(ctx context.Context, h *lab.Node) (string, error) {
	out, err := h.Run(ctx, "cat", "/sys/class/net/"+lab.HostInterface+"/address")
	return strings.TrimSpace(out), err
}

// Neighbor returns the MAC address a host's neighbour table (ARP for IPv4,
// neighbor discovery for IPv6) holds for an address, "" when none.
func Neighbor(ctx context.Context, h *lab.Node, a netip.Addr) (string, error) {
	fam := "-4"
	if a.Is6() {
		fam = "-6"
	}
	out, err := h.Run(ctx, "ip", fam, "neigh", "show", a.WithZone("").String(), "dev", lab.HostInterface)
	if err != nil {
		return "", err
	}
	f := strings.Fields(out)
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "lladdr" {
			return f[i+1], nil
		}
	}
	return "", nil
}

// FlushNeighbors empties a host's neighbour tables, so the next packet has
// to resolve its destination again (ARP, neighbor discovery).
func FlushNeighbors(ctx context.Context, h *lab.Node) error {
	_, err := h.Run(ctx, "ip", "neigh", "flush", "dev", lab.HostInterface)
	return err
}

// Oversize is what a host saw when it sent a packet with the don't-fragment
// bit set.
type Oversize struct {
	// Replied: the echo reply came back.
	Replied bool
	// Refused: the host got an error it can act on — an ICMP
	// "fragmentation needed" from a gateway, or its own interface or
	// path MTU refusing the send ("message too long"). Detail quotes it.
	Refused bool
	Detail  string
}

// Silent reports a packet that vanished: no reply and no error.
func (o Oversize) Silent() bool { return !o.Replied && !o.Refused }

func (o Oversize) String() string {
	switch {
	case o.Replied:
		return "replied"
	case o.Refused:
		return "refused: " + o.Detail
	}
	return "vanished without an error"
}

// refusedRE matches what iputils ping prints when a packet is too large
// for the path: an ICMP error from a router, or the local stack refusing.
var refusedRE = regexp.MustCompile(`(?i)(frag needed[^\n]*|message too long[^\n]*|packet too big[^\n]*)`)

// PingDF sends count pings of size payload bytes (ICMP data; the IPv4
// packet is size+28) with the don't-fragment bit set, as `ping -M do -s
// size`, and reports what the host saw. The IP packet is never
// fragmented: it either fits every link of the path or must be refused.
func PingDF(ctx context.Context, from *lab.Node, to netip.Addr, size, count int) (Oversize, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(count)*200*time.Millisecond+5*time.Second)
	defer cancel()
	out, err := from.Run(ctx, "ping", "-n", "-M", "do", "-s", strconv.Itoa(size), "-c", strconv.Itoa(count), "-i", "0.2", "-W", "1", to.String())
	var o Oversize
	if m := refusedRE.FindString(out); m != "" {
		o.Refused, o.Detail = true, strings.TrimSpace(m)
	}
	o.Replied = replyFromRE.MatchString(out)
	if !o.Replied && !o.Refused && err != nil && !strings.Contains(out, "packets transmitted") {
		return o, err // ping could not run at all
	}
	return o, nil
}

// Plans returns the plans of f by gateway name, without keys: for the
// figures a plan holds (MTUs, MSS), not for agents.
func Plans(f *spec.Federation) (map[string]plan.Gateway, error) {
	gws, err := plan.Compute(f, plan.Inputs{})
	if err != nil {
		return nil, fmt.Errorf("planning: %w", err)
	}
	out := map[string]plan.Gateway{}
	for _, g := range gws {
		out[g.Name] = g
	}
	return out, nil
}

// checkFunc records one pass/fail check of the demo.
type checkFunc func(name string, ok bool, format string, args ...any)

// bridgeMTU returns the MTU the plans give bridged network name, or 0.
func bridgeMTU(plans map[string]plan.Gateway, name string) int {
	for _, g := range plans {
		for _, b := range g.Bridges {
			if b.Network == name {
				return b.MTU
			}
		}
	}
	return 0
}

// followBridgedMTU gives the hosts of the lab's bridged networks the MTU
// the current plans compute, as an operator's DHCP (option 26) would: after
// an underlay MTU change the network MTU shrinks, and hosts left at the old
// one would lose their largest frames at the bridge without an error.
func followBridgedMTU(ctx context.Context, l *lab.Lab, plans map[string]plan.Gateway, bridged []lab.BridgedNetwork, step func(string, ...any)) error {
	for _, b := range bridged {
		mtu := bridgeMTU(plans, b.Name)
		if mtu == 0 || l.BridgedMTU(b.Name) == mtu {
			continue
		}
		step("bridged network %s: the plan's MTU is now %d; hosts get it (as DHCP option 26 would on renewal)", b.Name, mtu)
		if err := l.SetBridgedMTU(ctx, b.Name, mtu); err != nil {
			return err
		}
	}
	return nil
}

// broadcastAddr returns the IPv4 broadcast address of p.
func broadcastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	for i := p.Bits(); i < 32; i++ {
		b[i/8] |= 1 << (7 - i%8)
	}
	return netip.AddrFrom4(b)
}

// layer2Checks runs the demo's checks of a bridged network between its
// first host at the first site and the hosts of the other sites: ARP,
// IPv4 broadcast, IPv6 link-local unicast (neighbor discovery) and IPv6
// all-nodes multicast.
func layer2Checks(ctx context.Context, l *lab.Lab, network string, sites []string, check checkFunc) {
	var from *lab.Node
	var others []*lab.Node
	for _, s := range sites {
		hosts := l.BridgedHosts(network, s)
		if from == nil && len(hosts) > 0 {
			from, hosts = hosts[0], hosts[1:]
		}
		for _, h := range hosts {
			if h.Site != from.Site {
				others = append(others, h)
			}
		}
	}
	if from == nil || len(others) == 0 {
		check("layer 2", false, "bridged network %s has no hosts at two sites", network)
		return
	}
	to := others[0]

	// ARP: a fresh resolution of a host at another site.
	mac, err := MAC(ctx, to)
	var got string
	if err == nil {
		err = FlushNeighbors(ctx, from)
	}
	if err == nil {
		_, err = lab.Ping(ctx, from, to.LAN.Addr(), 1, 200*time.Millisecond)
	}
	if err == nil {
		got, err = Neighbor(ctx, from, to.LAN.Addr())
	}
	check("ARP across sites", err == nil && got == mac, "%s (site %s) resolved %s of %s (site %s) to %s; its MAC is %s%s",
		from, from.Site, to.LAN.Addr(), to, to.Site, got, mac, errSuffix(err))

	count := func(a Answers, addr func(*lab.Node) netip.Addr) int {
		n := 0
		for _, h := range others {
			if a.By[addr(h)] > 0 {
				n++
			}
		}
		return n
	}
	bcast := broadcastAddr(from.LAN)
	ans, err := Responders(ctx, from, bcast)
	n := count(ans, func(h *lab.Node) netip.Addr { return h.LAN.Addr() })
	check("broadcast across sites", err == nil && n == len(others), "ping -b %s from %s answered by %d of the %d hosts at other sites%s",
		bcast, from, n, len(others), errSuffix(err))

	lls := map[*lab.Node]netip.Addr{}
	for _, h := range others {
		if lls[h], err = LinkLocal(ctx, h); err != nil {
			break
		}
	}
	var pr lab.PingResult
	if err == nil {
		pr, err = lab.Ping(ctx, from, lls[to], 3, 100*time.Millisecond)
	}
	got = ""
	if err == nil {
		got, err = Neighbor(ctx, from, lls[to])
	}
	check("IPv6 link-local across sites", err == nil && pr.Received == pr.Sent && got == mac, "ping %s (%s, site %s) from %s: %d/%d replies; neighbor discovery resolved it to %s%s",
		lls[to], to, to.Site, from, pr.Received, pr.Sent, got, errSuffix(err))

	group := netip.MustParseAddr("ff02::1").WithZone(lab.HostInterface)
	if err == nil {
		ans, err = Responders(ctx, from, group)
	}
	n = count(ans, func(h *lab.Node) netip.Addr { return lls[h].WithZone("") })
	check("IPv6 multicast across sites", err == nil && n == len(others), "ping %s from %s answered by %d of the %d hosts at other sites%s",
		group, from, n, len(others), errSuffix(err))
}

// mtuChecks sends the largest unfragmented ping (don't fragment, MTU − 28
// bytes of data) from hostA to hostB on the routed network and between
// the bridged hosts of the same sites, and one byte more, which must be
// refused where the host sees it, never lost silently.
func mtuChecks(ctx context.Context, r *Report, plans map[string]plan.Gateway, l *lab.Lab, hostA, hostB *lab.Node, check checkFunc) {
	pa := plans[l.SiteGateways(hostA.Site)[0].Name]
	pb := plans[l.SiteGateways(hostB.Site)[0].Name]
	r.MTURouted = min(routeMTU(pa, hostB.LAN.Addr()), routeMTU(pb, hostA.LAN.Addr()))
	boundary := func(name string, from, to *lab.Node, mtu int) {
		fit, err := PingDF(ctx, from, to.LAN.Addr(), mtu-28, 2)
		var over Oversize
		if err == nil {
			over, err = PingDF(ctx, from, to.LAN.Addr(), mtu-27, 2)
		}
		check(name, err == nil && fit.Replied && !over.Replied && over.Refused, "%s -> %s with DF: %d bytes %s; %d bytes %s%s",
			from, to, mtu, fit, mtu+1, over, errSuffix(err))
	}
	boundary("MTU: routed", hostA, hostB, r.MTURouted)
	if r.BridgedNetwork == "" {
		return
	}
	ba, bb := l.BridgedHosts(r.BridgedNetwork, hostA.Site), l.BridgedHosts(r.BridgedNetwork, hostB.Site)
	if len(ba) == 0 || len(bb) == 0 {
		return
	}
	r.MTUBridged = bridgeMTU(plans, r.BridgedNetwork)
	boundary("MTU: bridged", ba[0], bb[0], r.MTUBridged)
}
