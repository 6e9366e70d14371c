//go:build !linux

package dataplane

import (
	"context"
	"errors"
	"net/netip"
	"runtime"

	"github.com/fednet/fednet/internal/plan"
)

var errHostOS = errors.New("dataplane: neighbor tunnels run on Linux only, not on " + runtime.GOOS)

// ApplyHost returns an error: neighbor tunnels run on Linux only.
func ApplyHost(ctx context.Context, t plan.HostTunnel, address netip.Prefix) ([]Change, error) {
	return nil, errHostOS
}

// RemoveHost returns an error: neighbor tunnels run on Linux only.
func RemoveHost(name string) ([]Change, error) { return nil, errHostOS }
