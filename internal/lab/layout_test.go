package lab

import (
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/fednet/fednet/internal/spec"
)

// threeSites returns examples/three-sites.yaml as spec.Parse fills it in.
func threeSites() *spec.Federation {
	p := netip.MustParsePrefix
	a := netip.MustParseAddr
	return &spec.Federation{
		APIVersion: spec.APIVersion,
		Kind:       spec.Kind,
		Name:       "demo",
		Overlay: spec.Overlay{
			Supernet:    p("10.0.0.0/8"),
			Transit:     p("10.255.0.0/16"),
			ListenPort:  51820,
			UnderlayMTU: 1500,
			Interface:   "fed0",
		},
		Sites: []spec.Site{
			{Name: "aws-eu", Provider: "aws", Prefixes: []netip.Prefix{p("10.1.0.0/24")}, Gateways: []spec.Gateway{
				{Name: "aws-gw", Endpoint: "198.51.100.10:51820", LANAddress: a("10.1.0.254"), TransitAddress: a("10.255.0.1")}}},
			{Name: "azure-we", Provider: "azure", Prefixes: []netip.Prefix{p("10.2.0.0/24")}, Gateways: []spec.Gateway{
				{Name: "azure-gw", Endpoint: "203.0.113.20:51820", LANAddress: a("10.2.0.254"), TransitAddress: a("10.255.0.2")}}},
			{Name: "lab", Provider: "onprem", Prefixes: []netip.Prefix{p("10.5.0.0/24")}, Gateways: []spec.Gateway{
				{Name: "onprem-gw", Endpoint: "198.51.100.30:51820", LANAddress: a("10.5.0.254"), TransitAddress: a("10.255.0.3")}}},
		},
		Networks: []spec.Network{{Name: "apps", ID: 100, Mode: spec.Routed, Sites: []string{"aws-eu", "azure-we", "lab"}}},
		Topology: spec.Topology{Mode: "mesh"},
		Lab:      &spec.Lab{HostsPerSite: 2},
	}
}

func TestLayout(t *testing.T) {
	l, err := newLab(Config{Federation: threeSites(), Name: "x1"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range l.Nodes() {
		got = append(got, n.Role.String()+" "+n.Name+" "+n.Namespace+" lan="+n.LAN.String()+" pub="+n.Public.String()+" via="+n.Via.String())
	}
	want := []string{
		"internet internet fnlab-x1-inet lan=invalid Prefix pub=invalid Prefix via=invalid IP",
		"switch aws-eu-lan fnlab-x1-lan-aws-eu lan=invalid Prefix pub=invalid Prefix via=invalid IP",
		"gateway aws-gw fnlab-x1-gw-aws-gw lan=10.1.0.254/24 pub=198.51.100.10/32 via=198.51.100.1",
		"host aws-eu-h1 fnlab-x1-h-aws-eu-1 lan=10.1.0.1/24 pub=invalid Prefix via=10.1.0.254",
		"host aws-eu-h2 fnlab-x1-h-aws-eu-2 lan=10.1.0.2/24 pub=invalid Prefix via=10.1.0.254",
		"switch azure-we-lan fnlab-x1-lan-azure-we lan=invalid Prefix pub=invalid Prefix via=invalid IP",
		"gateway azure-gw fnlab-x1-gw-azure-gw lan=10.2.0.254/24 pub=203.0.113.20/32 via=203.0.113.1",
		"host azure-we-h1 fnlab-x1-h-azure-we-1 lan=10.2.0.1/24 pub=invalid Prefix via=10.2.0.254",
		"host azure-we-h2 fnlab-x1-h-azure-we-2 lan=10.2.0.2/24 pub=invalid Prefix via=10.2.0.254",
		"switch lab-lan fnlab-x1-lan-lab lan=invalid Prefix pub=invalid Prefix via=invalid IP",
		"gateway onprem-gw fnlab-x1-gw-onprem-gw lan=10.5.0.254/24 pub=198.51.100.30/32 via=198.51.100.1",
		"host lab-h1 fnlab-x1-h-lab-1 lan=10.5.0.1/24 pub=invalid Prefix via=10.5.0.254",
		"host lab-h2 fnlab-x1-h-lab-2 lan=10.5.0.2/24 pub=invalid Prefix via=10.5.0.254",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("layout:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if l.Dir != "/run/fednet-lab/x1" {
		t.Errorf("Dir = %s", l.Dir)
	}
	if g := l.Gateway("azure-gw"); g == nil || g.WireGuardDir() != "/run/fednet-lab/x1/gw-azure-gw/wireguard" {
		t.Errorf("Gateway(azure-gw) = %+v", g)
	}
	if len(l.Hosts("lab")) != 2 || l.Hosts("nope") != nil || l.Switch("lab").Role != RoleSwitch {
		t.Errorf("Hosts/Switch lookups wrong")
	}
	if l.Supernet != netip.MustParsePrefix("10.0.0.0/8") {
		t.Errorf("Supernet = %s", l.Supernet)
	}
}

func TestLayoutPublicAddresses(t *testing.T) {
	f := threeSites()
	f.Sites[0].Gateways[0].Endpoint = "gw.example.com:51820"
	f.Lab.PublicAddresses = map[string]netip.Addr{"aws-gw": netip.MustParseAddr("203.0.113.7")}
	f.Sites[1].Gateways[0].Endpoint = ""
	f.Sites[1].Gateways[0].BehindNAT = true
	// Two gateways in one site: hosts skip both LAN addresses and route
	// via the first.
	f.Sites[2].Gateways = append(f.Sites[2].Gateways, spec.Gateway{Name: "onprem-gw2", BehindNAT: true, LANAddress: netip.MustParseAddr("10.5.0.2")})
	l, err := newLab(Config{Federation: f, Name: "x2", HostsPerSite: 3, Dir: "/tmp/x2"})
	if err != nil {
		t.Fatal(err)
	}
	for gw, want := range map[string]string{"aws-gw": "203.0.113.7/32", "azure-gw": "198.51.100.2/32", "onprem-gw": "198.51.100.30/32", "onprem-gw2": "198.51.100.3/32"} {
		if got := l.Gateway(gw).Public.String(); got != want {
			t.Errorf("%s public = %s, want %s", gw, got, want)
		}
	}
	var hosts []string
	for _, h := range l.Hosts("lab") {
		hosts = append(hosts, h.LAN.String()+" via "+h.Via.String())
	}
	if got := strings.Join(hosts, ", "); got != "10.5.0.1/24 via 10.5.0.254, 10.5.0.3/24 via 10.5.0.254, 10.5.0.4/24 via 10.5.0.254" {
		t.Errorf("lab hosts: %s", got)
	}
	if len(l.Hosts("aws-eu")) != 3 || l.Dir != "/tmp/x2" {
		t.Errorf("HostsPerSite or Dir not taken from Config")
	}
}

func TestLayoutErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   []string
	}{
		{"no spec", func(c *Config) { c.Federation = nil }, []string{"no federation spec"}},
		{"bad name", func(c *Config) { c.Name = "Lab-1" }, []string{`lab name "Lab-1"`, "lowercase letters and digits"}},
		{"endpoint outside", func(c *Config) { c.Federation.Sites[0].Gateways[0].Endpoint = "192.0.2.1:51820" },
			[]string{"sites[0].gateways[0]", `"192.0.2.1:51820"`, "lab.publicAddresses[aws-gw]"}},
		{"public address outside", func(c *Config) {
			c.Federation.Sites[0].Gateways[0].Endpoint = "192.0.2.1:51820"
			c.Federation.Lab.PublicAddresses = map[string]netip.Addr{"aws-gw": netip.MustParseAddr("192.0.2.1")}
		}, []string{"lab.publicAddresses[aws-gw] 192.0.2.1", "198.51.100.0/24"}},
		{"router address", func(c *Config) { c.Federation.Sites[0].Gateways[0].Endpoint = "198.51.100.1:51820" },
			[]string{"198.51.100.1 is the network, broadcast or lab router address"}},
		{"same public", func(c *Config) { c.Federation.Sites[1].Gateways[0].Endpoint = "198.51.100.10:51820" },
			[]string{"sites[1].gateways[0]", `also gateway "aws-gw"`}},
		{"unparsed", func(c *Config) {
			c.Federation.Sites[1].Prefixes = nil
			c.Federation.Sites[2].Gateways[0].LANAddress = netip.Addr{}
		}, []string{"2 problems", "sites[1] (azure-we): no prefixes", "sites[2].gateways[0].lanAddress: not set"}},
		{"lan outside", func(c *Config) { c.Federation.Sites[0].Gateways[0].LANAddress = netip.MustParseAddr("10.9.0.1") },
			[]string{"sites[0].gateways[0].lanAddress", "10.9.0.1 lies in none"}},
		{"too many hosts", func(c *Config) { c.HostsPerSite = 65 }, []string{"65 hosts per site"}},
		{"small segment", func(c *Config) {
			c.Federation.Sites[0].Prefixes = []netip.Prefix{netip.MustParsePrefix("10.1.0.0/30")}
			c.Federation.Sites[0].Gateways[0].LANAddress = netip.MustParseAddr("10.1.0.1")
		}, []string{"segment 10.1.0.0/30 has no room for 2 hosts"}},
		{"duplicate gateway", func(c *Config) { c.Federation.Sites[1].Gateways[0].Name = "aws-gw" },
			[]string{`sites[1].gateways[0].name "aws-gw"`}},
		{"bad site name", func(c *Config) { c.Federation.Sites[1].Name = "a/b" }, []string{`sites[1].name "a/b"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Federation: threeSites()}
			tc.change(&cfg)
			_, err := newLab(cfg)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// TestLayoutFromExample checks that the parsed example spec yields the lab
// the hand-built one does, so the lab and the parser agree on what Parse
// fills in.
func TestLayoutFromExample(t *testing.T) {
	b, err := os.ReadFile("../../examples/three-sites.yaml")
	if err != nil {
		t.Fatal(err)
	}
	f, err := spec.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	render := func(l *Lab) string {
		var s []string
		for _, n := range l.Nodes() {
			s = append(s, fmt.Sprintf("%v %s %s %s %s %s %s", n.Role, n.Name, n.Site, n.Namespace, n.LAN, n.Public, n.Via))
		}
		return strings.Join(s, "\n")
	}
	parsed, err := newLab(Config{Federation: f, Name: "x3"})
	if err != nil {
		t.Fatal(err)
	}
	hand, err := newLab(Config{Federation: threeSites(), Name: "x3"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := render(parsed), render(hand); got != want {
		t.Errorf("lab from examples/three-sites.yaml:\n%s\nwant:\n%s", got, want)
	}
}
