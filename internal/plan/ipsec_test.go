package plan

import (
	"net/netip"
	"os"
	"slices"
	"testing"

	"github.com/fednet/fednet/internal/backend"
	"github.com/fednet/fednet/internal/spec"
)

// A federation with one IPsec link: the two gateways of that link get a
// second tunnel, ipsec0, with the transit address as a /32 and a route to
// the peer's; the peer carries the IPsec block; exactly one side
// initiates; the firewall opens IKE, NAT-T and ESP.
func TestIPsecLink(t *testing.T) {
	b, err := os.ReadFile("../../examples/ipsec-mixed.yaml")
	if err != nil {
		t.Fatal(err)
	}
	f, err := spec.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	plans, err := Compute(f, Inputs{})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]Gateway{}
	for _, g := range plans {
		byName[g.Name] = g
	}
	aws, azure, onprem := byName["aws-gw"], byName["azure-gw"], byName["onprem-gw"]
	if len(onprem.Tunnels) != 1 || onprem.Tunnels[0].Backend != backend.WireGuard {
		t.Errorf("onprem-gw has no IPsec link: tunnels %+v; want fed0 alone", onprem.Tunnels)
	}
	initiators := 0
	for _, g := range []Gateway{aws, azure} {
		if len(g.Tunnels) != 2 || g.Tunnels[0].Name != "fed0" || g.Tunnels[1].Name != "ipsec0" || g.Tunnels[1].Address.Bits() != 32 ||
			g.Tunnels[1].Address.Addr() != g.TransitAddress() || g.Tunnels[1].MTU != 1399 {
			t.Errorf("%s tunnels %+v; want fed0 with the transit prefix, then ipsec0 with the transit /32, MTU 1399", g.Name, g.Tunnels)
		}
		var ipsecPeer Peer
		for _, p := range g.Peers {
			if p.Backend == backend.IPsec {
				ipsecPeer = p
			}
		}
		if ipsecPeer.IPsec.PSKFile != f.Overlay.IPsec.PSK.File || ipsecPeer.IPsec.LocalID != g.Name || ipsecPeer.IPsec.RemoteAddress == "" {
			t.Errorf("%s: IPsec peer %+v", g.Name, ipsecPeer)
		}
		if ipsecPeer.IPsec.Initiator {
			initiators++
		}
		transit := ipsecPeer.AllowedIPs[len(ipsecPeer.AllowedIPs)-1]
		if !slices.Contains(g.Routes, Route{Destination: transit, Device: "ipsec0", Via: ipsecPeer.Gateway}) {
			t.Errorf("%s: no route to the IPsec peer's transit address %s via ipsec0: %+v", g.Name, transit, g.Routes)
		}
		for _, want := range []backend.Port{{Protocol: backend.UDP, Port: 500}, {Protocol: backend.UDP, Port: 4500}, {Protocol: backend.ESP}} {
			if !slices.Contains(g.Firewall.Public, want) {
				t.Errorf("%s: firewall public %v lacks %s", g.Name, g.Firewall.Public, want)
			}
		}
		if !slices.Contains(g.Firewall.Tunnels, "ipsec0") {
			t.Errorf("%s: firewall tunnels %v lack ipsec0", g.Name, g.Firewall.Tunnels)
		}
	}
	if initiators != 1 {
		t.Errorf("%d sides initiate the IPsec link; want exactly one", initiators)
	}
	if !netip.MustParsePrefix("10.255.0.0/16").Contains(aws.TransitAddress()) {
		t.Errorf("transit address %s", aws.TransitAddress())
	}
}
