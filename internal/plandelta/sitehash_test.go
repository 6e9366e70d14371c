package plandelta

import (
	"net/netip"
	"testing"

	"github.com/cespare/xxhash/v2"

	"github.com/fednet/fednet/internal/spec"
)

// TestSiteHashIsOfJSON: siteHash, which encodes into a reused buffer, is
// the hash of the site's JSON as json.Marshal gives it (HTML escaped, no
// newline), which sums of version 2 are defined with.
func TestSiteHashIsOfJSON(t *testing.T) {
	s := spec.Site{Name: "s<0001>&", Provider: "onprem", Gateways: []spec.Gateway{{Name: "g0001", Endpoint: "100.64.1.1:51820", BridgePorts: map[string]string{"lan": "eth1"}}}}
	for range 3 {
		if siteHash(&s) != xxhash.Sum64String(encode(s)) {
			t.Fatal("siteHash is not the hash of the site's JSON")
		}
	}
}

func BenchmarkSiteHash(b *testing.B) {
	s := spec.Site{Name: "s0001", Provider: "onprem", Gateways: []spec.Gateway{{Name: "g0001", Endpoint: "100.64.1.1:51820", BridgePorts: map[string]string{"lan": "eth1"}}}}
	for b.Loop() {
		siteHash(&s)
	}
}

// portedSites returns 1000 sites, and the same each given a bridge port.
func portedSites() (old, new []spec.Site) {
	for i := range 1000 {
		s := spec.Site{Name: "s", Provider: "onprem", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.1.2.0/24")}, Gateways: []spec.Gateway{{Name: "g", Endpoint: "100.64.1.1:51820"}}}
		s.Name, s.Gateways[0].Name = s.Name+string(rune('a'+i%26))+string(rune('a'+i/26%26))+string(rune('a'+i/676)), "g"+string(rune(i))
		old = append(old, s)
		n := s
		n.Gateways = []spec.Gateway{s.Gateways[0]}
		n.Gateways[0].BridgePorts = map[string]string{"lan": "eth1"}
		new = append(new, n)
	}
	return old, new
}

// BenchmarkDiffRepeatedPatch: the edits giving every site of 1000 a
// bridge port, as a manager makes them (once per change).
func BenchmarkDiffRepeatedPatch(b *testing.B) {
	old, new := portedSites()
	for b.Loop() {
		if e := diffEdits(old, new, true); len(e.Ops) != 1 || len(e.Ops[0].Patch) != 1000 {
			b.Fatalf("edits %+v", e.Ops)
		}
	}
}

// BenchmarkApplyRepeatedPatch: a bridge port given to every site of 1000
// (one patch, repeated), as an agent applies it.
func BenchmarkApplyRepeatedPatch(b *testing.B) {
	old, new := portedSites()
	e := diffEdits(old, new, true)
	if len(e.Ops) != 1 || len(e.Ops[0].Patch) != 1000 {
		b.Fatalf("edits %+v", e.Ops)
	}
	for b.Loop() {
		if _, err := e.apply(old); err != nil {
			b.Fatal(err)
		}
	}
}
