package spec

import (
	"strings"
	"testing"

	"github.com/fednet/fednet/internal/backend"
)

func TestCheckProposal(t *testing.T) {
	for _, tc := range []struct {
		p       string
		ike     bool
		legacy  bool
		problem string
	}{
		{"aes256gcm16-prfsha384-curve25519", true, false, ""},
		{"aes256-sha256-ecp256", false, false, ""},
		{"chacha20poly1305-curve25519", false, false, ""},
		{"aes128-sha1-modp2048", true, false, "sha1, which is too weak"},
		{"aes128-sha256-modp1024", true, false, "modp1024, which is too weak"},
		{"aes128-sha1-modp1536", true, true, ""},
		{"aes256-curve25519", false, false, "without integrity"},
		{"aes256gcm16", false, false, "no DH group"},
		{"sha256-curve25519", true, false, "no cipher"},
		{"aes256gcm16-rot13-curve25519", true, false, `"rot13" is not an algorithm`},
	} {
		err := CheckProposal(tc.p, tc.ike, tc.legacy)
		switch {
		case tc.problem == "" && err != nil:
			t.Errorf("%s: %v; want accepted", tc.p, err)
		case tc.problem != "" && (err == nil || !strings.Contains(err.Error(), tc.problem)):
			t.Errorf("%s: %v; want an error with %q", tc.p, err, tc.problem)
		}
	}
}

const ipsecSpec = `apiVersion: fednet/v1
kind: Federation
name: x
overlay:
  ipsec:
    psk: {file: PSK}
    esp: [ESP]
sites:
  - name: a
    provider: aws
    gateways: [{name: a-gw, endpoint: "198.51.100.10:51820"}]
  - name: b
    provider: azure
    gateways: [{name: b-gw, endpoint: "203.0.113.20:51820"}]
networks:
  - {name: apps, id: 100, mode: routed, sites: [a, b]}
topology:
  mode: mesh
  links:
    - {between: [a, b], backend: BACKEND}
`

func TestIPsecSpec(t *testing.T) {
	parse := func(psk, esp, b string) (*Federation, error) {
		y := strings.NewReplacer("PSK", psk, "ESP", esp, "BACKEND", b).Replace(ipsecSpec)
		return Parse([]byte(y))
	}
	f, err := parse("/etc/fednet/ipsec.psk", "aes256gcm16-curve25519", "ipsec")
	if err != nil {
		t.Fatal(err)
	}
	if f.LinkBackend("b", "a") != backend.IPsec || f.Overlay.Backend != backend.WireGuard || f.Overlay.IPsec.DPDSeconds != DefaultDPDSeconds || len(f.Overlay.IPsec.IKE) == 0 {
		t.Errorf("link backend %s, overlay %s, ipsec %+v; want ipsec on the link, defaults filled", f.LinkBackend("a", "b"), f.Overlay.Backend, f.Overlay.IPsec)
	}
	for _, tc := range []struct{ psk, esp, b, want string }{
		{"relative.psk", "aes256gcm16-curve25519", "ipsec", "overlay.ipsec.psk.file"},
		{"/p", "3des-sha1-modp1024", "ipsec", "overlay.ipsec.esp[0]"},
		{"/p", "aes256gcm16-curve25519", "openvpn", "topology.links[0].backend"},
	} {
		_, err := parse(tc.psk, tc.esp, tc.b)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("psk %q esp %q backend %q: %v; want an error naming %s", tc.psk, tc.esp, tc.b, err, tc.want)
		}
	}
	// A link on ipsec without overlay.ipsec.
	y := strings.Replace(strings.NewReplacer("BACKEND", "ipsec").Replace(ipsecSpec), "  ipsec:\n    psk: {file: PSK}\n    esp: [ESP]\n", "", 1)
	if _, err := Parse([]byte(y)); err == nil || !strings.Contains(err.Error(), "overlay.ipsec: links use backend ipsec") {
		t.Errorf("ipsec link without overlay.ipsec: %v", err)
	}
}
