package bench

import (
	"os"
	"strings"
	"testing"

	"github.com/fednet/fednet/internal/backend"
	"github.com/fednet/fednet/internal/spec"
)

func parseExample(t *testing.T, name string) *spec.Federation {
	t.Helper()
	b, err := os.ReadFile("../../examples/" + name)
	if err != nil {
		t.Fatal(err)
	}
	f, err := spec.Parse(b)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return f
}

// TestChoosePairs: by default the measured pair is the first WireGuard
// link and the spec's first IPsec link between sites with agents is
// measured beside it; --between picks the pair, and an IPsec pair then has
// no second one; bad --between values are refused naming the flag.
func TestChoosePairs(t *testing.T) {
	mixed := parseExample(t, "ipsec-mixed.yaml")
	interop := parseExample(t, "interop.yaml")
	three := parseExample(t, "three-sites.yaml")
	tests := []struct {
		name    string
		f       *spec.Federation
		between []string
		want    Pairs
	}{
		{"mixed: first WireGuard link, the IPsec link beside", mixed, nil,
			Pairs{A: "aws-eu", B: "lab", Backend: backend.WireGuard, IPsecA: "aws-eu", IPsecB: "azure-we"}},
		{"interop: externals are never measured", interop, nil,
			Pairs{A: "aws-eu", B: "azure-we", Backend: backend.WireGuard, IPsecA: "azure-we", IPsecB: "onprem"}},
		{"no IPsec link", three, nil, Pairs{A: three.Sites[0].Name, B: three.Sites[1].Name, Backend: backend.WireGuard}},
		{"between a WireGuard pair", mixed, []string{"azure-we", "lab"},
			Pairs{A: "azure-we", B: "lab", Backend: backend.WireGuard, IPsecA: "aws-eu", IPsecB: "azure-we"}},
		{"between the IPsec pair", mixed, []string{"azure-we", "aws-eu"}, Pairs{A: "azure-we", B: "aws-eu", Backend: backend.IPsec}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ChoosePairs(tt.f, tt.between)
			if err != nil || got != tt.want {
				t.Errorf("ChoosePairs(%v) = %+v, %v; want %+v", tt.between, got, err, tt.want)
			}
		})
	}
	for _, bad := range []struct {
		between []string
		says    string
	}{
		{[]string{"aws-eu"}, "want two sites"},
		{[]string{"aws-eu", "mars"}, `"mars" is not a site`},
		{[]string{"aws-eu", "aws-eu"}, "have no link"},
		{[]string{"aws-eu", "aws-vpc"}, "external site"},
	} {
		f := mixed
		if bad.between[len(bad.between)-1] == "aws-vpc" {
			f = interop
		}
		_, err := ChoosePairs(f, bad.between)
		if err == nil || !strings.Contains(err.Error(), "--between") || !strings.Contains(err.Error(), bad.says) {
			t.Errorf("ChoosePairs(%v) = %v; want an error naming --between that says %q", bad.between, err, bad.says)
		}
	}
}

// TestModeLabels: a mode's title and file key carry its link's backend and
// transport, so routed over WireGuard, routed over IPsec and tcp443 stand
// apart in tables, plots and file names; results without them keep the old
// names.
func TestModeLabels(t *testing.T) {
	for _, tt := range []struct {
		m          ModeResult
		title, key string
	}{
		{ModeResult{Mode: "routed", Backend: backend.WireGuard, Transport: backend.TransportUDP}, "routed (wireguard/udp)", "routed"},
		{ModeResult{Mode: "routed", Backend: backend.IPsec}, "routed (ipsec)", "routed-ipsec"},
		{ModeResult{Mode: TCP443, Backend: backend.WireGuard, Transport: backend.TransportTCP443}, "tcp443 (wireguard/tcp443)", "tcp443"},
		{ModeResult{Mode: "bridged", Network: "lan", Backend: backend.WireGuard, Transport: backend.TransportUDP}, "bridged (lan, wireguard/udp)", "bridged-lan"},
		{ModeResult{Mode: "bridged", Network: "lan"}, "bridged (lan)", "bridged-lan"},
		{ModeResult{Mode: "routed"}, "routed", "routed"},
	} {
		if got := modeTitle(tt.m); got != tt.title {
			t.Errorf("modeTitle(%+v) = %q; want %q", tt.m, got, tt.title)
		}
		if got := modeKey(tt.m); got != tt.key {
			t.Errorf("modeKey(%+v) = %q; want %q", tt.m, got, tt.key)
		}
	}
	r := &Results{Modes: []ModeResult{
		{Mode: "routed", Backend: backend.WireGuard, Transport: backend.TransportUDP},
		{Mode: "routed", Backend: backend.IPsec},
		{Mode: TCP443, Backend: backend.WireGuard, Transport: backend.TransportTCP443},
	}}
	h := Headline(r)
	for _, want := range []string{"routed (wireguard/udp): ", "routed (ipsec): ", "tcp443 (wireguard/tcp443): "} {
		if !strings.Contains(h, want) {
			t.Errorf("headline lacks %q:\n%s", want, h)
		}
	}
}
