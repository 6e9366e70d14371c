package spec

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImports keeps spec pure: no package that touches the OS, the network
// or the kernel, and none of fednet's higher layers.
func TestImports(t *testing.T) {
	forbidden := []string{"os", "os/exec", "os/signal", "syscall", "net/http", "io/fs", "path/filepath", "time", "math/rand", "math/rand/v2", "crypto/rand", "unsafe"}
	forbiddenPrefix := []string{"github.com/vishvananda/", "golang.zx2c4.com/", "github.com/google/nftables", "github.com/fednet/fednet/internal/", "golang.org/x/sys"}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			for _, bad := range forbidden {
				if path == bad {
					t.Errorf("%s imports %s; spec must stay pure (no OS, clock, randomness)", name, path)
				}
			}
			for _, bad := range forbiddenPrefix {
				// backend is the pure table of tunnel backends the
				// validator checks overlay.backend against.
				if strings.HasPrefix(path, bad) && path != "github.com/fednet/fednet/internal/backend" {
					t.Errorf("%s imports %s; spec must not depend on the kernel or on other fednet packages", name, path)
				}
			}
		}
	}
}
