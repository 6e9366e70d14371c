package agent

import (
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/await"
	"github.com/fednet/fednet/internal/backend"
	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/probe"
)

// loopPlan is a plan whose transit address is self on loopback (all of
// 127.0.0.0/8 is local on Linux) with one peer at peer.
func loopPlan(name, self, peerName, peer string) plan.Gateway {
	return plan.Gateway{
		Name:     name,
		Tunnels:  []plan.Tunnel{{Backend: backend.WireGuard, Name: "fed0", Address: netip.MustParsePrefix(self + "/8")}},
		Firewall: plan.Firewall{Transit: netip.MustParsePrefix(self + "/8").Masked()},
		Peers: []plan.Peer{{
			Gateway: peerName, Backend: backend.WireGuard, WireGuard: plan.WireGuardPeer{PublicKey: plan.Key{1}},
			AllowedIPs: []netip.Prefix{netip.MustParsePrefix("10.9.0.0/24"), netip.MustParsePrefix(peer + "/32")},
		}},
	}
}

// waitFor waits up to 10 s for f to return nil (await.Until).
func waitFor(t *testing.T, what string, f func() error) {
	t.Helper()
	await.Until(t, 10*time.Second, await.NoError(func() error {
		if err := f(); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	}))
}

// TestLinksProbeEachOther: two link monitors on loopback addresses answer
// each other's probes; when one stops, the other sees the link down after
// probe.DownAfterLost lost probes, and up again when it comes back.
//
// The timeout is generous (500 ms for a loopback RTT of microseconds) so
// that a loaded test machine does not lose probes to scheduling delays.
func TestLinksProbeEachOther(t *testing.T) {
	ctx := t.Context()
	var mu sync.Mutex
	var verdicts []bool
	samples := 0
	cfg := ProbeConfig{Interval: 30 * time.Millisecond, Timeout: 500 * time.Millisecond, Events: LinkEvents{
		Sample: func(peer string, s probe.Sample) {
			mu.Lock()
			samples++
			mu.Unlock()
		},
		Changed: func(peer string, up bool) {
			mu.Lock()
			verdicts = append(verdicts, up)
			mu.Unlock()
		},
	}}
	a := cfg.start(ctx, t.Logf, func() {})
	defer a.Close()
	bcfg := ProbeConfig{Interval: 30 * time.Millisecond, Timeout: 500 * time.Millisecond}
	b := bcfg.start(ctx, t.Logf, nil)
	pa := loopPlan("a", "127.0.0.2", "b", "127.0.0.3")
	pb := loopPlan("b", "127.0.0.3", "a", "127.0.0.2")
	a.Update(pa)
	// b is not up yet: a's probes are lost, the link is down, but losses
	// before the first answer are not counted in the figures.
	waitFor(t, "a sees a link that never answered as down", func() error {
		lp := a.Probe("b", time.Now())
		if lp == nil || lp.Up || lp.RecentLoss != 1 || lp.Sent != 0 {
			return fmt.Errorf("probe figures %+v", lp)
		}
		return nil
	})
	b.Update(pb)
	a.Update(pa) // idempotent: the running prober stays
	waitFor(t, "a measures the link to b", func() error {
		lp := a.Probe("b", time.Now())
		if lp == nil || lp.Sent < 5 || lp.RTTP50 <= 0 {
			return fmt.Errorf("probe figures %+v", lp)
		}
		if lp.Lost != 0 || !lp.Up || lp.RecentLoss != 0 {
			return fmt.Errorf("loss on loopback: %+v", lp)
		}
		return nil
	})
	if lp := b.Probe("a", time.Now()); lp == nil || lp.Sent == 0 {
		t.Errorf("b does not probe a: %+v", lp)
	}
	if a.Probe("nobody", time.Now()) != nil {
		t.Error("a link that is not in the plan has figures")
	}
	if h := a.History("b"); h == nil || len(h.Samples(time.Now(), time.Minute)) == 0 {
		t.Error("the link's history is empty")
	}
	mu.Lock()
	if samples == 0 {
		t.Error("Events.Sample was not called")
	}
	mu.Unlock()

	b.Close() // b's responder is gone: a's probes are lost
	waitFor(t, "a sees the link down", func() error {
		lp := a.Probe("b", time.Now())
		if lp.Up || lp.RecentLoss != 1 || lp.Lost == 0 {
			return fmt.Errorf("probe figures %+v", lp)
		}
		return nil
	})
	b = bcfg.start(ctx, t.Logf, nil)
	defer b.Close()
	b.Update(pb)
	waitFor(t, "a sees the link up again", func() error {
		if lp := a.Probe("b", time.Now()); !lp.Up {
			return fmt.Errorf("probe figures %+v", lp)
		}
		return nil
	})
	mu.Lock()
	if len(verdicts) != 4 || verdicts[0] || !verdicts[1] || verdicts[2] || !verdicts[3] {
		t.Errorf("verdict changes = %v, want down, up, down, up", verdicts)
	}
	mu.Unlock()

	// A plan without the peer stops its prober.
	pa.Peers = nil
	a.Update(pa)
	if a.Probe("b", time.Now()) != nil {
		t.Error("the link to a removed peer is still probed")
	}
}

func TestPeerTransit(t *testing.T) {
	g := loopPlan("a", "10.255.0.1", "b", "10.255.0.2")
	g.Tunnels[0].Address = netip.MustParsePrefix("10.255.0.1/16")
	g.Firewall.Transit = netip.MustParsePrefix("10.255.0.0/16")
	if a, ok := peerTransit(g, g.Peers[0]); !ok || a != netip.MustParseAddr("10.255.0.2") {
		t.Errorf("peerTransit = %v, %v", a, ok)
	}
	g.Peers[0].AllowedIPs = g.Peers[0].AllowedIPs[:1]
	if _, ok := peerTransit(g, g.Peers[0]); ok {
		t.Error("found a transit address among site prefixes")
	}
}
