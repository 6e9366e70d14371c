package dataplane

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fednet/fednet/internal/dataplane/tunnel"
	"github.com/fednet/fednet/internal/dataplane/wireguard"
	"github.com/fednet/fednet/internal/plan"
)

// fakePrivateKey is the fake dataplane's WireGuard private key.
var fakePrivateKey = plan.Key{0xfe, 0xd0}

// FakePublicKey is the public key of the fake dataplane's WireGuard device.
var FakePublicKey = wireguard.PublicKey(fakePrivateKey)

// Fake is a Dataplane that keeps a State in memory. It runs the same checks
// and diff as the Linux dataplane, with the same drivers' pure parts, and
// applies the ops to the State, so tests of state transitions exercise the
// real logic. With the built-in WireGuard driver it behaves like a kernel
// with WireGuard: new interfaces are of kind wireguard. It is safe for
// concurrent use.
type Fake struct {
	reg registry

	mu    sync.Mutex
	state State              // guarded by mu
	fault func(Change) error // guarded by mu
	now   func() time.Time   // guarded by mu
}

// NewFake returns a fake dataplane for an empty machine, with the built-in
// drivers (WireGuard with a fixed key, FakePublicKey) and drivers, which
// add backends or replace built-in ones. It panics when a driver's backend
// is not in package backend's table: a test's mistake.
func NewFake(drivers ...tunnel.Driver) *Fake {
	wg, err := wireguard.New(wireguard.Config{PrivateKey: fakePrivateKey})
	if err != nil {
		panic(err)
	}
	reg, err := newRegistry(append([]tunnel.Driver{wg}, drivers...)...)
	if err != nil {
		panic(err)
	}
	return &Fake{reg: reg, now: time.Now}
}

// State returns a copy of the current state.
func (f *Fake) State() State {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.state.Clone()
	s.normalize()
	return s
}

// SetState replaces the current state, to start from (or simulate) a given
// machine, e.g. a peer endpoint the device learned by roaming, or an
// underlay.
func (f *Fake) SetState(s State) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.state = s.Clone()
}

// SetFault makes every change for which fault returns an error fail with
// that error, without changing the state; nil removes it.
func (f *Fake) SetFault(fault func(Change) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fault = fault
}

// SetClock sets the clock Status judges handshakes by (default time.Now).
func (f *Fake) SetClock(now func() time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = now
}

// Apply implements Dataplane.
func (f *Fake) Apply(ctx context.Context, p plan.Gateway) ([]Change, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ops, err := diff(f.state, p, f.reg, kernelL2{})
	if err != nil {
		return nil, err
	}
	return f.runLocked(ops)
}

// Down implements Dataplane.
func (f *Fake) Down(ctx context.Context, p plan.Gateway) ([]Change, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ops, err := down(withPlanBackends(f.state, p), f.reg, kernelL2{})
	changes, runErr := f.runLocked(ops)
	return changes, errors.Join(err, runErr)
}

// Status implements Dataplane.
func (f *Fake) Status(ctx context.Context, p plan.Gateway) ([]LinkState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return status(p, f.reg, f.now(), func(t plan.Tunnel) (tunnel.State, error) {
		if ts := f.state.tunnel(t.Name); ts != nil {
			return ts.State.Clone(), nil
		}
		return tunnel.State{}, nil
	})
}

// withPlanBackends returns s with the backend of each tunnel p names set to
// p's, so that Down judges an unmarked one with the plan's driver.
func withPlanBackends(s State, p plan.Gateway) State {
	s = s.Clone()
	for i := range s.Tunnels {
		for _, t := range p.Tunnels {
			if t.Name == s.Tunnels[i].Name {
				s.Tunnels[i].Backend = t.Backend
			}
		}
	}
	return s
}

func (f *Fake) runLocked(ops []op) ([]Change, error) {
	var (
		changes []Change
		errs    []error
		failed  = map[string]bool{} // interfaces whose creation failed
	)
	for _, o := range ops {
		c := o.change()
		if n := needs(o); n != "" && failed[n] {
			continue
		}
		if f.fault != nil {
			if err := f.fault(c); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", c, err))
				if n := creates(o); n != "" {
					failed[n] = true
				}
				continue
			}
		}
		o.apply(&f.state)
		changes = append(changes, c)
	}
	f.state.normalize()
	return changes, errors.Join(errs...)
}
