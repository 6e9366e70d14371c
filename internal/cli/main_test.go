package cli

import (
	"os"
	"testing"

	"github.com/fednet/fednet/internal/dataplane/nstest"
)

// envMain, set to 1, makes this test binary act as the fednet command
// with its arguments: kernel tests run a real agent process they can kill.
const envMain = "FEDNET_CLI_MAIN"

// The agent starts `os.Executable() wgdev NAME` for userspace WireGuard: in
// kernel tests that is this test binary (nstest.EnvWGDev).
func TestMain(m *testing.M) {
	nstest.WGDevChild()
	if os.Getenv(envMain) == "1" {
		os.Exit(Main(os.Args[1:]))
	}
	os.Exit(m.Run())
}
