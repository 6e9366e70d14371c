package agent

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl"

	"github.com/fednet/fednet/internal/plan"
)

// NewWGPeers returns the PeerReader of this machine: it reads WireGuard
// devices through wgctrl, kernel and userspace ones alike.
func NewWGPeers() PeerReader { return wgPeers{} }

type wgPeers struct{}

// Peers implements PeerReader. wgctrl sets no deadline on a userspace
// device's socket, so the read runs aside and Peers returns at ctx's end.
func (wgPeers) Peers(ctx context.Context, iface string) ([]PeerStats, error) {
	type result struct {
		peers []PeerStats
		err   error
	}
	done := make(chan result, 1)
	go func() {
		peers, err := readPeers(iface)
		done <- result{peers, err}
	}()
	select {
	case r := <-done:
		return r.peers, r.err
	case <-ctx.Done():
		return nil, fmt.Errorf("reading WireGuard peers of %s: %w", iface, ctx.Err())
	}
}

func readPeers(iface string) ([]PeerStats, error) {
	c, err := wgctrl.New()
	if err != nil {
		return nil, fmt.Errorf("opening wgctrl: %w", err)
	}
	defer c.Close()
	dev, err := c.Device(iface)
	if err != nil {
		return nil, fmt.Errorf("reading WireGuard device %s: %w", iface, err)
	}
	out := make([]PeerStats, 0, len(dev.Peers))
	for _, p := range dev.Peers {
		s := PeerStats{
			PublicKey:     plan.Key(p.PublicKey),
			LastHandshake: p.LastHandshakeTime,
			RxBytes:       p.ReceiveBytes,
			TxBytes:       p.TransmitBytes,
		}
		if p.Endpoint != nil {
			ap := p.Endpoint.AddrPort()
			s.Endpoint = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()).String()
		}
		if s.LastHandshake.Unix() <= 0 {
			s.LastHandshake = time.Time{} // userspace devices say 1970 for never
		}
		out = append(out, s)
	}
	return out, nil
}
