package plan

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/fednet/fednet/internal/spec"
)

// Tree is the loop-free set of links that carries one network's traffic
// between its member sites, relaying through other sites where a direct
// link is disabled. It is a value: safe to copy and to read concurrently.
type Tree struct {
	// Network is the name of the network the tree is for.
	Network string `json:"network"`
	// Members are the network's member sites, sorted.
	Members []string `json:"members"`
	// Relays are the sites in the tree that are not members: they forward
	// the network's traffic without being part of it. Sorted.
	Relays []string `json:"relays"`
	// Edges are the tree's links, sorted by A then B. There are
	// len(Members)+len(Relays)-1 of them (none for a single member).
	Edges []Edge `json:"edges"`
	// Paths holds, for every two members, the sites along the tree from one
	// to the other, sorted by From then To.
	Paths []Path `json:"paths"`
}

// Edge is a link of a Tree; A sorts before B.
type Edge struct {
	A    string `json:"a"`
	B    string `json:"b"`
	Cost int    `json:"cost"`
}

// Path is the way between two member sites along a Tree.
type Path struct {
	// From sorts before To.
	From string `json:"from"`
	To   string `json:"to"`
	// Sites runs from From to To, both included; the sites between them
	// are relays (or members passed on the way).
	Sites []string `json:"sites"`
}

// Path returns the sites along t from member a to member b, both included,
// and whether t has such a path. The slice is new; callers may keep it.
func (t Tree) Path(a, b string) ([]string, bool) {
	from, to := a, b
	if to < from {
		from, to = to, from
	}
	i, ok := slices.BinarySearchFunc(t.Paths, Path{From: from, To: to}, comparePath)
	if !ok {
		return nil, false
	}
	out := slices.Clone(t.Paths[i].Sites)
	if from != a {
		slices.Reverse(out)
	}
	return out, true
}

// UnreachableError is returned by NetworkTree when no chain of enabled links
// joins some member sites of a network to the others.
type UnreachableError struct {
	Network string
	// Reached are the members of the largest group that can reach each
	// other; Unreachable the members outside it. Both sorted.
	Reached     []string
	Unreachable []string
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("network %s: member sites %s cannot reach member sites %s: no chain of enabled links joins them; enable a link in topology.links between the two groups or take the sites out of the network",
		e.Network, strings.Join(e.Unreachable, ", "), strings.Join(e.Reached, ", "))
}

// NetworkTree returns the relay tree of the named network of f.
//
// The graph has every site of f as a node and an edge for every link that
// f.LinkEnabled reports, weighted by f.LinkCost. NetworkTree computes a
// minimum spanning forest of that graph with Kruskal's algorithm, taking
// edges in order of cost, then of the smaller site name, then of the
// larger, so that equal costs always resolve the same way. It keeps the
// tree that holds the members and then removes, again and again, every
// leaf that is not a member, until each leaf is a member. What remains
// spans exactly the members and the relay sites needed between them.
//
// The result is loop-free by construction (a subtree of a tree),
// deterministic (the same f always gives the same Tree), and cheap
// (O(E log E) for E site pairs). Every network's tree is a subtree of the
// same federation-wide spanning tree, so two sites reach each other the same
// way in every network. It is not a minimal Steiner tree: a cheaper tree over
// the members may exist that uses other relays or a costlier direct link.
// Finding that one is NP-hard, and the cost here only steers the choice of
// relays; loop-freedom and reachability are what matter. See
// docs/topology.md.
//
// NetworkTree returns an *UnreachableError when no chain of enabled links
// joins some members to the others, and a plain error when the network or
// one of its sites is not in f. It never changes f and is safe to call
// concurrently.
func NetworkTree(f *spec.Federation, network string) (Tree, error) {
	return networkTree(specView(f), network, "")
}

// networkTree is NetworkTree over the sites and links that are up in v.
// With part set (a site name), it is the tree of the members that site
// reaches over links that are up, which may be fewer than all when a
// failure split the network: each part keeps working on its own. A part
// with no member gives an empty tree.
func networkTree(v view, network, part string) (Tree, error) {
	f := v.f
	var members []string
	found := false
	for _, n := range f.Networks {
		if n.Name == network {
			found = true
			members = slices.Clone(n.Sites)
			break
		}
	}
	if !found {
		return Tree{}, fmt.Errorf("no network %q in federation %q", network, f.Name)
	}
	slices.Sort(members)
	members = slices.Compact(members)
	if len(members) == 0 {
		return Tree{}, fmt.Errorf("network %s has no member sites", network)
	}

	sites := siteNames(f)
	for _, m := range members {
		if _, ok := slices.BinarySearch(sites, m); !ok {
			return Tree{}, fmt.Errorf("network %s: member site %q is not a site of federation %q", network, m, f.Name)
		}
	}
	members = slices.DeleteFunc(members, func(m string) bool { return !v.siteUp(m) })

	sf := v.spanning()
	adj := sf.adj
	if part != "" {
		if !v.siteUp(part) {
			members = nil
		} else {
			root := sf.root(part)
			members = slices.DeleteFunc(members, func(m string) bool { return sf.root(m) != root })
		}
		if len(members) == 0 {
			return Tree{Network: network, Members: []string{}, Relays: []string{}, Edges: []Edge{}, Paths: []Path{}}, nil
		}
	}
	if len(members) == 0 {
		return Tree{}, fmt.Errorf("network %s: no member site has a usable gateway", network)
	}

	// Every member must be in one tree of the forest.
	groups := map[string][]string{}
	for _, m := range members {
		r := sf.root(m)
		groups[r] = append(groups[r], m)
	}
	if len(groups) > 1 {
		var largest []string
		for _, g := range groups {
			if len(g) > len(largest) || len(g) == len(largest) && g[0] < largest[0] {
				largest = g
			}
		}
		var out []string
		for _, m := range members {
			if !slices.Contains(largest, m) {
				out = append(out, m)
			}
		}
		return Tree{}, &UnreachableError{Network: network, Reached: largest, Unreachable: out}
	}

	// Keep the members' tree, then prune non-member leaves until none is
	// left. A pruned leaf's neighbor may become a leaf in turn.
	root := sf.root(members[0])
	isMember := map[string]bool{}
	for _, m := range members {
		isMember[m] = true
	}
	in := map[string]bool{}
	degree := map[string]int{}
	var leaves []string
	for _, s := range sites {
		if sf.root(s) != root {
			continue
		}
		in[s] = true
		degree[s] = len(adj[s])
		if degree[s] <= 1 && !isMember[s] {
			leaves = append(leaves, s)
		}
	}
	for len(leaves) > 0 {
		s := leaves[len(leaves)-1]
		leaves = leaves[:len(leaves)-1]
		delete(in, s)
		for _, e := range adj[s] {
			o := other(e, s)
			if !in[o] {
				continue
			}
			degree[o]--
			if degree[o] == 1 && !isMember[o] {
				leaves = append(leaves, o)
			}
		}
	}

	t := Tree{Network: network, Members: members, Relays: []string{}, Edges: []Edge{}, Paths: []Path{}}
	for _, s := range sites {
		if in[s] && !isMember[s] {
			t.Relays = append(t.Relays, s)
		}
		for _, e := range adj[s] {
			if e.A == s && in[e.A] && in[e.B] {
				t.Edges = append(t.Edges, e)
			}
		}
	}
	slices.SortFunc(t.Edges, compareEdge)

	for i, a := range members {
		parent := treeParents(adj, in, a)
		for _, b := range members[i+1:] {
			var p []string
			for s := b; s != a; s = parent[s] {
				p = append(p, s)
			}
			p = append(p, a)
			slices.Reverse(p)
			t.Paths = append(t.Paths, Path{From: a, To: b, Sites: p})
		}
	}
	return t, nil
}

// spanning returns spanningForest(v), computed once per view.
func (v view) spanning() *forest {
	v.idx.forestOnce.Do(func() {
		adj, uf := spanningForest(v)
		sf := &forest{adj: adj, roots: map[string]string{}}
		for s := range uf {
			sf.roots[s] = uf.find(s)
		}
		v.idx.forest = sf
	})
	return v.idx.forest
}

// colors returns edgeColors(v), computed once per view.
func (v view) colors() map[Edge]int {
	v.idx.colorsOnce.Do(func() { v.idx.colors = edgeColors(v) })
	return v.idx.colors
}

// spanningForest is Kruskal's minimum spanning forest over the links that
// are up in v between its sites (every site of the spec is a node; a site
// that is down has no link): edges taken in order of cost, then of the
// smaller site name, then of the larger. It returns each site's forest
// edges and the union-find of the forest's trees.
func spanningForest(v view) (map[string][]Edge, unionFind) {
	sites := siteNames(v.f)
	var links []Edge
	for i, a := range sites {
		for _, b := range sites[i+1:] {
			if v.linkUp(a, b) {
				links = append(links, Edge{A: a, B: b, Cost: v.linkCost(a, b)})
			}
		}
	}
	slices.SortFunc(links, func(x, y Edge) int {
		if c := cmp.Compare(x.Cost, y.Cost); c != 0 {
			return c
		}
		return compareEdge(x, y)
	})
	uf := newUnionFind(sites)
	adj := map[string][]Edge{}
	for _, e := range links {
		if uf.union(e.A, e.B) {
			adj[e.A] = append(adj[e.A], e)
			adj[e.B] = append(adj[e.B], e)
		}
	}
	return adj, uf
}

// edgeColors numbers the edges of f's spanning forest so that no two edges
// at one site share a number (a proper edge colouring, which a tree always
// has with as many numbers as its largest degree). Each tree is walked from
// its smallest site; a site's child edges, by child name, take the smallest
// numbers its parent edge does not use. A relay tree link's VXLAN devices
// use RelayPortBase plus the number as UDP port: Linux refuses two devices
// with one VNI and one port, and every relay tree is a subtree of this
// forest, so a site's devices of one network never collide.
func edgeColors(v view) map[Edge]int {
	sites := siteNames(v.f)
	adj := v.spanning().adj
	colors := map[Edge]int{}
	seen := map[string]bool{}
	for _, root := range sites {
		if seen[root] {
			continue
		}
		seen[root] = true
		type item struct {
			site   string
			parent int // colour of the edge to the parent, -1 at the root
		}
		stack := []item{{root, -1}}
		for len(stack) > 0 {
			it := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			edges := slices.Clone(adj[it.site])
			slices.SortFunc(edges, func(x, y Edge) int { return cmp.Compare(other(x, it.site), other(y, it.site)) })
			next := 0
			for _, e := range edges {
				o := other(e, it.site)
				if seen[o] {
					continue
				}
				seen[o] = true
				if next == it.parent {
					next++
				}
				colors[Edge{A: e.A, B: e.B}] = next
				stack = append(stack, item{o, next})
				next++
			}
		}
	}
	return colors
}

// siteNames returns the names of f's sites, sorted and unique.
func siteNames(f *spec.Federation) []string {
	var sites []string
	for _, s := range f.Sites {
		sites = append(sites, s.Name)
	}
	slices.Sort(sites)
	return slices.Compact(sites)
}

// treeParents walks the tree (edges adj, nodes in) from root and returns
// each reached node's parent on the way back to root.
func treeParents(adj map[string][]Edge, in map[string]bool, root string) map[string]string {
	parent := map[string]string{root: root}
	stack := []string{root}
	for len(stack) > 0 {
		s := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, e := range adj[s] {
			o := other(e, s)
			if _, seen := parent[o]; seen || !in[o] {
				continue
			}
			parent[o] = s
			stack = append(stack, o)
		}
	}
	return parent
}

func other(e Edge, s string) string {
	if e.A == s {
		return e.B
	}
	return e.A
}

func compareEdge(x, y Edge) int {
	if c := cmp.Compare(x.A, y.A); c != 0 {
		return c
	}
	return cmp.Compare(x.B, y.B)
}

func comparePath(x, y Path) int {
	if c := cmp.Compare(x.From, y.From); c != 0 {
		return c
	}
	return cmp.Compare(x.To, y.To)
}

// unionFind is a disjoint-set forest over site names.
type unionFind map[string]string

func newUnionFind(names []string) unionFind {
	uf := unionFind{}
	for _, n := range names {
		uf[n] = n
	}
	return uf
}

func (uf unionFind) find(n string) string {
	for uf[n] != n {
		uf[n] = uf[uf[n]]
		n = uf[n]
	}
	return uf[n]
}

// union joins the sets of a and b and reports whether they were apart.
func (uf unionFind) union(a, b string) bool {
	ra, rb := uf.find(a), uf.find(b)
	if ra == rb {
		return false
	}
	if rb < ra {
		ra, rb = rb, ra
	}
	uf[rb] = ra
	return true
}
