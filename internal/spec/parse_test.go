package spec

import (
	"errors"
	"fmt"
	"github.com/fednet/fednet/internal/backend"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func mustParse(t *testing.T, src string) *Federation {
	t.Helper()
	f, err := Parse([]byte(src))
	if err != nil {
		t.Fatalf("Parse: %v\n%s", err, src)
	}
	if f == nil {
		t.Fatal("Parse returned nil Federation and nil error")
	}
	return f
}

func readExample(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "examples", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestThreeSitesExample(t *testing.T) {
	f := mustParse(t, string(readExample(t, "three-sites.yaml")))

	wantOverlay := Overlay{
		Supernet:    netip.MustParsePrefix("10.0.0.0/8"),
		Transit:     netip.MustParsePrefix("10.255.0.0/16"),
		ListenPort:  51820,
		UnderlayMTU: 1500,
		Interface:   "fed0",
		Backend:     backend.WireGuard,
		Fallback:    Fallback{TCP443: FallbackAuto, Port: DefaultFallbackPort},
	}
	if !reflect.DeepEqual(f.Overlay, wantOverlay) {
		t.Errorf("overlay = %+v, want %+v", f.Overlay, wantOverlay)
	}
	if f.Topology.Mode != "mesh" {
		t.Errorf("topology mode = %q, want mesh", f.Topology.Mode)
	}
	if f.Lab == nil || f.Lab.HostsPerSite != 2 {
		t.Errorf("lab = %+v, want hostsPerSite 2", f.Lab)
	}
	want := []struct {
		site, prefix, gateway, lan string
	}{
		{"aws-eu", "10.1.0.0/24", "aws-gw", "10.1.0.254"},
		{"azure-we", "10.2.0.0/24", "azure-gw", "10.2.0.254"},
		{"lab", "10.5.0.0/24", "onprem-gw", "10.5.0.254"},
	}
	if len(f.Sites) != len(want) {
		t.Fatalf("got %d sites, want %d", len(f.Sites), len(want))
	}
	seen := map[netip.Addr]string{}
	for i, w := range want {
		s := f.Sites[i]
		if s.Name != w.site {
			t.Errorf("sites[%d] = %s, want %s", i, s.Name, w.site)
		}
		if got := s.Prefixes; len(got) != 1 || got[0] != netip.MustParsePrefix(w.prefix) {
			t.Errorf("site %s prefixes = %v, want [%s]", s.Name, got, w.prefix)
		}
		g := s.Gateways[0]
		if g.LANAddress != netip.MustParseAddr(w.lan) {
			t.Errorf("gateway %s lanAddress = %v, want %s", g.Name, g.LANAddress, w.lan)
		}
		if !f.Overlay.Transit.Contains(g.TransitAddress) {
			t.Errorf("gateway %s transitAddress %v is not in %v", g.Name, g.TransitAddress, f.Overlay.Transit)
		}
		if other, dup := seen[g.TransitAddress]; dup {
			t.Errorf("gateways %s and %s share transit address %v", other, g.Name, g.TransitAddress)
		}
		seen[g.TransitAddress] = g.Name
		if got := transitHome(f.Overlay.Transit, g.Name); g.TransitAddress != got {
			t.Errorf("gateway %s transitAddress = %v, want its hash slot %v", g.Name, g.TransitAddress, got)
		}
	}
	if got := f.Line("sites[1].gateways[0].endpoint"); got != 24 {
		t.Errorf("Line(sites[1].gateways[0].endpoint) = %d, want 24", got)
	}
}

func TestDefaults(t *testing.T) {
	tests := []struct {
		name  string
		extra string
		check func(t *testing.T, f *Federation)
	}{
		{"overlay", "", func(t *testing.T, f *Federation) {
			o := f.Overlay
			if o.Supernet != DefaultSupernet || o.Transit != DefaultTransit || o.ListenPort != DefaultListenPort ||
				o.UnderlayMTU != DefaultUnderlayMTU || o.Interface != DefaultInterface || o.Backend != backend.Default {
				t.Errorf("overlay = %+v, want the defaults", o)
			}
			if f.Topology.Mode != "mesh" {
				t.Errorf("topology mode = %q, want mesh", f.Topology.Mode)
			}
			if f.Lab != nil {
				t.Errorf("lab = %+v, want nil without a lab section", f.Lab)
			}
		}},
		{"overlay given", "overlay:\n  supernet: 10.0.0.0/9\n  transit: 172.31.0.0/24\n  listenPort: 443\n  underlayMTU: 9000\n  interface: wg-fed\n",
			func(t *testing.T, f *Federation) {
				want := Overlay{Supernet: netip.MustParsePrefix("10.0.0.0/9"), Transit: netip.MustParsePrefix("172.31.0.0/24"), ListenPort: 443, UnderlayMTU: 9000, Interface: "wg-fed", Backend: backend.WireGuard, Fallback: Fallback{FallbackAuto, DefaultFallbackPort}}
				if !reflect.DeepEqual(f.Overlay, want) {
					t.Errorf("overlay = %+v, want %+v", f.Overlay, want)
				}
				if p := f.Overlay.TCPFallbackPort(); p != 443 {
					t.Errorf("TCPFallbackPort = %d, want 443 by default", p)
				}
			}},
		{"fallback off", "overlay:\n  fallback: {tcp443: off, port: 8443}\n",
			func(t *testing.T, f *Federation) {
				if got, want := f.Overlay.Fallback, (Fallback{FallbackOff, 8443}); got != want {
					t.Errorf("fallback = %+v, want %+v", got, want)
				}
				if p := f.Overlay.TCPFallbackPort(); p != 0 {
					t.Errorf("TCPFallbackPort = %d, want 0 when off", p)
				}
			}},
		{"fallback port", "overlay:\n  fallback: {port: 8443}\n",
			func(t *testing.T, f *Federation) {
				if p := f.Overlay.TCPFallbackPort(); p != 8443 {
					t.Errorf("TCPFallbackPort = %d, want 8443", p)
				}
			}},
		{"link cost", "topology:\n  links:\n    - between: [a, b]\n    - between: [a, c]\n      cost: 7\n",
			func(t *testing.T, f *Federation) {
				if got := f.Topology.Links[0].Cost; got != 1 {
					t.Errorf("links[0].cost = %d, want default 1", got)
				}
				if got := f.Topology.Links[1].Cost; got != 7 {
					t.Errorf("links[1].cost = %d, want 7", got)
				}
			}},
		{"empty lab section", "lab:\n", func(t *testing.T, f *Federation) {
			if f.Lab == nil || f.Lab.HostsPerSite != 2 {
				t.Errorf("lab = %+v, want hostsPerSite 2", f.Lab)
			}
		}},
		{"lab without hostsPerSite", "lab:\n  publicAddresses: {a-gw: 192.0.2.1}\n", func(t *testing.T, f *Federation) {
			if f.Lab == nil || f.Lab.HostsPerSite != 2 {
				t.Errorf("lab = %+v, want hostsPerSite 2", f.Lab)
			}
			if got := f.Lab.PublicAddresses["a-gw"]; got != netip.MustParseAddr("192.0.2.1") {
				t.Errorf("publicAddresses[a-gw] = %v, want 192.0.2.1", got)
			}
		}},
		{"lab hostsPerSite 0 kept", "lab:\n  hostsPerSite: 0\n", func(t *testing.T, f *Federation) {
			if f.Lab == nil || f.Lab.HostsPerSite != 0 {
				t.Errorf("lab = %+v, want hostsPerSite 0", f.Lab)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.check(t, mustParse(t, threeSites+tt.extra))
		})
	}
}

// threeSites is a valid spec with sites a, b, c and gateways a-gw, b-gw, c-gw.
const threeSites = `apiVersion: fednet/v1
kind: Federation
name: t
sites:
  - {name: a, provider: aws, gateways: [{name: a-gw, endpoint: "198.51.100.1:51820"}]}
  - {name: b, provider: azure, gateways: [{name: b-gw, endpoint: "198.51.100.2:51820"}]}
  - {name: c, provider: gcp, gateways: [{name: c-gw, behindNAT: true}]}
networks:
  - {name: n, id: 1, mode: routed, sites: [a, b, c]}
`

func TestNumberingPlan(t *testing.T) {
	type gw struct{ name, lan string }
	tests := []struct {
		name     string
		overlay  string // overlay and providers sections
		site     string // one site, as YAML flow mapping fields
		prefixes []string
		gateways []gw
	}{
		{"aws index 0", "", "provider: aws", []string{"10.1.0.0/24"}, []gw{{"g", "10.1.0.254"}}},
		{"aws index 3", "", "provider: aws, index: 3", []string{"10.1.3.0/24"}, []gw{{"g", "10.1.3.254"}}},
		{"edge index 255", "", "provider: edge, index: 255", []string{"10.6.255.0/24"}, []gw{{"g", "10.6.255.254"}}},
		{"provider added", "providers: {ovh: 7}\n", "provider: ovh, index: 2", []string{"10.7.2.0/24"}, []gw{{"g", "10.7.2.254"}}},
		{"provider overridden", "providers: {aws: 9}\n", "provider: aws", []string{"10.9.0.0/24"}, []gw{{"g", "10.9.0.254"}}},
		{"explicit prefixes win", "", "provider: aws, prefixes: [10.20.0.0/16, 10.21.0.0/24]",
			[]string{"10.20.0.0/16", "10.21.0.0/24"}, []gw{{"g", "10.20.255.254"}}},
		{"explicit prefixes, unknown provider", "", "provider: hetzner, prefixes: [10.30.0.0/24]",
			[]string{"10.30.0.0/24"}, []gw{{"g", "10.30.0.254"}}},
		{"explicit prefixes, other supernet", "overlay: {supernet: 192.168.0.0/16}\n", "prefixes: [192.168.4.0/22]",
			[]string{"192.168.4.0/22"}, []gw{{"g", "192.168.7.254"}}},
		{"/30 prefix", "", "prefixes: [10.40.0.0/30]", []string{"10.40.0.0/30"}, []gw{{"g", "10.40.0.2"}}},
		{"/32 prefix", "", "prefixes: [10.40.0.9/32]", []string{"10.40.0.9/32"}, []gw{{"g", "10.40.0.9"}}},
		{"IPv6 prefix", "overlay: {supernet: \"fd00::/8\"}\n", "prefixes: [\"fd00:1::/64\"]",
			[]string{"fd00:1::/64"}, []gw{{"g", "fd00:1::ffff:ffff:ffff:ffff"}}},
		{"several gateways", "", "provider: aws", []string{"10.1.0.0/24"},
			[]gw{{"g", "10.1.0.253"}, {"h", "10.1.0.252"}, {"i", "10.1.0.251"}}},
		{"explicit lanAddress skipped", "", "provider: aws", []string{"10.1.0.0/24"},
			[]gw{{"g", ""}, {"h=10.1.0.254", "10.1.0.254"}, {"i", ""}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var gws []string
			for i, g := range tt.gateways {
				name, lan, pinned := strings.Cut(g.name, "=")
				entry := "{name: " + name + ", endpoint: \"198.51.100." + string(rune('1'+i)) + ":51820\""
				if pinned {
					entry += ", lanAddress: \"" + lan + "\""
				}
				gws = append(gws, entry+"}")
			}
			src := "apiVersion: fednet/v1\nkind: Federation\nname: t\n" + tt.overlay +
				"sites:\n  - {name: s, " + tt.site + ", gateways: [" + strings.Join(gws, ", ") + "]}\n"
			f := mustParse(t, src)
			s := f.Sites[0]
			var got []string
			for _, p := range s.Prefixes {
				got = append(got, p.String())
			}
			if !reflect.DeepEqual(got, tt.prefixes) {
				t.Errorf("prefixes = %v, want %v", got, tt.prefixes)
			}
			// Gateways without an expected address take the highest free
			// ones, skipping pinned ones.
			want := map[string]string{}
			next := []string{"10.1.0.252", "10.1.0.251"}
			for _, g := range tt.gateways {
				name, _, _ := strings.Cut(g.name, "=")
				if g.lan == "" {
					want[name], next = next[0], next[1:]
				} else {
					want[name] = g.lan
				}
			}
			for _, g := range s.Gateways {
				if g.LANAddress.String() != want[g.Name] {
					t.Errorf("gateway %s lanAddress = %v, want %s", g.Name, g.LANAddress, want[g.Name])
				}
			}
		})
	}
}

func TestAccepts(t *testing.T) {
	tests := []struct {
		name string
		spec string
	}{
		{"DNS endpoint", edit(t, "198.51.100.1:51820", "gw-1.example.com:51820")},
		{"IPv6 endpoint", edit(t, "198.51.100.1:51820", "\"[2001:db8::1]:51820\"")},
		{"public key", edit(t, "endpoint: 198.51.100.1:51820\n", "endpoint: 198.51.100.1:51820\n        publicKey: AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n")},
		{"pinned transit address", edit(t, "endpoint: 198.51.100.1:51820\n", "endpoint: 198.51.100.1:51820\n        transitAddress: 10.255.0.1\n")},
		{"explicit lanAddress", edit(t, "endpoint: 198.51.100.1:51820\n", "endpoint: 198.51.100.1:51820\n        lanAddress: 10.1.0.1\n")},
		{"NAT site with a public peer", edit(t, "endpoint: 198.51.100.1:51820", "behindNAT: true")},
		{"NAT sites with their link disabled", edit(t,
			"endpoint: 198.51.100.1:51820", "behindNAT: true",
			"sites: [a, b]", "sites: [a]",
			"networks:\n", siteC+"networks:\n",
			"endpoint: 198.51.100.2:51820", "behindNAT: true") +
			"  - {name: m, id: 2, mode: routed, sites: [b, c]}\ntopology:\n  links:\n    - between: [a, b]\n      disabled: true\n"},
		{"network relayed through a third site", edit(t, "networks:\n", siteC+"networks:\n") +
			"topology:\n  links:\n    - between: [a, b]\n      disabled: true\n"},
		{"no networks", strings.Split(base, "networks:\n")[0]},
		{"largest network id", edit(t, "id: 1", "id: 16777215")},
		{"hex network id", edit(t, "id: 1", "id: 0x10")},
		{"lab hosts 50", base + "lab:\n  hostsPerSite: 50\n"},
		{"anchors and aliases", edit(t, "sites: [a, b]", "sites: &both [a, b]") + "  - {name: m, id: 2, mode: routed, sites: *both}\n"},
		{"comments and blank lines", "# a federation\n\n" + base + "\n# end\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mustParse(t, tt.spec)
		})
	}
}

func TestManyProblems(t *testing.T) {
	src := `apiVersion: fednet/v2
kind: Federation
name: t
overlay:
  listenPort: 0
  mtu: 1400
sites:
  - name: a
    provider: aws
    gateways:
      - name: a-gw
        endpoint: 1.2.3.4
  - name: a
    provider: nope
    gateways: []
networks:
  - name: n
    id: abc
    mode: l3
    sites: [a, zzz]
topology:
  mode: star
lab:
  hostsPerSite: 99
`
	_, err := Parse([]byte(src))
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("want *Error, got %v", err)
	}
	want := []Problem{
		{Line: 1, Path: "apiVersion"},
		{Line: 5, Path: "overlay.listenPort"},
		{Line: 6, Path: "overlay.mtu"},
		{Line: 12, Path: "sites[0].gateways[0].endpoint"},
		{Line: 13, Path: "sites[1].name"},
		{Line: 14, Path: "sites[1].provider"},
		{Line: 15, Path: "sites[1].gateways"},
		{Line: 18, Path: "networks[0].id"},
		{Line: 19, Path: "networks[0].mode"},
		{Line: 20, Path: "networks[0].sites[1]"},
		{Line: 22, Path: "topology.mode"},
		{Line: 24, Path: "lab.hostsPerSite"},
	}
	var got []Problem
	for _, p := range e.Problems {
		got = append(got, Problem{Line: p.Line, Path: p.Path})
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("problems:\n%v\nwant (line, path):\n%v", err, want)
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != len(want) {
		t.Fatalf("Error() has %d lines, want one per problem (%d):\n%v", len(lines), len(want), err)
	}
	for i, l := range lines {
		if !strings.HasPrefix(l, e.Problems[i].String()) {
			t.Errorf("Error() line %d = %q, want %q", i, l, e.Problems[i].String())
		}
	}
}

func TestProblemString(t *testing.T) {
	tests := []struct {
		p    Problem
		want string
	}{
		{Problem{12, "sites[1].gateways[0].endpoint", `"1.2.3.4" is not host:port`}, `line 12: sites[1].gateways[0].endpoint: "1.2.3.4" is not host:port`},
		{Problem{3, "", "not valid YAML"}, "line 3: not valid YAML"},
		{Problem{0, "", "the spec is empty"}, "the spec is empty"},
		{Problem{0, "name", "missing"}, "name: missing"},
	}
	for _, tt := range tests {
		if got := tt.p.String(); got != tt.want {
			t.Errorf("String() = %q, want %q", got, tt.want)
		}
	}
	e := &Error{Problems: []Problem{tests[0].p, tests[1].p}}
	if got, want := e.Error(), tests[0].want+"\n"+tests[1].want; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

func TestProblemCap(t *testing.T) {
	var b strings.Builder
	b.WriteString(base + "  - {name: m, id: 2, mode: routed, sites: [")
	for i := range 2 * maxProblems {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("nosuchsite")
	}
	b.WriteString("]}\n")
	_, err := Parse([]byte(b.String()))
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("want *Error, got %v", err)
	}
	if len(e.Problems) != maxProblems+1 || !strings.Contains(e.Problems[maxProblems].Message, "too many problems") {
		t.Errorf("got %d problems ending with %q, want %d and a final note", len(e.Problems), e.Problems[len(e.Problems)-1], maxProblems+1)
	}
}

func TestAliasBomb(t *testing.T) {
	// 2000 sites, each an alias of one site with 2000 aliased gateways: four
	// million gateways from a 30 kB document.
	var b strings.Builder
	b.WriteString("apiVersion: fednet/v1\nkind: Federation\nname: t\nsites:\n")
	b.WriteString("  - &s\n    name: a\n    provider: aws\n    gateways:\n      - &g {name: g, behindNAT: true}\n")
	for range 2000 {
		b.WriteString("      - *g\n")
	}
	for range 2000 {
		b.WriteString("  - *s\n")
	}
	_, err := Parse([]byte(b.String()))
	if err == nil || !strings.Contains(err.Error(), "YAML nodes") {
		t.Fatalf("want a size problem, got %v", err)
	}
}

func TestExamplesParse(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "examples", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	for _, name := range files {
		t.Run(filepath.Base(name), func(t *testing.T) {
			data, err := os.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			f, err := Parse(data)
			if err != nil {
				t.Fatalf("%s:\n%v", name, err)
			}
			checkComplete(t, f)
		})
	}
}

func TestHybridExample(t *testing.T) {
	f := mustParse(t, string(readExample(t, "hybrid.yaml")))
	want := map[string]struct{ prefixes, lan string }{
		"aws-eu":  {"[10.1.0.0/24]", "10.1.0.254"},
		"ovh-gra": {"[10.7.1.0/24]", "10.7.1.254"},
		"office":  {"[10.50.0.0/22 10.50.8.0/24]", "10.50.0.1"},
		"shop":    {"[10.6.4.0/24]", "10.6.4.254"},
	}
	for _, s := range f.Sites {
		w := want[s.Name]
		if got := fmt.Sprint(s.Prefixes); got != w.prefixes {
			t.Errorf("site %s prefixes = %s, want %s", s.Name, got, w.prefixes)
		}
		if got := s.Gateways[0].LANAddress.String(); got != w.lan {
			t.Errorf("site %s first gateway lanAddress = %s, want %s", s.Name, got, w.lan)
		}
	}
	// Two gateways: the site's virtual address takes the plan's .254 and
	// office-gw-b the next free address below it.
	g, _, _ := f.Gateway("office-gw-b")
	if g.LANAddress != netip.MustParseAddr("10.50.3.253") || g.TransitAddress != netip.MustParseAddr("10.255.0.10") {
		t.Errorf("office-gw-b = %+v, want lanAddress 10.50.3.253 and pinned transit 10.255.0.10", g)
	}
	for site, want := range map[string]string{"office": "10.50.3.254", "aws-eu": "10.1.0.254", "shop": "10.6.4.254"} {
		if s, _ := f.Site(site); s.VirtualAddress != netip.MustParseAddr(want) {
			t.Errorf("site %s virtualAddress = %s, want %s", site, s.VirtualAddress, want)
		}
	}
	if f.LinkEnabled("shop", "ovh-gra") || !f.LinkEnabled("shop", "office") || f.LinkCost("ovh-gra", "aws-eu") != 10 {
		t.Error("links do not match the example's topology")
	}
	if s, _ := f.Site("shop"); !s.BehindNAT() {
		t.Error("shop should be behind NAT")
	}
}
