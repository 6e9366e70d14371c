package plandelta

import (
	"net/netip"
	"strings"
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

// TestDiffEditsComparesAsJSON: diffEdits, which compares entries in their
// binary form, copies an entry whose JSON is unchanged though its Go value
// is not (an empty list or map where there was none, both left out), and
// patches one whose JSON changed in a single field.
func TestDiffEditsComparesAsJSON(t *testing.T) {
	old, _ := portedSites()
	old = old[:3]
	new := make([]spec.Site, len(old))
	copy(new, old)
	new[0].Prefixes = nil // omitempty: as the empty list
	old[0].Prefixes = []netip.Prefix{}
	new[1].Gateways = []spec.Gateway{new[1].Gateways[0]}
	new[1].Gateways[0].BridgePorts = map[string]string{} // omitempty: as none
	new[2].Gateways = []spec.Gateway{new[2].Gateways[0]}
	new[2].Gateways[0].Endpoint = "100.64.9.9:51820"
	e := diffEdits(old, new, true)
	if len(e.Ops) != 1 || e.Ops[0].From != 0 || e.Ops[0].Count != 2 || len(e.Ops[0].Patch) != 1 || len(e.Ops[0].Insert) != 0 {
		t.Fatalf("edits %s, want sites 0 and 1 copied and site 2 patched", encode(e))
	}
	if got := encode(e.Ops[0].Patch[0]); !strings.Contains(got, `"endpoint"`) || !strings.Contains(got, "100.64.9.9") || strings.Contains(got, "bridgePorts") {
		t.Errorf("patch %s, want the endpoint set", got)
	}
	got, err := e.apply(old)
	if err != nil || encode(got) != encode(new) {
		t.Errorf("applied: %s (%v), want %s", encode(got), err, encode(new))
	}
}
