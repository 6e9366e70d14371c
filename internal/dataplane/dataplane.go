// Package dataplane brings a gateway's kernel to a plan. Apply is the only
// code path in fednet that changes the kernel; it is idempotent and changes
// only what differs from the plan.
package dataplane

import (
	"context"

	"github.com/fednet/fednet/internal/plan"
)

// Dataplane applies gateway plans to one machine (one network namespace).
type Dataplane interface {
	// Apply makes the machine match p: creates or updates the tunnel
	// interface, its address and MTU, WireGuard peers, the bridges and VXLAN
	// devices of bridged networks, routes, forwarding and the firewall
	// table. It reads the current state first and changes only
	// what differs, so applying the same plan twice returns no changes the
	// second time. On error it keeps applying the rest and returns the
	// changes it made with all errors joined. Safe to call again at any time.
	Apply(ctx context.Context, p plan.Gateway) ([]Change, error)
	// Down removes everything Apply created for p: fednet's bridges and
	// VXLAN devices (their ports are released, not deleted), the tunnel
	// interface (and with it its routes and peers; a userspace WireGuard
	// process exits when its interface goes) and the firewall table. Down of a machine that has
	// nothing is not an error.
	Down(ctx context.Context, p plan.Gateway) ([]Change, error)
}

// Change is one change made to the machine, rendered like the command an
// operator would have typed ("ip route add 10.2.0.0/24 dev fed0").
type Change string
