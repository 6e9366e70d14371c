package dataplane

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"testing"

	"github.com/fednet/fednet/internal/closeonexec"
	"github.com/fednet/fednet/internal/wgdev"
)

// envWGDevChild makes the test binary act as `fednet wgdev NAME`, so that
// kernel tests can point Config.WGDevCommand at it.
const envWGDevChild = "FEDNET_WGDEV_CHILD"

func TestMain(m *testing.M) {
	closeonexec.Inherited() // userspace devices it starts must not hold a flock around go test
	if os.Getenv(envWGDevChild) == "1" && len(os.Args) == 3 && os.Args[1] == "wgdev" {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		err := wgdev.Run(ctx, os.Args[2], log.Printf)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, "wgdev:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}
