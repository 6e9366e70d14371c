//go:build linux

package nstest

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

const envNoTools = "FEDNET_NSTEST_NO_TOOLS"

// TestNewWithoutTools runs New in a child test process whose PATH holds no
// tools: as root (CI) the child must fail, naming the Debian package of
// every missing tool; not as root it must skip, saying it needs root. A
// kernel test never passes by skipping on a machine that should run it.
func TestNewWithoutTools(t *testing.T) {
	if os.Getenv(envNoTools) == "1" {
		New(t)
		t.Error("New returned without the tools it needs")
		return
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run", "^TestNewWithoutTools$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), envNoTools+"=1", "PATH="+t.TempDir())
	b, err := cmd.CombinedOutput()
	out := string(b)
	t.Logf("child without tools:\n%s", indent(out))
	if os.Geteuid() != 0 {
		if err != nil || !strings.Contains(out, "--- SKIP") || !strings.Contains(out, "needs root") {
			t.Errorf("not as root the child must skip, saying it needs root (exit %v)", err)
		}
		return
	}
	if err == nil || !strings.Contains(out, "--- FAIL: TestNewWithoutTools") || strings.Contains(out, "--- SKIP") {
		t.Errorf("as root the child must fail, not skip or pass (exit %v)", err)
	}
	for _, want := range []string{"ip (Debian package iproute2)", "unshare (Debian package util-linux)",
		"mount (Debian package mount)", "sh (Debian package dash)", "apt-get install iproute2 util-linux mount dash"} {
		if !strings.Contains(out, want) {
			t.Errorf("the failure does not say %q", want)
		}
	}
}

// TestMissingTools: a tool that is there is not reported, one that is
// not is, with its package.
func TestMissingTools(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := missingTools([]tool{{self, "fednet"}}); err != nil {
		t.Errorf("missingTools of the test binary itself = %v, want nil", err)
	}
	err = missingTools([]tool{{self, "fednet"}, {"fednet-no-such-tool", "fednet-nothing"}})
	if err == nil || strings.Contains(err.Error(), self) || !strings.Contains(err.Error(), "fednet-no-such-tool (Debian package fednet-nothing)") {
		t.Errorf("missingTools with one tool present and one missing = %v; want only the missing one", err)
	}
}
