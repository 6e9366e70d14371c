package plan_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/spec"
)

// federation builds a spec.Federation by hand: sites named by sites, the
// given topology links, and one network "lan" over members. The mode does
// not matter to NetworkTree; hand-built specs skip spec.Parse, which would
// reject disabled links inside a routed network.
func federation(sites []string, links []spec.Link, members ...string) *spec.Federation {
	f := &spec.Federation{Name: "test", Topology: spec.Topology{Mode: "mesh", Links: links}}
	for _, s := range sites {
		f.Sites = append(f.Sites, spec.Site{Name: s})
	}
	f.Networks = []spec.Network{{Name: "lan", ID: 1, Mode: spec.Bridged, Sites: members}}
	return f
}

func off(a, b string) spec.Link { return spec.Link{Between: []string{a, b}, Disabled: true} }

func cost(a, b string, c int) spec.Link { return spec.Link{Between: []string{a, b}, Cost: c} }

// edges writes t's edges as "a-b:1 a-c:1".
func edges(t plan.Tree) string {
	var s []string
	for _, e := range t.Edges {
		s = append(s, fmt.Sprintf("%s-%s:%d", e.A, e.B, e.Cost))
	}
	return strings.Join(s, " ")
}

// paths writes t's paths as "a>b: a c b; ...".
func paths(t plan.Tree) string {
	var s []string
	for _, p := range t.Paths {
		s = append(s, fmt.Sprintf("%s>%s: %s", p.From, p.To, strings.Join(p.Sites, " ")))
	}
	return strings.Join(s, "; ")
}

func TestNetworkTree(t *testing.T) {
	abc := []string{"a", "b", "c"}
	abcd := []string{"a", "b", "c", "d"}
	tests := []struct {
		name    string
		sites   []string
		links   []spec.Link
		members []string
		edges   string
		relays  []string
		paths   string
	}{
		{
			name: "full mesh: ties go by site names", sites: abc, members: abc,
			edges: "a-b:1 a-c:1", relays: []string{},
			paths: "a>b: a b; a>c: a c; b>c: b a c",
		},
		{
			name: "full mesh, sites listed out of order", sites: []string{"c", "a", "b"}, members: []string{"c", "b", "a"},
			edges: "a-b:1 a-c:1", relays: []string{},
			paths: "a>b: a b; a>c: a c; b>c: b a c",
		},
		{
			name: "single member", sites: abc, members: []string{"b"},
			edges: "", relays: []string{}, paths: "",
		},
		{
			name: "two members directly linked; other sites pruned", sites: abcd, members: []string{"b", "d"},
			links: []spec.Link{off("a", "b"), off("a", "d")},
			edges: "b-d:1", relays: []string{}, paths: "b>d: b d",
		},
		{
			name: "one disabled link: relay through a third site", sites: abc, members: []string{"a", "b"},
			links: []spec.Link{off("a", "b")},
			edges: "a-c:1 b-c:1", relays: []string{"c"}, paths: "a>b: a c b",
		},
		{
			name: "one disabled link among three members", sites: abc, members: abc,
			links: []spec.Link{off("a", "b")},
			edges: "a-c:1 b-c:1", relays: []string{}, paths: "a>b: a c b; a>c: a c; b>c: b c",
		},
		{
			name: "chain", sites: abcd, members: []string{"a", "d"},
			links: []spec.Link{off("a", "c"), off("a", "d"), off("b", "d")},
			edges: "a-b:1 b-c:1 c-d:1", relays: []string{"b", "c"}, paths: "a>d: a b c d",
		},
		{
			name: "chain, member in the middle", sites: abcd, members: []string{"a", "c"},
			links: []spec.Link{off("a", "c"), off("a", "d"), off("b", "d")},
			edges: "a-b:1 b-c:1", relays: []string{"b"}, paths: "a>c: a b c",
		},
		{
			name: "relay by name when costs tie", sites: abcd, members: []string{"a", "b"},
			links: []spec.Link{off("a", "b")},
			edges: "a-c:1 b-c:1", relays: []string{"c"}, paths: "a>b: a c b",
		},
		{
			name: "a cost moves the relay", sites: abcd, members: []string{"a", "b"},
			links: []spec.Link{off("a", "b"), cost("c", "a", 3)},
			edges: "a-d:1 b-d:1", relays: []string{"d"}, paths: "a>b: a d b",
		},
		{
			name: "an expensive direct link loses to a cheap relay", sites: abc, members: []string{"a", "b"},
			links: []spec.Link{cost("a", "b", 10)},
			edges: "a-c:1 b-c:1", relays: []string{"c"}, paths: "a>b: a c b",
		},
		{
			name: "costs pick the cheapest links", sites: abcd, members: abcd,
			links: []spec.Link{cost("a", "b", 5), cost("a", "c", 5), cost("a", "d", 2), cost("b", "c", 3), cost("b", "d", 4), cost("c", "d", 5)},
			edges: "a-d:2 b-c:3 b-d:4", relays: []string{},
			paths: "a>b: a d b; a>c: a d b c; a>d: a d; b>c: b c; b>d: b d; c>d: c b d",
		},
		{
			name: "an isolated non-member does not matter", sites: abcd, members: []string{"a", "b"},
			links: []spec.Link{off("d", "a"), off("d", "b"), off("d", "c")},
			edges: "a-b:1", relays: []string{}, paths: "a>b: a b",
		},
		{
			name: "duplicate member listed once", sites: abc, members: []string{"a", "c", "a"},
			edges: "a-c:1", relays: []string{}, paths: "a>c: a c",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := federation(tt.sites, tt.links, tt.members...)
			tr, err := plan.NetworkTree(f, "lan")
			if err != nil {
				t.Fatal(err)
			}
			if got := edges(tr); got != tt.edges {
				t.Errorf("edges = %q, want %q", got, tt.edges)
			}
			if !slices.Equal(tr.Relays, tt.relays) {
				t.Errorf("relays = %q, want %q", tr.Relays, tt.relays)
			}
			if got := paths(tr); got != tt.paths {
				t.Errorf("paths = %q, want %q", got, tt.paths)
			}
		})
	}
}

func TestNetworkTreePath(t *testing.T) {
	f := federation([]string{"a", "b", "c"}, []spec.Link{off("a", "b")}, "a", "b")
	tr, err := plan.NetworkTree(f, "lan")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		a, b string
		want []string
		ok   bool
	}{
		{"a", "b", []string{"a", "c", "b"}, true},
		{"b", "a", []string{"b", "c", "a"}, true},
		{"a", "c", nil, false}, // c is a relay, not a member
		{"a", "a", nil, false},
	} {
		got, ok := tr.Path(tt.a, tt.b)
		if ok != tt.ok || !slices.Equal(got, tt.want) {
			t.Errorf("Path(%s, %s) = %q, %v; want %q, %v", tt.a, tt.b, got, ok, tt.want, tt.ok)
		}
	}
	// The returned slice is the caller's.
	p, _ := tr.Path("b", "a")
	p[0] = "x"
	if again, _ := tr.Path("a", "b"); again[2] != "b" {
		t.Errorf("Path shares its result with the tree: %q", again)
	}
}

func TestNetworkTreeErrors(t *testing.T) {
	abcde := []string{"a", "b", "c", "d", "e"}
	// d and e are linked to each other only.
	split := []spec.Link{off("a", "d"), off("b", "d"), off("c", "d"), off("a", "e"), off("b", "e"), off("c", "e")}
	tests := []struct {
		name        string
		f           *spec.Federation
		network     string
		reached     []string
		unreachable []string
		msg         []string
	}{
		{
			name: "disconnected member", f: federation(abcde, split, "a", "b", "d"), network: "lan",
			reached: []string{"a", "b"}, unreachable: []string{"d"},
			msg: []string{"network lan", "member sites d cannot reach member sites a, b", "topology.links"},
		},
		{
			name: "larger group is the reached one", f: federation(abcde, split, "a", "d", "e"), network: "lan",
			reached: []string{"d", "e"}, unreachable: []string{"a"},
			msg: []string{"network lan", "member sites a cannot reach member sites d, e"},
		},
		{
			name: "equal groups: the one with the first name is reached", f: federation(abcde, split, "e", "b", "d", "a"), network: "lan",
			reached: []string{"a", "b"}, unreachable: []string{"d", "e"},
			msg: []string{"network lan", "member sites d, e cannot reach member sites a, b"},
		},
		{
			name: "every link off", f: federation([]string{"a", "b"}, []spec.Link{off("a", "b")}, "a", "b"), network: "lan",
			reached: []string{"a"}, unreachable: []string{"b"},
			msg: []string{"network lan", "member sites b cannot reach member sites a"},
		},
		{name: "no such network", f: federation(abcde, nil, "a"), network: "wan", msg: []string{`no network "wan"`}},
		{name: "no such site", f: federation(abcde, nil, "a", "z"), network: "lan", msg: []string{"network lan", `"z"`}},
		{name: "no members", f: federation(abcde, nil), network: "lan", msg: []string{"network lan has no member sites"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := plan.NetworkTree(tt.f, tt.network)
			if err == nil {
				t.Fatal("no error")
			}
			for _, m := range tt.msg {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error %q does not contain %q", err, m)
				}
			}
			var ue *plan.UnreachableError
			if errors.As(err, &ue) != (tt.unreachable != nil) {
				t.Fatalf("error %q: UnreachableError = %v, want %v", err, ue != nil, tt.unreachable != nil)
			}
			if ue != nil && (!slices.Equal(ue.Reached, tt.reached) || !slices.Equal(ue.Unreachable, tt.unreachable) || ue.Network != tt.network) {
				t.Errorf("got %+v, want reached %q unreachable %q", *ue, tt.reached, tt.unreachable)
			}
		})
	}
}

// TestNetworkTreeRandom checks the tree's properties on random federations:
// loop-free (edges = nodes-1 and connected), spanning every member, every
// leaf a member, paths along the tree, deterministic, independent of the
// order of sites and links, and a subtree of the federation-wide tree.
func TestNetworkTreeRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 2026))
	iterations := 3000
	if testing.Short() {
		iterations = 300
	}
	var trees, unreachable, relayed int
	for it := range iterations {
		n := 2 + rng.IntN(11)
		var sites []string
		for i := range n {
			sites = append(sites, fmt.Sprintf("s%02d", i))
		}
		pOff := rng.Float64() * 0.8
		var links []spec.Link
		for i := range n {
			for j := i + 1; j < n; j++ {
				switch r := rng.Float64(); {
				case r < pOff:
					links = append(links, off(sites[i], sites[j]))
				case rng.IntN(2) == 0:
					links = append(links, cost(sites[i], sites[j], 1+rng.IntN(5)))
				}
			}
		}
		var members []string
		for len(members) == 0 {
			for _, s := range sites {
				if rng.IntN(2) == 0 {
					members = append(members, s)
				}
			}
		}
		rng.Shuffle(len(sites), func(i, j int) { sites[i], sites[j] = sites[j], sites[i] })
		f := federation(sites, links, members...)
		name := fmt.Sprintf("iteration %d (%d sites, members %q, links %v)", it, n, members, links)

		tr, err := plan.NetworkTree(f, "lan")
		again, err2 := plan.NetworkTree(f, "lan")
		if !reflect.DeepEqual(tr, again) || fmt.Sprint(err) != fmt.Sprint(err2) {
			t.Fatalf("%s: two calls differ: %+v, %v and %+v, %v", name, tr, err, again, err2)
		}
		// The same federation written in another order.
		g := federation(slices.Clone(sites), slices.Clone(links), slices.Clone(members)...)
		rng.Shuffle(len(g.Sites), func(i, j int) { g.Sites[i], g.Sites[j] = g.Sites[j], g.Sites[i] })
		rng.Shuffle(len(g.Topology.Links), func(i, j int) {
			g.Topology.Links[i], g.Topology.Links[j] = g.Topology.Links[j], g.Topology.Links[i]
		})
		for _, l := range g.Topology.Links {
			if rng.IntN(2) == 0 {
				l.Between[0], l.Between[1] = l.Between[1], l.Between[0]
			}
		}
		rng.Shuffle(len(g.Networks[0].Sites), func(i, j int) {
			g.Networks[0].Sites[i], g.Networks[0].Sites[j] = g.Networks[0].Sites[j], g.Networks[0].Sites[i]
		})
		shuffled, err3 := plan.NetworkTree(g, "lan")
		if !reflect.DeepEqual(tr, shuffled) || fmt.Sprint(err) != fmt.Sprint(err3) {
			t.Fatalf("%s: reordered input differs: %+v, %v and %+v, %v", name, tr, err, shuffled, err3)
		}

		comp := components(f)
		if err != nil {
			var ue *plan.UnreachableError
			if !errors.As(err, &ue) {
				t.Fatalf("%s: %v", name, err)
			}
			checkUnreachable(t, name, comp, members, ue)
			unreachable++
			continue
		}
		for _, m := range members {
			if comp[m] != comp[members[0]] {
				t.Fatalf("%s: members %s and %s are not connected, but got a tree %+v", name, members[0], m, tr)
			}
		}
		checkTree(t, name, f, members, tr)
		trees++
		if len(tr.Relays) > 0 {
			relayed++
		}

		// Every network's tree lies inside the tree of all sites.
		if connected(comp) {
			all := federation(sites, links, sites...)
			whole, err := plan.NetworkTree(all, "lan")
			if err != nil {
				t.Fatalf("%s: all sites: %v", name, err)
			}
			for _, e := range tr.Edges {
				if !slices.Contains(whole.Edges, e) {
					t.Fatalf("%s: edge %v is not in the all-sites tree %v", name, e, whole.Edges)
				}
			}
		}
	}
	t.Logf("%d trees (%d with relays), %d unreachable", trees, relayed, unreachable)
	if trees == 0 || unreachable == 0 || relayed == 0 {
		t.Errorf("the generator missed a case: %d trees, %d with relays, %d unreachable", trees, relayed, unreachable)
	}
}

func checkTree(t *testing.T, name string, f *spec.Federation, members []string, tr plan.Tree) {
	t.Helper()
	wantMembers := slices.Clone(members)
	slices.Sort(wantMembers)
	wantMembers = slices.Compact(wantMembers)
	if !slices.Equal(tr.Members, wantMembers) {
		t.Fatalf("%s: members %q, want %q", name, tr.Members, wantMembers)
	}
	nodes := map[string]bool{}
	for _, s := range append(slices.Clone(tr.Members), tr.Relays...) {
		if nodes[s] {
			t.Fatalf("%s: site %s is both member and relay", name, s)
		}
		nodes[s] = true
	}
	if len(tr.Edges) != len(nodes)-1 {
		t.Fatalf("%s: %d edges for %d sites: not a tree: %+v", name, len(tr.Edges), len(nodes), tr)
	}
	if !slices.IsSortedFunc(tr.Edges, func(x, y plan.Edge) int { return strings.Compare(x.A+" "+x.B, y.A+" "+y.B) }) {
		t.Fatalf("%s: edges not sorted: %v", name, tr.Edges)
	}
	adj := map[string][]string{}
	for _, e := range tr.Edges {
		if !(e.A < e.B) || !nodes[e.A] || !nodes[e.B] {
			t.Fatalf("%s: bad edge %v in %+v", name, e, tr)
		}
		if !f.LinkEnabled(e.A, e.B) || e.Cost != f.LinkCost(e.A, e.B) {
			t.Fatalf("%s: edge %v is not an enabled link of that cost", name, e)
		}
		adj[e.A] = append(adj[e.A], e.B)
		adj[e.B] = append(adj[e.B], e.A)
	}
	// Connected: with nodes-1 edges that also means no loop.
	seen := map[string]bool{tr.Members[0]: true}
	stack := []string{tr.Members[0]}
	for len(stack) > 0 {
		s := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, o := range adj[s] {
			if !seen[o] {
				seen[o] = true
				stack = append(stack, o)
			}
		}
	}
	if len(seen) != len(nodes) {
		t.Fatalf("%s: tree not connected: reached %v of %v", name, seen, nodes)
	}
	for s := range nodes {
		if len(nodes) > 1 && len(adj[s]) <= 1 && !slices.Contains(tr.Members, s) {
			t.Fatalf("%s: leaf %s is not a member: %+v", name, s, tr)
		}
	}
	if want := len(tr.Members) * (len(tr.Members) - 1) / 2; len(tr.Paths) != want {
		t.Fatalf("%s: %d paths, want %d", name, len(tr.Paths), want)
	}
	for _, p := range tr.Paths {
		if !(p.From < p.To) || p.Sites[0] != p.From || p.Sites[len(p.Sites)-1] != p.To {
			t.Fatalf("%s: bad path %+v", name, p)
		}
		visited := map[string]bool{}
		for i, s := range p.Sites {
			if visited[s] {
				t.Fatalf("%s: path %+v visits %s twice", name, p, s)
			}
			visited[s] = true
			if i > 0 && !slices.Contains(adj[s], p.Sites[i-1]) {
				t.Fatalf("%s: path %+v steps off the tree at %s", name, p, s)
			}
		}
	}
}

func checkUnreachable(t *testing.T, name string, comp map[string]int, members []string, ue *plan.UnreachableError) {
	t.Helper()
	all := append(slices.Clone(ue.Reached), ue.Unreachable...)
	slices.Sort(all)
	want := slices.Clone(members)
	slices.Sort(want)
	want = slices.Compact(want)
	if !slices.Equal(all, want) || len(ue.Unreachable) == 0 {
		t.Fatalf("%s: reached %q + unreachable %q are not the members %q", name, ue.Reached, ue.Unreachable, want)
	}
	for _, r := range ue.Reached {
		if comp[r] != comp[ue.Reached[0]] {
			t.Fatalf("%s: reached %q are not connected", name, ue.Reached)
		}
	}
	for _, u := range ue.Unreachable {
		if comp[u] == comp[ue.Reached[0]] {
			t.Fatalf("%s: %s is called unreachable but connects to %s", name, u, ue.Reached[0])
		}
	}
}

// components numbers the connected components of f's enabled links, by
// plain search: an oracle independent of NetworkTree.
func components(f *spec.Federation) map[string]int {
	comp := map[string]int{}
	for _, s := range f.Sites {
		if _, ok := comp[s.Name]; ok {
			continue
		}
		id := len(comp)
		comp[s.Name] = id
		stack := []string{s.Name}
		for len(stack) > 0 {
			x := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			for _, o := range f.Sites {
				if _, ok := comp[o.Name]; !ok && f.LinkEnabled(x, o.Name) {
					comp[o.Name] = id
					stack = append(stack, o.Name)
				}
			}
		}
	}
	return comp
}

func connected(comp map[string]int) bool {
	for _, c := range comp {
		if c != 0 {
			return false
		}
	}
	return true
}
