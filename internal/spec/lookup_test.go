package spec

import (
	"strings"
	"testing"
)

func TestLookups(t *testing.T) {
	src := strings.Replace(threeSites, "sites: [a, b, c]", "sites: [a, b]", 1) + `topology:
  links:
    - between: [b, a]
      cost: 5
    - between: [a, c]
      disabled: true
      cost: 3
`
	f := mustParse(t, src)

	links := []struct {
		a, b    string
		enabled bool
		cost    int
	}{
		{"a", "b", true, 5},
		{"b", "a", true, 5},
		{"a", "c", false, 3},
		{"c", "a", false, 3},
		{"b", "c", true, 1}, // mesh default
		{"a", "a", false, 1},
		{"a", "zzz", false, 1},
	}
	for _, l := range links {
		if got := f.LinkEnabled(l.a, l.b); got != l.enabled {
			t.Errorf("LinkEnabled(%s, %s) = %v, want %v", l.a, l.b, got, l.enabled)
		}
		if got := f.LinkCost(l.a, l.b); got != l.cost {
			t.Errorf("LinkCost(%s, %s) = %d, want %d", l.a, l.b, got, l.cost)
		}
	}

	if s, ok := f.Site("b"); !ok || s.Name != "b" || s != &f.Sites[1] {
		t.Errorf("Site(b) = %v, %v; want a pointer to sites[1]", s, ok)
	}
	if _, ok := f.Site("zzz"); ok {
		t.Error("Site(zzz) found a site")
	}
	if g, s, ok := f.Gateway("c-gw"); !ok || g != &f.Sites[2].Gateways[0] || s != &f.Sites[2] {
		t.Errorf("Gateway(c-gw) = %v, %v, %v; want sites[2].gateways[0]", g, s, ok)
	}
	if _, _, ok := f.Gateway("zzz"); ok {
		t.Error("Gateway(zzz) found a gateway")
	}

	nat := []struct {
		site Site
		want bool
	}{
		{f.Sites[0], false},
		{f.Sites[2], true},
		{Site{Gateways: []Gateway{{BehindNAT: true}, {Endpoint: "198.51.100.1:1"}}}, false},
		{Site{Gateways: []Gateway{{BehindNAT: true}, {BehindNAT: true}}}, true},
		{Site{}, false},
	}
	for i, tt := range nat {
		if got := tt.site.BehindNAT(); got != tt.want {
			t.Errorf("case %d: BehindNAT() = %v, want %v", i, got, tt.want)
		}
	}
}

func TestLine(t *testing.T) {
	f := mustParse(t, base)
	tests := []struct {
		path string
		want int
	}{
		{"", 1},
		{"kind", 2},
		{"sites[1]", 10},
		{"sites[1].gateways[0].endpoint", 14},
		{"sites[1].gateways[0].publicKey", 13}, // not written: its gateway
		{"sites[1].prefixes", 10},              // filled by the numbering plan
		{"networks[0].sites[1]", 19},
		{"overlay.listenPort", 1}, // default: the document
		{"nosuch[3].thing", 1},
	}
	for _, tt := range tests {
		if got := f.Line(tt.path); got != tt.want {
			t.Errorf("Line(%q) = %d, want %d", tt.path, got, tt.want)
		}
	}
	if got := (&Federation{}).Line("name"); got != 0 {
		t.Errorf("Line on a Federation not from Parse = %d, want 0", got)
	}
}
