package plan_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/fednet/fednet/internal/backend"
	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/spec"
)

var update = flag.Bool("update", false, "rewrite golden files")

// testKeys gives every gateway a fixed fake public key, so golden files are
// stable. Public keys are opaque 32 bytes to the planner.
func testKeys(f *spec.Federation) plan.Inputs {
	in := plan.Inputs{PublicKeys: map[string]plan.Key{}}
	for _, s := range f.Sites {
		for _, g := range s.Gateways {
			in.PublicKeys[g.Name] = plan.Key(sha256.Sum256([]byte(g.Name)))
		}
	}
	return in
}

func load(t *testing.T, name string) *spec.Federation {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "examples", name))
	if err != nil {
		t.Fatal(err)
	}
	f, err := spec.Parse(data)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return f
}

// render is what `fednet plan` prints, in text and JSON.
func render(t *testing.T, f *spec.Federation) (text, js []byte) {
	t.Helper()
	gws, err := plan.Compute(f, testKeys(f))
	if err != nil {
		t.Fatal(err)
	}
	var tb, jb bytes.Buffer
	tb.WriteString(plan.AddressPlan(f))
	for _, g := range gws {
		tb.WriteString("\n" + g.String())
		jb.Write(g.JSON())
	}
	return tb.Bytes(), jb.Bytes()
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./internal/plan -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the plan computed now (go test ./internal/plan -update rewrites it after review):\n--- got\n%s", path, got)
	}
}

func TestGolden(t *testing.T) {
	for _, ex := range []string{"three-sites", "five-sites", "bridged", "clouds", "interop"} {
		t.Run(ex, func(t *testing.T) {
			text, js := render(t, load(t, ex+".yaml"))
			golden(t, ex+".txt", text)
			golden(t, ex+".json", js)
		})
	}
}

func TestDeterministic(t *testing.T) {
	for _, ex := range []string{"three-sites", "five-sites", "bridged"} {
		text1, js1 := render(t, load(t, ex+".yaml"))
		for i := 0; i < 20; i++ {
			text2, js2 := render(t, load(t, ex+".yaml"))
			if !bytes.Equal(text1, text2) || !bytes.Equal(js1, js2) {
				t.Fatalf("%s: run %d rendered differently", ex, i)
			}
		}
	}
}

func TestJSONRoundTrip(t *testing.T) {
	for _, ex := range []string{"five-sites.yaml", "clouds.yaml"} { // clouds: public-side admissions
		f := load(t, ex)
		gws, err := plan.Compute(f, testKeys(f))
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range gws {
			back, err := plan.Decode(g.JSON())
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(back.JSON(), g.JSON()) || !reflect.DeepEqual(back.Firewall.Admit, g.Firewall.Admit) {
				t.Errorf("%s: JSON round trip changed the plan", g.Name)
			}
		}
	}
	if _, err := plan.Decode([]byte(`{"version":2,"gateway":"x","tunnels":[{"name":"fed0"}],"bogus":1}`)); err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Errorf("unknown field accepted or not named: %v", err)
	}
}

// An agent refuses a plan of a format it does not know, saying what to do;
// it never applies part of it.
func TestDecodeVersion(t *testing.T) {
	f := load(t, "three-sites.yaml")
	g, err := plan.ForGateway(f, testKeys(f), "aws-gw")
	if err != nil {
		t.Fatal(err)
	}
	if g.Version != plan.Version {
		t.Fatalf("computed plan has version %d, want %d", g.Version, plan.Version)
	}
	newer := g
	newer.Version = plan.Version + 1
	tests := []struct {
		name string
		data []byte
		msg  string
	}{
		{"newer", newer.JSON(), fmt.Sprintf("format %d, newer than the %d this fednet understands; upgrade fednet", plan.Version+1, plan.Version)},
		{"format 1", []byte(`{"gateway":"aws-gw","interface":{"name":"fed0"}}`), "no version field, so it is of format 1"},
		{"older", []byte(`{"version":1,"gateway":"aws-gw"}`), "format 1 is older"},
		{"no tunnels", []byte(fmt.Sprintf(`{"version":%d,"gateway":"aws-gw"}`, plan.Version)), "missing gateway or tunnels"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := plan.Decode(tt.data); err == nil || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("Decode = %v, want an error with %q", err, tt.msg)
			}
		})
	}
}

func byName(gws []plan.Gateway) map[string]plan.Gateway {
	m := map[string]plan.Gateway{}
	for _, g := range gws {
		m[g.Name] = g
	}
	return m
}

// TestSemantics checks the rules golden files could hide.
func TestSemantics(t *testing.T) {
	f := load(t, "five-sites.yaml")
	gws, err := plan.Compute(f, testKeys(f))
	if err != nil {
		t.Fatal(err)
	}
	m := byName(gws)
	peers := func(g string) map[string]plan.Peer {
		out := map[string]plan.Peer{}
		for _, p := range m[g].Peers {
			out[p.Gateway] = p
		}
		return out
	}
	// Disabled link: no peer either way.
	if _, ok := peers("edge-1-gw")["aws-us-gw"]; ok {
		t.Error("edge-1 peers with aws-us over a disabled link")
	}
	if _, ok := peers("aws-us-gw")["edge-1-gw"]; ok {
		t.Error("aws-us peers with edge-1 over a disabled link")
	}
	// NAT: keepalive on both sides of links to hq, none elsewhere.
	if p := peers("aws-eu-gw")["hq-gw"]; p.WireGuard.PersistentKeepalive != plan.KeepaliveNAT || p.Endpoint != "" {
		t.Errorf("aws-eu's peer hq-gw = %+v, want keepalive %d and no endpoint", p, plan.KeepaliveNAT)
	}
	if p := peers("hq-gw")["aws-eu-gw"]; p.WireGuard.PersistentKeepalive != plan.KeepaliveNAT || p.Endpoint == "" {
		t.Errorf("hq's peer aws-eu-gw = %+v, want keepalive and an endpoint", p)
	}
	if p := peers("aws-eu-gw")["hel1-gw"]; p.WireGuard.PersistentKeepalive != 0 {
		t.Errorf("keepalive between public gateways: %+v", p)
	}
	// Allowed IPs: only prefixes of shared routed networks. hq and edge-1
	// share none: only the transit address.
	if p := peers("hq-gw")["edge-1-gw"]; len(p.AllowedIPs) != 1 || p.AllowedIPs[0].Bits() != 32 {
		t.Errorf("hq's peer edge-1 allowed %v, want only its transit /32", p.AllowedIPs)
	}
	if p := peers("aws-eu-gw")["edge-1-gw"]; len(p.AllowedIPs) != 2 || p.AllowedIPs[0].String() != "10.6.16.0/20" {
		t.Errorf("aws-eu's peer edge-1 allowed %v, want 10.6.16.0/20 and its transit address", p.AllowedIPs)
	}
	// Every route goes to a peer whose allowed IPs carry it, and every
	// forwarded flow has the local site on one side or is relayed: the
	// gateway routes both of its sides into the tunnel.
	for _, g := range gws {
		ps := map[string]plan.Peer{}
		for _, p := range g.Peers {
			ps[p.Gateway] = p
		}
		for _, r := range g.Routes {
			found := false
			for _, a := range ps[r.Via].AllowedIPs {
				found = found || a == r.Destination
			}
			if !found {
				t.Errorf("%s: route %s via %s not in the peer's allowed IPs", g.Name, r.Destination, r.Via)
			}
		}
		routed := map[netip.Prefix]bool{}
		for _, r := range g.Routes {
			routed[r.Destination] = true
		}
		for _, fl := range g.Firewall.Flows {
			local := false
			for _, l := range g.Firewall.Local {
				local = local || l == fl.Source || l == fl.Destination
			}
			if !local && !(routed[fl.Source] && routed[fl.Destination]) {
				t.Errorf("%s: flow %s -> %s neither touches the local site nor is relayed", g.Name, fl.Source, fl.Destination)
			}
		}
	}
	// Link cost: aws-eu–hel1 costs 10, so their traffic takes aws-us
	// (1 + 1) and aws-us forwards it from tunnel to tunnel.
	for _, tc := range []struct{ gw, dst, via string }{
		{"aws-eu-gw", "10.7.0.0/24", "aws-us-gw"},
		{"hel1-gw", "10.1.0.0/24", "aws-us-gw"},
		{"aws-us-gw", "10.7.0.0/24", "hel1-gw"},
		{"aws-us-gw", "10.1.0.0/24", "aws-eu-gw"},
	} {
		if !slices.ContainsFunc(m[tc.gw].Routes, func(r plan.Route) bool { return r.Destination.String() == tc.dst && r.Via == tc.via }) {
			t.Errorf("%s: no route to %s via %s; routes %v", tc.gw, tc.dst, tc.via, m[tc.gw].Routes)
		}
	}
	// MTU: edge-1 has a DNS endpoint, so its links may run over IPv6.
	if got := m["edge-1-gw"].Tunnels[0].MTU; got != 1420 {
		t.Errorf("edge-1 MTU %d, want 1420 (IPv6 outer assumed for a DNS endpoint)", got)
	}
	if got := m["aws-us-gw"].Tunnels[0].MTU; got != 1440 {
		t.Errorf("aws-us MTU %d, want 1440 (all links IPv4)", got)
	}
	if got := m["aws-us-gw"].Firewall.MSS; got != 1400 {
		t.Errorf("aws-us MSS %d, want 1400", got)
	}
}

// TestBridged checks the bridges of examples/bridged.yaml: one per member
// site's first gateway, flooding to the other members' transit addresses,
// one MTU for the whole segment, and nothing routed for the bridged subnet.
func TestBridged(t *testing.T) {
	f := load(t, "bridged.yaml")
	gws, err := plan.Compute(f, testKeys(f))
	if err != nil {
		t.Fatal(err)
	}
	subnet := f.Networks[1].Subnet
	transit := map[string]netip.Addr{}
	for _, s := range f.Sites {
		transit[s.Gateways[0].Name] = s.Gateways[0].TransitAddress
	}
	mtu := 0
	for _, g := range gws {
		if len(g.Bridges) != 1 {
			t.Fatalf("%s has %d bridges, want 1:\n%s", g.Name, len(g.Bridges), g)
		}
		b := g.Bridges[0]
		var want []netip.Addr
		for name, a := range transit {
			if name != g.Name {
				want = append(want, a)
			}
		}
		slices.SortFunc(want, netip.Addr.Compare)
		if len(b.VXLANs) != 1 {
			t.Fatalf("%s: bridge %+v, want one VXLAN device (full mesh)", g.Name, b)
		}
		v := b.VXLANs[0]
		if !slices.Equal(v.Remotes, want) {
			t.Errorf("%s floods to %v, want the other members %v", g.Name, v.Remotes, want)
		}
		if b.Network != "lan" || b.VNI != 200 || b.Name != "fbr200" || v.Name != "fvx200" || b.Port != "b1" || v.UDPPort != 4789 || v.Local != transit[g.Name] || b.Relay {
			t.Errorf("%s: bridge %+v", g.Name, b)
		}
		if mtu == 0 {
			mtu = b.MTU
		}
		if b.MTU != mtu || b.MTU != g.Tunnels[0].MTU-plan.VXLANOverhead(plan.IPv4) {
			t.Errorf("%s: bridge MTU %d, want %d on every member (tunnel %d - VXLAN 50)", g.Name, b.MTU, mtu, g.Tunnels[0].MTU)
		}
		for _, r := range g.Routes {
			if r.Destination.Overlaps(subnet) {
				t.Errorf("%s routes the bridged subnet: %v", g.Name, r)
			}
		}
		for _, fl := range g.Firewall.Flows {
			if fl.Network == "lan" || fl.Source.Overlaps(subnet) || fl.Destination.Overlaps(subnet) {
				t.Errorf("%s forwards the bridged network: %v", g.Name, fl)
			}
		}
	}
}

// TestBridgedMembers checks the edges: a gateway of a site outside the
// network and a site's second gateway get no bridge, a removed member is
// flooded to by nobody, and the smallest tunnel MTU sets every member's.
func TestBridgedMembers(t *testing.T) {
	f := load(t, "bridged.yaml")
	f.Networks[1].Sites = []string{"aws-eu", "azure-we"}
	f.Sites[0].Gateways = append(f.Sites[0].Gateways, spec.Gateway{
		Name: "aws-gw2", Endpoint: "[2001:db8::1]:51820",
		TransitAddress: netip.MustParseAddr("10.255.7.7"), BridgePorts: map[string]string{"lan": "b1"},
	})
	gws, err := plan.Compute(f, testKeys(f))
	if err != nil {
		t.Fatal(err)
	}
	m := byName(gws)
	for _, name := range []string{"onprem-gw", "aws-gw2"} {
		if n := len(m[name].Bridges); n != 0 {
			t.Errorf("%s has %d bridges, want none", name, n)
		}
	}
	// aws-gw2's IPv6 endpoint makes every tunnel 1420 but its own: the
	// segment takes the smallest, 1420 - 50.
	for _, name := range []string{"aws-gw", "azure-gw"} {
		if b := m[name].Bridges; len(b) != 1 || b[0].MTU != 1370 || len(b[0].VXLANs) != 1 || len(b[0].VXLANs[0].Remotes) != 1 {
			t.Errorf("%s bridges %+v, want one with MTU 1370 and one remote", name, b)
		}
	}
	in := testKeys(f)
	in.Removed = map[string]bool{"azure-gw": true}
	gws, err = plan.Compute(f, in)
	if err != nil {
		t.Fatal(err)
	}
	if b := byName(gws)["aws-gw"].Bridges; len(b) != 1 || len(b[0].VXLANs) != 1 || len(b[0].VXLANs[0].Remotes) != 0 {
		t.Errorf("aws-gw bridges %+v, want one flooding to nobody (azure-gw removed)", b)
	}
}

func TestMTU(t *testing.T) {
	f := load(t, "three-sites.yaml")
	for _, tc := range []struct {
		underlay, want int
	}{{1500, 1440}, {9001, 8941}, {1420, 1360}} {
		f.Overlay.UnderlayMTU = tc.underlay
		gws, err := plan.Compute(f, plan.Inputs{})
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range gws {
			if g.Tunnels[0].MTU != tc.want || g.Firewall.MSS != tc.want-40 {
				t.Errorf("underlay %d: %s mtu %d mss %d, want %d/%d", tc.underlay, g.Name, g.Tunnels[0].MTU, g.Firewall.MSS, tc.want, tc.want-40)
			}
		}
	}
}

func TestMissingKeySkipsNothingButMarksPeer(t *testing.T) {
	f := load(t, "three-sites.yaml")
	gws, err := plan.Compute(f, plan.Inputs{})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range gws {
		if len(g.Peers) != 2 {
			t.Fatalf("%s has %d peers, want 2", g.Name, len(g.Peers))
		}
		for _, p := range g.Peers {
			if !p.WireGuard.PublicKey.IsZero() {
				t.Errorf("%s: peer %s has a key nobody gave", g.Name, p.Gateway)
			}
		}
		if !strings.Contains(g.String(), "not known yet") {
			t.Errorf("%s: rendering does not say the key is missing", g.Name)
		}
	}
}

func TestKeyText(t *testing.T) {
	k := plan.Key(sha256.Sum256([]byte("x")))
	b, _ := json.Marshal(k)
	var back plan.Key
	if err := json.Unmarshal(b, &back); err != nil || back != k {
		t.Fatalf("round trip %s: %v", b, err)
	}
	for _, bad := range []string{"!!", "AAAA"} {
		if _, err := plan.ParseKey(bad); err == nil {
			t.Errorf("ParseKey(%q) accepted", bad)
		}
	}
}

func TestRemovedGateway(t *testing.T) {
	f := load(t, "three-sites.yaml")
	in := testKeys(f)
	in.Removed = map[string]bool{"onprem-gw": true}
	gws, err := plan.Compute(f, in)
	if err != nil {
		t.Fatal(err)
	}
	if len(gws) != 2 {
		t.Fatalf("%d plans, want 2 (onprem-gw removed)", len(gws))
	}
	for _, g := range gws {
		if strings.Contains(g.String(), "onprem-gw") || strings.Contains(g.String(), "10.5.0.0/24 dev") {
			t.Errorf("%s still knows the removed gateway:\n%s", g.Name, g)
		}
	}
	if _, err := plan.ForGateway(f, in, "onprem-gw"); err == nil {
		t.Error("a removed gateway got a plan")
	}
}

// A second backend is a table entry: the spec accepts its name, the plan
// puts the links on it and takes MTU and MSS from its overhead and the
// public ports from its table entry.
func TestOtherBackend(t *testing.T) {
	if err := backend.Register(backend.Info{Name: "fake", Overhead: []backend.Term{{Label: "UDP", Bytes: 8}, {Label: "fake", Bytes: 72}},
		Public: func(p int) []backend.Port { return []backend.Port{{Protocol: backend.TCP, Port: p}} }}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { backend.Unregister("fake") })
	data, err := os.ReadFile(filepath.Join("..", "..", "examples", "three-sites.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := spec.Parse([]byte(strings.Replace(string(data), "  underlayMTU: 1500\n", "  underlayMTU: 1500\n  backend: fake\n", 1)))
	if err != nil {
		t.Fatal(err)
	}
	g, err := plan.ForGateway(f, testKeys(f), "aws-gw")
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Tunnels) != 1 || g.Tunnels[0].Backend != "fake" || g.Tunnels[0].MTU != 1500-20-80 {
		t.Errorf("tunnels = %+v, want one fake tunnel of MTU %d", g.Tunnels, 1500-20-80)
	}
	if !strings.Contains(g.Tunnels[0].MTUReason, "fake 72") || g.Firewall.MSS != 1400-40 {
		t.Errorf("mtu reason %q, mss %d", g.Tunnels[0].MTUReason, g.Firewall.MSS)
	}
	for _, p := range g.Peers {
		if p.Backend != "fake" || !p.WireGuard.PublicKey.IsZero() {
			t.Errorf("peer %s: backend %s, WireGuard %+v; want fake without WireGuard parameters", p.Gateway, p.Backend, p.WireGuard)
		}
	}
	if want := []backend.Port{{Protocol: backend.TCP, Port: 51820}}; !slices.Equal(g.Firewall.Public, want) {
		t.Errorf("public = %v, want %v", g.Firewall.Public, want)
	}
}
