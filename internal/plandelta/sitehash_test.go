package plandelta

import (
	"encoding/json"
	"net/netip"
	"slices"
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

// TestPortsPatchAsGeneral: a patch setting only gateways' bridge ports,
// applied without reflection (portsPatch), gives each site exactly what
// the general path gives, leaves the base's gateways alone, and refuses
// a gateway the site lacks as the general path does, and never lets one
// patched site's gateways grow into another's; a patch of more than
// ports is not taken for one.
func TestPortsPatchAsGeneral(t *testing.T) {
	old, _ := portedSites()
	two := old[1]
	two.Gateways = append(slices.Clone(two.Gateways), spec.Gateway{Name: "second", BridgePorts: map[string]string{"x": "eth9"}})
	sites := []spec.Site{old[0], two, {Name: "none"}}
	patches := []*Patch{
		{Edit: map[string]*Patch{"gateways": {Elems: map[int]*Patch{0: {Set: map[string]json.RawMessage{"bridgePorts": json.RawMessage(`{"lan":"eth1"}`)}}}}}},
		{Edit: map[string]*Patch{"gateways": {Elems: map[int]*Patch{1: {Set: map[string]json.RawMessage{"bridgePorts": json.RawMessage(`null`)}}, 0: {Set: map[string]json.RawMessage{"bridgePorts": json.RawMessage(`{"b":"eth2","a":"eth1"}`)}}}}}},
		{Edit: map[string]*Patch{"gateways": {Elems: map[int]*Patch{3: {Set: map[string]json.RawMessage{"bridgePorts": json.RawMessage(`{}`)}}}}}},
	}
	var pp portsPatches
	for pi, p := range patches {
		if pp.of(p) == nil {
			t.Fatalf("patch %d: not taken for a patch of bridge ports", pi)
		}
		for si, s := range sites {
			fast, general := s, s
			errFast := pp.of(p).apply(&fast, &pp)
			errGeneral := applyPatchTo(&general, p, patchCache{})
			if (errFast == nil) != (errGeneral == nil) {
				t.Fatalf("patch %d, site %d: error %v, the general path's %v", pi, si, errFast, errGeneral)
			}
			if errFast == nil && encode(fast) != encode(general) {
				t.Errorf("patch %d, site %d: %s, the general path gives %s", pi, si, encode(fast), encode(general))
			}
			if encode(s) != encode(sites[si]) {
				t.Errorf("patch %d, site %d: the base changed", pi, si)
			}
		}
	}
	// The patched sites' gateway lists share the arena's room: appending
	// to one never writes into the next.
	p := patches[0]
	a, b := old[0], old[2]
	if err := pp.of(p).apply(&a, &pp); err != nil {
		t.Fatal(err)
	}
	if err := pp.of(p).apply(&b, &pp); err != nil {
		t.Fatal(err)
	}
	before := encode(b)
	a.Gateways = append(a.Gateways, spec.Gateway{Name: "appended"})
	if encode(b) != before {
		t.Errorf("appending to one patched site's gateways changed the next site's: %s, was %s", encode(b), before)
	}

	more := &Patch{Edit: map[string]*Patch{"gateways": {Elems: map[int]*Patch{0: {Set: map[string]json.RawMessage{"bridgePorts": json.RawMessage(`{}`), "endpoint": json.RawMessage(`"1.2.3.4:5"`)}}}}}}
	if pp.of(more) != nil {
		t.Error("a patch of a gateway's endpoint and ports taken for one of ports alone")
	}
}
