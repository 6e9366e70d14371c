package nstest

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/fednet/fednet/internal/wgdev"
)

// EnvWGDev, set to 1, makes a test binary whose TestMain calls WGDevChild
// act as `fednet wgdev NAME` when it is run with the arguments wgdev NAME:
// kernel tests point the userspace WireGuard command at the test binary.
const EnvWGDev = "FEDNET_WGDEV_CHILD"

// WGDevChild runs the userspace WireGuard device and exits when this
// process is such a child (see EnvWGDev); otherwise it returns at once.
// Call it first in TestMain.
func WGDevChild() {
	if os.Getenv(EnvWGDev) != "1" || len(os.Args) != 3 || os.Args[1] != "wgdev" {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	err := wgdev.Run(ctx, os.Args[2], log.Printf)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "wgdev:", err)
		os.Exit(1)
	}
	os.Exit(0)
}
