// Package fednet_test holds tests that enforce the project's architecture:
// formatting, package documentation and the dependency rule, a table of
// forbidden import edges checked over the dependency graph `go list -deps`
// prints.
package fednet_test

import (
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/fednet/fednet"

// Groups of packages, by import path. A package of the module is in
// exactly one of production, labCode, testHelper and wiring.
var (
	// labCode builds and measures testbeds; only the CLI links it.
	labCode = within(module+"/internal/lab", module+"/internal/demo", module+"/internal/faults", module+"/internal/bench", module+"/internal/abw/abwlab")
	// wiring is the binary's main and the subcommands: the one place that
	// joins production code to lab code.
	wiring = within(module+"/cmd/fednet", module+"/internal/cli")
	// root holds only this test.
	root = func(p string) bool { return p == module }
)

// testHelper is a package for tests only: the ...test packages (nstest,
// clienttest, metricstest, storetest) and await.
func testHelper(p string) bool {
	if !inModule(p) {
		return false
	}
	last := p[strings.LastIndex(p, "/")+1:]
	return strings.HasSuffix(last, "test") || p == module+"/internal/await"
}

// production is every package of the module that the agent, the manager
// or the host side may link: all but lab code, test helpers and wiring.
func production(p string) bool {
	return inModule(p) && !labCode(p) && !testHelper(p) && !wiring(p) && !root(p)
}

func inModule(p string) bool { return p == module || strings.HasPrefix(p, module+"/") }

// within matches the packages at or below any of paths.
func within(paths ...string) func(string) bool {
	return func(p string) bool {
		for _, w := range paths {
			if p == w || strings.HasPrefix(p, w+"/") {
				return true
			}
		}
		return false
	}
}

// edgeRule forbids packages that from matches to depend on packages that
// to matches: anywhere in their dependency closure, or, with direct, only
// by their own imports (for standard packages that the standard library
// itself pulls in, like os under fmt).
type edgeRule struct {
	from, to         func(string) bool
	fromName, toName string
	direct           bool
	why              string
}

// forbidden is the dependency rule of DESIGN.md as a table.
var forbidden = []edgeRule{
	{
		fromName: "production packages", from: production, toName: "lab code (lab, demo, faults, bench, abwlab)", to: labCode,
		why: "the agent and the manager never link the testbeds; only internal/cli joins them",
	},
	{
		fromName: "production packages", from: production, toName: "gopacket", to: within("github.com/google/gopacket"),
		why: "packet capture is the lab's; the agent and the manager do not link it",
	},
	{
		fromName: "non-test packages", from: func(p string) bool { return inModule(p) && !testHelper(p) }, toName: "a test helper or package testing",
		to:  func(p string) bool { return testHelper(p) || p == "testing" },
		why: "test helpers serve _test.go files only; the fednet binary never links test code",
	},
	{
		fromName: "spec and plan", from: pure, toName: "the OS, the network or the clock", direct: true,
		to:  within("os", "os/exec", "os/signal", "syscall", "net/http", "io/ioutil", "math/rand", "time"),
		why: "spec and plan are pure: no I/O, no clock, no randomness",
	},
	{
		fromName: "spec and plan", from: pure, toName: "kernel or runtime code",
		to: within("github.com/vishvananda/netlink", "github.com/vishvananda/netns", "github.com/google/nftables",
			"golang.zx2c4.com/wireguard", module+"/internal/dataplane", module+"/internal/agent",
			module+"/internal/lab", module+"/internal/cli", module+"/internal/wgdev"),
		why: "spec and plan are pure: nothing that touches the kernel",
	},
}

func pure(p string) bool { return p == module+"/internal/spec" || p == module+"/internal/plan" }

// graph maps an import path to the paths it imports (non-test files of
// this platform's build).
type graph map[string][]string

// loadGraph returns the dependency graph of the module's packages.
func loadGraph(t *testing.T, patterns ...string) graph {
	t.Helper()
	args := append([]string{"list", "-deps", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}"}, patterns...)
	out, err := exec.Command("go", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	g := graph{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		g[f[0]] = f[1:]
	}
	return g
}

// chain returns the shortest import chain from one package to the first
// package that to matches (breadth first, imports in order), or nil.
func (g graph) chain(from string, to func(string) bool, direct bool) []string {
	if direct {
		for _, imp := range g[from] {
			if to(imp) {
				return []string{from, imp}
			}
		}
		return nil
	}
	parent := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, imp := range g[p] {
			if _, seen := parent[imp]; seen {
				continue
			}
			parent[imp] = p
			if to(imp) {
				var c []string
				for q := imp; q != ""; q = parent[q] {
					c = append(c, q)
				}
				slices.Reverse(c)
				return c
			}
			queue = append(queue, imp)
		}
	}
	return nil
}

// violations checks every package of g that a rule binds and returns one
// message per forbidden edge (the import that must go), with the chain
// from the first package it reaches (in the order of roots, then the
// rest sorted) and how many more packages it reaches.
func (g graph) violations(rules []edgeRule, roots []string) []string {
	pkgs := slices.Sorted(func(yield func(string) bool) {
		for p := range g {
			if !slices.Contains(roots, p) && !yield(p) {
				return
			}
		}
	})
	pkgs = append(slices.Clone(roots), pkgs...)
	var out []string
	for _, r := range rules {
		type edge struct{ from, to string }
		first := map[edge][]string{}
		more := map[edge]int{}
		var order []edge
		for _, p := range pkgs {
			if _, ok := g[p]; !ok || !r.from(p) {
				continue
			}
			c := g.chain(p, r.to, r.direct)
			if c == nil {
				continue
			}
			e := edge{c[len(c)-2], c[len(c)-1]}
			if first[e] == nil {
				first[e] = c
				order = append(order, e)
			} else {
				more[e]++
			}
		}
		for _, e := range order {
			msg := fmt.Sprintf("forbidden edge %s -> %s (%s must not depend on %s: %s); import chain: %s",
				short(e.from), short(e.to), r.fromName, r.toName, r.why, strings.Join(mapShort(first[e]), " -> "))
			if n := more[e]; n > 0 {
				msg += fmt.Sprintf(", and %d more of the %s through the same edge", n, r.fromName)
			}
			out = append(out, msg)
		}
	}
	return out
}

func short(p string) string { return strings.TrimPrefix(p, module+"/") }

func mapShort(ps []string) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = short(p)
	}
	return out
}

// TestForbiddenEdges enforces the table over the whole module's
// dependency graph, starting with the closures of the agent and the
// manager (the packages `fednet agent` and `fednet manager` run).
func TestForbiddenEdges(t *testing.T) {
	g := loadGraph(t, "./...")
	roots := []string{module + "/internal/agent", module + "/internal/manager"}
	for _, r := range roots {
		if _, ok := g[r]; !ok || !production(r) {
			t.Errorf("%s is not a production package of the module; the table no longer covers the agent and the manager", short(r))
		}
	}
	for _, v := range g.violations(forbidden, roots) {
		t.Error(v)
	}
	// Every rule binds a package and names one that exists, so that a
	// rename cannot empty it: the lab, gopacket and the test helpers are
	// in the graph (the CLI and the tests link them), spec and plan are.
	for _, r := range forbidden {
		var from, to bool
		for p := range g {
			from = from || r.from(p)
			to = to || r.to(p)
		}
		if !from || !to && !r.direct {
			t.Errorf("rule %q -> %q matches no package on one side (%v, %v): fix the table", r.fromName, r.toName, from, to)
		}
	}
}

// TestCLILinksLab: the fednet binary still has `fednet lab` (its closure
// includes the lab), while the agent's and the manager's packages do not
// (TestForbiddenEdges) — the split is in the packages, not the binary.
func TestCLILinksLab(t *testing.T) {
	g := loadGraph(t, "./cmd/fednet")
	for _, want := range []string{module + "/internal/lab", module + "/internal/abw/abwlab"} {
		if g.chain(module+"/cmd/fednet", func(p string) bool { return p == want }, false) == nil {
			t.Errorf("go list -deps ./cmd/fednet does not include %s; the CLI lost `fednet lab` or `probe bandwidth --lab`", short(want))
		}
	}
	if c := g.chain(module+"/cmd/fednet", func(p string) bool { return p == "testing" }, false); c != nil {
		t.Errorf("the fednet binary links package testing; import chain: %s", strings.Join(mapShort(c), " -> "))
	}
}

// TestViolationsNameTheChain checks the checker on a made-up graph: a
// production package that reaches the lab through another one is
// reported with the edge and the whole chain, once per edge.
func TestViolationsNameTheChain(t *testing.T) {
	m := func(p string) string { return module + "/" + p }
	g := graph{
		m("internal/agent"):          {m("internal/probe"), "fmt"},
		m("internal/manager"):        {m("internal/probe")},
		m("internal/probe"):          {m("internal/abw")},
		m("internal/abw"):            {m("internal/lab"), "fmt"},
		m("internal/lab"):            {"github.com/google/gopacket"},
		m("internal/cli"):            {m("internal/lab")},
		m("internal/spec"):           {"time"},
		"github.com/google/gopacket": nil,
		"fmt":                        {"os"},
	}
	got := g.violations(forbidden, []string{m("internal/agent"), m("internal/manager")})
	want := []string{
		"forbidden edge internal/abw -> internal/lab (production packages must not depend on lab code (lab, demo, faults, bench, abwlab): " + forbidden[0].why +
			"); import chain: internal/agent -> internal/probe -> internal/abw -> internal/lab, and 3 more of the production packages through the same edge",
		"forbidden edge internal/lab -> github.com/google/gopacket (production packages must not depend on gopacket: " + forbidden[1].why +
			"); import chain: internal/agent -> internal/probe -> internal/abw -> internal/lab -> github.com/google/gopacket, and 3 more of the production packages through the same edge",
		"forbidden edge internal/spec -> time (spec and plan must not depend on the OS, the network or the clock: " + forbidden[3].why +
			"); import chain: internal/spec -> time",
	}
	if !slices.Equal(got, want) {
		t.Errorf("violations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestPackagesDocumented requires a package doc comment on every package.
func TestPackagesDocumented(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{len .GoFiles}} {{.Doc}}", "./...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, rest, _ := strings.Cut(line, " ")
		files, doc, _ := strings.Cut(rest, " ")
		if files != "0" && strings.TrimSpace(doc) == "" {
			t.Errorf("package %s has no package doc comment", path)
		}
	}
}

// TestGofmt keeps the tree gofmt-clean.
func TestGofmt(t *testing.T) {
	out, err := exec.Command("sh", "-c", "gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go')").CombinedOutput()
	if err != nil {
		t.Fatalf("gofmt: %v\n%s", err, out)
	}
	if s := strings.TrimSpace(string(out)); s != "" {
		t.Errorf("gofmt -w needed on:\n%s", s)
	}
}
