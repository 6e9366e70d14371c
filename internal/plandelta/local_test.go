package plandelta_test

import (
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/plandelta"
	"github.com/fednet/fednet/internal/spec"
)

// localPlans are the plans of f and in, each with the Local the manager
// attaches.
func localPlans(t testing.TB, f *spec.Federation, in plan.Inputs) map[string]plan.Gateway {
	t.Helper()
	out := plans(t, f, in)
	l := plan.NewLocal(f, in)
	for name, g := range out {
		g.Local = l
		out[name] = g
	}
	return out
}

func size(t *testing.T, v any) int {
	t.Helper()
	return len(js(t, v))
}

// TestLocalDeltaRoundTrip: for changes of the spec and of every input a
// Local carries, a delta sent over JSON and applied to the old plan as an
// agent holds it (decoded from JSON) gives the new plan with its Local,
// byte for byte, and checks against the sum; the Local part of the delta
// is a small part of the Local.
func TestLocalDeltaRoundTrip(t *testing.T) {
	const n = 40
	base := federation(t, n, nil, "")
	key := plan.Key{7}
	baseIn := plan.Inputs{PublicKeys: map[string]plan.Key{"g001": {1}, "g002": {2}}, Active: map[string]string{"s003": "g003"},
		Hosts: []plan.Host{{Name: "h1", Site: "s001", Network: "apps", Address: netip.MustParseAddr("10.64.1.10"), Slot: 1}}}
	all := ""
	for i := range n {
		all += fmt.Sprintf("s%03d, ", i)
	}
	// The spec with the site of index i left out (a site in the middle
	// removed, and so inserted when going the other way).
	without := func(i int) *spec.Federation {
		f := federation(t, n, nil, "")
		f.Sites = append(f.Sites[:i:i], f.Sites[i+1:]...)
		f.Networks[0].Sites = append(f.Networks[0].Sites[:i:i], f.Networks[0].Sites[i+1:]...)
		return f
	}
	with := func(edit func(in *plan.Inputs)) plan.Inputs {
		in := baseIn
		in.PublicKeys = map[string]plan.Key{"g001": {1}, "g002": {2}}
		in.Active = map[string]string{"s003": "g003"}
		in.Hosts = append([]plan.Host(nil), baseIn.Hosts...)
		edit(&in)
		return in
	}
	changes := []struct {
		name     string
		from, to *spec.Federation
		in       plan.Inputs
		bigLocal bool // the change is most of the Local
	}{
		{name: "site added", from: base, to: federation(t, n+1, nil, ""), in: baseIn},
		{name: "site removed in the middle", from: base, to: without(17), in: baseIn},
		{name: "site inserted in the middle", from: without(17), to: base, in: baseIn},
		{name: "prefix changed", from: base, to: federation(t, n, func(i int) string { return map[bool]string{true: "10.99.0.0/24"}[i == 7] }, ""), in: baseIn},
		// Every site's gateway gets a bridge port: every site changes.
		{name: "network added", from: base, to: federation(t, n, nil, "  - {name: lan, id: 100, mode: bridged, subnet: 192.168.0.0/24, sites: ["+strings.TrimSuffix(all, ", ")+"]}\n"), in: baseIn, bigLocal: true},
		{name: "link disabled", from: base, to: federation(t, n, nil, "topology:\n  links:\n    - {between: [s001, s002], disabled: true}\n"), in: baseIn},
		{name: "key enrolled", from: base, to: base, in: with(func(in *plan.Inputs) { in.PublicKeys["g009"] = key })},
		{name: "key dropped", from: base, to: base, in: with(func(in *plan.Inputs) { delete(in.PublicKeys, "g002") })},
		{name: "gateway removed", from: base, to: base, in: with(func(in *plan.Inputs) { in.Removed = map[string]bool{"g003": true} })},
		{name: "host joined", from: base, to: base, in: with(func(in *plan.Inputs) {
			in.Hosts = append(in.Hosts, plan.Host{Name: "h2", Site: "s002", Network: "apps", Address: netip.MustParseAddr("10.64.2.10"), Slot: 1})
		})},
		{name: "host left", from: base, to: base, in: with(func(in *plan.Inputs) { in.Hosts = nil })},
		{name: "active moved", from: base, to: base, in: with(func(in *plan.Inputs) { in.Active = map[string]string{"s004": "g004"} })},
		{name: "nothing", from: base, to: base, in: baseIn},
	}
	for _, c := range changes {
		t.Run(c.name, func(t *testing.T) {
			old := localPlans(t, c.from, baseIn)
			for gw, want := range localPlans(t, c.to, c.in) {
				from, ok := old[gw]
				if !ok {
					continue
				}
				d, _ := roundTrip(t, gw, from, want)
				if d.Local == nil {
					t.Fatalf("%s: the delta has no Local", gw)
				}
				checkDigest(t, gw, from, want, d)
				if l, whole := size(t, d.Local), size(t, want.Local); !c.bigLocal && l*10 > whole {
					t.Errorf("%s: the Local's delta is %d bytes for a Local of %d", gw, l, whole)
				}
			}
		})
	}
}

// TestLocalDeltaOfOneSite: in a federation of 300 sites, adding one ships
// a Local delta under 5 % of the whole Local, not the federation again.
func TestLocalDeltaOfOneSite(t *testing.T) {
	oldF, newF := federation(t, 300, nil, ""), federation(t, 301, nil, "")
	old, new := plan.NewLocal(oldF, plan.Inputs{}), plan.NewLocal(newF, plan.Inputs{})
	d, ok := plandelta.DiffLocal(old, new)
	if !ok {
		t.Fatal("no delta")
	}
	l, whole := size(t, d), size(t, new)
	t.Logf("adding one site of 301: a Local delta of %d bytes for a Local of %d", l, whole)
	if l*20 > whole {
		t.Errorf("adding one site of 301: a Local delta of %d bytes for a Local of %d (want < 5 %%)", l, whole)
	}
}

// TestSumCoversLocal: changing any part of a plan's Local changes its
// sum; a plan's sum without Local does not depend on the Local it had;
// SumWithLocal is Sum.
func TestSumCoversLocal(t *testing.T) {
	f := federation(t, 4, nil, "")
	in := plan.Inputs{PublicKeys: map[string]plan.Key{"g001": {1}}, Active: map[string]string{"s001": "g001"},
		Hosts: []plan.Host{{Name: "h1", Site: "s001", Network: "apps", Address: netip.MustParseAddr("10.64.1.10"), Slot: 1}}}
	g := localPlans(t, f, in)["g000"]
	sum := plandelta.Sum(g)
	if plandelta.SumWithLocal(g, plandelta.SumLocal(g.Local)) != sum {
		t.Error("SumWithLocal differs from Sum")
	}
	edits := map[string]func(l *plan.Local){
		"federation name": func(l *plan.Local) { l.Federation.Name += "x" },
		"a site's region": func(l *plan.Local) { l.Federation.Sites[2].Region += "x" },
		"a network":       func(l *plan.Local) { l.Federation.Networks[0].Sites = l.Federation.Networks[0].Sites[1:] },
		"a key":           func(l *plan.Local) { l.PublicKeys["g001"] = plan.Key{2} },
		"removed":         func(l *plan.Local) { l.Removed = append(l.Removed, "g002") },
		"a host":          func(l *plan.Local) { l.Hosts[0].Slot++ },
		"active":          func(l *plan.Local) { l.Active["s001"] = "g009" },
		"a bridge port": func(l *plan.Local) {
			l.Federation.Sites[1].Gateways = []spec.Gateway{l.Federation.Sites[1].Gateways[0]}
			l.Federation.Sites[1].Gateways[0].BridgePorts = map[string]string{"lan": "eth1"}
		},
		"a gateway's endpoint": func(l *plan.Local) {
			l.Federation.Sites[1].Gateways = []spec.Gateway{l.Federation.Sites[1].Gateways[0]}
			l.Federation.Sites[1].Gateways[0].Endpoint = "198.51.100.7:51820"
		},
	}
	for name, edit := range edits {
		c := g
		lf := *g.Local.Federation
		lf.Sites = append([]spec.Site(nil), lf.Sites...)
		lf.Networks = append([]spec.Network(nil), lf.Networks...)
		l := plan.NewLocal(&lf, g.Local.Inputs())
		edit(l)
		c.Local = l
		if plandelta.Sum(c) == sum {
			t.Errorf("changing the Local's %s does not change the sum", name)
		}
		if plandelta.NewDigest(c).Sum == plandelta.NewDigest(g).Sum {
			t.Errorf("changing the Local's %s does not change the digest", name)
		}
		c.Local = nil
		b := g
		b.Local = nil
		if plandelta.Sum(c) != plandelta.Sum(b) {
			t.Errorf("%s: the sum of a plan without Local depends on the Local it had", name)
		}
	}
	b := g
	b.Local = nil
	if plandelta.Sum(b) == sum {
		t.Error("a plan without its Local sums as with it")
	}
	if strings.Contains(js(t, b), `"local":{`) {
		t.Error("a plan without Local encodes a local object")
	}
}

// TestLocalTypesAllInJSON: SumLocal covers a Local by its JSON, and a
// delta carries it as JSON: no exported field of the types a Local holds
// may be left out of JSON (json:"-"), or it would be neither summed nor
// sent.
func TestLocalTypesAllInJSON(t *testing.T) {
	seen := map[reflect.Type]bool{}
	var walk func(rt reflect.Type, path string)
	walk = func(rt reflect.Type, path string) {
		switch rt.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Array:
			walk(rt.Elem(), path+"[]")
		case reflect.Map:
			walk(rt.Elem(), path+"{}")
		case reflect.Struct:
			if seen[rt] {
				return
			}
			seen[rt] = true
			for i := range rt.NumField() {
				fl := rt.Field(i)
				if !fl.IsExported() {
					continue
				}
				if tag, _, _ := strings.Cut(fl.Tag.Get("json"), ","); tag == "-" {
					t.Errorf("%s.%s is left out of JSON: a Local's sum and delta would miss it", path, fl.Name)
				}
				walk(fl.Type, path+"."+fl.Name)
			}
		}
	}
	walk(reflect.TypeFor[plan.Local](), "Local")
}

// TestApplyLocalMismatch: a Local delta applied to a plan without Local,
// or with edits outside the base's lists, is refused with ErrMismatch.
func TestApplyLocalMismatch(t *testing.T) {
	a := localPlans(t, federation(t, 10, nil, ""), plan.Inputs{})["g001"]
	b := localPlans(t, federation(t, 11, nil, ""), plan.Inputs{})["g001"]
	d, ok := plandelta.Diff(a, b, plandelta.Sum(b))
	if !ok {
		t.Fatal("no delta")
	}
	bare := a
	bare.Local = nil
	if _, err := plandelta.Apply(bare, d); !errors.Is(err, plandelta.ErrMismatch) {
		t.Errorf("a Local delta on a plan without Local = %v, want ErrMismatch", err)
	}
	bad := d
	l := *d.Local
	l.Sites.Ops = append(l.Sites.Ops, plandelta.Edit[spec.Site]{From: 5, Count: 100})
	bad.Local = &l
	if _, err := plandelta.Apply(a, bad); !errors.Is(err, plandelta.ErrMismatch) {
		t.Errorf("a Local delta copying past the base's sites = %v, want ErrMismatch", err)
	}
	other := localPlans(t, federation(t, 9, nil, ""), plan.Inputs{})["g001"]
	if _, err := plandelta.Apply(other, d); !errors.Is(err, plandelta.ErrMismatch) {
		t.Errorf("a Local delta on another Local = %v, want ErrMismatch", err)
	}
}

// TestDigestOfPortsAndMore: a bridged network added over every site
// patches only the sites' bridge ports, which sums of version 4 hash
// apart from the rest of each site (kept from the base's digest). A
// delta that also changes other fields of some sites (in the same patch
// as their ports), or whose base differs from the agent's in a field
// other than the ports, is still checked whole: ApplyDigest rebuilds the
// new plan with the new plan's digest, or refuses it.
func TestDigestOfPortsAndMore(t *testing.T) {
	const n = 30
	var all []string
	for i := range n {
		all = append(all, fmt.Sprintf("s%03d", i))
	}
	lan := "  - {name: lan, id: 100, mode: bridged, subnet: 192.168.0.0/24, sites: [" + strings.Join(all, ", ") + "]}\n"
	from := localPlans(t, federation(t, n, nil, ""), plan.Inputs{})["g001"]
	cases := map[string]func(f *spec.Federation){
		"ports alone":                      func(*spec.Federation) {},
		"a site's region beside its port":  func(f *spec.Federation) { f.Sites[7].Region = "eu" },
		"an endpoint beside the port":      func(f *spec.Federation) { f.Sites[9].Gateways[0].Endpoint = "198.51.100.9:51820" },
		"every site's region and its port": func(f *spec.Federation) { setRegions(f) },
	}
	for name, edit := range cases {
		f := federation(t, n, nil, lan)
		edit(f)
		want := localPlans(t, f, plan.Inputs{})["g001"]
		d, ok := plandelta.Diff(from, want, plandelta.Sum(want))
		if !ok {
			t.Fatalf("%s: no delta", name)
		}
		dg := plandelta.NewDigest(want)
		d.Sum, d.SumVersion = fmt.Sprintf("%x", dg.Sum), plandelta.SumVersion
		got, nd, err := plandelta.ApplyDigest(from, plandelta.NewDigest(from), d)
		if err != nil || js(t, got) != js(t, want) || !nd.Same(dg) || nd.Local.Sum != plandelta.NewLocalDigest(want.Local).Sum {
			t.Fatalf("%s: ApplyDigest: %v (plan equal: %v, digest equal: %v)", name, err, err == nil && js(t, got) == js(t, want), nd.Same(dg))
		}
		// An agent whose base differs in a site's endpoint (not a port),
		// with the digest of that base: the sites patched keep its hash of
		// their rest, which is not the manager's.
		other := from
		of := *from.Local.Federation
		of.Sites = append([]spec.Site(nil), of.Sites...)
		of.Sites[12].Gateways = []spec.Gateway{of.Sites[12].Gateways[0]}
		of.Sites[12].Gateways[0].Endpoint = "203.0.113.12:51820"
		other.Local = plan.NewLocal(&of, from.Local.Inputs())
		if _, _, err := plandelta.ApplyDigest(other, plandelta.NewDigest(other), d); !errors.Is(err, plandelta.ErrMismatch) {
			t.Errorf("%s: ApplyDigest on a base with another endpoint = %v, want ErrMismatch", name, err)
		}
	}
}

// setRegions gives every site of f a region.
func setRegions(f *spec.Federation) {
	for i := range f.Sites {
		f.Sites[i].Region = "eu"
	}
}
