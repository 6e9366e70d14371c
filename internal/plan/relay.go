package plan

import (
	"cmp"
	"math/big"
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
	// next[a][b] is the site after a on the way from a to b, for every b
	// that a routes: the sites it shares a routed network with and the
	// sites it relays to.
	next map[string]map[string]string
	// relayed[s] are the (source, destination) site pairs whose routed
	// traffic s forwards from tunnel to tunnel, with the networks the pair
	// shares.
	relayed map[string][]relayedPair
}

type relayedPair struct {
	from, to string
	networks []string
}

// computeRouting plans routed traffic over the links that are up in v,
// between the sites that have an active gateway.
func computeRouting(v view) routing {
	f := v.f
	sites := v.up

	// Links in name order; bit i of a path's tie-break is link i.
	type link struct {
		to   string
		cost int
		bit  int
	}
	adj := map[string][]link{}
	bit := 0
	for i, a := range sites {
		for _, b := range sites[i+1:] {
			if v.linkUp(a, b) {
				c := f.LinkCost(a, b)
				adj[a] = append(adj[a], link{b, c, bit})
				adj[b] = append(adj[b], link{a, c, bit})
				bit++
			}
		}
	}

	// first[a][b] is the first hop on the unique shortest path from a to b.
	first := map[string]map[string]string{}
	for _, src := range sites {
		first[src] = shortestFirstHops(src, sites, func(s string, visit func(to string, cost, bit int)) {
			for _, l := range adj[s] {
				visit(l.to, l.cost, l.bit)
			}
		})
	}

	rt := routing{next: map[string]map[string]string{}, relayed: map[string][]relayedPair{}}
	route := func(a, b string) {
		if rt.next[a] == nil {
			rt.next[a] = map[string]string{}
		}
		rt.next[a][b] = first[a][b]
	}
	for i, a := range sites {
		for _, b := range sites[i+1:] {
			nets := sharedRoutedNetworks(f, a, b)
			if len(nets) == 0 {
				continue
			}
			if _, ok := first[a][b]; !ok {
				continue // not connected: the spec check reports it, or a failure cut them apart
			}
			// Walk a → b; the way back is the same, reversed. Unique
			// shortest paths make every walk end within len(sites) hops;
			// the bound only guards against a broken invariant.
			s := a
			for hops := 0; s != b && hops < len(sites); hops++ {
				route(s, b)
				if s != a {
					rt.relayed[s] = append(rt.relayed[s], relayedPair{a, b, nets}, relayedPair{b, a, nets})
				}
				s = first[s][b]
			}
			s = b
			for hops := 0; s != a && hops < len(sites); hops++ {
				route(s, a)
				s = first[s][a]
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

// pathWeight orders paths by total cost, then by the links they use.
type pathWeight struct {
	cost int
	bits *big.Int
}

func (w pathWeight) less(o pathWeight) bool {
	if w.cost != o.cost {
		return w.cost < o.cost
	}
	return w.bits.Cmp(o.bits) < 0
}

// shortestFirstHops runs Dijkstra from src over the sites and returns, for
// every site reachable from src, the first hop of the unique shortest path
// to it. neighbors calls visit for every link of a site. Federations have
// tens of sites, so the quadratic selection is fine.
func shortestFirstHops(src string, sites []string, neighbors func(s string, visit func(to string, cost, bit int))) map[string]string {
	dist := map[string]pathWeight{src: {0, new(big.Int)}}
	hop := map[string]string{}
	done := map[string]bool{}
	for {
		u, found := "", false
		for _, s := range sites {
			if d, ok := dist[s]; ok && !done[s] && (!found || d.less(dist[u])) {
				u, found = s, true
			}
		}
		if !found {
			return hop
		}
		done[u] = true
		neighbors(u, func(v string, cost, bit int) {
			if done[v] {
				return
			}
			w := pathWeight{dist[u].cost + cost, new(big.Int).SetBit(new(big.Int).Set(dist[u].bits), bit, 1)}
			if d, ok := dist[v]; ok && !w.less(d) {
				return
			}
			dist[v] = w
			if u == src {
				hop[v] = v
			} else {
				hop[v] = hop[u]
			}
		})
	}
}
