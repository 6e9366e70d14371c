//go:build unix

package manager

import (
	"os"
	"os/signal"
	"syscall"
)

// profileSignals returns the channel SIGUSR1 arrives on (see
// startProfile) and what stops its delivery.
func profileSignals() (<-chan os.Signal, func()) {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGUSR1)
	return c, func() { signal.Stop(c) }
}
