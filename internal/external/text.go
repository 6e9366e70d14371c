package external

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/fednet/fednet/internal/spec"
)

// Text renders c for a person: what to click or type on the provider's
// side, in its vocabulary, then the facts every profile shares.
func (c Config) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "External site %s: %s, joined through fednet gateway %s\n\n", c.Site, c.Provider, c.PeerGateway)
	switch c.Profile {
	case spec.ProfileAWS:
		c.aws(&b)
	case spec.ProfileAzure:
		c.azure(&b)
	case spec.ProfileGCP:
		c.gcp(&b)
	case spec.ProfileOpenStack:
		c.openstack(&b)
	default:
		c.generic(&b)
	}
	fmt.Fprintf(&b, "\nOn both sides\n")
	fmt.Fprintf(&b, "  pre-shared key:    the contents of %s on %s (the same key on both sides; never in the spec)\n", c.PSKFile, c.PeerGateway)
	fmt.Fprintf(&b, "  identities:        %s (the provider) and %s (fednet), both IP addresses\n", c.LocalID, c.PeerID)
	fmt.Fprintf(&b, "  who starts:        %s\n", c.Initiator)
	fmt.Fprintf(&b, "  NAT traversal:     %s\n", c.NATTraversal)
	fmt.Fprintf(&b, "  dead peer:         DPD every %d s, peer dead after %d s\n", c.DPDSeconds, c.DPDTimeoutSeconds)
	fmt.Fprintf(&b, "  site prefixes:     %s (behind the provider's gateway)\n", join(c.LocalPrefixes))
	fmt.Fprintf(&b, "  remote prefixes:   %s (the federation's sites this site may reach; route them into the tunnel)\n", join(c.RemotePrefixes))
	for _, w := range c.Warnings {
		fmt.Fprintf(&b, "warning: %s\n", w)
	}
	fmt.Fprintf(&b, "(limits from: %s)\n", c.Docs)
	return b.String()
}

func (c Config) aws(b *strings.Builder) {
	fmt.Fprintf(b, "1. Customer gateway: IP address %s, routing Static.\n", c.PeerAddress)
	fmt.Fprintf(b, "2. Site-to-Site VPN connection: target gateway your VPC's virtual private gateway (or transit gateway), customer gateway the one above,\n")
	fmt.Fprintf(b, "   routing options Static, static IP prefixes %s.\n", join(c.RemotePrefixes))
	fmt.Fprintf(b, "   Local IPv4 network CIDR %s; remote IPv4 network CIDR %s (route-based: fednet's gateway forwards only what the site's networks allow).\n", localCIDR(c.LocalPrefixes), join(c.ChildSAs[0].Remote))
	fmt.Fprintf(b, "3. Tunnel 1 options (outside IP address %s; the spec's endpoint must be this one):\n", c.LocalAddress)
	fmt.Fprintf(b, "   Inside IPv4 CIDR           %s (AWS %s, fednet %s)\n", c.InsideCIDR, c.InsideLocal.Addr(), c.InsidePeer.Addr())
	fmt.Fprintf(b, "   Pre-shared key             the contents of %s\n", c.PSKFile)
	fmt.Fprintf(b, "   IKE version                ikev%d\n", c.IKEVersion)
	fmt.Fprintf(b, "   Phase 1 encryption         %s\n", list(c.IKE, func(p Proposal) string { return p.Encryption }))
	fmt.Fprintf(b, "   Phase 1 integrity          %s\n", list(c.IKE, func(p Proposal) string { return first(p.Integrity, p.PRF) }))
	fmt.Fprintf(b, "   Phase 1 DH group numbers   %s\n", list(c.IKE, func(p Proposal) string { return p.DHGroup }))
	fmt.Fprintf(b, "   Phase 2 encryption         %s\n", list(c.ESP, func(p Proposal) string { return p.Encryption }))
	fmt.Fprintf(b, "   Phase 2 integrity          %s\n", list(c.ESP, func(p Proposal) string { return first(p.Integrity, "(none: GCM authenticates)") }))
	fmt.Fprintf(b, "   Phase 2 DH group numbers   %s\n", list(c.ESP, func(p Proposal) string { return p.DHGroup }))
	fmt.Fprintf(b, "   Phase 1 lifetime (seconds) %d\n", c.IKELifetimeSeconds)
	fmt.Fprintf(b, "   Phase 2 lifetime (seconds) %d\n", c.ESPLifetimeSeconds)
	fmt.Fprintf(b, "   DPD timeout (seconds)      %d, DPD timeout action Restart\n", c.DPDTimeoutSeconds)
	fmt.Fprintf(b, "   Startup action             Add (fednet starts the connection)\n")
	fmt.Fprintf(b, "   Tunnel 2 is not used by fednet: AWS shows it down.\n")
	fmt.Fprintf(b, "4. Route tables of the VPC's subnets: enable route propagation from the virtual private gateway, or add %s -> the virtual private gateway.\n", join(c.RemotePrefixes))
}

func (c Config) azure(b *strings.Builder) {
	ike, esp := c.IKE[0], c.ESP[0]
	espInteg := esp.Integrity
	if espInteg == "" {
		espInteg = esp.Encryption // GCM: Azure wants the same GCM name as integrity
	}
	fmt.Fprintf(b, "1. Local network gateway: IP address %s, address space %s.\n", c.PeerAddress, join(c.RemotePrefixes))
	fmt.Fprintf(b, "2. Connection (Site-to-site IPsec) from your VPN gateway (public IP %s) to that local network gateway:\n", c.LocalAddress)
	fmt.Fprintf(b, "   IKE protocol %s, shared key: the contents of %s, use policy based traffic selector: disabled.\n", ikeName(c.IKEVersion), c.PSKFile)
	fmt.Fprintf(b, "3. Its IPsec/IKE policy: Custom, every parameter:\n")
	fmt.Fprintf(b, "   IKE Phase 1: encryption %s, integrity/PRF %s, DH group %s\n", ike.Encryption, first(ike.PRF, ike.Integrity), ike.DHGroup)
	fmt.Fprintf(b, "   IKE Phase 2 (IPsec): encryption %s, integrity %s, PFS group %s\n", esp.Encryption, espInteg, esp.DHGroup)
	fmt.Fprintf(b, "   IPsec SA lifetime in seconds %d (IKE SA: %d, fixed by Azure); DPD timeout %d s\n", c.ESPLifetimeSeconds, c.IKELifetimeSeconds, c.DPDTimeoutSeconds)
	fmt.Fprintf(b, "   PowerShell: New-AzIpsecPolicy -IkeEncryption %s -IkeIntegrity %s -DhGroup %s -IpsecEncryption %s -IpsecIntegrity %s -PfsGroup %s -SALifeTimeSeconds %d -SADataSizeKilobytes 102400000\n",
		ike.Encryption, first(ike.PRF, ike.Integrity), ike.DHGroup, esp.Encryption, espInteg, esp.DHGroup, c.ESPLifetimeSeconds)
}

func (c Config) gcp(b *strings.Builder) {
	ike, esp := c.IKE[0], c.ESP[0]
	fmt.Fprintf(b, "1. Peer VPN gateway: interface 0 IP address %s.\n", c.PeerAddress)
	fmt.Fprintf(b, "2. VPN tunnel from your Cloud VPN gateway (interface IP %s) to it: IKE version %d, shared secret: the contents of %s.\n", c.LocalAddress, c.IKEVersion, c.PSKFile)
	fmt.Fprintf(b, "   Classic VPN (route based): local traffic selector %s, remote traffic selector %s;\n", join(c.ChildSAs[0].Local), join(c.ChildSAs[0].Remote))
	fmt.Fprintf(b, "   then routes %s -> next hop the tunnel.\n", join(c.RemotePrefixes))
	fmt.Fprintf(b, "   gcloud compute vpn-tunnels create fednet-%s --peer-address=%s --ike-version=%d --shared-secret=\"$(cat %s)\" --local-traffic-selector=%s --remote-traffic-selector=%s --target-vpn-gateway=GATEWAY --region=REGION\n",
		c.Site, c.PeerAddress, c.IKEVersion, c.PSKFile, joinComma(c.ChildSAs[0].Local), joinComma(c.ChildSAs[0].Remote))
	fmt.Fprintf(b, "3. Ciphers: Cloud VPN is not told them; fednet proposes exactly one per role, which Cloud VPN accepts:\n")
	fmt.Fprintf(b, "   Phase 1 encryption %s, integrity %s, PRF %s, DH %s; lifetime %d s (fixed)\n", ike.Encryption, dash(ike.Integrity), ike.PRF, ike.DHGroup, c.IKELifetimeSeconds)
	fmt.Fprintf(b, "   Phase 2 encryption %s, integrity %s, PFS %s; lifetime %d s (fixed)\n", esp.Encryption, dash(esp.Integrity), esp.DHGroup, c.ESPLifetimeSeconds)
}

func (c Config) openstack(b *strings.Builder) {
	ike, esp := c.IKE[0], c.ESP[0]
	name := "fednet-" + c.Site
	fmt.Fprintf(b, "OpenStack commands (the project's router is ROUTER, its external address %s; SUBNET is the subnet of %s):\n\n", c.LocalAddress, join(c.LocalPrefixes))
	fmt.Fprintf(b, "  openstack vpn ike policy create %s --ike-version v%d --encryption-algorithm %s --auth-algorithm %s --pfs %s --lifetime units=seconds,value=%d\n",
		name, c.IKEVersion, ike.Encryption, ike.Integrity, ike.DHGroup, c.IKELifetimeSeconds)
	fmt.Fprintf(b, "  openstack vpn ipsec policy create %s --encryption-algorithm %s --auth-algorithm %s --pfs %s --lifetime units=seconds,value=%d\n",
		name, esp.Encryption, esp.Integrity, esp.DHGroup, c.ESPLifetimeSeconds)
	fmt.Fprintf(b, "  openstack vpn service create %s --router ROUTER\n", name)
	fmt.Fprintf(b, "  openstack vpn endpoint group create %s-local --type subnet --value SUBNET\n", name)
	var values []string
	for _, p := range c.RemotePrefixes {
		values = append(values, "--value "+p.String())
	}
	fmt.Fprintf(b, "  openstack vpn endpoint group create %s-peer --type cidr %s\n", name, strings.Join(values, " "))
	fmt.Fprintf(b, "  openstack vpn ipsec site connection create %s --vpnservice %s --ikepolicy %s --ipsecpolicy %s \\\n", name, name, name, name)
	fmt.Fprintf(b, "      --local-endpoint-group %s-local --peer-endpoint-group %s-peer --peer-address %s --peer-id %s \\\n", name, name, c.PeerAddress, c.PeerID)
	fmt.Fprintf(b, "      --psk \"$(cat %s)\" --dpd action=restart,interval=%d,timeout=%d --initiator bi-directional\n", c.PSKFile, c.DPDSeconds, c.DPDTimeoutSeconds)
	fmt.Fprintf(b, "\n  One child SA per local x remote prefix pair (%d), as VPNaaS negotiates them.\n", len(c.ChildSAs))
}

func (c Config) generic(b *strings.Builder) {
	fmt.Fprintf(b, "IKEv%d, ESP tunnel mode, pre-shared key; in strongSwan's notation:\n", c.IKEVersion)
	fmt.Fprintf(b, "  local address %s, remote address %s\n", c.LocalAddress, c.PeerAddress)
	fmt.Fprintf(b, "  ike proposals %s, rekey %d s\n", list(c.IKE, func(p Proposal) string { return p.StrongSwan }), c.IKELifetimeSeconds)
	fmt.Fprintf(b, "  esp proposals %s, rekey %d s\n", list(c.ESP, func(p Proposal) string { return p.StrongSwan }), c.ESPLifetimeSeconds)
	for _, ch := range c.ChildSAs {
		fmt.Fprintf(b, "  child SA: local %s, remote %s\n", join(ch.Local), join(ch.Remote))
	}
}

func ikeName(v int) string {
	if v == 1 {
		return "IKEv1"
	}
	return "IKEv2"
}

// localCIDR is AWS's "Local IPv4 network CIDR": the site's one prefix,
// or 0.0.0.0/0 when it has several (AWS takes one CIDR).
func localCIDR(ps []netip.Prefix) string {
	if len(ps) == 1 {
		return ps[0].String()
	}
	return "0.0.0.0/0"
}

func list(ps []Proposal, f func(Proposal) string) string {
	var out []string
	for _, p := range ps {
		if v := f(p); v != "" && !contains(out, v) {
			out = append(out, v)
		}
	}
	return dash(strings.Join(out, ", "))
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func first(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func join(ps []netip.Prefix) string { return joinSep(ps, ", ") }

func joinComma(ps []netip.Prefix) string { return joinSep(ps, ",") }

func joinSep(ps []netip.Prefix, sep string) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, sep)
}
