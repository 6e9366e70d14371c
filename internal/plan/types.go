// Package plan computes, from a validated spec and the planner's inputs
// (public keys, removed and failed gateways, the active gateway of each
// site, links that are down), the complete desired state of every gateway:
// its tunnel interfaces, peers, routes, bridged networks, forwarding and
// firewall. It is pure: no I/O, no clock, no randomness; output is sorted
// so the same input always yields byte-identical plans.
package plan

import (
	"encoding/base64"
	"fmt"
	"net/netip"

	"github.com/fednet/fednet/internal/backend"
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

// Version is the version of the plan format this fednet writes and
// understands. It grows when a plan gains something an older agent would
// apply wrongly if it ignored it; an agent refuses a plan of a newer
// version (Decode) and keeps its current state.
//
// Version 2: tunnels per backend, peers with a backend and per-backend
// parameters, one list of VXLAN ports per bridge (gateways and neighbor
// hosts), bounds. Version 1 (no version field) was the single WireGuard
// interface.
const Version = 2

// Gateway is the desired state of one gateway. It is a value: safe to copy
// and compare; dataplane.Apply brings a machine to it.
type Gateway struct {
	// Version is the plan format version (Version when computed).
	Version    int    `json:"version"`
	Federation string `json:"federation"`
	Name       string `json:"gateway"`
	Site       string `json:"site"`
	// Tunnels are the gateway's tunnel interfaces, one per backend its
	// links use, sorted by backend. The first holds the gateway's transit
	// address with the transit prefix length.
	Tunnels []Tunnel `json:"tunnels"`
	// Peers are sorted by gateway name.
	Peers []Peer `json:"peers"`
	// Routes are sorted by destination.
	Routes []Route `json:"routes"`
	// Forwarding turns on IPv4 forwarding.
	Forwarding bool     `json:"forwarding"`
	Firewall   Firewall `json:"firewall"`
	// Bridges are the bridged (L2) networks of this gateway, sorted by VNI;
	// only a site's active gateway carries them.
	Bridges []Bridge `json:"bridges,omitempty"`
	// LAN is the gateway's side of its site's segment.
	LAN LAN `json:"lan"`
	// Bounds are the limits of what the plan may touch on the gateway; the
	// agent refuses a plan whose routes, peers or bridge ports fall outside
	// them (see dataplane's plan checks).
	Bounds Bounds `json:"bounds"`
	// Local, when set, lets the agent compute this plan under failures it
	// detects without the manager (see Local). Equal ignores it.
	Local *Local `json:"local,omitempty"`
}

// LAN is a gateway's side of its site's segment: its own address and the
// site's virtual address (the hosts' next hop), which the site's active
// gateway holds besides its own.
type LAN struct {
	// Address is the gateway's own address on the segment, with the prefix
	// length of the site prefix that holds it; invalid when the site has
	// no prefix holding it.
	Address netip.Prefix `json:"address,omitzero"`
	// Virtual is the site's virtual address with the same prefix length.
	// At a site with one gateway it is Address.
	Virtual netip.Prefix `json:"virtual,omitzero"`
	// Active is true on the site's active gateway: it holds Virtual, and
	// it alone has the site's bridges and neighbor tunnels.
	Active bool `json:"active,omitempty"`
}

// Tunnel is one tunnel interface of a gateway: the device a backend's
// links to other gateways go through.
type Tunnel struct {
	// Backend is the tunnel technology (backend.WireGuard).
	Backend backend.Name `json:"backend"`
	// Name is the interface (at most 15 bytes).
	Name string `json:"name"`
	// ListenPort is the UDP port the tunnel receives on, 0 for none.
	ListenPort int `json:"listenPort"`
	// FallbackPort is the TCP port of the UDP-blocked fallback (WireGuard
	// packets in a TLS stream): the tunnel accepts streams on it and dials
	// its peers' on it. 0 when the fallback is off (spec
	// overlay.fallback).
	FallbackPort int `json:"fallbackPort,omitempty"`
	// Address is the transit address with the transit prefix length, so the
	// whole transit prefix is on-link through the tunnel interface.
	Address netip.Prefix `json:"address"`
	MTU     int          `json:"mtu"`
	// MTUReason explains how MTU was computed, for humans.
	MTUReason string `json:"mtuReason"`
}

// Tunnel returns the gateway's tunnel of backend b.
func (g Gateway) Tunnel(b backend.Name) (Tunnel, bool) {
	for _, t := range g.Tunnels {
		if t.Backend == b {
			return t, true
		}
	}
	return Tunnel{}, false
}

// TransitAddress is the gateway's own address inside the tunnels (that of
// its first tunnel), the invalid Addr when the plan has no tunnel.
func (g Gateway) TransitAddress() netip.Addr {
	if len(g.Tunnels) == 0 {
		return netip.Addr{}
	}
	return g.Tunnels[0].Address.Addr()
}

// Bridge is one bridged network on a gateway: the L2 domain of the network
// as this gateway serves it. A Linux bridge (or another L2 implementation
// serving the same plan) joins the site segment's port and the VXLAN ports
// that carry the network's frames: to other gateways, between transit
// addresses, inside the tunnels; and, at a site whose fabric drops unknown
// MACs, to each of the site's hosts that joined through a neighbor tunnel,
// over the site's LAN.
//
// Where every two member sites have a link (the common case) the bridge has
// one gateway port that replicates broadcast, unknown unicast and multicast
// to every other member (head-end replication); MAC learning keeps unicast
// direct. Where links are missing, frames travel along the network's relay
// tree (NetworkTree): one VXLAN port per tree neighbor, so the bridge
// forwards from one neighbor to the next, and a relay site that is not a
// member gets a bridge without a segment port.
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
	// MTU is set on the bridge and every VXLAN port: one figure for the
	// whole network, MTUReason says how it was computed.
	MTU       int    `json:"mtu"`
	MTUReason string `json:"mtuReason,omitempty"`
	// VXLANs are the bridge's VXLAN ports, sorted by name.
	VXLANs []VXLAN `json:"vxlans"`
	// Drain is set by the agent, never by the planner, on the bridge a
	// gateway keeps for a moment after it stepped down as its site's
	// active gateway (docs/resilience.md, "The bridged handover"): the
	// bridge forwards on what still reaches it, but its ports flood to
	// nobody (no flood entries) and keep what they learned, so the site's
	// broadcasts go out through the new active gateway alone.
	Drain bool `json:"drain,omitempty"`
}

// Ports returns the VXLAN ports of b of kind k, in b's order.
func (b Bridge) Ports(k PortKind) []VXLAN {
	var out []VXLAN
	for _, v := range b.VXLANs {
		if v.Kind == k {
			out = append(out, v)
		}
	}
	return out
}

// PortKind says where a VXLAN port of a bridge leads.
type PortKind uint8

// Port kinds.
const (
	// ToGateways is a port to other gateways, between transit addresses,
	// inside the tunnels; the firewall takes its UDP port from the tunnels
	// only.
	ToGateways PortKind = iota + 1
	// ToHost is a neighbor tunnel to one host of the site, over the LAN,
	// from the gateway's LAN address; the firewall takes its UDP port from
	// that host's address only.
	ToHost
)

func (k PortKind) String() string {
	switch k {
	case ToGateways:
		return "gateways"
	case ToHost:
		return "host"
	}
	return fmt.Sprintf("PortKind(%d)", uint8(k))
}

// MarshalText implements encoding.TextMarshaler.
func (k PortKind) MarshalText() ([]byte, error) {
	if k != ToGateways && k != ToHost {
		return nil, fmt.Errorf("port kind %d is not valid", uint8(k))
	}
	return []byte(k.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (k *PortKind) UnmarshalText(b []byte) error {
	for _, v := range []PortKind{ToGateways, ToHost} {
		if string(b) == v.String() {
			*k = v
			return nil
		}
	}
	return fmt.Errorf("port kind %q is not valid; want gateways or host", b)
}

// VXLAN is one VXLAN port of a bridged network, enslaved to its bridge.
// Linux allows one device per VNI and UDP port, so ports of one network
// differ in UDPPort.
type VXLAN struct {
	// Name is the interface (at most 15 bytes).
	Name string   `json:"name"`
	Kind PortKind `json:"kind"`
	// Local is the source address: this gateway's transit address for
	// ToGateways, its LAN address for ToHost.
	Local netip.Addr `json:"local"`
	// UDPPort is the VXLAN UDP port, used as source and destination:
	// 4789 for the full-mesh port, RelayPortBase plus the link's number
	// for a tree link, NeighborPort(slot) for a host.
	UDPPort int `json:"udpPort"`
	// Remotes are the addresses frames are replicated to, sorted: other
	// gateways' transit addresses, or the one host's LAN address.
	Remotes []netip.Addr `json:"remotes"`
	// To names the far side for humans: "members" for the full-mesh
	// port, else the neighbor site, or the host's name for ToHost.
	To string `json:"to"`
	// NoLearning makes the bridge learn nothing behind the port. The
	// planner never sets it: an agent sets it, for a way back's lead, on
	// the ports it makes ahead and on the relay tree's ports they replace
	// (docs/resilience.md, "The way back of bridged networks"), so that
	// during the lead every frame to a remote host floods through both
	// shapes and none is sent, by what one shape learned, into the other.
	NoLearning bool `json:"noLearning,omitempty"`
}

// Peer is one remote gateway this gateway has a link to.
type Peer struct {
	Gateway string `json:"gateway"`
	Site    string `json:"site"`
	// Backend is the link's tunnel technology; the peer belongs to the
	// gateway's tunnel of that backend.
	Backend backend.Name `json:"backend"`
	// Endpoint is host:port, empty when the peer is behind NAT (it will
	// connect to us).
	Endpoint string `json:"endpoint,omitempty"`
	// AllowedIPs are what the link carries to and accepts from the peer
	// (WireGuard's allowed IPs), sorted: the remote transit address (/32)
	// and, when the peer is its site's active gateway, the prefixes routed
	// through it.
	AllowedIPs []netip.Prefix `json:"allowedIPs"`
	// WireGuard holds the link's WireGuard parameters (backend wireguard).
	WireGuard WireGuardPeer `json:"wireguard,omitzero"`
	// IPsec holds the link's IPsec parameters (backend ipsec); nil on
	// other backends. A pointer: most peers are WireGuard's, and a plan
	// of a thousand peers is copied and held by every manager and agent.
	IPsec *IPsecPeer `json:"ipsec,omitzero"`
}

// WireGuardPeer is what a WireGuard link needs beyond Peer.
type WireGuardPeer struct {
	// PublicKey is zero while the remote gateway has no known key; the
	// dataplane skips such peers.
	PublicKey Key `json:"publicKey"`
	// PersistentKeepalive in seconds, 0 for off; set when either side is
	// behind NAT.
	PersistentKeepalive int `json:"persistentKeepalive,omitempty"`
}

// Route sends a destination into a tunnel interface.
type Route struct {
	Destination netip.Prefix `json:"destination"`
	Device      string       `json:"device"`
	// Via is the peer gateway whose allowed IPs carry the destination.
	Via string `json:"via"`
}

// Firewall is the gateway's packet filter, rendered into one nftables table
// owned by fednet and replaced atomically.
type Firewall struct {
	// Table is the nftables table name (inet family); always Table.
	Table string `json:"table"`
	// Tunnels are the tunnel interfaces, sorted: the inside of the
	// federation.
	Tunnels []string `json:"tunnels"`
	// Public are the only protocols and ports the public side accepts
	// (the tunnels' own), sorted.
	Public []backend.Port `json:"public"`
	// Local are the site's own segment prefixes: hosts there may reach the
	// gateway and, through Flows, the overlay.
	Local []netip.Prefix `json:"local"`
	// Remote are the prefixes of every other site of the federation. They
	// are never forwarded except through a tunnel: a packet for a site
	// this gateway has no route to (no shared network, a disabled link)
	// is dropped instead of leaving in clear by the default route. Sorted.
	Remote []netip.Prefix `json:"remote"`
	// Transit is the transit prefix, accepted on the tunnel interfaces.
	Transit netip.Prefix `json:"transit"`
	// Flows are the forwarded (source, destination) pairs, both directions
	// listed; everything else is dropped in forwarding. Sorted.
	Flows []Flow `json:"flows"`
	// MSS is the TCP MSS that SYNs through the tunnels are clamped to.
	MSS int `json:"mss"`
	// Neighbors are the UDP ports of neighbor tunnels, each accepted from
	// its host's address only (not through a tunnel), sorted by port.
	Neighbors []NeighborRule `json:"neighbors,omitempty"`
	// TunnelPorts are UDP ports accepted only through the tunnel
	// interfaces: the VXLAN ports of the gateway's bridges, on which a
	// packet from anywhere else would put frames into a bridged network.
	// Sorted.
	TunnelPorts []int `json:"tunnelPorts,omitempty"`
	// Admit is what the spec admits to the gateway itself besides the
	// tunnel (overlay.publicAllow, then the gateway's publicAllow): on
	// any interface, from the listed sources only. An agent older than
	// this field refuses a plan that has it (unknown field) and keeps its
	// state, so no plan format change.
	Admit []Admission `json:"admit,omitempty"`
}

// Admission accepts one protocol and port from some source prefixes.
type Admission struct {
	// Protocol is TCP or UDP.
	Protocol backend.Protocol `json:"protocol"`
	// Port is the destination port, 1..65535.
	Port int `json:"port"`
	// Sources are the source prefixes, masked, sorted, each once.
	Sources []netip.Prefix `json:"sources"`
}

// Flow allows forwarding from Source to Destination for a network.
type Flow struct {
	Network     string       `json:"network"`
	Source      netip.Prefix `json:"source"`
	Destination netip.Prefix `json:"destination"`
}

// Bounds are what a plan may reach on its gateway, from the spec: every
// route and every allowed IP lies inside Supernet or Transit, and a bridge
// port is one of Ports. The agent checks a plan against them, and against
// the machine (no route may cover the underlay's own addresses), before it
// applies anything.
type Bounds struct {
	// Supernet contains every site prefix of the federation.
	Supernet netip.Prefix `json:"supernet"`
	// Transit is the prefix of the gateways' tunnel addresses.
	Transit netip.Prefix `json:"transit"`
	// Ports are the interfaces the spec names as this gateway's bridge
	// ports (its LAN segments of bridged networks), sorted.
	Ports []string `json:"ports,omitempty"`
}
