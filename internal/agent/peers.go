package agent

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/fednet/fednet/internal/plan"
)

// PeerStats is what a WireGuard device knows about one peer.
type PeerStats struct {
	PublicKey plan.Key
	// Endpoint is the peer's current endpoint (host:port), empty when
	// unknown.
	Endpoint string
	// LastHandshake is zero when there never was one.
	LastHandshake time.Time
	RxBytes       int64
	TxBytes       int64
}

// PeerReader reads the peers of a WireGuard interface.
type PeerReader interface {
	// Peers returns the peers of interface iface. It is bounded by ctx and
	// safe for concurrent use.
	Peers(ctx context.Context, iface string) ([]PeerStats, error)
}

// FakePeers is a PeerReader that returns what it was given. It is safe for
// concurrent use.
type FakePeers struct {
	mu    sync.Mutex
	peers map[string][]PeerStats
	err   error
}

// Set makes Peers(iface) return peers.
func (f *FakePeers) Set(iface string, peers []PeerStats) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.peers == nil {
		f.peers = map[string][]PeerStats{}
	}
	f.peers[iface] = slices.Clone(peers)
}

// SetError makes Peers fail with err (nil: succeed again).
func (f *FakePeers) SetError(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

// Peers implements PeerReader.
func (f *FakePeers) Peers(_ context.Context, iface string) ([]PeerStats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	return slices.Clone(f.peers[iface]), nil
}
