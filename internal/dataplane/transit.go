package dataplane

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
)

// The transit device carries a gateway's traffic encapsulated while the
// gateways of a path disagree on which peer carries a site's prefixes (a
// handover, the way back to a repaired link; docs/resilience.md,
// "Lossless moves"). WireGuard's source check accepts a prefix from one
// peer only; a packet wrapped in VXLAN with the outer source of the
// sender's own transit address is accepted by any peer, since a gateway's
// transit address is always in its own peer entry. The receiver's transit
// device unwraps it and forwards the inner packet by its routes and the
// forward chain's flows, exactly as if it had come through the tunnel.
//
// One VXLAN device per gateway (TransitDevice): VNI TransitVNI on UDP port
// TransitPort, local address the gateway's transit address, no learning,
// a MAC derived from the transit address (TransitMAC), so that every
// gateway knows every other's without asking: a static FDB entry and a
// permanent neighbor entry per peer in use. Its routes live in their own
// table (TransitTable), looked up before the main one (rule priority
// TransitRulePriority): an empty table — the steady state — sends nothing
// through the device, and Apply, which owns the main table's routes, never
// sees them. What the device unwraps is routed by the main table only
// (rule TransitRulePriority-1): never encapsulated again, so two gateways
// that encapsulate a prefix to each other cannot bounce it. The outer
// packets may be fragmented (the device's MTU is the
// tunnel's, the VXLAN DF bit unset), so no packet that fits the tunnel is
// refused during a move.

// Names and numbers of the transit device.
const (
	// TransitDevice is the transit VXLAN device's name.
	TransitDevice = "fednet-tx"
	// TransitVNI is its VXLAN network identifier.
	TransitVNI = 0xfed
	// TransitPort is its UDP port, accepted only through the tunnels.
	TransitPort = 51824
	// TransitTable is the routing table of the encapsulated prefixes.
	TransitTable = 51825
	// TransitRulePriority is the priority of the rule that looks
	// TransitTable up (before the main table's 32766).
	TransitRulePriority = 31825
)

// TransitConfig is what the transit device must carry.
type TransitConfig struct {
	// Local is the gateway's transit address: the outer source.
	Local netip.Addr
	// MTU is the device's MTU: the tunnel's.
	MTU int
	// Encap maps each destination prefix to send encapsulated to the
	// transit address of the peer gateway that must receive it. An empty
	// map sends nothing through the device (the routes are removed; the
	// device stays).
	Encap map[netip.Prefix]netip.Addr
}

// Validate checks c: a valid local address, a positive MTU, and no
// encapsulated prefix that holds a peer's or the local transit address
// (the outer packet would loop into the device).
func (c TransitConfig) Validate() error {
	if !c.Local.IsValid() {
		return fmt.Errorf("transit device: Local (the gateway's transit address) is not set")
	}
	if c.MTU <= 0 {
		return fmt.Errorf("transit device: MTU %d must be positive (the tunnel's MTU)", c.MTU)
	}
	for dst, peer := range c.Encap {
		if !peer.IsValid() || peer.Is4() != c.Local.Is4() {
			return fmt.Errorf("transit device: prefix %s: peer transit address %v is not of the family of the local one %s", dst, peer, c.Local)
		}
		if dst.Addr().Is4() && !peer.Is4() {
			return fmt.Errorf("transit device: prefix %s: an IPv4 prefix needs IPv4 transit addresses", dst)
		}
		if dst.Contains(peer) || dst.Contains(c.Local) {
			return fmt.Errorf("transit device: prefix %s holds a transit address: its outer packets would loop", dst)
		}
	}
	return nil
}

// Peers returns the distinct peer transit addresses of c, sorted.
func (c TransitConfig) Peers() []netip.Addr {
	var out []netip.Addr
	for _, p := range c.Encap {
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return out
}

// TransitMAC is the transit device's MAC of the gateway with transit
// address a: locally administered, unicast, 02:fe and the address's last
// four bytes.
func TransitMAC(a netip.Addr) net.HardwareAddr {
	b := a.As16()
	return net.HardwareAddr{0x02, 0xfe, b[12], b[13], b[14], b[15]}
}

// TransitLinkLocal is the IPv6 link-local address (EUI-64) of the transit
// device of the gateway with transit address a: the next hop of IPv6
// prefixes sent to it.
func TransitLinkLocal(a netip.Addr) netip.Addr {
	m := TransitMAC(a)
	var b [16]byte
	b[0], b[1] = 0xfe, 0x80
	b[8], b[9], b[10] = m[0]^0x02, m[1], m[2]
	b[11], b[12] = 0xff, 0xfe
	b[13], b[14], b[15] = m[3], m[4], m[5]
	return netip.AddrFrom16(b)
}

// transitNextHop is the next hop, through the transit device, of dst sent
// to the gateway of transit address peer.
func transitNextHop(dst netip.Prefix, peer netip.Addr) netip.Addr {
	if dst.Addr().Is4() {
		return peer
	}
	return TransitLinkLocal(peer)
}
