package bench

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/fednet/fednet/internal/backend"
	"github.com/fednet/fednet/internal/demo"
	"github.com/fednet/fednet/internal/wgdev/fallback"
)

// TCP443 is the mode that measures the routed path with the second site's
// UDP blocked in the lab's internet, its link on the TCP fallback.
const TCP443 = "tcp443"

// fallbackTimeout bounds the wait for the link to move to the stream once
// UDP is blocked: WireGuard starts a new handshake 15 s after its packets
// go unanswered, and the fallback dials 3 s after that.
const fallbackTimeout = 60 * time.Second

// measureTCP443 blocks the UDP of the second measured site, waits until the
// first site's gateway carries the link on its TCP fallback stream, measures
// routed again (the tcp443 mode, beside the shared underlay and standalone
// results) and unblocks. It reports why when the mode cannot run: the
// fallback off in the spec, or a gateway without a userspace device.
func (r *labRun) measureTCP443(ctx context.Context, routed *path, others []*path, shared map[string]*pathResult) (ModeResult, error) {
	if r.pairs.Backend != backend.WireGuard {
		return ModeResult{}, fmt.Errorf("the link of %s and %s is on %s; the TCP fallback is WireGuard's", r.a, r.b, r.pairs.Backend)
	}
	if r.f.Overlay.TCPFallbackPort() == 0 {
		return ModeResult{}, errors.New("the spec turns the TCP fallback off (overlay.fallback.tcp443: off)")
	}
	gw := r.l.SiteGateways(r.a)[0]
	status := filepath.Join(gw.WireGuardDir(), r.f.Overlay.Interface+".fallback.json")
	if _, err := fallback.ReadStatus(status); err != nil {
		return ModeResult{}, fmt.Errorf("gateway %s has no userspace device with the fallback: %w", gw.Name, err)
	}
	r.progress("mode tcp443: UDP of %s blocked in the lab's internet", r.b)
	if err := r.l.SetUDPBlocked(ctx, r.b, true); err != nil {
		return ModeResult{}, err
	}
	defer r.l.SetUDPBlocked(context.WithoutCancel(ctx), r.b, false)
	start := time.Now()
	pair := []demo.Pair{{From: r.l.Hosts(r.a)[0], To: r.l.Hosts(r.b)[0]}}
	for {
		st, err := fallback.ReadStatus(status)
		if err == nil && len(st.TCP) > 0 {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err = demo.WaitReachable(wctx, pair, nil)
			cancel()
			if err == nil {
				break
			}
		}
		if time.Since(start) > fallbackTimeout {
			return ModeResult{}, fmt.Errorf("the link of %s to %s did not move to the TCP fallback within %v (status %+v, %v)", r.a, r.b, fallbackTimeout, st, err)
		}
		select {
		case <-ctx.Done():
			return ModeResult{}, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	r.progress("mode tcp443: the link moved to the TCP fallback after %v", time.Since(start).Round(time.Millisecond))
	by := map[string]*pathResult{Overlay: measurePath(ctx, r.cfg.Settings, routed, r.progress)}
	for _, p := range others {
		by[p.info.Name] = shared[p.info.Name]
	}
	m := assemble(TCP443, append([]*path{routed}, others...), by)
	m.Backend, m.Transport = backend.WireGuard, backend.TransportTCP443
	return m, nil
}
