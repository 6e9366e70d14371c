package plan

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/fednet/fednet/internal/spec"
)

// TestMeshRoutingEqualsWalk plans random full meshes (sites in random
// routed networks or none, with gateways removed or down, some sites with
// two) with meshRouting and with walkRouting, the walk along shortest
// paths it stands in for: the two routings are the same. It also checks
// that meshOnly holds for them and not for a federation that names a link
// or has one down.
func TestMeshRoutingEqualsWalk(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 7))
	for round := range 200 {
		n := 2 + rng.IntN(30)
		var b strings.Builder
		b.WriteString("apiVersion: fednet/v1\nkind: Federation\nname: mesh\nsites:\n")
		var gws []string
		for i := range n {
			fmt.Fprintf(&b, "  - name: s%02d\n    provider: p\n    prefixes: [10.%d.0.0/24]\n    gateways:\n", i, i+1)
			for k := range 1 + rng.IntN(2) {
				name := fmt.Sprintf("s%02d-gw%d", i, k)
				gws = append(gws, name)
				fmt.Fprintf(&b, "      - {name: %s, endpoint: '198.51.%d.%d:51820'}\n", name, k, i+1)
			}
		}
		b.WriteString("networks:\n")
		for k := range 1 + rng.IntN(3) {
			var m []string
			for i := range n {
				if rng.IntN(3) > 0 {
					m = append(m, fmt.Sprintf("s%02d", i))
				}
			}
			if len(m) < 2 {
				m = []string{"s00", "s01"}
			}
			fmt.Fprintf(&b, "  - {name: r%d, id: %d, mode: routed, sites: [%s]}\n", k+1, k+1, strings.Join(m, ", "))
		}
		f, err := spec.Parse([]byte(b.String()))
		if err != nil {
			t.Fatalf("round %d: %v\n%s", round, err, b.String())
		}
		in := Inputs{Removed: map[string]bool{}, Down: map[string]bool{}}
		for _, g := range gws {
			switch rng.IntN(8) {
			case 0:
				in.Removed[g] = true
			case 1:
				in.Down[g] = true
			}
		}
		v := newView(f, in)
		if !meshOnly(v) {
			t.Fatalf("round %d: meshOnly does not hold for a full mesh", round)
		}
		if got, want := meshRouting(v), walkRouting(v); !reflect.DeepEqual(got, want) {
			t.Fatalf("round %d: meshRouting differs from walkRouting:\n got %+v\nwant %+v", round, got, want)
		}
		checkViaOne(t, fmt.Sprintf("round %d", round), v, meshRouting(v))
		if len(v.up) >= 2 {
			down := in
			down.LinksDown = map[SitePair]bool{Pair(v.up[0], v.up[1]): true}
			if meshOnly(newView(f, down)) {
				t.Fatalf("round %d: meshOnly holds with a link down", round)
			}
		}
	}
}

// TestViaOne: viaOne is via's entry for one site, for every pair of
// sites of random partial meshes (links disabled or costly: paths through
// relays) and full ones.
func TestViaOne(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 9))
	relayed := 0
	for round := range 100 {
		n := 3 + rng.IntN(12)
		var b strings.Builder
		b.WriteString("apiVersion: fednet/v1\nkind: Federation\nname: partial\nsites:\n")
		var names []string
		for i := range n {
			names = append(names, fmt.Sprintf("s%02d", i))
			fmt.Fprintf(&b, "  - {name: s%02d, provider: p, prefixes: [10.%d.0.0/24, 10.%d.1.0/24], gateways: [{name: g%02d, endpoint: '198.51.100.%d:51820'}]}\n", i, i+1, i+1, i, i+1)
		}
		fmt.Fprintf(&b, "networks:\n  - {name: r1, id: 1, mode: routed, sites: [%s]}\n", strings.Join(names, ", "))
		var links []string
		for i := range n {
			for j := i + 1; j < n; j++ {
				switch rng.IntN(4) {
				case 0:
					links = append(links, fmt.Sprintf("    - {between: [s%02d, s%02d], disabled: true}\n", i, j))
				case 1:
					links = append(links, fmt.Sprintf("    - {between: [s%02d, s%02d], cost: %d}\n", i, j, 2+rng.IntN(4)))
				}
			}
		}
		if len(links) > 0 && round%4 != 0 {
			b.WriteString("topology:\n  links:\n" + strings.Join(links, ""))
		}
		f, err := spec.Parse([]byte(b.String()))
		if err != nil {
			continue // cut in two by the disabled links
		}
		v := newView(f, Inputs{})
		rt := computeRouting(v)
		if len(rt.relayed) > 0 {
			relayed++
		}
		checkViaOne(t, fmt.Sprintf("round %d", round), v, rt)
	}
	if relayed == 0 {
		t.Error("no round relayed anything: the test checks full meshes alone")
	}
}

// checkViaOne checks viaOne against via for every site and next site.
func checkViaOne(t *testing.T, what string, v view, rt routing) {
	t.Helper()
	for _, s := range v.f.Sites {
		via := rt.via(v, s.Name)
		for n := range v.f.Sites {
			var want []netip.Prefix
			if via != nil {
				want = via[n]
			}
			if got := rt.viaOne(v, s.Name, n); !slices.Equal(got, want) || (got == nil) != (want == nil) {
				t.Fatalf("%s: site %s by %s: viaOne %v, via %v", what, s.Name, v.f.Sites[n].Name, got, want)
			}
		}
	}
}

// BenchmarkRouting plans the routing of a full mesh of 1000 sites in one
// routed network, by meshRouting and by the walk.
func BenchmarkRouting(b *testing.B) {
	var s strings.Builder
	s.WriteString("apiVersion: fednet/v1\nkind: Federation\nname: mesh\nsites:\n")
	var names []string
	for i := range 1000 {
		names = append(names, fmt.Sprintf("s%04d", i))
		fmt.Fprintf(&s, "  - {name: s%04d, provider: p, prefixes: [10.%d.%d.0/24], gateways: [{name: g%04d, endpoint: '100.%d.%d.1:51820'}]}\n", i, 64+i/256, i%256, i, 64+i/256, i%256)
	}
	fmt.Fprintf(&s, "networks:\n  - {name: apps, id: 1, mode: routed, sites: [%s]}\n", strings.Join(names, ", "))
	f, err := spec.Parse([]byte(s.String()))
	if err != nil {
		b.Fatal(err)
	}
	v := newView(f, Inputs{})
	b.Run("mesh", func(b *testing.B) {
		for b.Loop() {
			meshRouting(v)
		}
	})
	b.Run("walk", func(b *testing.B) {
		for b.Loop() {
			walkRouting(v)
		}
	})
}
