package spec

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

// externalSpec has one external site x; EXT is replaced by the lines of
// its external block (indented 6).
const externalSpec = `apiVersion: fednet/v1
kind: Federation
name: x
sites:
  - name: a
    provider: aws
    gateways: [{name: a-gw, endpoint: "198.51.100.10:51820"}]
  - name: b
    provider: azure
    gateways: [{name: b-gw, endpoint: "203.0.113.20:51820"}]
  - name: x
    provider: onprem
    external:
EXT
networks:
  - {name: apps, id: 100, mode: routed, sites: [a, b, x]}
`

func externalYAML(lines ...string) string {
	var b strings.Builder
	for _, l := range lines {
		b.WriteString("      " + l + "\n")
	}
	return strings.Replace(externalSpec, "EXT\n", b.String(), 1)
}

// extBlock is a valid external block of profile p.
func extBlock(p string, more ...string) []string {
	return append([]string{"profile: " + p, "endpoint: 198.51.100.77", "psk: {file: /etc/fednet/x.psk}"}, more...)
}

func TestExternalValid(t *testing.T) {
	for _, p := range Profiles() {
		f, err := Parse([]byte(externalYAML(extBlock(string(p))...)))
		if err != nil {
			t.Fatalf("profile %s with its defaults: %v", p, err)
		}
		s, _ := f.Site("x")
		x := s.External
		lim, _ := ProfileLimitsOf(p)
		if x.Via != "a-gw" || x.IKEVersion != lim.IKEVersions[0] || len(x.IKE) == 0 || len(x.ESP) == 0 ||
			x.IKELifetimeSeconds != lim.IKELifetime[2] || x.ESPLifetimeSeconds != lim.ESPLifetime[2] {
			t.Errorf("profile %s: defaults not filled: %+v", p, x)
		}
		if p == ProfileAWS && x.InsideCIDR != netip.MustParsePrefix("169.254.10.0/30") {
			t.Errorf("aws inside CIDR %s, want 169.254.10.0/30", x.InsideCIDR)
		}
		if got := f.LinkBackend("a", "x"); got != "ipsec" {
			t.Errorf("profile %s: link a-x on %s, want ipsec", p, got)
		}
		if f.LinkEnabled("b", "x") || !f.LinkEnabled("a", "x") {
			t.Errorf("profile %s: x must link to a (its via's site) only", p)
		}
		warned := len(f.Warnings()) > 0
		if warned != (p == ProfileOpenStack) {
			t.Errorf("profile %s: warnings %q; want them for openstack-vpnaas's legacy defaults only", p, f.Warnings())
		}
	}
}

func TestExternalRejected(t *testing.T) {
	for _, tc := range []struct {
		name  string
		block []string
		path  string
		want  string
	}{
		{"unknown profile", extBlock("oracle"), "sites[2].external.profile", "want one of: aws, azure"},
		{"no endpoint", []string{"profile: aws", "psk: {file: /p}"}, "sites[2].external.endpoint", "has no endpoint"},
		{"endpoint in supernet", []string{"profile: aws", "endpoint: 10.9.9.9", "psk: {file: /p}"}, "sites[2].external.endpoint", "inside overlay.supernet"},
		{"endpoint of a gateway", []string{"profile: aws", "endpoint: 203.0.113.20", "psk: {file: /p}"}, "sites[2].external.endpoint", "gateway b-gw's endpoint"},
		{"relative psk", []string{"profile: aws", "endpoint: 198.51.100.77", "psk: {file: x.psk}"}, "sites[2].external.psk.file", "not an absolute path"},
		{"unknown via", extBlock("aws", "via: nope"), "sites[2].external.via", `unknown gateway "nope"`},
		// AWS: IKE versions 1 and 2, its ciphers, DH 2 and 14-24, phase 1
		// 900..28800 s, phase 2 900..3600 s, inside /30s in 169.254/16.
		{"aws chacha", extBlock("aws", "ike: [chacha20poly1305-prfsha256-ecp256]"), "sites[2].external.ike[0]", "encryption chacha20poly1305 is not one AWS Site-to-Site VPN offers"},
		{"aws curve25519", extBlock("aws", "ike: [aes256gcm16-prfsha384-curve25519]"), "sites[2].external.ike[0]", "DH group curve25519 is not one AWS"},
		{"aws esp ecp not listed", extBlock("aws", "esp: [aes256gcm16-curve448]"), "sites[2].external.esp[0]", "DH group curve448"},
		{"aws sha1 still weak", extBlock("aws", "ike: [aes128-sha1-modp2048]"), "sites[2].external.ike[0]", "too weak"},
		{"aws phase 1 lifetime", extBlock("aws", "ikeLifetimeSeconds: 600"), "sites[2].external.ikeLifetimeSeconds", "900..28800"},
		{"aws phase 2 lifetime", extBlock("aws", "espLifetimeSeconds: 7200"), "sites[2].external.espLifetimeSeconds", "900..3600"},
		{"aws inside /29", extBlock("aws", "insideCIDR: 169.254.10.0/29"), "sites[2].external.insideCIDR", "a /30 CIDR block from 169.254.0.0/16"},
		{"aws inside outside", extBlock("aws", "insideCIDR: 10.9.0.0/30"), "sites[2].external.insideCIDR", "a /30 CIDR block from 169.254.0.0/16"},
		{"aws inside reserved", extBlock("aws", "insideCIDR: 169.254.169.252/30"), "sites[2].external.insideCIDR", "reserved by AWS"},
		{"aws ikev3", extBlock("aws", "ikeVersion: 3"), "sites[2].external.ikeVersion", "want 2 or 1"},
		// Azure: one policy, every parameter listed, its own groups.
		{"azure two proposals", extBlock("azure", "ike: [aes256gcm16-prfsha384-ecp384, aes128gcm16-prfsha256-ecp256]"), "sites[2].external.ike", "takes exactly one per role"},
		{"azure curve25519", extBlock("azure", "ike: [aes256gcm16-prfsha384-curve25519]"), "sites[2].external.ike[0]", "DH group curve25519 is not one Azure"},
		{"azure sha512", extBlock("azure", "esp: [aes256-sha512-ecp256]"), "sites[2].external.esp[0]", "integrity sha512"},
		{"azure main mode lifetime", extBlock("azure", "ikeLifetimeSeconds: 3600"), "sites[2].external.ikeLifetimeSeconds", "exactly 28800"},
		{"azure inside", extBlock("azure", "insideCIDR: 169.254.10.0/30"), "sites[2].external.insideCIDR", "no inside addresses"},
		// GCP: one proposal per role, fixed lifetimes.
		{"gcp two esp", extBlock("gcp", "esp: [aes256gcm16-curve25519, aes128gcm16-curve25519]"), "sites[2].external.esp", "exactly one per role"},
		{"gcp lifetime", extBlock("gcp", "espLifetimeSeconds: 3600"), "sites[2].external.espLifetimeSeconds", "exactly 10800"},
		{"gcp chacha", extBlock("gcp", "esp: [chacha20poly1305-curve25519]"), "sites[2].external.esp[0]", "Google Cloud VPN offers"},
		// OpenStack VPNaaS: legacy groups allowed, 3des not, IKE v1/v2.
		{"vpnaas 3des", extBlock("openstack-vpnaas", "ike: [3des-sha1-modp1536]"), "sites[2].external.ike[0]", "encryption 3des is not one OpenStack"},
		{"vpnaas gcm", extBlock("openstack-vpnaas", "esp: [aes256gcm16-modp2048]"), "sites[2].external.esp[0]", "encryption aes256gcm16"},
		{"vpnaas md5", extBlock("openstack-vpnaas", "ike: [aes128-md5-modp1536]"), "sites[2].external.ike[0]", "integrity md5"},
		// generic-ikev2: fednet's own rules, IKEv2 only, nothing weak.
		{"generic ikev1", extBlock("generic-ikev2", "ikeVersion: 1"), "sites[2].external.ikeVersion", "want 2"},
		{"generic sha1", extBlock("generic-ikev2", "ike: [aes128-sha1-modp2048]"), "sites[2].external.ike[0]", "too weak"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantProblem(t, externalYAML(tc.block...), tc.path, tc.want)
		})
	}
}

func TestExternalStructure(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, path, want string
	}{
		{"gateways on an external site",
			strings.Replace(externalYAML(extBlock("aws")...), "    external:\n", "    gateways: [{name: x-gw, endpoint: \"198.51.100.99:51820\"}]\n    external:\n", 1),
			"sites[2].gateways", "no fednet gateways"},
		{"bridged", strings.Replace(externalYAML(extBlock("aws")...), "networks:\n", "networks:\n  - {name: lan, id: 200, mode: bridged, sites: [a, x]}\n", 1),
			"networks[0].sites", "routed traffic only"},
		{"topology link", externalYAML(extBlock("aws")...) + "topology:\n  links:\n    - {between: [b, x]}\n", "topology.links[0]", "its only link"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantProblem(t, tc.yaml, tc.path, tc.want)
		})
	}
}

func TestAWSPSK(t *testing.T) {
	lim, _ := ProfileLimitsOf(ProfileAWS)
	for key, ok := range map[string]bool{"abc.def_12": true, "short": false, "0abcdefgh": false, "abc-defgh": false, strings.Repeat("a", 65): false} {
		if err := lim.PSK(key); (err == nil) != ok {
			t.Errorf("AWS PSK %q: %v; want ok %v", key, err, ok)
		}
	}
}

// wantProblem parses doc and fails unless Parse reports a problem at path
// whose message contains want.
func wantProblem(t *testing.T, doc, path, want string) {
	t.Helper()
	_, err := Parse([]byte(doc))
	var pe *Error
	if !errors.As(err, &pe) {
		t.Fatalf("accepted (err %v); want a problem at %s", err, path)
	}
	for _, p := range pe.Problems {
		if p.Path == path && strings.Contains(p.Message, want) {
			return
		}
	}
	t.Errorf("problems:\n%v\nwant one at %s containing %q", err, path, want)
}
