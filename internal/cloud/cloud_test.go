package cloud

import (
	"errors"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/fednet/fednet/internal/backend"
	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/spec"
)

func parse(t *testing.T, mutate func(string) string) *spec.Federation {
	t.Helper()
	data, err := os.ReadFile("../../examples/clouds.yaml")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	if mutate != nil {
		doc = mutate(doc)
	}
	f, err := spec.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestNeedsFollowSpecAndInputs(t *testing.T) {
	f := parse(t, nil)
	n, err := Compute(f, "aws-eu", Options{})
	if err != nil {
		t.Fatal(err)
	}
	// LAN addresses come from the spec's numbering (they depend on how
	// many gateways the site has), not from this test.
	lan := func(name string) string {
		g, _, ok := f.Gateway(name)
		if !ok {
			t.Fatalf("no gateway %s", name)
		}
		return g.LANAddress.String()
	}
	want := strings.ReplaceAll(`site aws-eu (aws, federation clouds): active gateway aws-gw
  forwarding allowed on: aws-gw, aws-gw2
  route 10.2.0.0/24 -> aws-gw (LAN)
  route 10.3.0.0/24 -> aws-gw (LAN)
  route 10.4.0.0/24 -> aws-gw (LAN)
  route 10.5.0.0/24 -> aws-gw (LAN)
  ingress tcp/443 from 0.0.0.0/0 (behind NAT, address unknown: office-gw)
  ingress tcp/443 from 192.0.2.30/32 (peer gcp-gw)
  ingress tcp/443 from 192.0.2.40/32 (peer os-gw)
  ingress tcp/443 from 203.0.113.20/32 (peer azure-gw)
  ingress udp/51820 from 0.0.0.0/0 (behind NAT, address unknown: office-gw)
  ingress udp/51820 from 192.0.2.30/32 (peer gcp-gw)
  ingress udp/51820 from 192.0.2.40/32 (peer os-gw)
  ingress udp/51820 from 203.0.113.20/32 (peer azure-gw)
`, "LAN", lan("aws-gw"))
	if got := n.String(); got != want {
		t.Errorf("needs:\n%s\nwant:\n%s", got, want)
	}

	// A failover moves the routes to the other gateway; nothing else.
	in := plan.Inputs{}.WithActive("aws-eu", "aws-gw2")
	m, err := Compute(f, "aws-eu", Options{Inputs: in})
	if err != nil {
		t.Fatal(err)
	}
	if m.Active != "aws-gw2" || m.ActiveGateway().LAN.String() != lan("aws-gw2") || len(m.Routes) != 4 || len(m.Ingress) != 8 { // UDP 51820 and the fallback's TCP 443 from 4 peers
		t.Errorf("after failover: active %s (%s), %d routes, %d ingress", m.Active, m.ActiveGateway().LAN, len(m.Routes), len(m.Ingress))
	}
	down, err := Compute(f, "aws-eu", Options{Inputs: plan.Inputs{}.WithGatewayDown("aws-gw")})
	if err != nil || down.Active != "aws-gw2" {
		t.Errorf("aws-gw down: active %q, err %v; want aws-gw2", down.Active, err)
	}

	// A site that leaves the network loses its route; it stays a peer
	// (the mesh links every site), so its ingress rule stays.
	g := parse(t, func(s string) string {
		return strings.Replace(s, "sites: [aws-eu, azure-we, gcp-ew, os-lab, office]", "sites: [aws-eu, azure-we, gcp-ew, os-lab]", 1)
	})
	o, err := Compute(g, "aws-eu", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Routes) != 3 || o.Routes[2] != netip.MustParsePrefix("10.4.0.0/24") {
		t.Errorf("office left the network: routes %v, want 10.2, 10.3, 10.4", o.Routes)
	}
}

func TestNeedsResolveDNSEndpoints(t *testing.T) {
	f := parse(t, func(s string) string {
		return strings.Replace(s, "endpoint: 203.0.113.20:51820", "endpoint: azure.example.com:51820", 1)
	})
	if _, err := Compute(f, "aws-eu", Options{}); err == nil || !strings.Contains(err.Error(), "azure.example.com") {
		t.Errorf("no resolver: err %v, want one naming the DNS endpoint", err)
	}
	resolve := func(host string) ([]netip.Addr, error) {
		if host != "azure.example.com" {
			return nil, errors.New("unexpected host " + host)
		}
		return []netip.Addr{netip.MustParseAddr("203.0.113.21"), netip.MustParseAddr("203.0.113.22")}, nil
	}
	n, err := Compute(f, "aws-eu", Options{Resolve: resolve})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, in := range n.Ingress {
		if len(in.Peers) == 1 && in.Peers[0] == "azure-gw" && in.Protocol == backend.UDP {
			got = append(got, in.Source.String())
		}
	}
	if strings.Join(got, " ") != "203.0.113.21/32 203.0.113.22/32" {
		t.Errorf("azure-gw sources %v, want both resolved addresses", got)
	}
}

func TestNeedsErrors(t *testing.T) {
	f := parse(t, nil)
	for site, want := range map[string]string{"nope": "sites are aws-eu", "office": "has no cloud block"} {
		if _, err := Compute(f, site, Options{}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("site %s: err %v, want %q", site, err, want)
		}
	}
}
