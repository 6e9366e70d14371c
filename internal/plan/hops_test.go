package plan

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/fednet/fednet/internal/spec"
)

// refFirstHops is the search hopFinder replaced, kept as the reference:
// Dijkstra from src with a quadratic selection and the tie-break as a
// big.Int with bit i for link i.
func refFirstHops(src string, sites []string, adj map[string][]refLink) map[string]string {
	type weight struct {
		cost int
		bits *big.Int
	}
	less := func(w, o weight) bool {
		if w.cost != o.cost {
			return w.cost < o.cost
		}
		return w.bits.Cmp(o.bits) < 0
	}
	dist := map[string]weight{src: {0, new(big.Int)}}
	hop := map[string]string{}
	done := map[string]bool{}
	for {
		u, found := "", false
		for _, s := range sites {
			if d, ok := dist[s]; ok && !done[s] && (!found || less(d, dist[u])) {
				u, found = s, true
			}
		}
		if !found {
			return hop
		}
		done[u] = true
		for _, l := range adj[u] {
			if done[l.to] {
				continue
			}
			w := weight{dist[u].cost + l.cost, new(big.Int).SetBit(new(big.Int).Set(dist[u].bits), l.bit, 1)}
			if d, ok := dist[l.to]; ok && !less(w, d) {
				continue
			}
			dist[l.to] = w
			if u == src {
				hop[l.to] = l.to
			} else {
				hop[l.to] = hop[u]
			}
		}
	}
}

type refLink struct {
	to   string
	cost int
	bit  int
}

// TestHopsMatchReference: the first hops the planner uses (a direct link
// of cost 1 taken without a search, a heap-ordered search with the
// tie-break as a list of bits otherwise) are those of the reference search
// for every pair of sites, on random partial meshes with random costs and
// links down.
func TestHopsMatchReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 2026))
	iterations := 300
	if testing.Short() {
		iterations = 50
	}
	searched := 0
	for it := range iterations {
		n := 2 + rng.IntN(14)
		var b strings.Builder
		b.WriteString("apiVersion: fednet/v1\nkind: Federation\nname: hops\nsites:\n")
		for i := range n {
			fmt.Fprintf(&b, "  - {name: s%02d, provider: p, prefixes: [10.%d.0.0/24], gateways: [{name: g%02d, endpoint: '198.51.100.%d:51820'}]}\n", i, i+1, i, i+1)
		}
		b.WriteString("topology:\n  links:\n")
		var in Inputs
		pOff := rng.Float64() * 0.6
		for i := range n {
			for j := i + 1; j < n; j++ {
				switch r := rng.Float64(); {
				case r < pOff:
					fmt.Fprintf(&b, "    - {between: [s%02d, s%02d], disabled: true}\n", i, j)
				case r < pOff+0.2:
					fmt.Fprintf(&b, "    - {between: [s%02d, s%02d], cost: %d}\n", i, j, 1+rng.IntN(5))
				case r < pOff+0.25:
					in = in.WithLinkDown(fmt.Sprintf("s%02d", i), fmt.Sprintf("s%02d", j))
				}
			}
		}
		fmt.Fprintf(&b, "networks:\n  - {name: r, id: 1, mode: routed, sites: [s00, s01]}\n")
		f, err := spec.Parse([]byte(b.String()))
		if err != nil && strings.Contains(err.Error(), "cannot reach") {
			continue // the network's two sites are cut apart
		}
		if err != nil {
			t.Fatalf("iteration %d: %v\n%s", it, err, b.String())
		}
		v := newView(f, in)
		adj := map[string][]refLink{}
		bit := 0
		for i, a := range v.up {
			for _, c := range v.up[i+1:] {
				if v.linkUp(a, c) {
					adj[a] = append(adj[a], refLink{c, f.LinkCost(a, c), bit})
					adj[c] = append(adj[c], refLink{a, f.LinkCost(a, c), bit})
					bit++
				}
			}
		}
		h := newHopFinder(v, v.up)
		for i, a := range v.up {
			want := refFirstHops(a, v.up, adj)
			for j, c := range v.up {
				got, ok := h.first(i, j)
				w, wok := want[c]
				if i == j {
					continue
				}
				if ok != wok || ok && v.up[got] != w {
					t.Fatalf("iteration %d: first hop %s -> %s = %v %v, reference %q %v\n%s", it, a, c, got, ok, w, wok, b.String())
				}
			}
			if h.hops[i] != nil {
				searched++
			}
		}
	}
	if searched == 0 {
		t.Error("no pair needed a search: the generator missed a case")
	}
}
