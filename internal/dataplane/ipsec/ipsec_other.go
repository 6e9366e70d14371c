//go:build !linux

package ipsec

import (
	"context"
	"errors"
	"runtime"

	"github.com/fednet/fednet/internal/dataplane/tunnel"
	"github.com/fednet/fednet/internal/plan"
)

var errOS = errors.New("ipsec: the IPsec data plane runs on Linux only, not " + runtime.GOOS)

// Read implements tunnel.Machine; it fails off Linux.
func (d *Driver) Read(context.Context, tunnel.Interface) (tunnel.Device, error) { return nil, errOS }

// Exec implements tunnel.Machine; it fails off Linux.
func (d *Driver) Exec(context.Context, tunnel.Op) (tunnel.Change, error) { return "", errOS }

// Settle implements tunnel.Machine.
func (d *Driver) Settle(context.Context, plan.Tunnel, []plan.Peer, []tunnel.Op) {}
