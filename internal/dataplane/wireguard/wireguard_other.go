//go:build !linux

package wireguard

import (
	"context"
	"errors"
	"runtime"

	"github.com/fednet/fednet/internal/dataplane/tunnel"
	"github.com/fednet/fednet/internal/plan"
)

var errOS = errors.New("wireguard: gateways run on Linux only, not on " + runtime.GOOS)

// Read implements tunnel.Machine; it fails off Linux.
func (d *Driver) Read(context.Context, tunnel.Interface) (tunnel.Device, error) { return nil, errOS }

// Exec implements tunnel.Machine; it fails off Linux.
func (d *Driver) Exec(_ context.Context, op tunnel.Op) (tunnel.Change, error) {
	return op.Change(), errOS
}

// Settle implements tunnel.Machine; it does nothing off Linux.
func (d *Driver) Settle(context.Context, plan.Tunnel, []plan.Peer, []tunnel.Op) {}
