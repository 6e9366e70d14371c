package spec

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// External makes a site an external site: one whose edge is a provider's
// managed VPN gateway (AWS Site-to-Site VPN, Azure VPN Gateway, GCP Cloud
// VPN, OpenStack VPNaaS) or a router speaking IKE, where no fednet agent
// runs. The site has no gateways of its own. One fednet gateway (Via)
// terminates an IPsec connection to Endpoint; the other gateways route
// the site's prefixes through it, and forward flows only as the site's
// networks allow. `fednet external config SITE` prints what to enter on
// the provider's side (docs/interop.md).
type External struct {
	// Profile is the provider's kind of VPN gateway; its limits
	// (ProfileLimitsOf) constrain the fields below.
	Profile Profile `yaml:"profile" json:"profile"`
	// Endpoint is the public address of the provider's VPN gateway.
	Endpoint netip.Addr `yaml:"endpoint" json:"endpoint"`
	// PSK is where the terminating gateway reads the pre-shared key of
	// this site's connection (the same key is entered on the provider's
	// side); the key never enters the spec or a plan.
	PSK PSK `yaml:"psk" json:"psk"`
	// Via is the fednet gateway that terminates the connection. Parse
	// defaults it to the first gateway with an endpoint (not behind NAT),
	// in spec order, of the first site in spec order that shares a routed
	// network with this one, or, when none does, of the first site in
	// spec order.
	Via string `yaml:"via,omitempty" json:"via,omitempty"`
	// IKEVersion is 1 or 2 (default: the profile's; ProfileLimits).
	IKEVersion int `yaml:"ikeVersion,omitempty" json:"ikeVersion,omitempty"`
	// IKE and ESP are the proposals in strongSwan's notation, most
	// preferred first (default: the profile's). Each keyword must be one
	// the provider offers; profiles azure and gcp take exactly one each.
	IKE []string `yaml:"ike,omitempty" json:"ike,omitempty"`
	ESP []string `yaml:"esp,omitempty" json:"esp,omitempty"`
	// IKELifetimeSeconds is the IKE (phase 1) SA's lifetime and
	// ESPLifetimeSeconds the CHILD_SA's (phase 2), within the profile's
	// range (default: the profile's).
	IKELifetimeSeconds int `yaml:"ikeLifetimeSeconds,omitempty" json:"ikeLifetimeSeconds,omitempty"`
	ESPLifetimeSeconds int `yaml:"espLifetimeSeconds,omitempty" json:"espLifetimeSeconds,omitempty"`
	// DPDSeconds is the dead peer detection interval (default 10).
	DPDSeconds int `yaml:"dpdSeconds,omitempty" json:"dpdSeconds,omitempty"`
	// InsideCIDR is, for profile aws only, the tunnel's inside /30 in
	// 169.254.0.0/16 (AWS "Inside IPv4 CIDR"): the first usable address
	// is AWS's side, the second ours. Parse defaults the k-th aws site to
	// 169.254.10.(4k)/30.
	InsideCIDR netip.Prefix `yaml:"insideCIDR,omitempty" json:"insideCIDR,omitzero"`
}

// Profile names a provider's kind of VPN gateway.
type Profile string

// Profiles.
const (
	ProfileAWS       Profile = "aws"
	ProfileAzure     Profile = "azure"
	ProfileGCP       Profile = "gcp"
	ProfileOpenStack Profile = "openstack-vpnaas"
	ProfileGeneric   Profile = "generic-ikev2"
)

func (p Profile) String() string { return string(p) }

// Profiles lists every profile, sorted.
func Profiles() []Profile {
	return []Profile{ProfileAWS, ProfileAzure, ProfileGCP, ProfileGeneric, ProfileOpenStack}
}

// Algorithm classes of a proposal keyword.
type AlgClass int

// Algorithm classes.
const (
	ClassCipher AlgClass = iota + 1
	ClassIntegrity
	ClassPRF
	ClassDH
)

func (c AlgClass) String() string {
	switch c {
	case ClassCipher:
		return "encryption"
	case ClassIntegrity:
		return "integrity"
	case ClassPRF:
		return "PRF"
	case ClassDH:
		return "DH group"
	}
	return fmt.Sprintf("AlgClass(%d)", int(c))
}

// dhGroups are the IANA numbers of strongSwan's DH keywords.
var dhGroups = map[string]int{
	"modp768": 1, "modp1024": 2, "modp1536": 5, "modp2048": 14, "modp3072": 15, "modp4096": 16,
	"modp6144": 17, "modp8192": 18, "ecp256": 19, "ecp384": 20, "ecp521": 21, "modp1024s160": 22,
	"modp2048s224": 23, "modp2048s256": 24, "curve25519": 31, "curve448": 32,
}

// DHGroup returns the IANA number of a DH keyword (modp2048: 14), 0 for
// none.
func DHGroup(kw string) int { return dhGroups[kw] }

// Classify returns the class of a strongSwan proposal keyword, 0 for one
// fednet does not know.
func Classify(kw string) AlgClass {
	switch {
	case slices.Contains(aeadCiphers, kw), slices.Contains(cbcCiphers, kw), slices.Contains(weakCiphers, kw):
		return ClassCipher
	case strings.HasPrefix(kw, "prf"):
		if slices.Contains(prfs, kw) || slices.Contains(weakHash, kw) {
			return ClassPRF
		}
	case slices.Contains(integrity, kw), slices.Contains(weakHash, kw):
		return ClassIntegrity
	case dhGroups[kw] != 0:
		return ClassDH
	}
	return 0
}

// ProfileLimits are what a provider's VPN gateway accepts, and the
// defaults fednet uses for it. Algorithm tables map strongSwan's keyword
// to the provider's own name for it (what `fednet external config`
// prints); a keyword that is not in a table is refused.
type ProfileLimits struct {
	Profile Profile
	// Provider is the product, for messages ("AWS Site-to-Site VPN").
	Provider string
	// IKEVersions are the IKE versions accepted, the default first.
	IKEVersions []int
	// IKE and ESP map each accepted keyword, by class, to the provider's
	// name (phase 1 and phase 2).
	IKE, ESP map[AlgClass]map[string]string
	// DefaultIKE and DefaultESP are the proposals used when the spec
	// gives none.
	DefaultIKE, DefaultESP []string
	// OneProposal: exactly one IKE and one ESP proposal (Azure's custom
	// policy holds one of each; GCP asks for one cipher per role).
	OneProposal bool
	// Legacy allows SHA-1 and MODP below 2048 (with a warning): the
	// provider's defaults need them.
	Legacy bool
	// IKELifetime and ESPLifetime are the accepted ranges in seconds
	// [min, max] and the default; min == max is a fixed lifetime.
	IKELifetime, ESPLifetime [3]int
	// ChildPerPair: one CHILD_SA per local × remote prefix pair (the
	// provider is policy-based, IKEv1 negotiates one selector pair per
	// SA); else one CHILD_SA with every prefix in its selectors.
	ChildPerPair bool
	// InsideCIDR: the tunnel has inside addresses (AWS).
	InsideCIDR bool
	// PSK describes the pre-shared keys the provider accepts; nil for any.
	PSK func(key string) error
	// Docs is where these limits come from.
	Docs string
}

var (
	awsCipher = map[string]string{"aes128": "AES128", "aes256": "AES256", "aes128gcm16": "AES128-GCM-16", "aes256gcm16": "AES256-GCM-16"}
	awsInteg  = map[string]string{"sha1": "SHA1", "sha256": "SHA2-256", "sha384": "SHA2-384", "sha512": "SHA2-512"}
	awsPRF    = map[string]string{"prfsha1": "SHA1", "prfsha256": "SHA2-256", "prfsha384": "SHA2-384", "prfsha512": "SHA2-512"}
)

// dhNames maps DH keywords to "name" (or a number) via f, for the groups
// listed.
func dhNames(f func(kw string, n int) string, groups ...int) map[string]string {
	out := map[string]string{}
	for kw, n := range dhGroups {
		if slices.Contains(groups, n) {
			out[kw] = f(kw, n)
		}
	}
	return out
}

func dhNumber(_ string, n int) string { return fmt.Sprint(n) }

var profileLimits = map[Profile]ProfileLimits{
	ProfileAWS: {
		Profile: ProfileAWS, Provider: "AWS Site-to-Site VPN", IKEVersions: []int{2, 1},
		IKE: map[AlgClass]map[string]string{ClassCipher: awsCipher, ClassIntegrity: awsInteg, ClassPRF: awsPRF,
			ClassDH: dhNames(dhNumber, 2, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24)},
		ESP: map[AlgClass]map[string]string{ClassCipher: awsCipher, ClassIntegrity: awsInteg,
			ClassDH: dhNames(dhNumber, 2, 5, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24)},
		DefaultIKE: []string{"aes256gcm16-prfsha384-ecp384"}, DefaultESP: []string{"aes256gcm16-ecp384"},
		IKELifetime: [3]int{900, 28800, 28800}, ESPLifetime: [3]int{900, 3600, 3600},
		InsideCIDR: true, PSK: awsPSK,
		Docs: "AWS Site-to-Site VPN tunnel options (VpnTunnelOptionsSpecification)",
	},
	ProfileAzure: {
		Profile: ProfileAzure, Provider: "Azure VPN Gateway (custom IPsec/IKE policy)", IKEVersions: []int{2, 1},
		IKE: map[AlgClass]map[string]string{
			ClassCipher:    {"aes256gcm16": "GCMAES256", "aes128gcm16": "GCMAES128", "aes256": "AES256", "aes192": "AES192", "aes128": "AES128"},
			ClassIntegrity: {"sha256": "SHA256", "sha384": "SHA384"},
			ClassPRF:       {"prfsha256": "SHA256", "prfsha384": "SHA384"},
			ClassDH:        {"modp2048s256": "DHGroup24", "ecp384": "ECP384", "ecp256": "ECP256", "modp2048": "DHGroup14"},
		},
		ESP: map[AlgClass]map[string]string{
			ClassCipher:    {"aes256gcm16": "GCMAES256", "aes192gcm16": "GCMAES192", "aes128gcm16": "GCMAES128", "aes256": "AES256", "aes192": "AES192", "aes128": "AES128"},
			ClassIntegrity: {"sha256": "SHA256"},
			ClassDH:        {"modp2048s256": "PFS24", "ecp384": "ECP384", "ecp256": "ECP256", "modp2048": "PFS2048"},
		},
		DefaultIKE: []string{"aes256gcm16-prfsha384-ecp384"}, DefaultESP: []string{"aes256gcm16-ecp384"},
		OneProposal: true,
		// Main mode SA lifetime is fixed at 28800 s; quick mode 300 s and up.
		IKELifetime: [3]int{28800, 28800, 28800}, ESPLifetime: [3]int{300, 172799, 27000},
		Docs: "Azure VPN Gateway: custom IPsec/IKE policy (vpn-gateway-about-compliance-crypto)",
	},
	ProfileGCP: {
		Profile: ProfileGCP, Provider: "Google Cloud VPN", IKEVersions: []int{2, 1},
		IKE: map[AlgClass]map[string]string{
			ClassCipher:    {"aes128": "AES-CBC-128", "aes192": "AES-CBC-192", "aes256": "AES-CBC-256", "aes128gcm16": "AES-GCM-16-128", "aes256gcm16": "AES-GCM-16-256"},
			ClassIntegrity: {"sha256": "HMAC-SHA2-256-128", "sha384": "HMAC-SHA2-384-192", "sha512": "HMAC-SHA2-512-256"},
			ClassPRF:       {"prfsha256": "PRF-HMAC-SHA2-256", "prfsha384": "PRF-HMAC-SHA2-384", "prfsha512": "PRF-HMAC-SHA2-512"},
			ClassDH:        dhNames(gcpDH, 14, 15, 16, 18, 19, 20, 21, 31),
		},
		ESP: map[AlgClass]map[string]string{
			ClassCipher:    {"aes128": "AES-CBC-128", "aes192": "AES-CBC-192", "aes256": "AES-CBC-256", "aes128gcm16": "AES-GCM-16-128", "aes256gcm16": "AES-GCM-16-256"},
			ClassIntegrity: {"sha256": "HMAC-SHA2-256-128", "sha384": "HMAC-SHA2-384-192", "sha512": "HMAC-SHA2-512-256"},
			ClassDH:        dhNames(gcpDH, 14, 15, 16, 18, 19, 20, 21, 31),
		},
		DefaultIKE: []string{"aes256gcm16-prfsha256-curve25519"}, DefaultESP: []string{"aes256gcm16-curve25519"},
		OneProposal: true,
		// Cloud VPN's lifetimes are fixed: phase 1 36000 s, phase 2 10800 s.
		IKELifetime: [3]int{36000, 36000, 36000}, ESPLifetime: [3]int{10800, 10800, 10800},
		Docs: "Google Cloud VPN: supported IKE ciphers",
	},
	ProfileOpenStack: {
		Profile: ProfileOpenStack, Provider: "OpenStack Neutron VPNaaS", IKEVersions: []int{1, 2},
		IKE: map[AlgClass]map[string]string{
			ClassCipher:    {"aes128": "aes-128", "aes192": "aes-192", "aes256": "aes-256"},
			ClassIntegrity: {"sha1": "sha1", "sha256": "sha256", "sha384": "sha384", "sha512": "sha512"},
			ClassDH:        dhNames(func(_ string, n int) string { return fmt.Sprintf("group%d", n) }, 2, 5, 14),
		},
		ESP: map[AlgClass]map[string]string{
			ClassCipher:    {"aes128": "aes-128", "aes192": "aes-192", "aes256": "aes-256"},
			ClassIntegrity: {"sha1": "sha1", "sha256": "sha256", "sha384": "sha384", "sha512": "sha512"},
			ClassDH:        dhNames(func(_ string, n int) string { return fmt.Sprintf("group%d", n) }, 2, 5, 14),
		},
		// VPNaaS's own defaults (ike and ipsec policy create without
		// options): IKEv1, aes-128, sha1, group5; seed 003 measures them.
		DefaultIKE: []string{"aes128-sha1-modp1536"}, DefaultESP: []string{"aes128-sha1-modp1536"},
		Legacy:      true,
		IKELifetime: [3]int{60, 86400, 3600}, ESPLifetime: [3]int{60, 86400, 3600},
		ChildPerPair: true,
		Docs:         "OpenStack Neutron VPNaaS API (ikepolicies, ipsecpolicies); seed 003",
	},
	ProfileGeneric: {
		Profile: ProfileGeneric, Provider: "an IKEv2 router", IKEVersions: []int{2},
		IKE: map[AlgClass]map[string]string{ClassCipher: identity(aeadCiphers, cbcCiphers), ClassIntegrity: identity(integrity),
			ClassPRF: identity(prfs), ClassDH: identity(goodDH)},
		ESP: map[AlgClass]map[string]string{ClassCipher: identity(aeadCiphers, cbcCiphers), ClassIntegrity: identity(integrity),
			ClassDH: identity(goodDH)},
		DefaultIKE: DefaultIKEProposals, DefaultESP: DefaultESPProposals,
		IKELifetime: [3]int{1200, 86400, 4 * DefaultRekeySeconds}, ESPLifetime: [3]int{300, 86400, DefaultRekeySeconds},
		Docs: "fednet's own defaults (overlay.ipsec)",
	},
}

func gcpDH(kw string, n int) string {
	name := map[int]string{14: "MODP-2048", 15: "MODP-3072", 16: "MODP-4096", 18: "MODP-8192", 19: "ECP-256", 20: "ECP-384", 21: "ECP-521", 31: "Curve25519"}[n]
	return fmt.Sprintf("Group %d (%s)", n, name)
}

func identity(lists ...[]string) map[string]string {
	out := map[string]string{}
	for _, l := range lists {
		for _, kw := range l {
			out[kw] = kw
		}
	}
	return out
}

// ProfileLimitsOf returns the limits of profile p.
func ProfileLimitsOf(p Profile) (ProfileLimits, bool) {
	l, ok := profileLimits[p]
	return l, ok
}

// awsPSK is AWS's rule for a tunnel's pre-shared key.
func awsPSK(key string) error {
	if len(key) < 8 || len(key) > 64 {
		return fmt.Errorf("the key is %d characters; AWS takes 8 to 64", len(key))
	}
	if key[0] == '0' {
		return fmt.Errorf("the key starts with 0, which AWS refuses")
	}
	for _, r := range key {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_') {
			return fmt.Errorf("the key holds %q; AWS takes only letters, digits, '.' and '_'", r)
		}
	}
	return nil
}

// AWS's reserved inside CIDRs.
var awsReservedInside = []netip.Prefix{
	netip.MustParsePrefix("169.254.0.0/30"), netip.MustParsePrefix("169.254.1.0/30"), netip.MustParsePrefix("169.254.2.0/30"),
	netip.MustParsePrefix("169.254.3.0/30"), netip.MustParsePrefix("169.254.4.0/30"), netip.MustParsePrefix("169.254.5.0/30"),
	netip.MustParsePrefix("169.254.169.252/30"),
}

var linkLocal = netip.MustParsePrefix("169.254.0.0/16")

// IsExternal reports whether the site is an external site (no agent).
func (s *Site) IsExternal() bool { return s.External != nil }

// ExternalVias maps every external site to the site of its via gateway
// ("" when via names no gateway); nil when there is no external site.
func (f *Federation) ExternalVias() map[string]string { return f.externalVias() }

func (f *Federation) externalVias() map[string]string {
	var out map[string]string
	for i := range f.Sites {
		s := &f.Sites[i]
		if s.External == nil {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		_, vs, ok := f.Gateway(s.External.Via)
		if ok {
			out[s.Name] = vs.Name
		} else {
			out[s.Name] = ""
		}
	}
	return out
}

// ExternalAllows reports whether sites a and b may have a link as far as
// external sites go (vias from ExternalVias): an external site's only
// link is to its via gateway's site.
func ExternalAllows(vias map[string]string, a, b string) bool { return externalAllows(vias, a, b) }

func externalAllows(vias map[string]string, a, b string) bool {
	if v, ok := vias[a]; ok {
		return v == b && v != ""
	}
	if v, ok := vias[b]; ok {
		return v == a && v != ""
	}
	return true
}

// Warnings are what Parse accepted but an operator should hear: legacy
// algorithms a profile's provider needs (OpenStack VPNaaS defaults to
// IKEv1, SHA-1 and MODP-1536). Each names the field.
func (f *Federation) Warnings() []string {
	var out []string
	for i := range f.Sites {
		x := f.Sites[i].External
		if x == nil {
			continue
		}
		path := fmt.Sprintf("sites[%d].external", i)
		if x.IKEVersion == 1 {
			out = append(out, fmt.Sprintf("%s.ikeVersion: IKEv1 (profile %s's default); prefer ikeVersion: 2 where the provider allows it", path, x.Profile))
		}
		for k, list := range map[string][]string{"ike": x.IKE, "esp": x.ESP} {
			for j, p := range list {
				if weak := weakKeywords(p); len(weak) > 0 {
					out = append(out, fmt.Sprintf("%s.%s[%d]: %s uses %s, allowed only because profile %s needs it; prefer e.g. aes256-sha256-modp2048",
						path, k, j, p, strings.Join(weak, ", "), x.Profile))
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

func weakKeywords(p string) []string {
	var out []string
	for _, kw := range strings.Split(p, "-") {
		if slices.Contains(weakCiphers, kw) || slices.Contains(weakHash, kw) || slices.Contains(weakDH, kw) {
			out = append(out, kw)
		}
	}
	return out
}

// externalDefaults fills the external sites' left-out fields (after the
// numbering plan: via needs nothing of it, inside CIDRs count aws sites).
func (c *checker) externalDefaults() {
	f := c.f
	awsIndex := 0
	for i := range f.Sites {
		s := &f.Sites[i]
		x := s.External
		if x == nil {
			continue
		}
		lim, ok := profileLimits[x.Profile]
		if !ok {
			continue
		}
		if x.IKEVersion == 0 {
			x.IKEVersion = lim.IKEVersions[0]
		}
		if len(x.IKE) == 0 {
			x.IKE = slices.Clone(lim.DefaultIKE)
		}
		if len(x.ESP) == 0 {
			x.ESP = slices.Clone(lim.DefaultESP)
		}
		if x.IKELifetimeSeconds == 0 {
			x.IKELifetimeSeconds = lim.IKELifetime[2]
		}
		if x.ESPLifetimeSeconds == 0 {
			x.ESPLifetimeSeconds = lim.ESPLifetime[2]
		}
		if x.DPDSeconds == 0 {
			x.DPDSeconds = DefaultDPDSeconds
		}
		if lim.InsideCIDR {
			if !x.InsideCIDR.IsValid() && awsIndex < 64 {
				x.InsideCIDR = netip.PrefixFrom(netip.AddrFrom4([4]byte{169, 254, 10, byte(4 * awsIndex)}), 30)
			}
			awsIndex++
		}
		if x.Via == "" {
			x.Via = c.defaultVia(s)
		}
	}
}

// defaultVia is the deterministic choice of an external site's
// terminating gateway (see External.Via).
func (c *checker) defaultVia(ext *Site) string {
	f := c.f
	shares := func(s string) bool {
		for _, n := range f.Networks {
			if n.Mode == Routed && slices.Contains(n.Sites, s) && slices.Contains(n.Sites, ext.Name) {
				return true
			}
		}
		return false
	}
	pick := func(need bool) string {
		for i := range f.Sites {
			s := &f.Sites[i]
			if s.External != nil || need && !shares(s.Name) {
				continue
			}
			for _, g := range s.Gateways {
				if g.Endpoint != "" && !g.BehindNAT {
					return g.Name
				}
			}
		}
		return ""
	}
	if v := pick(true); v != "" {
		return v
	}
	return pick(false)
}

// externals checks every external site.
func (c *checker) externals() {
	f := c.f
	endpoints := map[netip.Addr]string{}
	for i := range f.Sites {
		for _, g := range f.Sites[i].Gateways {
			if h := endpointHostAddr(g.Endpoint); h.IsValid() {
				endpoints[h] = fmt.Sprintf("gateway %s's endpoint", g.Name)
			}
		}
	}
	insides := map[netip.Prefix]string{}
	for i := range f.Sites {
		s := &f.Sites[i]
		x := s.External
		path := fmt.Sprintf("sites[%d].external", i)
		if x == nil || c.ps.isBad(path) {
			continue
		}
		if len(s.Gateways) > 0 {
			c.add(fmt.Sprintf("sites[%d].gateways", i), "site %s is external (its VPN gateway is the provider's): it has no fednet gateways; remove gateways, or remove external", s.Name)
		}
		lim, ok := profileLimits[x.Profile]
		if !ok {
			c.add(path+".profile", "%q is not a profile; want one of: %s", x.Profile, joinProfiles())
			continue
		}
		switch {
		case !x.Endpoint.IsValid():
			c.add(path+".endpoint", "site %s has no endpoint; want the public address of the provider's VPN gateway, like endpoint: 198.51.100.77", s.Name)
		case x.Endpoint.IsUnspecified() || x.Endpoint.IsMulticast() || x.Endpoint.IsLoopback():
			c.add(path+".endpoint", "%s cannot be a VPN gateway's address; want its public unicast address", x.Endpoint)
		case f.Overlay.Supernet.Contains(x.Endpoint) || f.Overlay.Transit.Contains(x.Endpoint):
			c.add(path+".endpoint", "%s lies inside overlay.supernet or overlay.transit; want the provider gateway's public address, outside the overlay", x.Endpoint)
		default:
			if other, dup := endpoints[x.Endpoint]; dup {
				c.add(path+".endpoint", "%s is also %s; each external site has its own VPN gateway address", x.Endpoint, other)
			}
			endpoints[x.Endpoint] = "site " + s.Name + "'s endpoint"
		}
		if !strings.HasPrefix(x.PSK.File, "/") {
			c.add(path+".psk.file", "%q is not an absolute path; want the file holding this site's pre-shared key on the terminating gateway, like /etc/fednet/%s.psk", x.PSK.File, s.Name)
		}
		c.externalVia(i, path)
		if !slices.Contains(lim.IKEVersions, x.IKEVersion) {
			c.add(path+".ikeVersion", "%d is not an IKE version %s accepts; want %s", x.IKEVersion, lim.Provider, joinInts(lim.IKEVersions))
		}
		c.externalProposals(path+".ike", x.IKE, lim, true)
		c.externalProposals(path+".esp", x.ESP, lim, false)
		if r := lim.IKELifetime; x.IKELifetimeSeconds < r[0] || x.IKELifetimeSeconds > r[1] {
			c.add(path+".ikeLifetimeSeconds", "%d is outside what %s accepts for phase 1: %s", x.IKELifetimeSeconds, lim.Provider, rangeText(r))
		}
		if r := lim.ESPLifetime; x.ESPLifetimeSeconds < r[0] || x.ESPLifetimeSeconds > r[1] {
			c.add(path+".espLifetimeSeconds", "%d is outside what %s accepts for phase 2: %s", x.ESPLifetimeSeconds, lim.Provider, rangeText(r))
		}
		if x.DPDSeconds < 1 || x.DPDSeconds > 3600 {
			c.add(path+".dpdSeconds", "%d is out of range; want 1..3600 (default %d)", x.DPDSeconds, DefaultDPDSeconds)
		}
		c.insideCIDR(path+".insideCIDR", s.Name, x, lim, insides)
		for n := range f.Networks {
			if f.Networks[n].Mode == Bridged && slices.Contains(f.Networks[n].Sites, s.Name) {
				c.add(fmt.Sprintf("networks[%d].sites", n), "site %s is external: IPsec to a provider's gateway carries routed traffic only; take it out of bridged network %s", s.Name, f.Networks[n].Name)
			}
		}
		for k, l := range f.Topology.Links {
			if slices.Contains(l.Between, s.Name) {
				c.add(fmt.Sprintf("topology.links[%d]", k), "site %s is external: its only link is the IPsec connection to its via gateway (sites[%d].external.via); remove this entry", s.Name, i)
			}
		}
	}
}

func (c *checker) externalVia(i int, path string) {
	f := c.f
	x := f.Sites[i].External
	if x.Via == "" {
		c.add(path+".via", "no fednet gateway can terminate site %s's connection: none has a public endpoint; give one an endpoint, or set via", f.Sites[i].Name)
		return
	}
	g, gs, ok := f.Gateway(x.Via)
	switch {
	case !ok:
		c.add(path+".via", "unknown gateway %q; want the fednet gateway that terminates this site's IPsec connection", x.Via)
	case gs.External != nil:
		c.add(path+".via", "%q belongs to external site %s; want a fednet gateway", x.Via, gs.Name)
	case g.Endpoint == "" || g.BehindNAT:
		c.add(path+".via", "gateway %s has no public endpoint; the provider's gateway must reach it (UDP 500 and 4500): pick a gateway with an endpoint", x.Via)
	case !endpointHostAddr(g.Endpoint).IsValid():
		c.add(path+".via", "gateway %s's endpoint %q is not an IP address; providers want the peer's address (customer gateway IP): give the gateway an IP endpoint", x.Via, g.Endpoint)
	}
}

// externalProposals checks a profile's IKE or ESP proposals.
func (c *checker) externalProposals(path string, list []string, lim ProfileLimits, ike bool) {
	table := lim.ESP
	if ike {
		table = lim.IKE
	}
	if lim.OneProposal && len(list) != 1 {
		c.add(path, "%d proposals; %s takes exactly one per role (one encryption, integrity and DH group): list one", len(list), lim.Provider)
	}
	for j, p := range list {
		ppath := fmt.Sprintf("%s[%d]", path, j)
		if err := CheckProposal(p, ike, lim.Legacy); err != nil {
			c.add(ppath, "%v", err)
			continue
		}
		for _, kw := range strings.Split(p, "-") {
			cl := Classify(kw)
			if _, ok := table[cl][kw]; !ok {
				c.add(ppath, "%s: %s %s is not one %s offers; want one of: %s", p, cl, kw, lim.Provider, strings.Join(sortedKeys(table[cl]), ", "))
				break
			}
		}
	}
}

func (c *checker) insideCIDR(path, site string, x *External, lim ProfileLimits, seen map[netip.Prefix]string) {
	p := x.InsideCIDR
	if !lim.InsideCIDR {
		if p.IsValid() {
			c.add(path, "profile %s has no inside addresses; remove insideCIDR", x.Profile)
		}
		return
	}
	switch {
	case !p.IsValid():
		c.add(path, "no inside CIDR left; set insideCIDR to a /30 in 169.254.0.0/16")
	case p.Bits() != 30 || !linkLocal.Contains(p.Addr()) || p.Masked() != p:
		c.add(path, "%s: AWS wants a /30 CIDR block from 169.254.0.0/16 (like 169.254.10.0/30)", p)
	case slices.Contains(awsReservedInside, p):
		c.add(path, "%s is reserved by AWS (169.254.0.0/30 to 169.254.5.0/30 and 169.254.169.252/30); pick another /30", p)
	default:
		if other, dup := seen[p]; dup {
			c.add(path, "%s is also site %s's inside CIDR; AWS wants them unique per virtual private gateway", p, other)
		}
		seen[p] = site
	}
}

func joinProfiles() string {
	var s []string
	for _, p := range Profiles() {
		s = append(s, string(p))
	}
	return strings.Join(s, ", ")
}

func joinInts(v []int) string {
	var s []string
	for _, n := range v {
		s = append(s, fmt.Sprint(n))
	}
	return strings.Join(s, " or ")
}

func rangeText(r [3]int) string {
	if r[0] == r[1] {
		return fmt.Sprintf("exactly %d (fixed by the provider)", r[0])
	}
	return fmt.Sprintf("%d..%d (default %d)", r[0], r[1], r[2])
}

// endpointHostAddr is the address of a host:port endpoint, invalid when
// the host is a name.
func endpointHostAddr(ep string) netip.Addr {
	if ap, err := netip.ParseAddrPort(ep); err == nil {
		return ap.Addr().Unmap()
	}
	return netip.Addr{}
}
