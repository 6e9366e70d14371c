package plandelta_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/plandelta"
	"github.com/fednet/fednet/internal/spec"
)

// TestLocalDeltaCompact: the compact form of a Local delta
// (DiffLocalCompact) counts the patches repeated at the end of an edit
// (Edit.Repeat) and edits the sites of a network the base lacks from
// those of the base's nearest network (NetworkSitesFrom). A bridged
// network added over 300 sites is then a small part of the other form,
// with no run of nulls and no site's name; the plans rebuilt from it,
// and from the compact deltas of a network added over some of the sites,
// over a site no network of the base has, and of the sites' ports set two
// ways, are exact and check against their sums.
func TestLocalDeltaCompact(t *testing.T) {
	const n = 300
	var all []string
	for i := range n {
		all = append(all, fmt.Sprintf("s%03d", i))
	}
	lan := func(sites []string) string {
		return "  - {name: lan, id: 100, mode: bridged, subnet: 192.168.0.0/16, sites: [" + strings.Join(sites, ", ") + "]}\n"
	}
	web := func(sites []string) string { // routed: no bridge ports
		return "  - {name: web, id: 2, mode: routed, sites: [" + strings.Join(sites, ", ") + "]}\n"
	}
	twoPorts := func(f *spec.Federation) {
		for i := range f.Sites {
			f.Sites[i].Gateways[0].BridgePorts = map[string]string{"lan": fmt.Sprintf("eth%d", 1+i*2/n)}
		}
	}
	before := federation(t, n, nil, "")
	cases := []struct {
		name    string
		to      *spec.Federation
		network string // the network added
		from    string // the network NetworkSitesFrom names for it
	}{
		{"over every site", federation(t, n, nil, lan(all)), "lan", "apps"},
		{"over some sites", federation(t, n, nil, web(append(all[:100:100], all[200:]...))), "web", "apps"},
		{"ports set two ways", federation(t, n, nil, lan(all)), "lan", "apps"},
		{"over a new site", federation(t, n+1, nil, web([]string{"s300"})), "web", ""},
	}
	twoPorts(cases[2].to)
	for _, c := range cases {
		old, new := plan.NewLocal(before, plan.Inputs{}), plan.NewLocal(c.to, plan.Inputs{})
		compact, ok := plandelta.DiffLocalCompact(old, new)
		if !ok {
			t.Fatalf("%s: no delta", c.name)
		}
		other, _ := plandelta.DiffLocal(old, new)
		if got := compact.NetworkSitesFrom[c.network]; got != c.from {
			t.Errorf("%s: the new network's sites edited from network %q, want %q", c.name, got, c.from)
		}
		cj, oj := js(t, compact), js(t, other)
		if c.network == "lan" {
			if len(cj)*5 > len(oj) || strings.Contains(cj, "null,null") || strings.Contains(cj, `"s150"`) {
				t.Errorf("%s: the compact delta is %d bytes against %d, nulls in a row %v, a site's name %v:\n%.600s", c.name, len(cj), len(oj),
					strings.Contains(cj, "null,null"), strings.Contains(cj, `"s150"`), cj)
			}
			if ops := compact.Sites.Ops; len(ops) != 1+strings.Count(c.name, "two ways") || ops[0].Repeat < n/2-1 || ops[len(ops)-1].Repeat < n/2-1 {
				t.Errorf("%s: the sites' edits are %.300s, want an edit per patch, repeating it", c.name, js(t, compact.Sites))
			}
		}
		from, want := localPlans(t, before, plan.Inputs{})["g001"], localPlans(t, c.to, plan.Inputs{})["g001"]
		d, ok := plandelta.Diff(from, want, plandelta.Sum(want))
		if !ok {
			t.Fatalf("%s: no delta", c.name)
		}
		var sent plandelta.LocalDelta
		if err := json.Unmarshal([]byte(cj), &sent); err != nil {
			t.Fatal(err)
		}
		d.Local = &sent
		dg := plandelta.NewDigest(want)
		d.Sum, d.SumVersion = fmt.Sprintf("%x", dg.Sum), plandelta.SumVersion
		got, nd, err := plandelta.ApplyDigest(from, plandelta.NewDigest(from), d)
		if err != nil || js(t, got) != js(t, want) || !nd.Same(dg) {
			t.Fatalf("%s: ApplyDigest of the compact delta: %v (plan equal: %v)", c.name, err, err == nil && js(t, got) == js(t, want))
		}
		if got, err := plandelta.Apply(from, d); err != nil || js(t, got) != js(t, want) {
			t.Fatalf("%s: Apply of the compact delta: %v", c.name, err)
		}
	}
}

// TestCompactMismatch: a compact Local delta that repeats a patch with
// none before it, repeats past the base's sites, or edits a network's
// sites from a network the base lacks or with no edit is refused with
// ErrMismatch.
func TestCompactMismatch(t *testing.T) {
	const n = 10
	var all []string
	for i := range n {
		all = append(all, fmt.Sprintf("s%03d", i))
	}
	from := localPlans(t, federation(t, n, nil, ""), plan.Inputs{})["g001"]
	want := localPlans(t, federation(t, n, nil, "  - {name: lan, id: 100, mode: bridged, subnet: 192.168.0.0/16, sites: ["+strings.Join(all, ", ")+"]}\n"), plan.Inputs{})["g001"]
	good, ok := plandelta.DiffLocalCompact(from.Local, want.Local)
	if !ok || good.NetworkSitesFrom["lan"] != "apps" || good.Sites.Ops[0].Repeat != n-1 {
		t.Fatalf("the compact delta is not what this test breaks: %s", js(t, good))
	}
	bad := map[string]func(l *plandelta.LocalDelta){
		"a repeat without a patch": func(l *plandelta.LocalDelta) {
			l.Sites.Ops = []plandelta.Edit[spec.Site]{{Repeat: n}}
		},
		"a repeat past the sites": func(l *plandelta.LocalDelta) { l.Sites.Ops[0].Repeat = n },
		"a negative repeat":       func(l *plandelta.LocalDelta) { l.Sites.Ops[0].Repeat = -1 },
		"the largest repeat":      func(l *plandelta.LocalDelta) { l.Sites.Ops[0].Repeat = math.MaxInt },
		"sites from no network":   func(l *plandelta.LocalDelta) { l.NetworkSitesFrom = map[string]string{"lan": "nope"} },
		"sites from, no edit":     func(l *plandelta.LocalDelta) { l.NetworkSitesFrom = map[string]string{"apps": "lan"} },
	}
	for name, edit := range bad {
		var l plandelta.LocalDelta
		if err := json.Unmarshal([]byte(js(t, good)), &l); err != nil {
			t.Fatal(err)
		}
		edit(&l)
		d, _ := plandelta.Diff(from, want, plandelta.Sum(want))
		d.Local = &l
		if _, err := plandelta.Apply(from, d); !errors.Is(err, plandelta.ErrMismatch) {
			t.Errorf("%s: Apply = %v, want ErrMismatch", name, err)
		}
	}
}
