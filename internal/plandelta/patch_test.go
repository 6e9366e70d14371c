package plandelta_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"

	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/plandelta"
	"github.com/fednet/fednet/internal/spec"
)

// gzipped is the size of v as JSON, gzipped.
func gzipped(t *testing.T, v any) int {
	t.Helper()
	var b bytes.Buffer
	z := gzip.NewWriter(&b)
	if err := json.NewEncoder(z).Encode(v); err != nil {
		t.Fatal(err)
	}
	z.Close()
	return b.Len()
}

// TestLocalDeltaOfNetworkAdded: a bridged network added over every site of
// 300 gives every site's gateway a bridge port; the Local delta patches
// that field of each site instead of sending every site again, so it is a
// small part of the Local (it was most of it), gzipped or not, and the
// plans rebuilt from it are exact.
func TestLocalDeltaOfNetworkAdded(t *testing.T) {
	const n = 300
	oldF, newF := bridgedOverAll(t, n)
	old, new := plan.NewLocal(oldF, plan.Inputs{}), plan.NewLocal(newF, plan.Inputs{})
	d, ok := plandelta.DiffLocal(old, new)
	if !ok {
		t.Fatal("no delta")
	}
	l, whole := size(t, d), size(t, new)
	lz, wholez := gzipped(t, d), gzipped(t, new)
	t.Logf("a bridged network added over 300 sites: a Local delta of %d bytes (%d gzipped) for a Local of %d (%d gzipped)", l, lz, whole, wholez)
	// What is left, gzipped, is mostly the new network's 300 site names.
	if l*10 > whole || lz*5 > wholez {
		t.Errorf("a bridged network added over 300 sites: a Local delta of %d bytes (%d gzipped) for a Local of %d (%d gzipped); want < 10 %% (20 %% gzipped)", l, lz, whole, wholez)
	}
	if ops := d.Sites.Ops; len(ops) != 1 || len(ops[0].Patch) != n || len(ops[0].Insert) != 0 || ops[0].Patch[0] == nil || ops[0].Patch[1] != nil {
		t.Errorf("the sites' edits are %s, want one edit of %d patches, the first repeated", js(t, d.Sites), n)
	}
	oldPlans, newPlans := localPlans(t, oldF, plan.Inputs{}), localPlans(t, newF, plan.Inputs{})
	for _, gw := range []string{"g000", "g150", "g299"} {
		dd, _ := roundTrip(t, gw, oldPlans[gw], newPlans[gw])
		checkDigest(t, gw, oldPlans[gw], newPlans[gw], dd)
	}
}

// bridgedOverAll returns a federation of n sites and the same with a
// bridged network added over every site.
func bridgedOverAll(t *testing.T, n int) (before, after *spec.Federation) {
	var names []string
	for i := range n {
		names = append(names, fmt.Sprintf("s%03d", i))
	}
	before = federation(t, n, nil, "")
	after = federation(t, n, nil, "  - {name: lan, id: 100, mode: bridged, subnet: 192.168.0.0/16, sites: ["+strings.Join(names, ", ")+"]}\n")
	return before, after
}

// TestPatchRoundTrip: for random edits of the fields of random sites of a
// Local (the spec's fields at every depth a Patch reaches: a site's, its
// gateways', lists of them resized), the Local delta (every other round
// in its compact form) sent over JSON and
// applied to the old Local gives the new one exactly (as JSON), and plans
// rebuilt from such deltas check against their sums (both versions).
func TestPatchRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 4))
	base := federation(t, 30, nil, "")
	edits := []func(s *spec.Site){
		func(s *spec.Site) { s.Region = fmt.Sprintf("r%d", rng.IntN(5)) },
		func(s *spec.Site) { s.Region = "" },
		func(s *spec.Site) { s.Index = rng.IntN(200) },
		func(s *spec.Site) {
			s.Prefixes = append(s.Prefixes, netip.MustParsePrefix(fmt.Sprintf("10.200.%d.0/24", rng.IntN(256))))
		},
		func(s *spec.Site) { s.Prefixes = nil },
		func(s *spec.Site) { s.Fabric = spec.FabricDropsUnknownMACs },
		func(s *spec.Site) { s.Cloud = &spec.Cloud{} },
		func(s *spec.Site) { s.Gateways[0].Endpoint = fmt.Sprintf("100.1.1.%d:51820", rng.IntN(250)) },
		func(s *spec.Site) { s.Gateways[0].BehindNAT = !s.Gateways[0].BehindNAT },
		func(s *spec.Site) {
			s.Gateways[0].BridgePorts = map[string]string{"lan": fmt.Sprintf("eth%d", rng.IntN(3))}
		},
		func(s *spec.Site) { s.Gateways[0].BridgePorts = nil },
		func(s *spec.Site) {
			s.Gateways[0].PublicAllow = append(s.Gateways[0].PublicAllow, spec.Admission{})
		},
		func(s *spec.Site) {
			s.Gateways = append(s.Gateways, spec.Gateway{Name: fmt.Sprintf("x%d", rng.IntN(1000)), Endpoint: "100.9.9.9:51820"})
		},
		func(s *spec.Site) {
			if len(s.Gateways) > 1 {
				s.Gateways = s.Gateways[:1]
			}
		},
		func(s *spec.Site) {
			s.Gateways[len(s.Gateways)-1].LANAddress = netip.MustParseAddr(fmt.Sprintf("10.7.7.%d", 1+rng.IntN(250)))
		},
		func(s *spec.Site) { s.Name += "x" },
	}
	clone := func(f *spec.Federation) *spec.Federation {
		var c spec.Federation
		b, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &c); err != nil {
			t.Fatal(err)
		}
		return &c
	}
	cur := clone(base)
	patched := 0
	for round := range 200 {
		next := clone(cur)
		for range 1 + rng.IntN(8) {
			s := &next.Sites[rng.IntN(len(next.Sites))]
			edits[rng.IntN(len(edits))](s)
		}
		if rng.IntN(10) == 0 {
			i := rng.IntN(len(next.Sites))
			next.Sites = append(next.Sites[:i:i], next.Sites[i+1:]...)
		}
		a, b := plan.NewLocal(cur, plan.Inputs{}), plan.NewLocal(next, plan.Inputs{})
		diff := plandelta.DiffLocal
		if round%2 == 1 {
			diff = plandelta.DiffLocalCompact // every other round in the compact form
		}
		d, ok := diff(a, b)
		if !ok {
			t.Fatalf("round %d: no delta", round)
		}
		for _, op := range d.Sites.Ops {
			patched += len(op.Patch) + op.Repeat
		}
		// Over JSON, as an agent gets it, onto the Local as it holds it.
		var sent plandelta.LocalDelta
		if err := json.Unmarshal([]byte(js(t, d)), &sent); err != nil {
			t.Fatal(err)
		}
		var held plan.Local
		if err := json.Unmarshal([]byte(js(t, a)), &held); err != nil {
			t.Fatal(err)
		}
		ga, gb := plan.Gateway{Name: "g", Local: &held, Peers: []plan.Peer{}}, plan.Gateway{Name: "g", Local: b, Peers: []plan.Peer{}}
		for _, version := range []int{1, plandelta.SumVersion} {
			delta := plandelta.Delta{Head: gb, Local: &sent, Sum: plandelta.SumString(gb)}
			delta.Head.Local = nil
			if version == plandelta.SumVersion {
				dg := plandelta.NewDigest(gb)
				delta.Sum, delta.SumVersion = fmt.Sprintf("%x", dg.Sum), plandelta.SumVersion
			}
			got, err := plandelta.Apply(ga, delta)
			if err != nil {
				t.Fatalf("round %d, sums of version %d: %v\ndelta: %s", round, version, err, js(t, d.Sites))
			}
			if js(t, got.Local) != js(t, b) {
				t.Fatalf("round %d, sums of version %d: the Local rebuilt differs", round, version)
			}
		}
		// The base is not changed by applying a delta to it.
		if js(t, &held) != js(t, a) {
			t.Fatalf("round %d: applying the delta changed its base", round)
		}
		cur = next
	}
	if patched < 100 {
		t.Errorf("only %d sites were sent as patches in 200 rounds: the test does not exercise them", patched)
	}
	t.Logf("%d sites sent as patches", patched)
}

// TestPatchMismatch: a Local delta whose patches name a field the site
// lacks, carry a value of the wrong type, patch past the base's sites or
// start with a repeat is refused with ErrMismatch, not applied in part.
func TestPatchMismatch(t *testing.T) {
	a := localPlans(t, federation(t, 10, nil, ""), plan.Inputs{})["g001"]
	b := localPlans(t, federation(t, 10, nil, "  - {name: lan, id: 100, mode: bridged, subnet: 192.168.0.0/16, sites: [s000, s001, s002, s003, s004, s005, s006, s007, s008, s009]}\n"), plan.Inputs{})["g001"]
	d, ok := plandelta.Diff(a, b, plandelta.Sum(b))
	if !ok {
		t.Fatal("no delta")
	}
	bad := map[string]func(op *plandelta.Edit[spec.Site]){
		"an unknown field": func(op *plandelta.Edit[spec.Site]) {
			op.Patch = []*plandelta.Patch{{Set: map[string]json.RawMessage{"nope": []byte(`1`)}}}
		},
		"a value of the wrong type": func(op *plandelta.Edit[spec.Site]) {
			op.Patch = []*plandelta.Patch{{Set: map[string]json.RawMessage{"index": []byte(`"x"`)}}}
		},
		"entries of a field that is no list": func(op *plandelta.Edit[spec.Site]) {
			op.Patch = []*plandelta.Patch{{Edit: map[string]*plandelta.Patch{"region": {Elems: map[int]*plandelta.Patch{0: {}}}}}}
		},
		"an entry past the list": func(op *plandelta.Edit[spec.Site]) {
			op.Patch = []*plandelta.Patch{{Edit: map[string]*plandelta.Patch{"gateways": {Elems: map[int]*plandelta.Patch{3: {}}}}}}
		},
		"an entry before the list": func(op *plandelta.Edit[spec.Site]) {
			op.Patch = []*plandelta.Patch{{Edit: map[string]*plandelta.Patch{"gateways": {Elems: map[int]*plandelta.Patch{-1: {}}}}}}
		},
		"fields of a list": func(op *plandelta.Edit[spec.Site]) {
			op.Patch = []*plandelta.Patch{{Edit: map[string]*plandelta.Patch{"gateways": {Set: map[string]json.RawMessage{"name": []byte(`"x"`)}}}}}
		},
		"past the base's sites": func(op *plandelta.Edit[spec.Site]) {
			op.From, op.Count, op.Patch = 9, 1, []*plandelta.Patch{{}}
		},
		"a first repeat": func(op *plandelta.Edit[spec.Site]) { op.Patch = []*plandelta.Patch{nil} },
	}
	for name, edit := range bad {
		l := *d.Local
		l.Sites.Ops = []plandelta.Edit[spec.Site]{{From: 0, Count: 0}, {From: 0, Count: 0}}
		edit(&l.Sites.Ops[1])
		c := d
		c.Local = &l
		if _, err := plandelta.Apply(a, c); !errors.Is(err, plandelta.ErrMismatch) {
			t.Errorf("%s: Apply = %v, want ErrMismatch", name, err)
		}
		if js(t, a) != js(t, localPlans(t, federation(t, 10, nil, ""), plan.Inputs{})["g001"]) {
			t.Fatalf("%s: the failed Apply changed its base", name)
		}
	}
}

// TestLocalDeltaWholeHasNoPatch: DiffLocalWhole of a bridged network added
// over every site sends every site whole (no "patch" anywhere in its JSON,
// which an agent not announcing patches would ignore), and a plan rebuilt
// from it, with the patches stripped as such an agent drops them, is
// exact.
func TestLocalDeltaWholeHasNoPatch(t *testing.T) {
	oldF, newF := bridgedOverAll(t, 50)
	oldPlans, newPlans := localPlans(t, oldF, plan.Inputs{}), localPlans(t, newF, plan.Inputs{})
	gw := "g007"
	from, want := oldPlans[gw], newPlans[gw]
	local, ok := plandelta.DiffLocalWhole(from.Local, want.Local)
	if !ok {
		t.Fatal("no delta")
	}
	wire := js(t, local)
	if strings.Contains(wire, `"patch"`) {
		t.Fatalf("a Local delta without patches carries one: %.300s", wire)
	}
	if patched, _ := plandelta.DiffLocal(from.Local, want.Local); !strings.Contains(js(t, patched), `"patch"`) {
		t.Fatal("the same change with patches has none: the test no longer tests the difference")
	}
	d := plandelta.DiffKeyed(from, want, plandelta.Sum(want), local)
	var back plandelta.Delta
	if err := json.Unmarshal([]byte(js(t, d)), &back); err != nil {
		t.Fatal(err)
	}
	// An agent that does not know patches never sees any: drop what it
	// would ignore, to be sure none was needed.
	for i := range back.Local.Sites.Ops {
		back.Local.Sites.Ops[i].Patch = nil
	}
	got, err := plandelta.Apply(from, back)
	if err != nil {
		t.Fatalf("applying the delta without patches: %v", err)
	}
	if js(t, got) != js(t, want) {
		t.Fatalf("rebuilt plan differs:\n got %.300s\nwant %.300s", js(t, got), js(t, want))
	}
}
