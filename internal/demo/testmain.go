package demo

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// RunTests runs the tests of an end-to-end test package (m is its
// *testing.M) and returns the exit status for os.Exit. As root it first
// builds the fednet executable into a temporary directory and sets
// *binary to its path, for the agents the tests start; not as root the
// root-only tests skip, so nothing is built.
func RunTests(m interface{ Run() int }, binary *string) int {
	if os.Geteuid() != 0 {
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "fednet-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	*binary = filepath.Join(dir, "fednet")
	out, err := exec.Command("go", "build", "-o", *binary, "github.com/fednet/fednet/cmd/fednet").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building fednet: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}
