package ipsec

import (
	"net/netip"
	"testing"

	"github.com/fednet/fednet/internal/backend"
	"github.com/fednet/fednet/internal/plan"
)

// TestMessageExternal: a connection to an external site carries the
// plan's IKE version, IKE lifetime and one CHILD_SA per plan child, each
// with its own selectors; a fednet link keeps one child, IKEv2.
func TestMessageExternal(t *testing.T) {
	pfx := netip.MustParsePrefix
	ext := plan.Peer{Gateway: "os-lab", Backend: backend.IPsec, AllowedIPs: []netip.Prefix{pfx("10.4.0.0/24")},
		IPsec: &plan.IPsecPeer{Initiator: true, LocalID: "198.51.100.30", RemoteID: "203.0.113.78", RemoteAddress: "203.0.113.78",
			IKE: []string{"aes128-sha1-modp1536"}, ESP: []string{"aes128-sha1-modp1536"}, PSKFile: "/k", DPDSeconds: 10,
			RekeySeconds: 3600, IKERekeySeconds: 7200, IKEVersion: 1, Profile: "openstack-vpnaas",
			Children: []plan.ChildSA{
				{LocalTS: []netip.Prefix{pfx("10.5.0.0/24")}, RemoteTS: []netip.Prefix{pfx("10.4.0.0/24")}},
				{LocalTS: []netip.Prefix{pfx("10.6.0.0/24")}, RemoteTS: []netip.Prefix{pfx("10.4.0.0/24")}},
			}}}
	c := conn{peer: ext, ifID: DefaultIfID, iface: "ipsec0"}
	m, err := c.message(false)
	if err != nil {
		t.Fatal(err)
	}
	body := m.Get("fednet-os-lab")
	if body == nil {
		t.Fatalf("no connection fednet-os-lab in %v", m)
	}
	b := body.(interface{ Get(string) any })
	if v := b.Get("version"); v != "1" {
		t.Errorf("version %v, want 1", v)
	}
	if v := b.Get("rekey_time"); v != "7200s" {
		t.Errorf("IKE rekey_time %v, want 7200s", v)
	}
	children := b.Get("children").(interface {
		Get(string) any
		Keys() []string
	})
	if keys := children.Keys(); len(keys) != 2 || keys[0] != c.childName(0) || keys[1] != c.childName(1) {
		t.Fatalf("children %v, want %s and %s", keys, c.childName(0), c.childName(1))
	}
	second := children.Get(c.childName(1)).(interface{ Get(string) any })
	if lts, rts := second.Get("local_ts"), second.Get("remote_ts"); !equal(lts, "10.6.0.0/24") || !equal(rts, "10.4.0.0/24") {
		t.Errorf("second child selectors %v <-> %v", lts, rts)
	}
	// A link between fednet gateways: one child, IKEv2, IKE rekey 4x.
	link, ip := ext, *ext.IPsec
	link.IPsec = &ip
	link.IPsec.IKEVersion, link.IPsec.IKERekeySeconds, link.IPsec.Children = 0, 0, nil
	link.IPsec.LocalTS = []netip.Prefix{pfx("0.0.0.0/0")}
	m, err = conn{peer: link}.message(false)
	if err != nil {
		t.Fatal(err)
	}
	b = m.Get("fednet-os-lab").(interface{ Get(string) any })
	if b.Get("version") != "2" || b.Get("rekey_time") != "14400s" || len(b.Get("children").(interface{ Keys() []string }).Keys()) != 1 {
		t.Errorf("fednet link: version %v rekey %v children %v", b.Get("version"), b.Get("rekey_time"), b.Get("children"))
	}
}

func equal(v any, want ...string) bool {
	got, ok := v.([]string)
	if !ok || len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}
