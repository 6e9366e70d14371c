package plan_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/spec"
)

// randFed is a federation the randomized test of Update edits: sites with
// one or two gateways, two routed networks and a bridged one over random
// members, and the planner's inputs.
type randFed struct {
	sites  []*randSite
	nets   [3]map[string]bool // apps, db (routed), lan (bridged): members
	next   int                // numbers new sites, gateways and prefixes
	mtu    int
	backnd string
	link   bool // a disabled link between the first two sites
	in     plan.Inputs
}

type randSite struct {
	name     string
	prefixes []int
	gws      []*randGW
}

type randGW struct {
	name     string
	endpoint string
	nat      bool
}

func (r *randFed) num() int { r.next++; return r.next }

func (r *randFed) addSite(rng *rand.Rand) {
	s := &randSite{name: fmt.Sprintf("s%03d", r.num()), prefixes: []int{r.num()}}
	for range 1 + rng.IntN(2) {
		s.gws = append(s.gws, r.newGW(rng))
	}
	r.sites = append(r.sites, s)
	for i := range r.nets {
		if rng.IntN(3) > 0 {
			r.nets[i][s.name] = true
		}
	}
}

func (r *randFed) newGW(rng *rand.Rand) *randGW {
	n := r.num()
	g := &randGW{name: fmt.Sprintf("g%03d", n)}
	g.nat = rng.IntN(5) == 0
	if rng.IntN(4) == 0 {
		g.endpoint = fmt.Sprintf("[2001:db8::%x]:51820", n)
	} else {
		g.endpoint = fmt.Sprintf("100.64.%d.%d:51820", n/256, n%256)
	}
	return g
}

func (r *randFed) yaml() string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: fednet/v1\nkind: Federation\nname: r\noverlay: {underlayMTU: %d, backend: %s}\nsites:\n", r.mtu, r.backnd)
	for _, s := range r.sites {
		var ps []string
		for _, p := range s.prefixes {
			ps = append(ps, fmt.Sprintf("10.%d.%d.0/24", 64+p/256, p%256))
		}
		fmt.Fprintf(&b, "  - name: %s\n    provider: p\n    prefixes: [%s]\n    gateways:\n", s.name, strings.Join(ps, ", "))
		for _, g := range s.gws {
			fmt.Fprintf(&b, "      - name: %s\n", g.name)
			if g.endpoint != "" && !g.nat {
				fmt.Fprintf(&b, "        endpoint: '%s'\n", g.endpoint)
			}
			if g.nat {
				b.WriteString("        behindNAT: true\n")
			}
			if r.nets[2][s.name] {
				b.WriteString("        bridgePorts: {lan: eth1}\n")
			}
		}
	}
	b.WriteString("networks:\n")
	for i, n := range []string{"apps", "db", "lan"} {
		var members []string
		for _, s := range r.sites {
			if r.nets[i][s.name] {
				members = append(members, s.name)
			}
		}
		if len(members) == 0 {
			continue
		}
		mode := "routed"
		if n == "lan" {
			mode = "bridged"
		}
		fmt.Fprintf(&b, "  - {name: %s, id: %d, mode: %s, sites: [%s]}\n", n, i+1, mode, strings.Join(members, ", "))
	}
	if r.link && len(r.sites) >= 2 {
		fmt.Fprintf(&b, "topology:\n  links:\n    - {between: [%s, %s], disabled: true}\n", r.sites[0].name, r.sites[1].name)
	}
	return b.String()
}

func (r *randFed) gateways() []*randGW {
	var out []*randGW
	for _, s := range r.sites {
		out = append(out, s.gws...)
	}
	return out
}

// mutate makes one random change of the spec or the inputs.
func (r *randFed) mutate(rng *rand.Rand) string {
	pick := func() *randSite { return r.sites[rng.IntN(len(r.sites))] }
	gws := r.gateways()
	gw := gws[rng.IntN(len(gws))]
	switch rng.IntN(16) {
	case 0, 1:
		r.addSite(rng)
		return "site added"
	case 2:
		i := rng.IntN(len(r.sites))
		r.sites = slices.Delete(r.sites, i, i+1)
		return "site removed"
	case 3, 4:
		s := pick()
		s.prefixes[rng.IntN(len(s.prefixes))] = r.num()
		return "prefix changed"
	case 5:
		s := pick()
		s.prefixes = append(s.prefixes, r.num())
		return "prefix added"
	case 6:
		s := pick()
		if len(s.gws) < 3 {
			s.gws = append(s.gws, r.newGW(rng))
		}
		return "gateway added"
	case 7:
		gw.nat = !gw.nat
		return "NAT toggled"
	case 8:
		var k plan.Key
		k[0], k[1] = byte(rng.IntN(256)), 1
		r.in.PublicKeys[gw.name] = k
		return "key"
	case 9:
		r.in.Removed[gw.name] = !r.in.Removed[gw.name]
		return "removed"
	case 10:
		r.in.Down[gw.name] = !r.in.Down[gw.name]
		return "down"
	case 11:
		s := pick()
		r.in.Active[s.name] = s.gws[rng.IntN(len(s.gws))].name
		return "active"
	case 12, 13:
		n := rng.IntN(3)
		s := pick()
		r.nets[n][s.name] = !r.nets[n][s.name]
		return "membership"
	case 14:
		switch rng.IntN(3) {
		case 0:
			r.mtu = 1400 + rng.IntN(100)
		case 1:
			r.link = !r.link
		case 2:
			r.backnd = []string{"wireguard", "ipsec"}[rng.IntN(2)]
		}
		return "federation-wide"
	default:
		return "nothing"
	}
}

// copy returns a deep copy of r, to undo a change that makes the spec
// invalid.
func (r *randFed) copy() *randFed {
	c := *r
	c.sites = nil
	for _, s := range r.sites {
		cs := *s
		cs.prefixes = slices.Clone(s.prefixes)
		cs.gws = nil
		for _, g := range s.gws {
			cg := *g
			cs.gws = append(cs.gws, &cg)
		}
		c.sites = append(c.sites, &cs)
	}
	for i := range r.nets {
		c.nets[i] = clone(r.nets[i])
	}
	c.in = cloneInputs(r.in)
	return &c
}

// clone copies the inputs (the maps are edited in place).
func cloneInputs(in plan.Inputs) plan.Inputs {
	c := in
	c.PublicKeys = clone(in.PublicKeys)
	c.Removed = clone(in.Removed)
	c.Down = clone(in.Down)
	c.Active = clone(in.Active)
	return c
}

func clone[K comparable, V any](m map[K]V) map[K]V {
	out := make(map[K]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// TestUpdateEqualsCompute: over random sequences of spec and input changes,
// Update's plans are Compute's, and each edit turns the previous plan's
// lists into the new plan's; so are UpdateHeld's plans held in chunks from
// one change to the next.
func TestUpdateEqualsCompute(t *testing.T) {
	defer plan.SetChunkSize(3)() // so that these small plans span several chunks
	steps, edited, whole, invalid := 0, 0, 0, 0
	for seed := range 40 {
		rng := rand.New(rand.NewPCG(uint64(seed), 7))
		r := &randFed{nets: [3]map[string]bool{{}, {}, {}}, mtu: 1500, backnd: "wireguard",
			in: plan.Inputs{PublicKeys: map[string]plan.Key{}, Removed: map[string]bool{}, Down: map[string]bool{}, Active: map[string]string{}}}
		for range 4 + rng.IntN(8) {
			r.addSite(rng)
		}
		for _, g := range r.gateways()[1:] {
			g.nat = false // NAT comes with the changes (two sites behind NAT are refused)
		}
		prevF, err := spec.Parse([]byte(r.yaml()))
		if err != nil {
			t.Fatalf("seed %d: the first spec: %v\n%s", seed, err, r.yaml())
		}
		prevIn := cloneInputs(r.in)
		prev, err := plan.Compute(prevF, prevIn)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		// The plans held in chunks from step to step (UpdateHeld, as a
		// manager holds them).
		var prevHeld []plan.Held
		for _, g := range prev {
			prevHeld = append(prevHeld, plan.Hold(g))
		}
		for step := range 30 {
			if len(r.sites) < 3 {
				r.addSite(rng)
			}
			before := r.copy()
			what := r.mutate(rng)
			f, err := spec.Parse([]byte(r.yaml()))
			if err != nil {
				invalid++ // such as every gateway of two sites behind NAT
				r = before
				continue
			}
			in := cloneInputs(r.in)
			want, wantErr := plan.Compute(f, in)
			got, edits, gotErr := plan.Update(prevF, prevIn, prev, f, in)
			if fmt.Sprint(wantErr) != fmt.Sprint(gotErr) {
				t.Fatalf("seed %d step %d (%s): Update's error %v, Compute's %v", seed, step, what, gotErr, wantErr)
			}
			if wantErr != nil {
				continue
			}
			steps++
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("seed %d step %d (%s): Update's plans differ from Compute's:\n%s", seed, step, what, firstDifference(got, want))
			}
			held, _, _, err := plan.UpdateHeld(prevF, prevIn, prevHeld, f, in, nil)
			if err != nil {
				t.Fatalf("seed %d step %d (%s): UpdateHeld: %v", seed, step, what, err)
			}
			var fromHeld []plan.Gateway
			for _, h := range held {
				fromHeld = append(fromHeld, h.Gateway())
			}
			if !reflect.DeepEqual(fromHeld, want) {
				t.Fatalf("seed %d step %d (%s): the plans held from step to step differ from Compute's:\n%s", seed, step, what, firstDifference(fromHeld, want))
			}
			prevHeld = held
			if len(edits) != len(got) {
				t.Fatalf("seed %d step %d: %d edits for %d plans", seed, step, len(edits), len(got))
			}
			for i, e := range edits {
				if e == nil {
					whole++
					continue
				}
				edited++
				old := planNamed(prev, got[i].Name)
				if old == nil {
					t.Fatalf("seed %d step %d: an edit of %s, which had no plan", seed, step, got[i].Name)
				}
				checkEdit(t, fmt.Sprintf("seed %d step %d (%s) %s", seed, step, what, got[i].Name), *old, got[i], e)
			}
			// UpdateOnly of every other gateway, from the previous plans
			// of every third, gives Update's plans of those gateways.
			some := func(name string) bool { return (len(name)+int(name[len(name)-1]))%2 == step%2 }
			var prevSome, wantSome []plan.Gateway
			for i, g := range prev {
				if i%3 == 0 {
					prevSome = append(prevSome, g)
				}
			}
			for _, g := range got {
				if some(g.Name) {
					wantSome = append(wantSome, g)
				}
			}
			gotSome, _, err := plan.UpdateOnly(prevF, prevIn, prevSome, f, in, some)
			if err != nil {
				t.Fatalf("seed %d step %d (%s): UpdateOnly: %v", seed, step, what, err)
			}
			if !reflect.DeepEqual(gotSome, wantSome) {
				t.Fatalf("seed %d step %d (%s): UpdateOnly's plans differ from Update's:\n%s", seed, step, what, firstDifference(gotSome, wantSome))
			}
			prevF, prevIn, prev = f, in, got
		}
	}
	t.Logf("%d steps (%d invalid changes undone): %d plans edited, %d computed whole", steps, invalid, edited, whole)
	if invalid > steps/4 {
		t.Errorf("%d of the random changes made invalid specs, against %d valid: fix the generator", invalid, steps)
	}
	if edited < whole {
		t.Errorf("only %d plans edited against %d computed whole: the random changes do not exercise Update's edits", edited, whole)
	}
}

func planNamed(plans []plan.Gateway, name string) *plan.Gateway {
	for i := range plans {
		if plans[i].Name == name {
			return &plans[i]
		}
	}
	return nil
}

// checkEdit rebuilds new's lists from old's and the edit, by key.
func checkEdit(t *testing.T, what string, old, new plan.Gateway, e *plan.Edit) {
	t.Helper()
	peerKey := func(p plan.Peer) string { return p.Gateway }
	routeKey := func(r plan.Route) netip.Prefix { return r.Destination }
	flowKey := func(f plan.Flow) [2]netip.Prefix { return [2]netip.Prefix{f.Source, f.Destination} }
	checkList(t, what+" peers", old.Peers, e.PeersGone, e.Peers, new.Peers, peerKey, func(a, b plan.Peer) bool { return reflect.DeepEqual(a, b) })
	checkList(t, what+" routes", old.Routes, e.RoutesGone, e.Routes, new.Routes, routeKey, func(a, b plan.Route) bool { return a == b })
	checkList(t, what+" flows", old.Firewall.Flows, e.FlowsGone, e.Flows, new.Firewall.Flows, flowKey, func(a, b plan.Flow) bool { return a == b })
}

// checkList: old less the keys of gone, with set put in by key, is want.
func checkList[T any, K comparable](t *testing.T, what string, old, gone, set, want []T, key func(T) K, equal func(a, b T) bool) {
	t.Helper()
	m := map[K]T{}
	for _, x := range old {
		m[key(x)] = x
	}
	for _, x := range gone {
		delete(m, key(x))
	}
	for _, x := range set {
		m[key(x)] = x
	}
	if len(m) != len(want) {
		t.Fatalf("%s: the edit gives %d entries, the plan has %d", what, len(m), len(want))
	}
	for _, x := range want {
		if got, ok := m[key(x)]; !ok || !equal(got, x) {
			t.Fatalf("%s: entry %v from the edit differs", what, key(x))
		}
	}
}

func firstDifference(got, want []plan.Gateway) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%d plans, want %d", len(got), len(want))
	}
	for i := range got {
		if !reflect.DeepEqual(got[i], want[i]) {
			a, _ := json.MarshalIndent(got[i], "", " ")
			b, _ := json.MarshalIndent(want[i], "", " ")
			la, lb := strings.Split(string(a), "\n"), strings.Split(string(b), "\n")
			for j := range min(len(la), len(lb)) {
				if la[j] != lb[j] {
					return fmt.Sprintf("gateway %s, line %d: got %s, want %s", got[i].Name, j, la[j], lb[j])
				}
			}
			return fmt.Sprintf("gateway %s: got %d lines, want %d (or nil against empty lists)", got[i].Name, len(la), len(lb))
		}
	}
	return "?"
}

// TestUpdateKnowsEveryField: Update compares federations field by field,
// knowing which fields only the head of a plan reads. A field added to
// spec.Federation, spec.Site, spec.Gateway or plan.Inputs must be
// classified there (update.go) and here.
func TestUpdateKnowsEveryField(t *testing.T) {
	known := map[reflect.Type][]string{
		reflect.TypeFor[spec.Federation](): {"APIVersion", "Kind", "Name", "Overlay", "Providers", "Sites", "Networks", "Topology", "EgressPrices", "Lab"},
		reflect.TypeFor[spec.Site]():       {"Name", "Provider", "Region", "Index", "Prefixes", "Gateways", "VirtualAddress", "Fabric", "Cloud", "External"},
		reflect.TypeFor[spec.Gateway]():    {"Name", "Endpoint", "BehindNAT", "PublicKey", "TransitAddress", "LANAddress", "BridgePorts", "PublicAllow"},
		reflect.TypeFor[plan.Inputs]():     {"PublicKeys", "Removed", "Hosts", "Active", "Down", "LinksDown"},
	}
	for typ, fields := range known {
		var have []string
		for i := range typ.NumField() {
			if typ.Field(i).IsExported() {
				have = append(have, typ.Field(i).Name)
			}
		}
		if !slices.Equal(have, fields) {
			t.Errorf("%s has fields %v; plan.Update knows %v: decide whether Update may edit plans across a change of the new field (update.go: federationPerSite, siteHeadOnly, updatable), then list it here", typ, have, fields)
		}
	}
}

// BenchmarkUpdate plans a site added to a full mesh of n sites, with
// Update from the plans before, with UpdateHeld from them held in chunks
// (as the manager does) and with Compute.
func BenchmarkUpdate(b *testing.B) {
	for _, n := range []int{1000} {
		prevF, err := spec.Parse([]byte(scaleSpec(n)))
		if err != nil {
			b.Fatal(err)
		}
		f, err := spec.Parse([]byte(scaleSpec(n + 1)))
		if err != nil {
			b.Fatal(err)
		}
		prev, err := plan.Compute(prevF, plan.Inputs{})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("Update/%d", n), func(b *testing.B) {
			for b.Loop() {
				if _, edits, err := plan.Update(prevF, plan.Inputs{}, prev, f, plan.Inputs{}); err != nil || edits[0] == nil {
					b.Fatal(err, "or no edit")
				}
			}
		})
		held := make([]plan.Held, len(prev))
		for i, g := range prev {
			held[i] = plan.Hold(g)
		}
		b.Run(fmt.Sprintf("UpdateHeld/%d", n), func(b *testing.B) {
			for b.Loop() {
				if _, edits, _, err := plan.UpdateHeld(prevF, plan.Inputs{}, held, f, plan.Inputs{}, nil); err != nil || edits[0] == nil {
					b.Fatal(err, "or no edit")
				}
			}
		})
		b.Run(fmt.Sprintf("Compute/%d", n), func(b *testing.B) {
			for b.Loop() {
				if _, err := plan.Compute(f, plan.Inputs{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
