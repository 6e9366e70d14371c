package agent

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/abw"
	"github.com/fednet/fednet/internal/backend"
	"github.com/fednet/fednet/internal/metrics"
	"github.com/fednet/fednet/internal/plan"
)

// loopGateway is a plan whose transit address is 127.0.0.<self> with one
// peer at 127.0.0.<peer>: two bandwidth parts on loopback stand in for
// two gateways.
func loopGateway(self, peer byte, peerName string) plan.Gateway {
	var g plan.Gateway
	g.Tunnels = []plan.Tunnel{{Backend: backend.WireGuard, Name: "fed0", Address: netip.PrefixFrom(netip.AddrFrom4([4]byte{127, 0, 0, self}), 8)}}
	g.Firewall.Transit = g.Tunnels[0].Address.Masked()
	p := plan.Peer{Gateway: peerName, Backend: backend.WireGuard, AllowedIPs: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{127, 0, 0, peer}), 32)}}
	p.WireGuard.PublicKey[0] = 1
	g.Peers = []plan.Peer{p}
	return g
}

// TestBandwidthEstimateOverLoopback: the responder follows the plan's
// transit address, an estimate to a peer reaches the peer's responder and
// lands in the metrics, and an unknown peer is an error naming it.
func TestBandwidthEstimateOverLoopback(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	quick := BandwidthConfig{Estimator: abw.Config{MaxFleets: 2, Streams: 2}}
	ma := metrics.NewAgent()
	a := quick.start(ctx, t.Logf, ma)
	defer a.Close()
	b := quick.start(ctx, t.Logf, nil)
	defer b.Close()
	a.Update(loopGateway(91, 92, "b"))
	b.Update(loopGateway(92, 91, "a"))
	res, err := a.Estimate(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	if res.ADR <= 0 || len(res.Fleets) != 2 || res.Bytes <= 0 {
		t.Errorf("estimate over loopback: %+v", res)
	}
	if v, ok := ma.AvailableBandwidth("b"); !ok || v != res.Estimate {
		t.Errorf("metric for b: %v %v, want %v", v, ok, res.Estimate)
	}
	if _, err := a.Estimate(ctx, "c"); err == nil || !strings.Contains(err.Error(), `"c"`) {
		t.Errorf("estimate to an unknown peer: %v", err)
	}
	// b's responder moves with its plan.
	b.Update(loopGateway(93, 91, "a"))
	a.Update(loopGateway(91, 93, "b"))
	if _, err := a.Estimate(ctx, "b"); err != nil {
		t.Errorf("estimate after the peer moved: %v", err)
	}
}
