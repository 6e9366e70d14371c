package dataplane

import (
	"os"
	"testing"

	"github.com/fednet/fednet/internal/closeonexec"
	"github.com/fednet/fednet/internal/dataplane/nstest"
)

// envWGDevChild makes the test binary act as `fednet wgdev NAME`, so that
// kernel tests can point the WireGuard driver's WGDevCommand at it.
const envWGDevChild = nstest.EnvWGDev

func TestMain(m *testing.M) {
	closeonexec.Inherited() // userspace devices it starts must not hold a flock around go test
	nstest.WGDevChild()
	os.Exit(m.Run())
}
