package demo

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/fednet/fednet/internal/external"
	"github.com/fednet/fednet/internal/spec"
)

// SwanctlConf translates what `fednet external config SITE --format json`
// printed into the swanctl.conf of a standalone strongSwan playing the
// provider's VPN gateway, as an operator would type it into the
// provider's console: from the provider's vocabulary (encryption,
// integrity, PRF and DH names as that provider spells them), not from
// strongSwan's notation, so that a field the JSON lacks or misnames
// fails here. psk is the key the operator pastes (the contents of the
// file the JSON names); a key the provider refuses is an error.
func SwanctlConf(c external.Config, psk string) (string, error) {
	lim, ok := spec.ProfileLimitsOf(c.Profile)
	if !ok {
		return "", fmt.Errorf("profile %q: not one fednet knows", c.Profile)
	}
	if lim.PSK != nil {
		if err := lim.PSK(psk); err != nil {
			return "", fmt.Errorf("%s refuses the pre-shared key in %s: %w", lim.Provider, c.PSKFile, err)
		}
	}
	ike, err := proposals(c.IKE, lim.IKE, true)
	if err != nil {
		return "", fmt.Errorf("ike: %w", err)
	}
	esp, err := proposals(c.ESP, lim.ESP, false)
	if err != nil {
		return "", fmt.Errorf("esp: %w", err)
	}
	switch {
	case !c.LocalAddress.IsValid() || !c.PeerAddress.IsValid():
		return "", fmt.Errorf("the addresses are missing (local %s, peer %s)", c.LocalAddress, c.PeerAddress)
	case c.IKEVersion != 1 && c.IKEVersion != 2:
		return "", fmt.Errorf("ike_version %d", c.IKEVersion)
	case len(c.ChildSAs) == 0:
		return "", fmt.Errorf("no child_sas")
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# %s for external site %s, from fednet external config --format json\n", c.Provider, c.Site)
	b.WriteString("connections {\n  fednet {\n")
	fmt.Fprintf(&b, "    version = %d\n    local_addrs = %s\n    remote_addrs = %s\n", c.IKEVersion, c.LocalAddress, c.PeerAddress)
	fmt.Fprintf(&b, "    proposals = %s\n    encap = yes\n    mobike = no\n", ike)
	fmt.Fprintf(&b, "    dpd_delay = %ds\n    rekey_time = %ds\n", c.DPDSeconds, c.IKELifetimeSeconds)
	fmt.Fprintf(&b, "    local {\n      auth = psk\n      id = %s\n    }\n    remote {\n      auth = psk\n      id = %s\n    }\n", c.LocalID, c.PeerID)
	b.WriteString("    children {\n")
	for i, ch := range c.ChildSAs {
		fmt.Fprintf(&b, "      site%d {\n        local_ts = %s\n        remote_ts = %s\n", i, prefixList(ch.Local), prefixList(ch.Remote))
		fmt.Fprintf(&b, "        esp_proposals = %s\n        mode = tunnel\n        rekey_time = %ds\n        dpd_action = clear\n        start_action = none\n      }\n", esp, c.ESPLifetimeSeconds)
	}
	b.WriteString("    }\n  }\n}\n")
	fmt.Fprintf(&b, "secrets {\n  ike-fednet {\n    id-provider = %s\n    id-fednet = %s\n    secret = \"%s\"\n  }\n}\n", c.LocalID, c.PeerID, psk)
	return b.String(), nil
}

// proposals turns the JSON's proposals, in the provider's vocabulary,
// back into strongSwan's notation through the profile's tables.
func proposals(ps []external.Proposal, table map[spec.AlgClass]map[string]string, ike bool) (string, error) {
	if len(ps) == 0 {
		return "", fmt.Errorf("no proposal")
	}
	var out []string
	for _, p := range ps {
		var kws []string
		for _, part := range []struct {
			class spec.AlgClass
			name  string
		}{{spec.ClassCipher, p.Encryption}, {spec.ClassIntegrity, p.Integrity}, {spec.ClassPRF, p.PRF}, {spec.ClassDH, p.DHGroup}} {
			if part.name == "" {
				if part.class == spec.ClassCipher || part.class == spec.ClassDH {
					return "", fmt.Errorf("a proposal has no %s", part.class)
				}
				continue
			}
			kw, ok := keyword(table[part.class], part.name)
			if !ok {
				return "", fmt.Errorf("%s %q is not a name the provider uses", part.class, part.name)
			}
			kws = append(kws, kw)
		}
		if ike && p.PRF == "" && p.Integrity == "" {
			return "", fmt.Errorf("an IKE proposal has neither integrity nor PRF")
		}
		out = append(out, strings.Join(kws, "-"))
	}
	return strings.Join(out, ","), nil
}

// keyword finds the strongSwan keyword the provider calls name (the
// first in sorted order when several share it).
func keyword(table map[string]string, name string) (string, bool) {
	best := ""
	for kw, n := range table {
		if n == name && (best == "" || kw < best) {
			best = kw
		}
	}
	return best, best != ""
}

func prefixList(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}
