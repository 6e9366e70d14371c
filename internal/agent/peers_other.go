//go:build !linux

package agent

import (
	"context"
	"errors"
)

// NewWGPeers returns a PeerReader that fails: fednet gateways run Linux.
func NewWGPeers() PeerReader { return unsupportedPeers{} }

type unsupportedPeers struct{}

func (unsupportedPeers) Peers(context.Context, string) ([]PeerStats, error) {
	return nil, errors.New("reading WireGuard peers is only supported on Linux")
}
