package plan

import (
	"net/netip"
	"slices"

	"github.com/fednet/fednet/internal/backend"
	"github.com/fednet/fednet/internal/spec"
)

// IPsecPeer is what an IPsec link (backend ipsec) needs beyond Peer: one
// IKEv2 connection with one CHILD_SA in tunnel mode whose remote traffic
// selectors are the peer's AllowedIPs.
type IPsecPeer struct {
	// Initiator is true on the side that starts the IKE_SA: the peer
	// has an endpoint, and this side sorts first or the peer cannot reach
	// it (behind NAT, no endpoint). The other side only responds.
	Initiator bool `json:"initiator,omitempty"`
	// LocalID and RemoteID are the IKE identities (the gateway names).
	LocalID  string `json:"localID"`
	RemoteID string `json:"remoteID"`
	// RemoteAddress is the host of the peer's endpoint (IKE uses UDP 500
	// and 4500, not the endpoint's port); "" accepts the peer from
	// anywhere (it is behind NAT).
	RemoteAddress string `json:"remoteAddress,omitempty"`
	// LocalTS are the local traffic selectors offered; the responder
	// narrows them to what it routes to this gateway.
	LocalTS []netip.Prefix `json:"localTS"`
	// IKE and ESP are the proposals, most preferred first.
	IKE []string `json:"ike"`
	ESP []string `json:"esp"`
	// PSKFile is the file the gateway reads the pre-shared key from.
	PSKFile string `json:"pskFile"`
	// DPDSeconds and RekeySeconds are dead peer detection's interval and
	// the CHILD_SA's rekey time.
	DPDSeconds   int `json:"dpdSeconds"`
	RekeySeconds int `json:"rekeySeconds"`
	// IKERekeySeconds is the IKE_SA's rekey time; 0 is four times
	// RekeySeconds.
	IKERekeySeconds int `json:"ikeRekeySeconds,omitempty"`
	// IKEVersion is 1 or 2; 0 is 2.
	IKEVersion int `json:"ikeVersion,omitempty"`
	// Profile names the external site's profile (spec.Profile), "" for a
	// link between fednet gateways.
	Profile string `json:"profile,omitempty"`
	// Children, when set, are the connection's CHILD_SAs, each with its
	// own selectors, instead of the one with LocalTS and the peer's
	// allowed IPs (a link to an external site).
	Children []ChildSA `json:"children,omitempty"`
}

// tunnelOrder returns the backends of a gateway's tunnels: the first (the
// overlay's, which holds the transit prefix) first, the rest sorted,
// without duplicates.
func tunnelOrder(bs []backend.Name) []backend.Name {
	rest := slices.Clone(bs[1:])
	slices.Sort(rest)
	out := []backend.Name{bs[0]}
	for _, b := range slices.Compact(rest) {
		if b != bs[0] {
			out = append(out, b)
		}
	}
	return out
}

// tunnelOf returns the tunnel of backend info named and numbered as the
// overlay says: WireGuard's interface and port from the spec; a backend
// with its own interface name and fixed ports (IPsec: ipsec0, UDP 500
// and 4500) takes those.
func tunnelOf(ov spec.Overlay, info backend.Info) Tunnel {
	if info.Interface != "" {
		return Tunnel{Backend: info.Name, Name: info.Interface}
	}
	return Tunnel{Backend: info.Name, Name: ov.Interface, ListenPort: ov.ListenPort}
}

// ipsecPeer is the IPsec block of gateway self's link to h.
func ipsecPeer(f *spec.Federation, self, h *spec.Gateway) *IPsecPeer {
	ip := f.Overlay.IPsec
	if ip == nil {
		ip = &spec.IPsec{IKE: spec.DefaultIKEProposals, ESP: spec.DefaultESPProposals, DPDSeconds: spec.DefaultDPDSeconds, RekeySeconds: spec.DefaultRekeySeconds}
	}
	p := IPsecPeer{
		LocalID:       self.Name,
		RemoteID:      h.Name,
		RemoteAddress: endpointHost(h.Endpoint),
		LocalTS:       []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")},
		IKE:           slices.Clone(ip.IKE),
		ESP:           slices.Clone(ip.ESP),
		PSKFile:       ip.PSK.File,
		DPDSeconds:    ip.DPDSeconds,
		RekeySeconds:  ip.RekeySeconds,
	}
	selfReachable := self.Endpoint != "" && !self.BehindNAT
	p.Initiator = p.RemoteAddress != "" && (!selfReachable || self.Name < h.Name)
	return &p
}

// endpointHost is the host part of a host:port endpoint, "" for none.
func endpointHost(ep string) string {
	if ep == "" {
		return ""
	}
	if ap, err := netip.ParseAddrPort(ep); err == nil {
		return ap.Addr().String()
	}
	for i := len(ep) - 1; i >= 0; i-- {
		if ep[i] == ':' {
			return ep[:i]
		}
	}
	return ep
}
