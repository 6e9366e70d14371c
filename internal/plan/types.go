// Package plan computes, from a validated spec, the complete desired state of
// every gateway: its WireGuard interface, peers, routes, forwarding and
// firewall. It is pure: no I/O, no clock, no randomness; output is sorted so
// the same input always yields byte-identical plans.
package plan

import (
	"encoding/base64"
	"fmt"
	"net/netip"
)

// Key is a Curve25519 WireGuard key. Plans only ever hold public keys.
type Key [32]byte

// ParseKey decodes a base64 WireGuard key.
func ParseKey(s string) (Key, error) {
	var k Key
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return k, fmt.Errorf("key %q is not base64: %w", s, err)
	}
	if len(b) != len(k) {
		return k, fmt.Errorf("key %q decodes to %d bytes, want %d", s, len(b), len(k))
	}
	copy(k[:], b)
	return k, nil
}

// IsZero reports whether k is unset.
func (k Key) IsZero() bool { return k == Key{} }

// String returns the base64 form, or "" for the zero key.
func (k Key) String() string {
	if k.IsZero() {
		return ""
	}
	return base64.StdEncoding.EncodeToString(k[:])
}

// MarshalText implements encoding.TextMarshaler.
func (k Key) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler; "" is the zero key.
func (k *Key) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*k = Key{}
		return nil
	}
	v, err := ParseKey(string(b))
	if err != nil {
		return err
	}
	*k = v
	return nil
}

// Gateway is the desired state of one gateway. It is a value: safe to copy
// and compare; dataplane.Apply brings a machine to it.
type Gateway struct {
	Federation string    `json:"federation"`
	Name       string    `json:"gateway"`
	Site       string    `json:"site"`
	Interface  Interface `json:"interface"`
	// Peers are sorted by gateway name.
	Peers []Peer `json:"peers"`
	// Routes are sorted by destination.
	Routes []Route `json:"routes"`
	// Forwarding turns on IPv4 forwarding.
	Forwarding bool     `json:"forwarding"`
	Firewall   Firewall `json:"firewall"`
	// Bridges are the bridged (L2) networks of this gateway, sorted by VNI;
	// only a site's first gateway carries them.
	Bridges []Bridge `json:"bridges,omitempty"`
}

// Bridge is one bridged network on a gateway: a Linux bridge joining the
// site segment's port and the VXLAN devices that carry the network's frames
// to other gateways, between transit addresses, inside the tunnels.
//
// Where every two member sites have a link (the common case) the bridge has
// one VXLAN device that replicates broadcast, unknown unicast and multicast
// to every other member (head-end replication); MAC learning keeps unicast
// direct. Where links are missing, frames travel along the network's relay
// tree (NetworkTree): one VXLAN device per tree neighbor, so the bridge
// forwards from one neighbor to the next, and a relay site that is not a
// member gets a bridge without a port.
type Bridge struct {
	Network string `json:"network"`
	// VNI is the network id.
	VNI int `json:"vni"`
	// Name is the bridge interface (at most 15 bytes).
	Name string `json:"name"`
	// Port is the gateway's interface on the site segment, enslaved to the
	// bridge; empty for none (and always on a relay).
	Port string `json:"port,omitempty"`
	// Relay is true on a site that is not a member of the network and
	// only forwards its frames between tree neighbors.
	Relay bool `json:"relay,omitempty"`
	// MTU is set on the bridge and every VXLAN device: one figure for the
	// whole network, MTUReason says how it was computed.
	MTU       int    `json:"mtu"`
	MTUReason string `json:"mtuReason,omitempty"`
	// VXLANs are the bridge's VXLAN devices to other gateways, sorted by
	// name.
	VXLANs []VXLAN `json:"vxlans"`
	// Neighbors are the neighbor tunnels of the network's hosts at this
	// site, sorted by UDP port; only at sites whose fabric drops unknown
	// MACs. Their devices get MTU too, at both ends.
	Neighbors []Neighbor `json:"neighbors,omitempty"`
}

// VXLAN is one VXLAN device of a bridged network, enslaved to its bridge.
// Linux allows one device per VNI and UDP port, so devices of one network
// differ in UDPPort.
type VXLAN struct {
	// Name is the interface (at most 15 bytes).
	Name string `json:"name"`
	// Local is this gateway's transit address (the VXLAN source).
	Local netip.Addr `json:"local"`
	// UDPPort is the VXLAN UDP port, used as source and destination:
	// 4789 for the full-mesh device, RelayPortBase plus the link's number
	// for a tree link (neighbor tunnels use NeighborPortBase and up).
	UDPPort int `json:"udpPort"`
	// Remotes are the transit addresses frames are replicated to, sorted.
	Remotes []netip.Addr `json:"remotes"`
	// To names the far side for humans: "members" for the full-mesh
	// device, else the neighbor site.
	To string `json:"to"`
}

// Interface is the gateway's WireGuard interface.
type Interface struct {
	Name       string `json:"name"`
	ListenPort int    `json:"listenPort"`
	// Address is the transit address with the transit prefix length, so the
	// whole transit prefix is on-link through the tunnel interface.
	Address netip.Prefix `json:"address"`
	MTU     int          `json:"mtu"`
	// MTUReason explains how MTU was computed, for humans.
	MTUReason string `json:"mtuReason"`
}

// Peer is one remote gateway this gateway has a link to.
type Peer struct {
	Gateway string `json:"gateway"`
	Site    string `json:"site"`
	// PublicKey is zero while the remote gateway has no known key; the
	// dataplane skips such peers.
	PublicKey Key `json:"publicKey"`
	// Endpoint is host:port, empty when the peer is behind NAT (it will
	// connect to us).
	Endpoint string `json:"endpoint,omitempty"`
	// AllowedIPs are sorted; the remote transit address (/32) comes with the
	// remote site prefixes of the routed networks both sites share.
	AllowedIPs []netip.Prefix `json:"allowedIPs"`
	// PersistentKeepalive in seconds, 0 for off; set when either side is
	// behind NAT.
	PersistentKeepalive int `json:"persistentKeepalive,omitempty"`
}

// Route sends a destination into the tunnel interface.
type Route struct {
	Destination netip.Prefix `json:"destination"`
	Device      string       `json:"device"`
	// Via is the peer gateway whose allowed IPs carry the destination.
	Via string `json:"via"`
}

// Firewall is the gateway's packet filter, rendered into one nftables table
// owned by fednet and replaced atomically.
type Firewall struct {
	// Table is the nftables table name (inet family).
	Table string `json:"table"`
	// Tunnel is the WireGuard interface name.
	Tunnel string `json:"tunnel"`
	// ListenPort is the only port the public side accepts (UDP).
	ListenPort int `json:"listenPort"`
	// Local are the site's own segment prefixes: hosts there may reach the
	// gateway and, through Flows, the overlay.
	Local []netip.Prefix `json:"local"`
	// Remote are the prefixes of every other site of the federation. They
	// are never forwarded except through the tunnel: a packet for a site
	// this gateway has no route to (no shared network, a disabled link)
	// is dropped instead of leaving in clear by the default route. Sorted.
	Remote []netip.Prefix `json:"remote"`
	// Transit is the transit prefix, accepted on the tunnel interface.
	Transit netip.Prefix `json:"transit"`
	// Flows are the forwarded (source, destination) pairs, both directions
	// listed; everything else is dropped in forwarding. Sorted.
	Flows []Flow `json:"flows"`
	// MSS is the TCP MSS that SYNs through the tunnel are clamped to.
	MSS int `json:"mss"`
	// Neighbors are the UDP ports of neighbor tunnels, each accepted from
	// its host's address only (not through the tunnel), sorted by port.
	Neighbors []NeighborRule `json:"neighbors,omitempty"`
	// TunnelPorts are UDP ports accepted only through the tunnel
	// interface: the VXLAN ports of the gateway's bridges, on which a
	// packet from anywhere else would put frames into a bridged network.
	// Sorted.
	TunnelPorts []int `json:"tunnelPorts,omitempty"`
}

// Flow allows forwarding from Source to Destination for a network.
type Flow struct {
	Network     string       `json:"network"`
	Source      netip.Prefix `json:"source"`
	Destination netip.Prefix `json:"destination"`
}
