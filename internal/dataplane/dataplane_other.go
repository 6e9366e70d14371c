//go:build !linux

package dataplane

import (
	"errors"
	"runtime"

	"github.com/fednet/fednet/internal/plan"
)

// NewLinux returns an error: fednet gateways run on Linux only. The fake
// (NewFake) works everywhere.
func NewLinux(cfg Config) (Dataplane, error) {
	return nil, errors.New("dataplane: gateways run on Linux only, not on " + runtime.GOOS)
}

// HoldsVirtual is false off Linux.
func HoldsVirtual(lan plan.LAN) (bool, error) { return false, nil }
