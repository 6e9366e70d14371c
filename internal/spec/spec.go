// Package spec defines the declarative description of a federation (the
// operator's YAML), parses it with line numbers, validates it and applies the
// numbering plan. It is pure: no I/O beyond the bytes it is given, no clock,
// no randomness.
package spec

import (
	"net/netip"

	"github.com/fednet/fednet/internal/backend"
)

// APIVersion and Kind identify a federation spec document.
const (
	APIVersion = "fednet/v1"
	Kind       = "Federation"
)

// Defaults applied by Parse when a field is left out.
var (
	DefaultSupernet    = netip.MustParsePrefix("10.0.0.0/8")
	DefaultTransit     = netip.MustParsePrefix("10.255.0.0/16")
	DefaultListenPort  = 51820
	DefaultUnderlayMTU = 1500
	DefaultInterface   = "fed0"
	// DefaultProviders gives the A octet of the numbering plan (10.A.B.0/24)
	// per provider, after seed 000 §3.2.3.1. Spec field providers overrides or
	// extends it.
	DefaultProviders = map[string]int{"aws": 1, "azure": 2, "gcp": 3, "openstack": 4, "onprem": 5, "edge": 6}
)

// Federation is a whole spec document.
type Federation struct {
	APIVersion string `yaml:"apiVersion" json:"apiVersion"`
	Kind       string `yaml:"kind" json:"kind"`
	// Name of the federation.
	Name    string  `yaml:"name" json:"name"`
	Overlay Overlay `yaml:"overlay" json:"overlay"`
	// Providers maps a provider name to the A octet of the numbering plan,
	// overriding or extending DefaultProviders.
	Providers map[string]int `yaml:"providers,omitempty" json:"providers,omitempty"`
	Sites     []Site         `yaml:"sites" json:"sites"`
	Networks  []Network      `yaml:"networks" json:"networks"`
	Topology  Topology       `yaml:"topology" json:"topology"`
	// EgressPrices is the optional price table of traffic leaving a site,
	// for the estimated egress cost of each link (docs/spec.md).
	EgressPrices []EgressPrice `yaml:"egressPrices,omitempty" json:"egressPrices,omitempty"`
	// Lab holds settings used only by `fednet lab`; agents ignore it.
	Lab *Lab `yaml:"lab,omitempty" json:"lab,omitempty"`

	// lines maps a field path (sites[1].gateways[0].endpoint) to its YAML
	// line; filled by Parse, read by Line. Never written after Parse, so a
	// Federation is safe for concurrent reads.
	lines map[string]int
}

// Overlay holds federation-wide addressing and tunnel settings.
type Overlay struct {
	// Supernet contains every site prefix (default 10.0.0.0/8).
	Supernet netip.Prefix `yaml:"supernet" json:"supernet"`
	// Transit is the prefix gateways take their tunnel addresses from
	// (default 10.255.0.0/16); it must not overlap any site prefix.
	Transit netip.Prefix `yaml:"transit" json:"transit"`
	// ListenPort is the WireGuard UDP port of every gateway (default 51820).
	ListenPort int `yaml:"listenPort" json:"listenPort"`
	// UnderlayMTU is the MTU of the gateways' public path (default 1500).
	UnderlayMTU int `yaml:"underlayMTU" json:"underlayMTU"`
	// Interface is the WireGuard interface name on gateways (default fed0).
	// fednet creates it and marks it as its own; it never adopts an
	// interface it did not create.
	Interface string `yaml:"interface" json:"interface"`
	// Backend is the tunnel backend of every link (default wireguard; the
	// names package backend registers are valid).
	Backend backend.Name `yaml:"backend,omitempty" json:"backend,omitempty"`
	// PublicAllow admits traffic to every gateway itself on its public
	// side besides the tunnel, such as SSH from the operators' network
	// (publicallow.go).
	PublicAllow []Admission `yaml:"publicAllow,omitempty" json:"publicAllow,omitempty"`
	// IPsec holds the settings of links on backend ipsec (ipsec.go).
	IPsec *IPsec `yaml:"ipsec,omitempty" json:"ipsec,omitempty"`
	// Fallback is what a WireGuard link does when UDP between its gateways
	// is blocked (docs/interop.md).
	Fallback Fallback `yaml:"fallback,omitempty" json:"fallback,omitempty"`
}

// Fallback configures the UDP-blocked fallback of WireGuard links: their
// packets in a TLS stream over TCP, to the peer's Port.
type Fallback struct {
	// TCP443 is FallbackAuto (the default: a link whose UDP handshake goes
	// unanswered moves to the stream, and back once UDP answers) or
	// FallbackOff.
	TCP443 FallbackMode `yaml:"tcp443,omitempty" json:"tcp443,omitempty"`
	// Port is the TCP port gateways accept the stream on and dial peers'
	// streams on (default DefaultFallbackPort); the firewall opens it.
	Port int `yaml:"port,omitempty" json:"port,omitempty"`
}

// FallbackMode says whether the TCP fallback is used.
type FallbackMode string

// Fallback modes.
const (
	FallbackAuto FallbackMode = "auto"
	FallbackOff  FallbackMode = "off"
)

// DefaultFallbackPort is the TCP port of the fallback stream: HTTPS's.
const DefaultFallbackPort = 443

// TCPFallbackPort returns the TCP port of the fallback stream, 0 when the
// fallback is off.
func (o Overlay) TCPFallbackPort() int {
	if o.Fallback.TCP443 == FallbackOff {
		return 0
	}
	if o.Fallback.Port == 0 {
		return DefaultFallbackPort
	}
	return o.Fallback.Port
}

// Site is one place: a VPC, a VNet, an on-prem LAN, an edge location.
type Site struct {
	Name     string `yaml:"name" json:"name"`
	Provider string `yaml:"provider" json:"provider"`
	Region   string `yaml:"region,omitempty" json:"region,omitempty"`
	// Index is the deployment index B of the numbering plan (10.A.B.0/24),
	// 0..255, used when Prefixes is empty. Sequential from 0 per provider.
	Index int `yaml:"index" json:"index"`
	// Prefixes are the site's segments, inside Overlay.Supernet and
	// overlapping no other site's. When empty, Parse fills in the numbering
	// plan's 10.A.B.0/24, A being the provider's octet.
	Prefixes []netip.Prefix `yaml:"prefixes,omitempty" json:"prefixes,omitempty"`
	Gateways []Gateway      `yaml:"gateways" json:"gateways"`
	// VirtualAddress is the address the site's hosts use as their next hop
	// to the overlay; the site's active gateway holds it (and moves it
	// with gratuitous ARP on a takeover). At a site with one gateway it is
	// that gateway's LANAddress. At a site with two or more, Parse
	// defaults it to the last usable address of the site's first prefix
	// (the numbering plan's .254), and the gateways' own LAN addresses to
	// the next lower free ones (.253, .252, ...).
	VirtualAddress netip.Addr `yaml:"virtualAddress,omitempty" json:"virtualAddress,omitempty"`
	// Fabric says how the site's network treats Ethernet frames: empty for
	// an ordinary LAN, FabricDropsUnknownMACs for a cloud fabric (AWS,
	// OpenNebula) that drops frames whose source MAC is not the sending
	// port's own. At such a site the hosts of a bridged network join it
	// through neighbor tunnels to the gateway (fednet host join), and the
	// network's MTU leaves room for them.
	Fabric Fabric `yaml:"fabric,omitempty" json:"fabric,omitempty"`
	// Cloud names the site's cloud resources that `fednet cloud` sets up
	// (route tables, the gateways' interfaces, the security group); see
	// cloud.go and docs/cloud.md.
	Cloud *Cloud `yaml:"cloud,omitempty" json:"cloud,omitempty"`
	// External makes the site an external site: a provider's VPN gateway
	// (or an IKE router) instead of fednet gateways (external.go,
	// docs/interop.md).
	External *External `yaml:"external,omitempty" json:"external,omitempty"`
}

// Fabric is a site's kind of LAN fabric.
type Fabric string

// Fabrics. The zero Fabric is an ordinary LAN that forwards any frame.
const (
	FabricDropsUnknownMACs Fabric = "dropsUnknownMACs"
)

// DropsUnknownMACs reports whether the site's fabric drops frames from
// MAC addresses it did not assign, so bridged networks need neighbor
// tunnels there.
func (s *Site) DropsUnknownMACs() bool { return s.Fabric == FabricDropsUnknownMACs }

// Gateway is the machine of a site that runs `fednet agent`.
type Gateway struct {
	// Name is unique across the federation.
	Name string `yaml:"name" json:"name"`
	// Endpoint is the public host:port peers send to (host an IP address or
	// a DNS name), unique across the federation; empty when BehindNAT.
	Endpoint string `yaml:"endpoint,omitempty" json:"endpoint,omitempty"`
	// BehindNAT marks a gateway that cannot be reached from outside; it
	// connects out and keeps its NAT mapping alive.
	BehindNAT bool `yaml:"behindNAT,omitempty" json:"behindNAT,omitempty"`
	// PublicKey is the gateway's WireGuard public key (base64), for static
	// mode; the manager learns keys at enrollment instead.
	PublicKey string `yaml:"publicKey,omitempty" json:"publicKey,omitempty"`
	// TransitAddress is the gateway's tunnel address inside Overlay.Transit.
	// Set it to pin the address; when unset Parse assigns a stable one
	// derived from the gateway's name (see Parse).
	TransitAddress netip.Addr `yaml:"transitAddress,omitempty" json:"transitAddress,omitempty"`
	// LANAddress is the gateway's address on the site segment; it must lie
	// in one of the site's prefixes. Parse defaults it to the last usable
	// address of the site's first prefix (the numbering plan's .254), and
	// further gateways of the site to the next lower free addresses.
	LANAddress netip.Addr `yaml:"lanAddress,omitempty" json:"lanAddress,omitempty"`
	// BridgePorts maps the name of a bridged network of the site to the
	// gateway's interface on that network's segment (e.g. {lan: eth1}); the
	// planner enslaves it to the network's bridge. Every gateway of the
	// site needs one entry per bridged network of the site: the site's
	// active gateway serves its bridged networks.
	BridgePorts map[string]string `yaml:"bridgePorts,omitempty" json:"bridgePorts,omitempty"`
	// PublicAllow admits traffic to this gateway itself, in addition to
	// Overlay.PublicAllow (publicallow.go).
	PublicAllow []Admission `yaml:"publicAllow,omitempty" json:"publicAllow,omitempty"`
}

// Mode says how a network joins its sites.
type Mode string

// Network modes.
const (
	Routed  Mode = "routed"
	Bridged Mode = "bridged"
)

// Network is an isolated virtual network over some of the sites.
type Network struct {
	Name string `yaml:"name" json:"name"`
	// ID is unique, 1..16777215 (it becomes the VXLAN VNI for bridged networks).
	ID int `yaml:"id" json:"id"`
	// Mode is required: Routed joins the member sites' prefixes by routing;
	// Bridged stretches one Ethernet segment over the member sites (VXLAN
	// with VNI = ID between their active gateways, inside the tunnels).
	Mode Mode `yaml:"mode" json:"mode"`
	// Sites are the member sites. Every two of them need a chain of
	// enabled links: traffic is relayed through other sites where a direct
	// link is disabled (docs/topology.md).
	Sites []string `yaml:"sites" json:"sites"`
	// Subnet is, for a bridged network, the subnet stretched over its
	// sites; optional, for humans and validation only (fednet assigns no
	// addresses in it). When set it must overlap no site prefix and not
	// overlay.transit. Routed networks take none: their addresses are their
	// sites' prefixes.
	Subnet netip.Prefix `yaml:"subnet,omitempty" json:"subnet,omitzero"`
}

// Topology says which gateways have links between them.
type Topology struct {
	// Mode is "mesh" (default): every pair of sites has a link unless Links
	// disables it.
	Mode  string `yaml:"mode" json:"mode"`
	Links []Link `yaml:"links,omitempty" json:"links,omitempty"`
}

// Link overrides the default for the link between two sites.
type Link struct {
	// Between names the two sites, in either order.
	Between  []string `yaml:"between" json:"between"`
	Disabled bool     `yaml:"disabled,omitempty" json:"disabled,omitempty"`
	// Cost weights the link for path choice, 1 or more (default 1).
	Cost int `yaml:"cost,omitempty" json:"cost,omitempty"`
	// Backend is the link's tunnel backend; "" takes overlay.backend.
	Backend backend.Name `yaml:"backend,omitempty" json:"backend,omitempty"`
}

// Lab holds settings for `fednet lab` only.
type Lab struct {
	// HostsPerSite is how many host namespaces each site gets, 0..50
	// (default 2).
	HostsPerSite int `yaml:"hostsPerSite,omitempty" json:"hostsPerSite,omitempty"`
	// PublicAddresses maps a gateway name to its address on the lab's
	// internet, for gateways whose endpoint is not a lab address.
	PublicAddresses map[string]netip.Addr `yaml:"publicAddresses,omitempty" json:"publicAddresses,omitempty"`
}
