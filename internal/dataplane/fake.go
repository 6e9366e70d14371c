package dataplane

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"

	"github.com/fednet/fednet/internal/plan"
)

// FakePublicKey is the public key of the fake dataplane's WireGuard device.
var FakePublicKey = plan.Key{0xfe, 0xd0}

// Fake is a Dataplane that keeps a State in memory. It runs the same diff as
// the Linux dataplane and applies its ops to the State, so tests of state
// transitions exercise the real logic. A Fake behaves like a kernel with
// WireGuard: new interfaces are of kind KindKernel. It is safe for
// concurrent use.
type Fake struct {
	mu    sync.Mutex
	state State
	fault func(Change) error
}

// NewFake returns a fake dataplane for an empty machine.
func NewFake() *Fake { return &Fake{} }

// State returns a copy of the current state.
func (f *Fake) State() State {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.state.Clone()
	s.normalize()
	return s
}

// SetState replaces the current state, to start from (or simulate) a given
// machine, e.g. a peer endpoint the device learned by roaming.
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

// Apply implements Dataplane.
func (f *Fake) Apply(ctx context.Context, p plan.Gateway) ([]Change, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ops, err := diff(f.state, p, options{publicKey: FakePublicKey})
	if ops == nil && err != nil {
		return nil, err
	}
	changes, runErr := f.runLocked(ops)
	return changes, errors.Join(err, runErr)
}

// Down implements Dataplane.
func (f *Fake) Down(ctx context.Context, p plan.Gateway) ([]Change, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ops, err := down(f.state)
	changes, runErr := f.runLocked(ops)
	return changes, errors.Join(err, runErr)
}

func (f *Fake) runLocked(ops []op) ([]Change, error) {
	var (
		changes []Change
		errs    []error
		failed  = map[string]bool{} // links whose creation failed
	)
	for _, o := range ops {
		c := o.change()
		if failed[o.link()] {
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
		f.state.apply(o)
		changes = append(changes, c)
	}
	f.state.normalize()
	return changes, errors.Join(errs...)
}

// apply changes s as the kernel would for o.
func (s *State) apply(o op) {
	switch o := o.(type) {
	case linkDel:
		s.Link, s.WireGuard = nil, nil
		s.Routes = routesNotOn(s.Routes, o.name)
	case linkAdd:
		s.Link = &LinkState{Name: o.name, Kind: o.mode.kind(), MTU: defaultMTU}
		s.WireGuard = &WireGuardState{}
	case deviceSet:
		if o.privateKey {
			s.WireGuard.PublicKey = FakePublicKey
		}
		if o.listenPort >= 0 {
			s.WireGuard.ListenPort = o.listenPort
		}
	case linkSet:
		if s.setL2Link(o) {
			break
		}
		if o.mtu > 0 {
			s.Link.MTU = o.mtu
		}
		if o.up {
			s.Link.Up = true
		}
	case addrAdd:
		s.Link.Addresses = append(s.Link.Addresses, o.prefix)
	case addrDel:
		s.Link.Addresses = slices.DeleteFunc(s.Link.Addresses, func(a netip.Prefix) bool { return a == o.prefix })
		if o.prefix.Addr().Is4() && !hasIPv4(s.Link.Addresses) {
			s.Routes = withoutIPv4RoutesOn(s.Routes, o.dev)
		}
	case peerRemove:
		s.WireGuard.Peers = slices.DeleteFunc(s.WireGuard.Peers, func(p PeerState) bool { return p.PublicKey == o.key })
	case peerSet:
		i := slices.IndexFunc(s.WireGuard.Peers, func(p PeerState) bool { return p.PublicKey == o.key })
		if i < 0 {
			s.WireGuard.Peers = append(s.WireGuard.Peers, PeerState{PublicKey: o.key})
			i = len(s.WireGuard.Peers) - 1
		}
		p := &s.WireGuard.Peers[i]
		if o.endpoint != "" {
			p.Endpoint = o.endpoint
		}
		if o.setAllowedIPs {
			p.AllowedIPs = slices.Clone(o.allowedIPs)
			// An allowed IP belongs to one peer: the device takes it from
			// any other.
			for j := range s.WireGuard.Peers {
				if j != i {
					q := &s.WireGuard.Peers[j]
					q.AllowedIPs = slices.DeleteFunc(q.AllowedIPs, func(a netip.Prefix) bool { return slices.Contains(o.allowedIPs, a) })
				}
			}
		}
		if o.setKeepalive {
			p.PersistentKeepalive = o.keepalive
		}
	case routeAdd:
		s.Routes = append(s.Routes, o.route)
	case routeDel:
		s.Routes = slices.DeleteFunc(s.Routes, func(r RouteState) bool { return r == o.route })
	case forwardingOn:
		s.Forwarding = true
	case tableReplace:
		s.Table = &TableState{Name: o.rules.table, Fingerprint: o.fingerprint}
	case tableDel:
		s.Table = nil
	default:
		if !s.applyL2(o) && !s.applyNeighbor(o) {
			panic(fmt.Sprintf("dataplane: unknown op %T", o))
		}
	}
}
