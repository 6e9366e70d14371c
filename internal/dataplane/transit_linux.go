package dataplane

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// transitAlias marks the transit device as fednet's. Not of the form
// AliasPrefix+network: Apply would take it for a bridged network's device
// and delete it.
const transitAlias = "fednet-transit"

// SyncTransit brings the machine's transit device to c: it creates the
// device (or recreates it when its local address or port differ), sets
// its MTU, brings it up with loose reverse-path filtering (the unwrapped
// packets' sources route through the tunnel, not back through the
// device), makes sure the rule that looks TransitTable up exists, adds the
// FDB and neighbor entries of c's peers, then makes TransitTable hold
// exactly c.Encap's routes (new ones added before stale ones go). It
// returns what it changed.
func SyncTransit(c TransitConfig) ([]Change, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	var changes []Change
	link, made, err := ensureTransitLink(c)
	if err != nil {
		return nil, err
	}
	if made {
		changes = append(changes, Change(fmt.Sprintf("ip link add %s type vxlan id %d local %s dstport %d nolearning (the transit device)", TransitDevice, TransitVNI, c.Local, TransitPort)))
	}
	idx := link.Attrs().Index
	if link.Attrs().MTU != c.MTU {
		if err := netlink.LinkSetMTU(link, c.MTU); err != nil {
			return changes, fmt.Errorf("setting the MTU of %s to %d: %w", TransitDevice, c.MTU, err)
		}
		changes = append(changes, Change(fmt.Sprintf("ip link set %s mtu %d", TransitDevice, c.MTU)))
	}
	if link.Attrs().Flags&net.FlagUp == 0 {
		// Loose reverse-path filtering, and forwarding of what it
		// unwraps: a device made before the plan turned forwarding on
		// (the first sync precedes the first apply) would not inherit it.
		for _, c := range []struct{ path, value string }{
			{"/proc/sys/net/ipv4/conf/" + TransitDevice + "/rp_filter", "2"},
			{"/proc/sys/net/ipv4/conf/" + TransitDevice + "/forwarding", "1"},
		} {
			if err := os.WriteFile(c.path, []byte(c.value), 0o644); err != nil {
				return changes, fmt.Errorf("setting %s on %s: %w", c.path, TransitDevice, err)
			}
		}
		if err := netlink.LinkSetUp(link); err != nil {
			return changes, fmt.Errorf("bringing %s up: %w", TransitDevice, err)
		}
		changes = append(changes, Change(fmt.Sprintf("ip link set %s up (rp_filter loose, forwarding on)", TransitDevice)))
	}
	// The gateway's transit address on the device too (/32, scope host:
	// never chosen as a source, no route of its own). The kernel's loose
	// reverse-path check rejects a packet that arrives on a device with no
	// IPv4 address unless the route back to its source leaves by that
	// device, and the route back to what a remote gateway unwraps leaves by
	// the tunnel: without an address a move lost every reply that came
	// encapsulated to a gateway answering plain.
	if ok, err := ensureTransitAddress(link, c.Local); err != nil {
		return changes, err
	} else if ok {
		changes = append(changes, Change(fmt.Sprintf("ip address add %s/32 dev %s scope host", c.Local, TransitDevice)))
	}
	if ok, err := ensureTransitRules(); err != nil {
		return changes, err
	} else if ok {
		changes = append(changes, Change(fmt.Sprintf("ip rule add priority %d iif %s lookup main; ip rule add priority %d lookup %d", TransitRulePriority-1, TransitDevice, TransitRulePriority, TransitTable)))
	}
	v6 := map[netip.Addr]bool{}
	for dst, peer := range c.Encap {
		v6[peer] = v6[peer] || dst.Addr().Is6()
	}
	for _, peer := range c.Peers() {
		if err := setTransitPeer(idx, peer, v6[peer]); err != nil {
			return changes, err
		}
	}
	// The routes: the wanted ones first, then the stale ones go.
	have, err := transitRoutes()
	if err != nil {
		return changes, err
	}
	for dst, peer := range c.Encap {
		hop := transitNextHop(dst, peer)
		if r, ok := have[dst]; ok && r == hop {
			continue
		}
		rt := &netlink.Route{LinkIndex: idx, Dst: prefixNet(dst), Gw: hop.AsSlice(), Table: TransitTable}
		if dst.Addr().Is4() {
			rt.Flags = int(netlink.FLAG_ONLINK)
		}
		if err := netlink.RouteReplace(rt); err != nil {
			return changes, fmt.Errorf("routing %s through %s to %s: %w", dst, TransitDevice, peer, err)
		}
		changes = append(changes, Change(fmt.Sprintf("ip route replace %s via %s dev %s table %d (encapsulated)", dst, hop, TransitDevice, TransitTable)))
	}
	for dst := range have {
		if _, ok := c.Encap[dst]; ok {
			continue
		}
		rt := &netlink.Route{LinkIndex: idx, Dst: prefixNet(dst), Table: TransitTable}
		if err := netlink.RouteDel(rt); err != nil && !errors.Is(err, unix.ESRCH) {
			return changes, fmt.Errorf("removing the encapsulated route of %s: %w", dst, err)
		}
		changes = append(changes, Change(fmt.Sprintf("ip route del %s table %d (plain again)", dst, TransitTable)))
	}
	return changes, nil
}

// DownTransit removes the transit device (its routes go with it) and its
// rule. Nothing to remove is not an error.
func DownTransit() error {
	var errs []error
	if link, err := netlink.LinkByName(TransitDevice); err == nil {
		if link.Attrs().Alias == transitAlias {
			errs = append(errs, netlink.LinkDel(link))
		}
	}
	for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		for _, r := range transitRules(family) {
			if err := netlink.RuleDel(r); err != nil && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("removing the transit rule of priority %d: %w", r.Priority, err))
			}
		}
	}
	return errors.Join(errs...)
}

// ensureTransitLink returns the transit device, made when missing or when
// its VXLAN parameters are not c's.
func ensureTransitLink(c TransitConfig) (netlink.Link, bool, error) {
	link, err := netlink.LinkByName(TransitDevice)
	if err == nil {
		v, ok := link.(*netlink.Vxlan)
		if ok && link.Attrs().Alias == transitAlias && v.VxlanId == TransitVNI && v.Port == TransitPort && v.SrcAddr.Equal(c.Local.AsSlice()) && !v.Learning {
			return link, false, nil
		}
		if link.Attrs().Alias != transitAlias {
			return nil, false, fmt.Errorf("a device named %s exists and is not fednet's transit device: remove or rename it", TransitDevice)
		}
		if err := netlink.LinkDel(link); err != nil {
			return nil, false, fmt.Errorf("replacing %s: %w", TransitDevice, err)
		}
	} else if _, ok := err.(netlink.LinkNotFoundError); !ok {
		return nil, false, fmt.Errorf("reading %s: %w", TransitDevice, err)
	}
	v := &netlink.Vxlan{
		LinkAttrs: netlink.LinkAttrs{Name: TransitDevice, MTU: c.MTU, HardwareAddr: TransitMAC(c.Local)},
		VxlanId:   TransitVNI, SrcAddr: c.Local.AsSlice(), Port: TransitPort, Learning: false,
	}
	if err := addAliased(v, transitAlias); err != nil {
		return nil, false, fmt.Errorf("creating the transit device %s: %w", TransitDevice, err)
	}
	link, err = netlink.LinkByName(TransitDevice)
	if err != nil {
		return nil, false, fmt.Errorf("reading %s after creating it: %w", TransitDevice, err)
	}
	return link, true, nil
}

// transitRules are, for family, the rule that sends what the transit
// device unwrapped to the main table (never encapsulated again: two
// gateways that each encapsulate a prefix to the other would bounce it
// until its TTL ran out), then the rule that looks TransitTable up.
func transitRules(family int) []*netlink.Rule {
	unwrapped := netlink.NewRule()
	unwrapped.Family = family
	unwrapped.Priority = TransitRulePriority - 1
	unwrapped.IifName = TransitDevice
	unwrapped.Table = unix.RT_TABLE_MAIN
	r := netlink.NewRule()
	r.Family = family
	r.Priority = TransitRulePriority
	r.Table = TransitTable
	return []*netlink.Rule{unwrapped, r}
}

// ensureTransitRules adds the rules of both families when missing and
// reports whether it added one.
func ensureTransitRules() (bool, error) {
	added := false
	for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rules, err := netlink.RuleList(family)
		if err != nil {
			return added, fmt.Errorf("listing the routing rules: %w", err)
		}
		for _, want := range transitRules(family) {
			found := false
			for _, r := range rules {
				if r.Priority == want.Priority && r.Table == want.Table && r.IifName == want.IifName {
					found = true
				}
			}
			if found {
				continue
			}
			if err := netlink.RuleAdd(want); err != nil && !errors.Is(err, unix.EEXIST) {
				return added, fmt.Errorf("adding the rule of priority %d (table %d): %w", want.Priority, want.Table, err)
			}
			added = true
		}
	}
	return added, nil
}

// setTransitPeer adds the FDB entry and the neighbor entries (the transit
// address for IPv4, the derived link-local when v6: IPv6 prefixes go to
// it) of peer on the transit device of index idx.
func setTransitPeer(idx int, peer netip.Addr, v6 bool) error {
	mac := TransitMAC(peer)
	fdb := &netlink.Neigh{LinkIndex: idx, Family: unix.AF_BRIDGE, Flags: netlink.NTF_SELF,
		State: netlink.NUD_NOARP | netlink.NUD_PERMANENT, HardwareAddr: mac, IP: peer.AsSlice()}
	if err := netlink.NeighSet(fdb); err != nil {
		return fmt.Errorf("adding the FDB entry of %s (%s) on %s: %w", peer, mac, TransitDevice, err)
	}
	var hops []netip.Addr
	if peer.Is4() {
		hops = append(hops, peer)
	}
	if v6 || peer.Is6() {
		hops = append(hops, TransitLinkLocal(peer))
	}
	for _, hop := range hops {
		family := unix.AF_INET
		if hop.Is6() {
			family = unix.AF_INET6
		}
		n := &netlink.Neigh{LinkIndex: idx, Family: family, State: netlink.NUD_PERMANENT, HardwareAddr: mac, IP: hop.AsSlice()}
		if err := netlink.NeighSet(n); err != nil {
			return fmt.Errorf("adding the neighbor entry of %s on %s: %w", hop, TransitDevice, err)
		}
	}
	return nil
}

// transitRoutes returns TransitTable's routes: next hop by destination.
func transitRoutes() (map[netip.Prefix]netip.Addr, error) {
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: TransitTable}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("listing table %d: %w", TransitTable, err)
	}
	out := map[netip.Prefix]netip.Addr{}
	for _, r := range routes {
		dst, ok := routeDst(r)
		if !ok {
			continue
		}
		hop, _ := netip.AddrFromSlice(r.Gw)
		out[dst] = hop.Unmap()
	}
	return out, nil
}

// prefixNet is p as a net.IPNet.
func prefixNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Masked().Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// ensureTransitAddress puts local/32 (scope host) on the transit device
// when it is not there, and removes any other address; it returns whether
// it changed something.
func ensureTransitAddress(link netlink.Link, local netip.Addr) (bool, error) {
	if !local.Is4() {
		return false, nil
	}
	addrs, err := netlink.AddrList(link, netlink.FAMILY_V4)
	if err != nil {
		return false, fmt.Errorf("reading the addresses of %s: %w", TransitDevice, err)
	}
	want := &net.IPNet{IP: local.AsSlice(), Mask: net.CIDRMask(32, 32)}
	have, changed := false, false
	for _, a := range addrs {
		if a.IPNet != nil && a.IPNet.String() == want.String() {
			have = true
			continue
		}
		if err := netlink.AddrDel(link, &a); err != nil {
			return changed, fmt.Errorf("removing %s from %s: %w", a.IPNet, TransitDevice, err)
		}
		changed = true
	}
	if have {
		return changed, nil
	}
	if err := netlink.AddrAdd(link, &netlink.Addr{IPNet: want, Scope: int(netlink.SCOPE_HOST)}); err != nil {
		return changed, fmt.Errorf("adding %s/32 to %s: %w", local, TransitDevice, err)
	}
	return true, nil
}
