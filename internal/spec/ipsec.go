package spec

import (
	"fmt"
	"slices"
	"strings"

	"github.com/fednet/fednet/internal/backend"
)

// IPsec holds the settings of the federation's links on backend ipsec
// (overlay.ipsec): IKEv2 with ESP in tunnel mode, authenticated with a
// pre-shared key that every gateway reads from the same path.
type IPsec struct {
	// PSK is where each gateway reads the pre-shared key of its IPsec
	// links; the key itself never enters the spec or a plan.
	PSK PSK `yaml:"psk" json:"psk"`
	// IKE lists the IKE (phase 1) proposals in strongSwan's notation, most
	// preferred first (default DefaultIKEProposals).
	IKE []string `yaml:"ike,omitempty" json:"ike,omitempty"`
	// ESP lists the ESP (phase 2) proposals, with a DH group for perfect
	// forward secrecy on rekeying (default DefaultESPProposals).
	ESP []string `yaml:"esp,omitempty" json:"esp,omitempty"`
	// DPDSeconds is the dead peer detection interval (default 10).
	DPDSeconds int `yaml:"dpdSeconds,omitempty" json:"dpdSeconds,omitempty"`
	// RekeySeconds is the CHILD_SA rekey time (default 3600); the IKE_SA
	// rekeys at four times it.
	RekeySeconds int `yaml:"rekeySeconds,omitempty" json:"rekeySeconds,omitempty"`
}

// PSK names a file holding a pre-shared key (its first line, at least 16
// bytes); the file is read where the key is used, never by the planner.
type PSK struct {
	File string `yaml:"file" json:"file"`
}

// Defaults of overlay.ipsec: AEAD ciphers only, Curve25519 or ECP-256.
var (
	DefaultIKEProposals = []string{"aes256gcm16-prfsha384-curve25519", "chacha20poly1305-prfsha256-curve25519", "aes256gcm16-prfsha384-ecp256"}
	DefaultESPProposals = []string{"aes256gcm16-curve25519", "chacha20poly1305-curve25519", "aes256gcm16-ecp256"}
)

// Default IPsec timers.
const (
	DefaultDPDSeconds   = 10
	DefaultRekeySeconds = 3600
)

// LinkBackend returns the tunnel backend of the link between sites a and b:
// ipsec when either is an external site, else the link's own
// (topology.links[].backend) or overlay.backend.
func (f *Federation) LinkBackend(a, b string) backend.Name {
	for _, n := range []string{a, b} {
		if s, ok := f.Site(n); ok && s.External != nil {
			return backend.IPsec
		}
	}
	if l := f.link(a, b); l != nil && l.Backend != "" {
		return l.Backend
	}
	if f.Overlay.Backend == "" {
		return backend.Default
	}
	return f.Overlay.Backend
}

// UsesBackend reports whether the overlay or any enabled link uses b.
func (f *Federation) UsesBackend(b backend.Name) bool {
	if f.Overlay.Backend == b {
		return true
	}
	for _, l := range f.Topology.Links {
		if l.Backend == b && !l.Disabled {
			return true
		}
	}
	return false
}

// ipsecDefaults fills overlay.ipsec's left-out fields.
func (c *checker) ipsecDefaults() {
	ip := c.f.Overlay.IPsec
	if ip == nil {
		return
	}
	if len(ip.IKE) == 0 {
		ip.IKE = slices.Clone(DefaultIKEProposals)
	}
	if len(ip.ESP) == 0 {
		ip.ESP = slices.Clone(DefaultESPProposals)
	}
	if ip.DPDSeconds == 0 {
		ip.DPDSeconds = DefaultDPDSeconds
	}
	if ip.RekeySeconds == 0 {
		ip.RekeySeconds = DefaultRekeySeconds
	}
}

// ipsec checks the per-link backends and overlay.ipsec.
func (c *checker) ipsec() {
	f := c.f
	for k, l := range f.Topology.Links {
		if l.Backend == "" {
			continue
		}
		if _, ok := backend.Lookup(l.Backend); !ok {
			c.add(fmt.Sprintf("topology.links[%d].backend", k), "%q is not a tunnel backend; want one of: %s (default: overlay.backend)", l.Backend, backend.List())
		}
	}
	ip := f.Overlay.IPsec
	if ip == nil {
		if f.UsesBackend(backend.IPsec) {
			c.add("overlay.ipsec", "links use backend ipsec but the spec has no overlay.ipsec; want at least overlay.ipsec.psk.file: /etc/fednet/ipsec.psk (the same pre-shared key file on every gateway)")
		}
		return
	}
	if !strings.HasPrefix(ip.PSK.File, "/") {
		c.add("overlay.ipsec.psk.file", "%q is not an absolute path; want the file holding the pre-shared key on every gateway, like /etc/fednet/ipsec.psk", ip.PSK.File)
	}
	for i, p := range ip.IKE {
		if err := CheckProposal(p, true, false); err != nil {
			c.add(fmt.Sprintf("overlay.ipsec.ike[%d]", i), "%v", err)
		}
	}
	for i, p := range ip.ESP {
		if err := CheckProposal(p, false, false); err != nil {
			c.add(fmt.Sprintf("overlay.ipsec.esp[%d]", i), "%v", err)
		}
	}
	if ip.DPDSeconds < 1 || ip.DPDSeconds > 3600 {
		c.add("overlay.ipsec.dpdSeconds", "%d is out of range; want 1..3600 (default %d)", ip.DPDSeconds, DefaultDPDSeconds)
	}
	if ip.RekeySeconds < 300 || ip.RekeySeconds > 86400 {
		c.add("overlay.ipsec.rekeySeconds", "%d is out of range; want 300..86400 (default %d)", ip.RekeySeconds, DefaultRekeySeconds)
	}
}

// Algorithm classes of strongSwan's proposal keywords.
var (
	aeadCiphers = []string{"aes128gcm16", "aes192gcm16", "aes256gcm16", "aes128gcm", "aes256gcm", "chacha20poly1305"}
	cbcCiphers  = []string{"aes128", "aes192", "aes256"}
	integrity   = []string{"sha256", "sha384", "sha512"}
	prfs        = []string{"prfsha256", "prfsha384", "prfsha512"}
	goodDH      = []string{"curve25519", "curve448", "ecp256", "ecp384", "ecp521", "modp2048", "modp3072", "modp4096", "modp6144", "modp8192"}
	// weak are refused unless a profile demands them (legacy).
	weakCiphers = []string{"3des", "des", "blowfish128", "cast128"}
	weakHash    = []string{"sha1", "md5", "sha", "prfsha1", "prfmd5"}
	weakDH      = []string{"modp768", "modp1024", "modp1536", "modp2048s256", "modp1024s160", "modp2048s224"}
)

// CheckProposal checks one proposal in strongSwan's notation
// ("aes256gcm16-prfsha384-curve25519"): every keyword known, a cipher, for
// CBC an integrity algorithm, a DH group (phase 1 always; phase 2 one is
// needed for PFS), and nothing weak (SHA-1, MD5, 3DES, MODP below 2048)
// unless legacy is true (a profile whose provider demands it).
func CheckProposal(p string, ike, legacy bool) error {
	if p == "" {
		return fmt.Errorf("the proposal is empty; want e.g. %s", example(ike))
	}
	var cipher, aead, integ, dh bool
	for _, kw := range strings.Split(p, "-") {
		switch {
		case slices.Contains(aeadCiphers, kw):
			cipher, aead = true, true
		case slices.Contains(cbcCiphers, kw):
			cipher = true
		case slices.Contains(integrity, kw), slices.Contains(prfs, kw):
			integ = integ || slices.Contains(integrity, kw)
		case slices.Contains(goodDH, kw):
			dh = true
		case slices.Contains(weakCiphers, kw), slices.Contains(weakHash, kw), slices.Contains(weakDH, kw):
			if !legacy {
				return fmt.Errorf("proposal %q uses %s, which is too weak (no SHA-1, MD5, 3DES or MODP below 2048); want e.g. %s", p, kw, example(ike))
			}
			switch {
			case slices.Contains(weakCiphers, kw):
				cipher = true
			case slices.Contains(weakHash, kw):
				integ = true
			default:
				dh = true
			}
		default:
			return fmt.Errorf("proposal %q: %q is not an algorithm fednet knows; want ciphers %s, integrity %s, DH groups %s",
				p, kw, strings.Join(append(slices.Clone(aeadCiphers), cbcCiphers...), ", "), strings.Join(integrity, ", "), strings.Join(goodDH, ", "))
		}
	}
	switch {
	case !cipher:
		return fmt.Errorf("proposal %q has no cipher; want e.g. %s", p, example(ike))
	case !aead && !integ:
		return fmt.Errorf("proposal %q has a CBC cipher without integrity; add sha256, sha384 or sha512", p)
	case !dh:
		return fmt.Errorf("proposal %q has no DH group; want curve25519 or ecp256 (for ESP: perfect forward secrecy on rekeying)", p)
	}
	return nil
}

func example(ike bool) string {
	if ike {
		return DefaultIKEProposals[0]
	}
	return DefaultESPProposals[0]
}
