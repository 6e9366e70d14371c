package lab

import (
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/fednet/fednet/internal/spec"
)

// segmentsConfig returns threeSites with a drop-unknown-MACs fabric on
// aws-eu, an extra segment on azure-we and a bridged network over aws-eu
// and azure-we.
func segmentsConfig(name string) Config {
	return Config{
		Federation: threeSites(),
		Name:       name,
		Fabrics:    map[string]Fabric{"aws-eu": {DropUnknownMACs: true}},
		Segments:   map[string][]netip.Prefix{"azure-we": {netip.MustParsePrefix("10.2.1.0/24")}},
		Bridged: []BridgedNetwork{{
			Name:   "l2",
			Subnet: netip.MustParsePrefix("10.9.0.0/24"),
			Sites:  []string{"aws-eu", "azure-we"},
		}},
	}
}

func TestLayoutSegments(t *testing.T) {
	plain, err := newLab(Config{Federation: threeSites(), Name: "x1"})
	if err != nil {
		t.Fatal(err)
	}
	l, err := newLab(segmentsConfig("x1"))
	if err != nil {
		t.Fatal(err)
	}
	nodes := l.Nodes()
	if len(nodes) < len(plain.Nodes()) {
		t.Fatalf("%d nodes, fewer than without segments", len(nodes))
	}
	for i, n := range plain.Nodes() {
		if *n != *nodes[i] {
			t.Errorf("node %d: %+v, want %+v as without segments", i, nodes[i], n)
		}
	}
	var got []string
	for _, n := range nodes[len(plain.Nodes()):] {
		got = append(got, n.Role.String()+" "+n.Name+" "+n.Site+" "+n.Namespace+" lan="+n.LAN.String()+" via="+n.Via.String())
	}
	want := []string{
		"switch azure-we-s2-lan azure-we fnlab-x1-lan-azure-we-s2 lan=invalid Prefix via=invalid IP",
		"host azure-we-s2-h1 azure-we fnlab-x1-h-azure-we-s2-1 lan=10.2.1.1/24 via=10.2.1.254",
		"host azure-we-s2-h2 azure-we fnlab-x1-h-azure-we-s2-2 lan=10.2.1.2/24 via=10.2.1.254",
		"switch l2-aws-eu-br aws-eu fnlab-x1-br-l2-aws-eu lan=invalid Prefix via=invalid IP",
		"host l2-aws-eu-h1 aws-eu fnlab-x1-bh-l2-aws-eu-1 lan=10.9.0.1/24 via=invalid IP",
		"host l2-aws-eu-h2 aws-eu fnlab-x1-bh-l2-aws-eu-2 lan=10.9.0.2/24 via=invalid IP",
		"switch l2-azure-we-br azure-we fnlab-x1-br-l2-azure-we lan=invalid Prefix via=invalid IP",
		"host l2-azure-we-h1 azure-we fnlab-x1-bh-l2-azure-we-1 lan=10.9.0.17/24 via=invalid IP",
		"host l2-azure-we-h2 azure-we fnlab-x1-bh-l2-azure-we-2 lan=10.9.0.18/24 via=invalid IP",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("segment nodes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if port, addr, ok := l.SegmentPort("azure-we", 2); !ok || port != "lan1" || addr != netip.MustParsePrefix("10.2.1.254/24") {
		t.Errorf("SegmentPort(azure-we, 2) = %s %s %v", port, addr, ok)
	}
	if _, _, ok := l.SegmentPort("aws-eu", 2); ok {
		t.Error("SegmentPort(aws-eu, 2) found a segment")
	}
	if len(l.SegmentHosts("azure-we", 1)) != 2 || len(l.SegmentHosts("azure-we", 2)) != 2 || l.SegmentHosts("azure-we", 3) != nil {
		t.Error("SegmentHosts lookups wrong")
	}
	if h := l.BridgedHosts("l2", "azure-we"); len(h) != 2 || h[0].Name != "l2-azure-we-h1" || l.BridgedHosts("l2", "lab") != nil {
		t.Errorf("BridgedHosts lookups wrong: %v", h)
	}
	if p := l.BridgedPort("l2", "aws-gw"); p != "b1" {
		t.Errorf("BridgedPort(l2, aws-gw) = %q, want b1", p)
	}
	if p := l.BridgedPort("l2", "onprem-gw"); p != "" {
		t.Errorf("BridgedPort(l2, onprem-gw) = %q, want none", p)
	}
}

func TestLayoutSegmentErrors(t *testing.T) {
	p := netip.MustParsePrefix
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   []string
	}{
		{"fabric site", func(c *Config) { c.Fabrics = map[string]Fabric{"nope": {}} }, []string{`Fabrics["nope"]: no such site`}},
		{"segment site", func(c *Config) { c.Segments = map[string][]netip.Prefix{"nope": {p("10.7.0.0/24")}} }, []string{`Segments["nope"]: no such site`}},
		{"segment v6", func(c *Config) { c.Segments["azure-we"] = []netip.Prefix{p("fd00::/64")} }, []string{`Segments["azure-we"][0] fd00::/64: want an IPv4 prefix`}},
		{"segment overlaps own", func(c *Config) { c.Segments["azure-we"] = []netip.Prefix{p("10.2.0.128/25")} }, []string{`Segments["azure-we"][0]`, "overlaps segment 10.2.0.0/24 of the site"}},
		{"segment overlaps other site", func(c *Config) { c.Segments["azure-we"] = []netip.Prefix{p("10.1.0.0/24")} }, []string{"overlaps prefix 10.1.0.0/24 of site \"aws-eu\""}},
		{"segment too small", func(c *Config) { c.Segments["azure-we"] = []netip.Prefix{p("10.2.1.0/30")} }, []string{"10.2.1.0/30: no room for 2 hosts"}},
		{"bridged name", func(c *Config) { c.Bridged[0].Name = "a b" }, []string{`Bridged[0] (a b): name "a b"`}},
		{"bridged twice", func(c *Config) { c.Bridged = append(c.Bridged, c.Bridged[0]) }, []string{"Bridged[1] (l2): another bridged network has this name"}},
		{"bridged subnet", func(c *Config) { c.Bridged[0].Subnet = netip.Prefix{} }, []string{"Bridged[0] (l2): Subnet invalid Prefix: want an IPv4 prefix"}},
		{"bridged no sites", func(c *Config) { c.Bridged[0].Sites = nil }, []string{"Sites: no member site"}},
		{"bridged site", func(c *Config) { c.Bridged[0].Sites = []string{"aws-eu", "nope", "aws-eu"} }, []string{`Sites[1] "nope": no such site`, `Sites[2] "aws-eu": listed twice`}},
		{"bridged hosts", func(c *Config) { c.Bridged[0].HostsPerSite = 16 }, []string{"16 hosts per site; use 0 to 15"}},
		{"bridged mtu", func(c *Config) { c.Bridged[0].MTU = 1000 }, []string{"Bridged[0] (l2): MTU 1000: use 1280 to 65535"}},
		{"bridged small", func(c *Config) { c.Bridged[0].Subnet = p("10.9.0.0/28") }, []string{"Subnet 10.9.0.0/28 has no room for host 1 of member site 1 (azure-we)"}},
		{"namespace clash", func(c *Config) {
			c.Federation.Sites[2].Name = "azure-we-s2"
			c.Federation.Networks[0].Sites[2] = "azure-we-s2"
			c.Segments["azure-we"] = []netip.Prefix{p("10.2.1.0/24")}
		}, []string{"namespace fnlab-lab-lan-azure-we-s2 is taken"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := segmentsConfig("")
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

// A site whose spec says fabric: dropsUnknownMACs gets a fabric that drops
// unknown MACs without Config.Fabrics saying so.
func TestSpecFabric(t *testing.T) {
	f := threeSites()
	f.Sites[1].Fabric = spec.FabricDropsUnknownMACs
	l, err := newLab(Config{Federation: f, Name: "x1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range f.Sites {
		if got, want := l.fabrics[s.Name].DropUnknownMACs, s.DropsUnknownMACs(); got != want {
			t.Errorf("site %s: lab fabric drops unknown MACs = %v, want %v (spec fabric %q)", s.Name, got, want, s.Fabric)
		}
	}
}

// TestBridgedMTU: hosts of a bridged network get the planned network MTU
// unless the config says otherwise; a lab-only network gets Ethernet's.
func TestBridgedMTU(t *testing.T) {
	cfg := segmentsConfig("x2")
	f := cfg.Federation
	f.Sites[0].Gateways[0].BridgePorts = map[string]string{"l2": "b1"}
	f.Sites[1].Gateways[0].BridgePorts = map[string]string{"l2": "b1"}
	f.Networks = append(f.Networks, spec.Network{Name: "l2", ID: 200, Mode: spec.Bridged, Sites: []string{"aws-eu", "azure-we"}})
	l, err := newLab(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// underlay 1500 - IPv4 20 - UDP 8 - WireGuard 32 - VXLAN 50
	if got := l.BridgedMTU("l2"); got != 1390 {
		t.Errorf("BridgedMTU(l2) = %d, want the planned 1390", got)
	}
	cfg.Bridged[0].MTU = 1400
	if l, err = newLab(cfg); err != nil || l.BridgedMTU("l2") != 1400 {
		t.Errorf("explicit MTU 1400: %v, BridgedMTU %d", err, l.BridgedMTU("l2"))
	}
	cfg = segmentsConfig("x3")
	if l, err = newLab(cfg); err != nil || l.BridgedMTU("l2") != DefaultMTU || l.BridgedMTU("nope") != 0 {
		t.Errorf("network not in the spec: %v, BridgedMTU %d, want %d", err, l.BridgedMTU("l2"), DefaultMTU)
	}
}

// Every gateway of a bridged site has a port on the site's bridged
// segment, so whichever gateway is active can bridge it.
func TestLayoutBridgedEveryGateway(t *testing.T) {
	l, err := newLab(haConfig(t, "x4"))
	if err != nil {
		t.Fatal(err)
	}
	for _, gw := range []string{"aws-gw", "azure-gw", "onprem-gw1", "onprem-gw2"} {
		if p := l.BridgedPort("lan", gw); p != "b1" {
			t.Errorf("BridgedPort(lan, %s) = %q, want b1", gw, p)
		}
	}
	if p := l.BridgedPort("lan", "gcp-gw"); p != "" {
		t.Errorf("BridgedPort(lan, gcp-gw) = %q, want none (gcp-ew is not a member)", p)
	}
}

// haConfig returns the lab of examples/ha.yaml with its bridged network
// lan, as the demo and the fault suite build it.
func haConfig(t *testing.T, name string) Config {
	t.Helper()
	b, err := os.ReadFile("../../examples/ha.yaml")
	if err != nil {
		t.Fatal(err)
	}
	f, err := spec.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return Config{Federation: f, Name: name, Bridged: []BridgedNetwork{{
		Name: "lan", Subnet: netip.MustParsePrefix("192.168.50.0/24"), Sites: []string{"aws-eu", "azure-we", "lab"},
	}}}
}
