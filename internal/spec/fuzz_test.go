package spec

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse checks that Parse never panics, and that a nil error always
// comes with a complete, valid Federation. Run it for longer with
//
//	go test -run=^$ -fuzz=FuzzParse -fuzztime=10s ./internal/spec
func FuzzParse(f *testing.F) {
	examples, err := filepath.Glob(filepath.Join("..", "..", "examples", "*.yaml"))
	if err != nil {
		f.Fatal(err)
	}
	if len(examples) == 0 {
		f.Fatal("no examples/*.yaml to seed the corpus")
	}
	for _, name := range examples {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range []string{
		base,
		threeSites,
		"",
		"---\n",
		"[]",
		"apiVersion: fednet/v1\nkind: [Federation\n",
		"apiVersion: fednet/v1\n\tkind: Federation\n",
		"sites: [{name: a, prefixes: [10.0.0.0/0]}]\noverlay: {transit: 0.0.0.0/0}\n",
		"overlay: {transit: 10.0.0.0/31}\nsites: [{gateways: [{}, {}, {}]}]\n",
		"a: &a [*a]\n",
		"sites: &s [*s]\n",
		"<<: {name: x}\n",
		"networks: [{id: 0x7fffffffffffffff}]\n",
		"lab: ~\nproviders: {x: -1}\n",
		"topology: {links: [{between: [a, a]}, {between: []}, {}]}\n",
		base + "---\n" + base,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fed, err := Parse(data)
		if err != nil {
			if fed != nil {
				t.Fatal("Parse returned a Federation together with an error")
			}
			var e *Error
			if !errors.As(err, &e) || len(e.Problems) == 0 {
				t.Fatalf("error %T %v is not an *Error with problems", err, err)
			}
			return
		}
		if fed == nil {
			t.Fatal("Parse returned nil Federation and nil error")
		}
		checkComplete(t, fed)
	})
}

// checkComplete asserts the promises Parse makes about an accepted spec.
func checkComplete(t *testing.T, f *Federation) {
	t.Helper()
	if f.APIVersion != APIVersion || f.Kind != Kind || f.Name == "" {
		t.Fatalf("accepted header %q %q %q", f.APIVersion, f.Kind, f.Name)
	}
	o := f.Overlay
	if !o.Supernet.IsValid() || !o.Transit.IsValid() || !o.Transit.Addr().Is4() || o.Transit.Bits() > 30 ||
		o.ListenPort < 1 || o.ListenPort > 65535 || o.UnderlayMTU < MinUnderlayMTU || o.Interface == "" {
		t.Fatalf("accepted overlay %+v", o)
	}
	if f.Topology.Mode != "mesh" {
		t.Fatalf("accepted topology mode %q", f.Topology.Mode)
	}
	transit := map[string]bool{}
	for _, s := range f.Sites {
		if len(s.Prefixes) == 0 || len(s.Gateways) == 0 && s.External == nil || len(s.Gateways) > 0 && s.External != nil {
			t.Fatalf("accepted site %+v without prefixes, or with neither gateways nor external, or with both", s)
		}
		for _, p := range s.Prefixes {
			if !p.IsValid() || !o.Supernet.Contains(p.Addr()) || p.Overlaps(o.Transit) {
				t.Fatalf("accepted prefix %v of site %s", p, s.Name)
			}
		}
		for _, g := range s.Gateways {
			if !o.Transit.Contains(g.TransitAddress) || transit[g.TransitAddress.String()] {
				t.Fatalf("gateway %s transit address %v", g.Name, g.TransitAddress)
			}
			transit[g.TransitAddress.String()] = true
			if !g.LANAddress.IsValid() {
				t.Fatalf("gateway %s has no LAN address", g.Name)
			}
			if (g.Endpoint == "") == !g.BehindNAT {
				t.Fatalf("gateway %s endpoint %q behindNAT %v", g.Name, g.Endpoint, g.BehindNAT)
			}
		}
	}
	for _, n := range f.Networks {
		if n.Mode != Routed && n.Mode != Bridged || n.ID < 1 || n.ID > MaxNetworkID || len(n.Sites) == 0 ||
			n.Mode == Routed && n.Subnet.IsValid() {
			t.Fatalf("accepted network %+v", n)
		}
		if n.Mode == Bridged {
			for _, name := range n.Sites {
				s, _ := f.Site(name)
				if port := s.Gateways[0].BridgePorts[n.Name]; !validInterface(port) || port == f.Overlay.Interface {
					t.Fatalf("accepted bridged network %s with port %q on site %s", n.Name, port, name)
				}
			}
		}
		for _, a := range n.Sites {
			for _, b := range n.Sites {
				sa, _ := f.Site(a)
				sb, _ := f.Site(b)
				// An external site links to its via gateway's site only;
				// the rest is relayed.
				if a != b && !f.LinkEnabled(a, b) && sa.External == nil && sb.External == nil {
					t.Fatalf("accepted network %s over disabled link %s-%s", n.Name, a, b)
				}
			}
		}
	}
	for _, l := range f.Topology.Links {
		if l.Cost < 1 {
			t.Fatalf("accepted link %+v", l)
		}
	}
	if f.Lab != nil && (f.Lab.HostsPerSite < 0 || f.Lab.HostsPerSite > MaxHostsPerSite) {
		t.Fatalf("accepted lab %+v", f.Lab)
	}
}
