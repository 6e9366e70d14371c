package nstest

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strconv"
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
	// wgdev [--tcp-fallback PORT] NAME, as the WireGuard driver runs it.
	args := os.Args[1:]
	if os.Getenv(EnvWGDev) != "1" || len(args) < 2 || args[0] != "wgdev" {
		return
	}
	var port uint64
	if len(args) == 4 && args[1] == "--tcp-fallback" {
		p, err := strconv.ParseUint(args[2], 10, 16)
		if err != nil {
			fmt.Fprintln(os.Stderr, "wgdev: --tcp-fallback:", err)
			os.Exit(2)
		}
		port = p
	} else if len(args) != 2 {
		fmt.Fprintln(os.Stderr, "wgdev: want wgdev [--tcp-fallback PORT] NAME")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	err := wgdev.Run(ctx, args[len(args)-1], log.Printf, wgdev.WithFallback(uint16(port)))
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "wgdev:", err)
		os.Exit(1)
	}
	os.Exit(0)
}
