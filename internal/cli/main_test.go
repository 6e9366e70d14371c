package cli

import (
	"os"
	"testing"

	"github.com/fednet/fednet/internal/dataplane/nstest"
)

// The agent starts `os.Executable() wgdev NAME` for userspace WireGuard: in
// kernel tests that is this test binary (nstest.EnvWGDev).
func TestMain(m *testing.M) {
	nstest.WGDevChild()
	os.Exit(m.Run())
}
