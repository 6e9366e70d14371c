package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"time"

	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/backend"
	"github.com/fednet/fednet/internal/lab"
	"github.com/fednet/fednet/internal/spec"
)

// TCP443Config configures RunTCP443.
type TCP443Config struct {
	// Binary is the fednet executable the agents run (default: this one).
	Binary string
	// LabName names the lab (default "tcp443").
	LabName string
	// Sites is how many sites the generated spec has (default 3, 2..12).
	Sites int
	// Blocked is the site whose UDP the lab's internet drops (default the
	// second site of the spec).
	Blocked string
	// Throughput is how long each iperf3 run lasts (default 5 s).
	Throughput time.Duration
	// ReachTimeout bounds the wait for the blocked site's pairs (default
	// 30 s); ReturnTimeout the wait for the links' return to UDP once
	// unblocked (default 120 s).
	ReachTimeout, ReturnTimeout time.Duration
	// Progress receives one line per step; nil discards.
	Progress io.Writer
}

// TCP443Report is what RunTCP443 measured. JSON names are its public
// contract (the tcp443 part of `fednet lab interop --json`).
type TCP443Report struct {
	// Site is the site whose UDP was blocked.
	Site string `json:"tcp443_site"`
	// PairsTotal counts the host pairs from or to the blocked site,
	// PairsOK those that answered while it was blocked.
	PairsTotal int `json:"tcp443_pairs_total"`
	PairsOK    int `json:"tcp443_pairs_ok"`
	// ReachableS is the time from the agents' start to every pair of the
	// blocked site answering.
	ReachableS float64 `json:"tcp443_reachable_s"`
	// LinksTotal counts the links from or to the blocked site's gateways
	// (both directions), LinksTCP443 those the manager showed on tcp443
	// while blocked.
	LinksTotal  int `json:"tcp443_links_total"`
	LinksTCP443 int `json:"tcp443_links"`
	// OtherLinksUDP counts the links between other sites shown on udp
	// while the site was blocked (they must not move).
	OtherLinksTotal int `json:"tcp443_other_links_total"`
	OtherLinksUDP   int `json:"tcp443_other_links_udp"`
	// ReturnedS is the time from unblocking to every link of the site
	// shown on udp again; LinksReturned counts those that returned.
	ReturnedS     float64 `json:"tcp443_returned_udp_s"`
	LinksReturned int     `json:"tcp443_links_returned_udp"`
	// The capture on the lab's internet while blocked, of the blocked
	// gateway's packets that the internet forwarded.
	WirePackets      int `json:"tcp443_wire_packets"`
	WireTCP443       int `json:"tcp443_wire_tcp"`
	WireTLSRecords   int `json:"tcp443_wire_tls_records"`
	WireUDP          int `json:"tcp443_wire_udp"`
	WireOther        int `json:"tcp443_wire_other"`
	PlaintextPackets int `json:"plaintext_packets"`
	// ThroughputTCP443Mbps is TCP between a host of the blocked site and
	// a host of another site (the link on tcp443); ThroughputUDPMbps
	// between hosts of two other sites (a link on UDP), in the same run.
	ThroughputTCP443Mbps float64 `json:"throughput_tcp443_mbps"`
	ThroughputUDPMbps    float64 `json:"throughput_udp_mbps"`
	DurationS            float64 `json:"duration_s"`
	Checks               []Check `json:"checks"`
	ChecksPassed         bool    `json:"checks_passed"`
}

// RunTCP443 runs the UDP-blocked scenario (docs/interop.md) on a managed
// lab federation: the lab's internet drops UDP from and to one site before
// the agents start; its hosts must reach every other site's over the TCP
// fallback, the manager must show the site's links on tcp443 and the
// others on udp, and a capture of what the internet forwards of the
// site's gateway must hold only TCP to or from the fallback port, no UDP
// and no plaintext. Throughput is measured over tcp443 and over UDP. Then
// the block is lifted and every link must return to udp. The lab is
// removed at the end, also on error. A failed check is in the report, not
// an error; an error means the scenario could not run.
func RunTCP443(ctx context.Context, cfg TCP443Config) (*TCP443Report, error) {
	start := time.Now()
	step := stepper(cfg.Progress, start)
	if cfg.Sites == 0 {
		cfg.Sites = 3
	}
	if cfg.LabName == "" {
		cfg.LabName = "tcp443"
	}
	if cfg.Throughput == 0 {
		cfg.Throughput = 5 * time.Second
	}
	if cfg.ReachTimeout == 0 {
		cfg.ReachTimeout = 30 * time.Second
	}
	if cfg.ReturnTimeout == 0 {
		cfg.ReturnTimeout = 120 * time.Second
	}
	var err error
	if cfg.Binary, err = binaryOr(cfg.Binary); err != nil {
		return nil, err
	}
	specYAML, err := GenerateSpecYAML(cfg.Sites)
	if err != nil {
		return nil, err
	}
	f, err := spec.Parse([]byte(specYAML))
	if err != nil {
		return nil, err
	}
	if cfg.Blocked == "" {
		cfg.Blocked = f.Sites[1].Name
	}
	if _, ok := f.Site(cfg.Blocked); !ok {
		return nil, fmt.Errorf("blocked site %q is not a site of the spec", cfg.Blocked)
	}
	port := f.Overlay.TCPFallbackPort()

	if err := lab.Down(ctx, cfg.LabName); err != nil {
		return nil, fmt.Errorf("removing an old lab %q: %w", cfg.LabName, err)
	}
	step("building lab %q: %d sites, UDP of %s to be blocked", cfg.LabName, len(f.Sites), cfg.Blocked)
	l, err := lab.Up(ctx, lab.Config{Federation: f, Name: cfg.LabName, Manager: true})
	if err != nil {
		return nil, err
	}
	var m *Managed
	defer func() {
		cleanup, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if m != nil {
			m.Stop(cleanup)
		}
		l.Down(cleanup)
	}()

	r := &TCP443Report{Site: cfg.Blocked}
	check := checker(&r.Checks, step)

	if err := l.SetUDPBlocked(ctx, cfg.Blocked, true); err != nil {
		return r, err
	}
	if m, err = StartManaged(ctx, l, cfg.Binary); err != nil {
		return r, err
	}
	if _, err := m.Apply(ctx, specYAML); err != nil {
		return r, err
	}
	agentsStart := time.Now()
	for _, gw := range l.Gateways() {
		if err := m.Enroll(ctx, gw.Name); err != nil {
			return r, err
		}
	}
	step("agents started; UDP of %s blocked in the lab's internet", cfg.Blocked)

	// The blocked site's pairs, both ways, and the others'.
	var others []string
	for _, s := range l.Sites() {
		if s != cfg.Blocked {
			others = append(others, s)
		}
	}
	var pairs []Pair
	for _, p := range CrossSitePairs(l, l.Sites()) {
		if p.From.Site == cfg.Blocked || p.To.Site == cfg.Blocked {
			pairs = append(pairs, p)
		}
	}
	r.PairsTotal = len(pairs)
	wctx, wcancel := context.WithTimeout(ctx, cfg.ReachTimeout)
	_, werr := WaitReachable(wctx, append(pairs, CrossSitePairs(l, others)...), m.AgentsAlive)
	wcancel()
	r.ReachableS = round(time.Since(agentsStart).Seconds(), 2)
	res := PingAll(ctx, pairs, 3, 200*time.Millisecond)
	for _, p := range res {
		if p.Received > 0 {
			r.PairsOK++
		}
	}
	check("tcp443 reachable", werr == nil && r.PairsOK == r.PairsTotal, "%d/%d pairs of %s answer with its UDP blocked, %.2f s after the agents started%s",
		r.PairsOK, r.PairsTotal, cfg.Blocked, r.ReachableS, errSuffix(werr))
	check("tcp443 within 10 s", werr == nil && r.ReachableS <= 10, "%.2f s (the issue's figure; the machine is shared)", r.ReachableS)

	// The manager's view: the site's links on tcp443, the others on udp.
	blockedGW := map[string]bool{}
	for _, gw := range l.SiteGateways(cfg.Blocked) {
		blockedGW[gw.Name] = true
	}
	touches := func(k api.Link) bool { return blockedGW[k.From] || blockedGW[k.To] }
	var links []api.Link
	lerr := pollLinks(ctx, m, 30*time.Second, func(ls []api.Link) error {
		links = ls
		return linksOn(ls, touches, backend.TransportTCP443, 0)
	})
	r.LinksTotal, r.LinksTCP443 = countLinks(links, touches, backend.TransportTCP443)
	r.OtherLinksTotal, r.OtherLinksUDP = countLinks(links, func(k api.Link) bool { return !touches(k) }, backend.TransportUDP)
	check("tcp443 status", lerr == nil && r.LinksTCP443 == r.LinksTotal && r.LinksTotal > 0,
		"%d/%d links of %s shown on tcp443%s", r.LinksTCP443, r.LinksTotal, cfg.Blocked, errSuffix(lerr))
	check("other links on udp", r.OtherLinksUDP == r.OtherLinksTotal,
		"%d/%d links between other sites shown on udp", r.OtherLinksUDP, r.OtherLinksTotal)

	// What the internet forwards of the blocked gateway while pairs ping
	// and iperf3 runs: TLS on the fallback port only.
	gw := l.SiteGateways(cfg.Blocked)[0]
	capture, err := lab.StartCaptureOn(ctx, l, l.Internet, lab.BridgeInterface, "-Q", "out", "host", gw.Public.Addr().String())
	if err != nil {
		return r, err
	}
	PingAll(ctx, pairs, 5, 100*time.Millisecond)
	far := l.Hosts(others[0])[0]
	near := l.Hosts(cfg.Blocked)[0]
	tt, terr := lab.Iperf3(ctx, far, near, near.LAN.Addr(), cfg.Throughput, 1)
	pcap, cerr := capture.Stop()
	if terr != nil {
		return r, fmt.Errorf("iperf3 over tcp443: %w", terr)
	}
	if cerr != nil {
		return r, cerr
	}
	r.ThroughputTCP443Mbps = round(tt.Mbps, 1)
	var inner []netip.Addr
	for _, s := range l.Sites() {
		for _, h := range l.Hosts(s) {
			inner = append(inner, h.LAN.Addr())
		}
	}
	var control []netip.Addr
	if l.Manager != nil {
		control = append(control, l.Manager.Public.Addr())
	}
	w, err := lab.AnalyzeFallback(pcap, gw.Public.Addr(), port, f.Overlay.Supernet, inner, control...)
	if err != nil {
		return r, err
	}
	r.WirePackets, r.WireTCP443, r.WireTLSRecords, r.WireUDP, r.WireOther, r.PlaintextPackets = w.Packets, w.TCP, w.TLSRecords, w.UDP, w.Other, w.Plaintext
	check("tcp443 wire", w.Packets > 0 && w.TCP == w.Packets && w.TLSRecords > 0 && w.UDP == 0 && w.Plaintext == 0,
		"%s%s", w, samples(w.Samples))
	if len(others) >= 2 {
		a, b := l.Hosts(others[0])[0], l.Hosts(others[1])[0]
		tu, err := lab.Iperf3(ctx, a, b, b.LAN.Addr(), cfg.Throughput, 1)
		if err != nil {
			return r, fmt.Errorf("iperf3 over udp: %w", err)
		}
		r.ThroughputUDPMbps = round(tu.Mbps, 1)
	}
	step("throughput: %.1f Mbit/s over tcp443 (%s -> %s), %.1f Mbit/s over udp", r.ThroughputTCP443Mbps, far, near, r.ThroughputUDPMbps)

	// Unblocked: every link returns to UDP, the pairs still answer.
	if err := l.SetUDPBlocked(ctx, cfg.Blocked, false); err != nil {
		return r, err
	}
	unblocked := time.Now()
	step("UDP of %s unblocked", cfg.Blocked)
	// Traffic both ways keeps the links busy, as the probes do.
	stop := make(chan struct{})
	pinging := make(chan struct{})
	go func() {
		defer close(pinging)
		for {
			select {
			case <-stop:
				return
			case <-time.After(500 * time.Millisecond):
				PingAll(ctx, pairs, 1, 200*time.Millisecond)
			}
		}
	}()
	rerr := pollLinks(ctx, m, cfg.ReturnTimeout, func(ls []api.Link) error {
		links = ls
		return linksOn(ls, touches, backend.TransportUDP, 0)
	})
	close(stop)
	<-pinging
	r.ReturnedS = round(time.Since(unblocked).Seconds(), 2)
	_, r.LinksReturned = countLinks(links, touches, backend.TransportUDP)
	check("back on udp", rerr == nil && r.LinksReturned == r.LinksTotal, "%d/%d links of %s shown on udp %.1f s after UDP was unblocked%s",
		r.LinksReturned, r.LinksTotal, cfg.Blocked, r.ReturnedS, errSuffix(rerr))
	after := PingAll(ctx, pairs, 3, 200*time.Millisecond)
	ok := 0
	for _, p := range after {
		if p.Received > 0 {
			ok++
		}
	}
	check("reachable on udp", ok == len(pairs), "%d/%d pairs of %s answer after the return to udp", ok, len(pairs), cfg.Blocked)

	r.ChecksPassed = !slices.ContainsFunc(r.Checks, func(c Check) bool { return !c.Passed })
	r.DurationS = round(time.Since(start).Seconds(), 1)
	return r, nil
}

// pollLinks reads the manager's links until ok accepts them or timeout
// passes; it returns ok's last error.
func pollLinks(ctx context.Context, m *Managed, timeout time.Duration, ok func([]api.Link) error) error {
	deadline := time.Now().Add(timeout)
	for {
		ls, err := m.Admin.Links(ctx)
		if err == nil {
			if err = ok(ls); err == nil {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// linksOn returns an error naming the first link pick selects that is not
// up on transport t, or nil; at least min links must be selected.
func linksOn(ls []api.Link, pick func(api.Link) bool, t backend.Transport, min int) error {
	n := 0
	for _, k := range ls {
		if !pick(k) {
			continue
		}
		n++
		if !k.Up || k.Transport != t {
			return fmt.Errorf("link %s -> %s: up %v transport %q, want up on %s", k.From, k.To, k.Up, k.Transport, t)
		}
	}
	if n == 0 || n < min {
		return fmt.Errorf("%d links, want at least %d", n, max(min, 1))
	}
	return nil
}

// countLinks counts the links pick selects and those of them on t.
func countLinks(ls []api.Link, pick func(api.Link) bool, t backend.Transport) (total, on int) {
	for _, k := range ls {
		if pick(k) {
			total++
			if k.Transport == t {
				on++
			}
		}
	}
	return total, on
}
