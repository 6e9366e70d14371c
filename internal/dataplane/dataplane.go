// Package dataplane brings a gateway's machine to its plan. Apply is the
// only code path in fednet that changes the kernel; it is idempotent,
// changes only what differs from the plan, and only what fednet owns.
//
// The core here is backend-neutral: the tunnel interfaces' MTU, state and
// addresses, routes, forwarding, the firewall, bridged networks and the
// ownership checks. What is particular to a tunnel backend (creating its
// interface and device, its peers, when a link is established) is a
// driver's (package tunnel is the seam; package wireguard the WireGuard
// driver), found in a registry by the plan's backend (Config).
package dataplane

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/fednet/fednet/internal/dataplane/tunnel"
	"github.com/fednet/fednet/internal/plan"
)

// Dataplane applies gateway plans to one machine (one network namespace).
type Dataplane interface {
	// Apply makes the machine match p: the firewall table, the tunnel
	// interfaces (through their drivers: devices and peers), their
	// addresses and MTU, the bridges and VXLAN devices of bridged
	// networks, routes and forwarding. It first checks p against the
	// ownership rules (check.go) and refuses a plan that breaks one
	// whole, with an error wrapping ErrRefused that names every field at
	// fault; the machine is then unchanged. It reads the current state
	// and changes only what differs, so applying the same plan twice
	// returns no changes the second time. When a change fails it keeps
	// applying the rest and returns the changes it made with all errors
	// joined. Safe to call again at any time.
	Apply(ctx context.Context, p plan.Gateway) ([]Change, error)
	// Down removes what fednet owns for p: its bridges and VXLAN devices
	// (their ports are released, not deleted), its tunnel interfaces (and
	// with them their routes and peers; a userspace WireGuard process
	// exits when its interface goes), its remaining routes and the
	// firewall table. What is named like them but is not fednet's stays
	// and is reported. Down of a machine that has nothing is not an
	// error, and needs no private key.
	Down(ctx context.Context, p plan.Gateway) ([]Change, error)
	// Status returns the state of the link to every peer of p that the
	// tunnel drivers set up, in p's order: whether it is established
	// (the drivers' verdict), the last handshake, the endpoint and the
	// byte counters. When a device cannot be read, its links are still
	// listed, without figures and not established, and the error says
	// why. It changes nothing.
	Status(ctx context.Context, p plan.Gateway) ([]LinkState, error)
}

// Change is one change made to the machine, rendered like the command an
// operator would have typed ("ip route add 10.2.0.0/24 dev fed0").
type Change = tunnel.Change

// LinkState is the state of the link to one peer (Dataplane.Status).
type LinkState = tunnel.LinkState

// status returns the link states of p's peers, each tunnel's read by
// read.
func status(p plan.Gateway, reg registry, now time.Time, read func(plan.Tunnel) (tunnel.State, error)) ([]LinkState, error) {
	var out []LinkState
	var errs []error
	for _, t := range p.Tunnels {
		drv, ok := reg[t.Backend]
		if !ok {
			errs = append(errs, fmt.Errorf("tunnel %s: backend %q has no driver here", t.Name, t.Backend))
			continue
		}
		st, err := read(t)
		if err != nil {
			errs = append(errs, err)
			st = tunnel.State{}
		}
		out = append(out, drv.Status(st, peersOf(p, t.Backend), now)...)
	}
	// In p's order.
	order := map[string]int{}
	for i, peer := range p.Peers {
		order[peer.Gateway] = i
	}
	slices.SortStableFunc(out, func(a, b LinkState) int { return order[a.Peer] - order[b.Peer] })
	return out, errors.Join(errs...)
}
