// Package fednet_test holds tests that enforce the project's architecture:
// formatting, package documentation and the dependency rule.
package fednet_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestPureImports enforces the dependency rule of DESIGN.md: spec and plan
// are pure; they never import anything that touches the OS, the network or
// the kernel.
func TestPureImports(t *testing.T) {
	// The standard library's fmt imports os, so for std packages only
	// direct imports count; for everything else the whole closure does.
	direct := []string{"os", "os/exec", "os/signal", "syscall", "net/http", "io/ioutil", "math/rand", "math/rand/v2", "time"}
	closure := []string{
		"github.com/vishvananda/netlink", "github.com/vishvananda/netns", "github.com/google/nftables",
		"golang.zx2c4.com/wireguard", "github.com/fednet/fednet/internal/dataplane",
		"github.com/fednet/fednet/internal/agent", "github.com/fednet/fednet/internal/lab",
		"github.com/fednet/fednet/internal/cli", "github.com/fednet/fednet/internal/wgdev",
	}
	for _, pkg := range []string{"./internal/spec", "./internal/plan"} {
		imports := goList(t, "-f", "{{join .Imports \"\\n\"}}", pkg)
		deps := goList(t, "-deps", pkg)
		check := func(have, banned []string, how string) {
			for _, d := range have {
				for _, b := range banned {
					if d == b || strings.HasPrefix(d, b+"/") {
						t.Errorf("%s %s %s; spec and plan must stay pure (no OS, network, kernel or clock)", pkg, how, d)
					}
				}
			}
		}
		check(imports, direct, "imports")
		check(deps, closure, "depends on")
	}
}

func goList(t *testing.T, args ...string) []string {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list %v: %v\n%s", args, err, out)
	}
	return strings.Fields(string(out))
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
