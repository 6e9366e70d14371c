package plan

import (
	"cmp"
	"container/heap"
	"net/netip"
	"slices"
)

// Routed traffic between two sites of a network takes the cheapest chain of
// links that are up between them: the direct link when it is up and no
// cheaper chain exists, else a chain through relay sites, whose active
// gateways forward it from tunnel to tunnel through their allowed IPs.
//
// WireGuard accepts a packet from a peer only if its source address is in
// that peer's allowed IPs, and sends a packet to the one peer whose allowed
// IPs hold its destination. A relayed packet therefore passes only if every
// gateway on the way routes its source back to the hop it came from: the way
// from a to b must be the way from b to a, reversed, hop by hop. Shortest
// paths give that when they are unique: the part of a shortest path between
// two of its sites is the shortest path between them, in both directions.
// Costs alone tie often (every link costs 1 by default), so ties are broken
// by the set of links used, compared as a binary number with bit i for the
// i-th link in name order: two different paths never tie. The result is a
// function of the spec alone, loop-free, and the same seen from every site.

// routing is the relay plan of a federation: for every site, the next site
// towards every destination it routes.
type routing struct {
	// sites are the sites that are up (view.up), pos their positions,
	// fidx their indexes in f.Sites (index.sites: the first of a name);
	// posAt is pos by index in f.Sites, -1 for a site that is not up.
	sites []string
	pos   map[string]int
	fidx  []int
	posAt []int
	// next[a][b] is the position of the site after a on the way from a to
	// b, for every b that a routes (the sites it shares a routed network
	// with and the sites it relays to), -1 for the others. Rows of sites
	// that route nothing are nil.
	next [][]int32
	// relayed[s] are the (source, destination) site pairs whose routed
	// traffic s forwards from tunnel to tunnel, with the networks the pair
	// shares.
	relayed map[string][]relayedPair
}

type relayedPair struct {
	from, to string
	networks []string
}

// via returns, for site, the prefixes it routes by the next site on the
// way to them, indexed by that site's index in f.Sites (index.first): the
// prefixes of every destination whose next hop it is.
func (rt routing) via(v view, site string) [][]netip.Prefix {
	i, ok := rt.pos[site]
	if !ok || rt.next[i] == nil {
		return nil
	}
	via := make([][]netip.Prefix, len(v.f.Sites))
	for dst, next := range rt.next[i] {
		if next < 0 {
			continue
		}
		d := &v.f.Sites[rt.fidx[dst]]
		n := rt.fidx[next]
		if via[n] == nil && int(next) == dst {
			via[n] = d.Prefixes[:len(d.Prefixes):len(d.Prefixes)] // the common case: shared, not copied
			continue
		}
		via[n] = append(via[n], d.Prefixes...)
	}
	return via
}

// viaOne is via(v, site)[n]: the prefixes site routes by the site of
// index n in f.Sites, made without the others'.
func (rt routing) viaOne(v view, site string, n int) []netip.Prefix {
	i, ok := rt.pos[site]
	if !ok || rt.next[i] == nil {
		return nil
	}
	var out []netip.Prefix
	for dst, next := range rt.next[i] {
		if next < 0 || rt.fidx[next] != n {
			continue
		}
		d := &v.f.Sites[rt.fidx[dst]]
		if out == nil && int(next) == dst {
			out = d.Prefixes[:len(d.Prefixes):len(d.Prefixes)]
			continue
		}
		out = append(out, d.Prefixes...)
	}
	return out
}

// routes reports whether the site at position i (-1: not up) routes the
// site at index j of f.Sites.
func (rt routing) routes(i, j int) bool {
	if i < 0 || rt.next[i] == nil {
		return false
	}
	p := rt.posAt[j]
	return p >= 0 && rt.next[i][p] >= 0
}

// computeRouting plans routed traffic over the links that are up in v,
// between the sites that have an active gateway.
//
// A direct link of cost 1 that is up is the unique cheapest path between
// its sites (every other path has two links or more, each of cost 1 or
// more), so only a pair without one needs a search; a full mesh needs none.
// The searches run lazily, once per source site that needs one.
func computeRouting(v view) routing {
	if meshOnly(v) {
		return meshRouting(v)
	}
	return walkRouting(v)
}

// meshOnly reports whether every two sites that are up in v have a direct
// link of cost 1 that is up: no link is named in the topology (disabled
// or given a cost), none is down, no site is external (whose links go
// through its via gateway alone), and no name is up twice.
func meshOnly(v view) bool {
	if len(v.idx.links) > 0 || len(v.in.LinksDown) > 0 || v.idx.vias != nil {
		return false
	}
	for i := 1; i < len(v.up); i++ {
		if v.up[i-1] == v.up[i] {
			return false
		}
	}
	return true
}

// meshRouting is walkRouting where meshOnly holds: every pair of sites
// that shares a routed network takes its direct link, both ways, and
// nothing is relayed. It reads the routed networks by position rather
// than walking paths through lookups by name: at a thousand sites half a
// million pairs, on every manager at every change
// (TestMeshRoutingEqualsWalk).
func meshRouting(v view) routing {
	rt := newRouting(v)
	n := len(rt.sites)
	routed := make([][]string, n)
	for i, s := range rt.sites {
		routed[i] = v.idx.routed[s]
	}
	for i := range n {
		if len(routed[i]) == 0 {
			continue
		}
		for j := i + 1; j < n; j++ {
			if len(routed[j]) == 0 || !shareAny(routed[i], routed[j]) {
				continue
			}
			rt.route(i, j, j)
			rt.route(j, i, i)
		}
	}
	return rt
}

// shareAny reports whether the sorted lists x and y have a name in common.
func shareAny(x, y []string) bool {
	if len(x) == 1 && len(y) == 1 {
		return x[0] == y[0]
	}
	return firstShared(x, y) != ""
}

// newRouting returns the routing of v's sites that are up, with no
// routes yet.
func newRouting(v view) routing {
	sites := v.up
	n := len(sites)
	pos := make(map[string]int, n)
	for i, s := range sites {
		pos[s] = i
	}
	rt := routing{sites: sites, pos: pos, next: make([][]int32, n), relayed: map[string][]relayedPair{}}
	rt.fidx = make([]int, n)
	for i, s := range sites {
		rt.fidx[i] = v.idx.siteIndex[s]
	}
	rt.posAt = make([]int, len(v.f.Sites))
	for j := range v.f.Sites {
		rt.posAt[j] = -1
		if p, ok := pos[v.f.Sites[j].Name]; ok {
			rt.posAt[j] = p
		}
	}
	return rt
}

// route sets the next site after the one at position a on the way to the
// one at b.
func (rt routing) route(a, b, next int) {
	if rt.next[a] == nil {
		rt.next[a] = make([]int32, len(rt.sites))
		for i := range rt.next[a] {
			rt.next[a][i] = -1
		}
	}
	rt.next[a][b] = int32(next)
}

// walkRouting is computeRouting for any topology: for every pair of sites
// that shares a routed network, the walk along the unique shortest path
// (hopFinder), both ways.
func walkRouting(v view) routing {
	rt := newRouting(v)
	sites := rt.sites
	n := len(sites)
	hops := newHopFinder(v, sites)
	route := rt.route
	for i, a := range sites {
		for j := i + 1; j < n; j++ {
			b := sites[j]
			nets := v.sharedRouted(a, b)
			if len(nets) == 0 {
				continue
			}
			if _, ok := hops.first(i, j); !ok {
				continue // not connected: the spec check reports it, or a failure cut them apart
			}
			// Walk a → b; the way back is the same, reversed. Unique
			// shortest paths make every walk end within len(sites) hops;
			// the bound only guards against a broken invariant.
			s := i
			for h := 0; s != j && h < n; h++ {
				next, ok := hops.first(s, j)
				if !ok {
					break
				}
				route(s, j, next)
				if s != i {
					rt.relayed[sites[s]] = append(rt.relayed[sites[s]], relayedPair{a, b, nets}, relayedPair{b, a, nets})
				}
				s = next
			}
			s = j
			for h := 0; s != i && h < n; h++ {
				next, ok := hops.first(s, i)
				if !ok {
					break
				}
				route(s, i, next)
				s = next
			}
		}
	}
	for s := range rt.relayed {
		slices.SortFunc(rt.relayed[s], func(x, y relayedPair) int {
			if c := cmp.Compare(x.from, y.from); c != 0 {
				return c
			}
			return cmp.Compare(x.to, y.to)
		})
	}
	return rt
}

// hopFinder answers "the first hop of the unique shortest path from site a
// to site b" (by position in its sites), searching from a only when a and
// b have no direct link of cost 1 that is up.
type hopFinder struct {
	v     view
	sites []string
	adj   [][]hopLink // built at the first search
	hops  [][]int32   // by source: first hop to each site, -1 unreachable
}

// hopLink is a link that is up, to site to, with its cost and its bit in
// a path's tie-break (links numbered in name order).
type hopLink struct {
	to, cost, bit int32
}

func newHopFinder(v view, sites []string) *hopFinder {
	return &hopFinder{v: v, sites: sites, hops: make([][]int32, len(sites))}
}

func (h *hopFinder) first(a, b int) (int, bool) {
	if a == b {
		return -1, false
	}
	if sa, sb := h.sites[a], h.sites[b]; h.v.linkUp(sa, sb) && h.v.linkCost(sa, sb) == 1 {
		return b, true
	}
	if h.hops[a] == nil {
		if h.adj == nil {
			h.links()
		}
		h.hops[a] = shortestFirstHops(a, h.adj)
	}
	next := h.hops[a][b]
	return int(next), next >= 0
}

// links numbers the links that are up in name order: bit i of a path's
// tie-break is link i.
func (h *hopFinder) links() {
	h.adj = make([][]hopLink, len(h.sites))
	bit := int32(0)
	for i, a := range h.sites {
		for j := i + 1; j < len(h.sites); j++ {
			b := h.sites[j]
			if h.v.linkUp(a, b) {
				c := int32(h.v.linkCost(a, b))
				h.adj[i] = append(h.adj[i], hopLink{int32(j), c, bit})
				h.adj[j] = append(h.adj[j], hopLink{int32(i), c, bit})
				bit++
			}
		}
	}
}

// pathWeight orders paths by total cost, then by the links they use,
// compared as a binary number with bit i for link i. bits holds the set
// bits, highest first: comparing two such lists element by element
// compares the numbers (a list that is a prefix of the other is smaller).
// Two different paths from one site never weigh the same, so the shortest
// path to each site is unique.
type pathWeight struct {
	cost int
	bits []int32
}

func (w pathWeight) less(o pathWeight) bool {
	if w.cost != o.cost {
		return w.cost < o.cost
	}
	for i := range min(len(w.bits), len(o.bits)) {
		if w.bits[i] != o.bits[i] {
			return w.bits[i] < o.bits[i]
		}
	}
	return len(w.bits) < len(o.bits)
}

// with returns w extended by a link of cost c and bit b, which w does not
// use.
func (w pathWeight) with(c, b int32) pathWeight {
	i, _ := slices.BinarySearchFunc(w.bits, b, func(x, t int32) int { return cmp.Compare(t, x) })
	bits := make([]int32, 0, len(w.bits)+1)
	bits = append(append(append(bits, w.bits[:i]...), b), w.bits[i:]...)
	return pathWeight{w.cost + int(c), bits}
}

// shortestFirstHops runs Dijkstra from src over adj and returns, for every
// site, the first hop of the unique shortest path to it (-1 where there is
// none: src itself and sites src cannot reach).
func shortestFirstHops(src int, adj [][]hopLink) []int32 {
	n := len(adj)
	dist := make([]pathWeight, n)
	has := make([]bool, n)
	done := make([]bool, n)
	hop := make([]int32, n)
	for i := range hop {
		hop[i] = -1
	}
	q := &weightHeap{}
	dist[src], has[src] = pathWeight{}, true
	heap.Push(q, queued{int32(src), pathWeight{}})
	for q.Len() > 0 {
		u := heap.Pop(q).(queued).site
		if done[u] {
			continue
		}
		done[u] = true
		for _, l := range adj[u] {
			if done[l.to] {
				continue
			}
			w := dist[u].with(l.cost, l.bit)
			if has[l.to] && !w.less(dist[l.to]) {
				continue
			}
			dist[l.to], has[l.to] = w, true
			if int(u) == src {
				hop[l.to] = l.to
			} else {
				hop[l.to] = hop[u]
			}
			heap.Push(q, queued{l.to, w})
		}
	}
	return hop
}

// weightHeap is a min-heap of sites by the weight they were queued with.
// A site may be queued more than once (at every improvement); only its
// first pop counts, which carries its least weight. Weights are unique, so
// sites are settled in the order of the quadratic selection this replaced.
type weightHeap []queued

type queued struct {
	site int32
	w    pathWeight
}

func (q weightHeap) Len() int           { return len(q) }
func (q weightHeap) Less(i, j int) bool { return q[i].w.less(q[j].w) }
func (q weightHeap) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *weightHeap) Push(x any)        { *q = append(*q, x.(queued)) }
func (q *weightHeap) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}
