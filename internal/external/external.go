// Package external computes what an operator enters on a provider's side
// to join an external site (spec.External) to the federation: the peer
// address, IKE version, proposals and lifetimes in the provider's own
// vocabulary, DPD, inside addresses (AWS), the prefixes on either side,
// and where the pre-shared key lies. `fednet external config` prints it as
// text for people and as JSON for tools (the lab's stand-in VPN gateways
// are configured from the JSON alone). It is pure: it reads no file.
package external

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/spec"
)

// Config is the provider side of one external site's connection. Its JSON
// names are a public contract (docs/interop.md). "Local" is the
// provider's side, "peer" the fednet gateway: the names are from the
// point of view of whoever configures the provider.
type Config struct {
	Site     string       `json:"site"`
	Profile  spec.Profile `json:"profile"`
	Provider string       `json:"provider"`
	// LocalAddress is the provider gateway's public address (the spec's
	// endpoint); PeerAddress the fednet gateway's (the customer gateway,
	// local network gateway, peer VPN gateway); PeerGateway its name.
	LocalAddress netip.Addr `json:"local_address"`
	PeerAddress  netip.Addr `json:"peer_address"`
	PeerGateway  string     `json:"peer_gateway"`
	// LocalID and PeerID are the IKE identities (the two addresses).
	LocalID string `json:"local_id"`
	PeerID  string `json:"peer_id"`
	// IKEVersion is 1 or 2.
	IKEVersion int `json:"ike_version"`
	// IKE and ESP are the proposals, most preferred first.
	IKE []Proposal `json:"ike"`
	ESP []Proposal `json:"esp"`
	// Lifetimes of the IKE (phase 1) and IPsec (phase 2) SAs.
	IKELifetimeSeconds int `json:"ike_lifetime_seconds"`
	ESPLifetimeSeconds int `json:"esp_lifetime_seconds"`
	// DPDSeconds is the interval of dead peer detection; DPDTimeoutSeconds
	// the silence after which a side declares the peer dead.
	DPDSeconds        int `json:"dpd_seconds"`
	DPDTimeoutSeconds int `json:"dpd_timeout_seconds"`
	// Inside addresses (profile aws): the /30, the provider's and ours.
	InsideCIDR     netip.Prefix   `json:"inside_cidr,omitzero"`
	InsideLocal    netip.Prefix   `json:"inside_local,omitzero"`
	InsidePeer     netip.Prefix   `json:"inside_peer,omitzero"`
	LocalPrefixes  []netip.Prefix `json:"local_prefixes"`
	RemotePrefixes []netip.Prefix `json:"remote_prefixes"`
	// ChildSAs are the selector pairs the fednet gateway proposes, from
	// the provider's view (local: the site's prefixes): one per prefix
	// pair for a policy-based provider (VPNaaS), else one route-based
	// pair whose remote selector is 0.0.0.0/0 (fednet's gateway filters).
	ChildSAs []ChildSA `json:"child_sas"`
	// PSKFile is where the pre-shared key lies on the fednet gateway: the
	// same key is entered on the provider's side.
	PSKFile string `json:"psk_file"`
	// Initiator: the fednet gateway starts the connection; the provider's
	// side may answer only.
	Initiator string `json:"initiator"`
	// NATTraversal: ESP travels in UDP 4500 (forced encapsulation).
	NATTraversal string `json:"nat_traversal"`
	// Warnings are the spec's warnings about this site.
	Warnings []string `json:"warnings,omitempty"`
	// Docs names the provider documentation the limits come from.
	Docs string `json:"docs"`
}

// Proposal is one proposal: strongSwan's notation and each algorithm in
// the provider's vocabulary ("" for none: no integrity with AEAD, no PRF
// in ESP).
type Proposal struct {
	StrongSwan string `json:"strongswan"`
	Encryption string `json:"encryption"`
	Integrity  string `json:"integrity,omitempty"`
	PRF        string `json:"prf,omitempty"`
	// DHGroup is the group in the provider's vocabulary (phase 2: PFS);
	// DHNumber its IANA number.
	DHGroup  string `json:"dh_group"`
	DHNumber int    `json:"dh_number"`
}

// ChildSA is one CHILD_SA's selectors from the provider's view.
type ChildSA struct {
	Local  []netip.Prefix `json:"local"`
	Remote []netip.Prefix `json:"remote"`
}

// dpdTimeoutFactor: the peer is declared dead after this many DPD
// intervals of silence (AWS wants 30 s or more).
const dpdTimeoutFactor = 4

// New returns the provider side of external site name of f (parsed by
// spec.Parse) under the planner's inputs in.
func New(f *spec.Federation, in plan.Inputs, name string) (Config, error) {
	s, ok := f.Site(name)
	if !ok {
		return Config{}, fmt.Errorf("no site %q in federation %s", name, f.Name)
	}
	x := s.External
	if x == nil {
		var ext []string
		for _, t := range f.Sites {
			if t.External != nil {
				ext = append(ext, t.Name)
			}
		}
		return Config{}, fmt.Errorf("site %s is not external (it has fednet gateways); external sites: %s", name, orNone(ext))
	}
	lim, _ := spec.ProfileLimitsOf(x.Profile)
	via, _, ok := f.Gateway(x.Via)
	if !ok {
		return Config{}, fmt.Errorf("site %s: via gateway %q is not in the spec", name, x.Via)
	}
	peer, err := netip.ParseAddrPort(via.Endpoint)
	if err != nil {
		return Config{}, fmt.Errorf("site %s: via gateway %s's endpoint %q is not address:port: %w", name, via.Name, via.Endpoint, err)
	}
	c := Config{
		Site: name, Profile: x.Profile, Provider: lim.Provider,
		LocalAddress: x.Endpoint, PeerAddress: peer.Addr().Unmap(), PeerGateway: via.Name,
		LocalID: x.Endpoint.String(), PeerID: peer.Addr().Unmap().String(),
		IKEVersion: x.IKEVersion, IKELifetimeSeconds: x.IKELifetimeSeconds, ESPLifetimeSeconds: x.ESPLifetimeSeconds,
		DPDSeconds: x.DPDSeconds, DPDTimeoutSeconds: max(dpdTimeoutFactor*x.DPDSeconds, 30),
		LocalPrefixes:  sorted(s.Prefixes),
		RemotePrefixes: plan.ExternalReach(f, in, name),
		PSKFile:        x.PSK.File,
		Initiator:      "fednet gateway " + via.Name + " initiates; the provider's side answers (and may initiate too)",
		NATTraversal:   "ESP in UDP 4500 (forced encapsulation); open UDP 500 and 4500 between the two addresses",
		Docs:           lim.Docs,
	}
	if len(c.RemotePrefixes) == 0 {
		return Config{}, fmt.Errorf("site %s shares no routed network with a site it can reach; add it to a network (networks[].sites) first", name)
	}
	for _, p := range x.IKE {
		c.IKE = append(c.IKE, proposal(p, lim.IKE))
	}
	for _, p := range x.ESP {
		c.ESP = append(c.ESP, proposal(p, lim.ESP))
	}
	if lim.ChildPerPair {
		for _, l := range c.LocalPrefixes {
			for _, r := range c.RemotePrefixes {
				c.ChildSAs = append(c.ChildSAs, ChildSA{Local: []netip.Prefix{l}, Remote: []netip.Prefix{r}})
			}
		}
	} else {
		// Route-based: any remote address in the selectors; the
		// provider routes RemotePrefixes into the tunnel and fednet's
		// gateway forwards only what the site's networks allow.
		c.ChildSAs = []ChildSA{{Local: c.LocalPrefixes, Remote: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}}}
	}
	if p := x.InsideCIDR; p.IsValid() {
		c.InsideCIDR = p
		c.InsideLocal = netip.PrefixFrom(p.Addr().Next(), p.Bits())
		c.InsidePeer = netip.PrefixFrom(p.Addr().Next().Next(), p.Bits())
	}
	prefix := fmt.Sprintf("sites[%d].", slices.IndexFunc(f.Sites, func(t spec.Site) bool { return t.Name == name }))
	for _, w := range f.Warnings() {
		if strings.HasPrefix(w, prefix) {
			c.Warnings = append(c.Warnings, w)
		}
	}
	return c, nil
}

// proposal splits a strongSwan proposal and names each algorithm as the
// provider does (table is the profile's, by class).
func proposal(p string, table map[spec.AlgClass]map[string]string) Proposal {
	out := Proposal{StrongSwan: p}
	for _, kw := range strings.Split(p, "-") {
		name := table[spec.Classify(kw)][kw]
		switch spec.Classify(kw) {
		case spec.ClassCipher:
			out.Encryption = name
		case spec.ClassIntegrity:
			out.Integrity = name
		case spec.ClassPRF:
			out.PRF = name
		case spec.ClassDH:
			out.DHGroup, out.DHNumber = name, spec.DHGroup(kw)
		}
	}
	return out
}

func sorted(ps []netip.Prefix) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.Masked())
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	return out
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
