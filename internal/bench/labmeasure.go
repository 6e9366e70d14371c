package bench

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"time"

	"github.com/fednet/fednet/internal/backend"
	"github.com/fednet/fednet/internal/demo"
	"github.com/fednet/fednet/internal/lab"
)

// serve starts an iperf3 server in node n of l for the rest of the run.
func (r *labRun) serve(ctx context.Context, l *lab.Lab, n *lab.Node) error {
	p, err := l.Start(n, "iperf3", "-s", "-p", strconv.Itoa(IperfPort))
	if err != nil {
		return err
	}
	r.onCleanup(p.Stop)
	if err := waitIperfServer(ctx, n, IperfPort); err != nil {
		return fmt.Errorf("%w: %s", err, p.LogText())
	}
	return nil
}

// wireOf returns the public interfaces of the first gateways of the
// measured sites in l.
func (r *labRun) wireOf(l *lab.Lab) []wireIface { return wireBetween(l, r.a, r.b) }

// wireBetween returns the public interfaces of the first gateways of
// sites a and b in l.
func wireBetween(l *lab.Lab, a, b string) []wireIface {
	return []wireIface{
		{at: l.SiteGateways(a)[0], iface: lab.PublicInterface},
		{at: l.SiteGateways(b)[0], iface: lab.PublicInterface},
	}
}

// hostPath is the path from node from to node to's LAN address.
func hostPath(name string, from, to *lab.Node, wire []wireIface) *path {
	return nodePath(PathInfo{Name: name, From: from.Name, To: to.Name, Address: to.LAN.Addr().String()}, from, to, to.LAN.Addr(), wire)
}

// nodePath is the path from node from to address addr of node to.
func nodePath(info PathInfo, from, to *lab.Node, addr netip.Addr, wire []wireIface) *path {
	return &path{info: info, from: from, to: addr, port: IperfPort, wire: wire,
		send: func(ctx context.Context, n int64) (int64, error) { return sendExact(ctx, from, to, addr, n) }}
}

// measure runs every measurement and assembles the results.
func (r *labRun) measure(ctx context.Context) (*Results, error) {
	s := r.cfg.Settings
	res := &Results{
		Schema: Schema, Started: r.start.UTC(), Settings: s,
		Target: Target{Kind: "lab", Lab: r.l.Name, Reference: r.ref.Name, Spec: r.cfg.SpecName,
			Sites: []string{r.a, r.b}, WireGuard: demo.WireGuardKind(ctx, r.l.SiteGateways(r.a)[0]), Quick: r.cfg.Quick},
	}
	res.Notes = append(res.Notes,
		"The underlay (gateway to gateway between public addresses) and the standalone wireguard-go tunnel (host to host, configured by hand with wg and ip) run in a reference lab of the same two sites, built for this run: a federated gateway's firewall admits only WireGuard on its public side.",
		"The lab's wire is veth pairs inside one kernel: throughput ratios measure the tunnel's CPU cost on this machine, not what a WAN link would show.")

	rgwA, rgwB := r.ref.SiteGateways(r.a)[0], r.ref.SiteGateways(r.b)[0]
	underlay := nodePath(PathInfo{Name: Underlay, From: rgwA.Name, To: rgwB.Name, Address: rgwB.Public.Addr().String()},
		rgwA, rgwB, rgwB.Public.Addr(), r.wireOf(r.ref))
	standalone := hostPath(Standalone, r.ref.Hosts(r.a)[0], r.ref.Hosts(r.b)[0], r.wireOf(r.ref))
	routed := hostPath(Overlay, r.l.Hosts(r.a)[0], r.l.Hosts(r.b)[0], r.wireOf(r.l))
	standalone.cost.pids = wgdevPIDs(standaloneIface, rgwA, rgwB)
	overlayPIDs := wgdevPIDs(r.tunnelInterface(), r.l.SiteGateways(r.a)[0], r.l.SiteGateways(r.b)[0])
	routed.cost.pids = overlayPIDs
	for _, n := range []struct {
		l *lab.Lab
		n *lab.Node
	}{{r.ref, rgwB}, {r.ref, r.ref.Hosts(r.b)[0]}, {r.l, r.l.Hosts(r.b)[0]}} {
		if err := r.serve(ctx, n.l, n.n); err != nil {
			return nil, err
		}
	}

	// Every path is measured in one interleaved pass (measurePaths): the
	// overlay's figures and the standalone tunnel's they are compared
	// with are taken minutes apart no more.
	bridged := r.measuredBridged()
	paths := []*path{underlay, standalone, routed}
	for _, bn := range bridged {
		from, to := r.l.BridgedHosts(bn.Name, r.a)[0], r.l.BridgedHosts(bn.Name, r.b)[0]
		if err := r.serve(ctx, r.l, to); err != nil {
			return nil, err
		}
		p := hostPath(Overlay, from, to, r.wireOf(r.l))
		p.cost.pids = overlayPIDs
		paths = append(paths, p)
	}
	// The IPsec link, when the run has one beside the WireGuard link, in
	// the same pass: its host pair's traffic crosses that link only.
	var ipsec *path
	if r.pairs.IPsecA != "" {
		to := r.l.Hosts(r.pairs.IPsecB)[0]
		if err := r.serve(ctx, r.l, to); err != nil {
			return nil, err
		}
		ipsec = hostPath(Overlay, r.l.Hosts(r.pairs.IPsecA)[0], to, wireBetween(r.l, r.pairs.IPsecA, r.pairs.IPsecB))
		paths = append(paths, ipsec)
		res.Notes = append(res.Notes, fmt.Sprintf("The routed (ipsec) mode measures %s -> %s over their IPsec link; its underlay and standalone figures are those of %s -> %s (the lab's sites have alike wires). Its CPU cost per GB counts the whole machine only: the ESP work is charon's (kernel-libipsec), not a wgdev's.",
			r.pairs.IPsecA, r.pairs.IPsecB, r.a, r.b))
	}
	r.progress("measuring the underlay, the standalone tunnel, routed, %d bridged network(s) and %d IPsec link(s), each measurement on each in turn", len(bridged), len(paths)-3-len(bridged))
	all := measurePaths(ctx, s, paths, r.progress)
	shared := map[string]*pathResult{Underlay: all[0], Standalone: all[1]}
	mode := assemble("routed", []*path{routed, underlay, standalone},
		map[string]*pathResult{Overlay: all[2], Underlay: shared[Underlay], Standalone: shared[Standalone]})
	mode.Backend, mode.Transport = r.pairs.linkOf()
	mode.Delay, mode.Errors = r.delaySweep(ctx, []*path{routed, underlay, standalone}, mode.Errors)
	res.Modes = append(res.Modes, mode)
	for i, bn := range bridged {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		m := assemble("bridged", []*path{paths[3+i], underlay, standalone},
			map[string]*pathResult{Overlay: all[3+i], Underlay: shared[Underlay], Standalone: shared[Standalone]})
		m.Network = bn.Name
		m.Backend, m.Transport = r.pairs.linkOf()
		res.Modes = append(res.Modes, m)
	}
	if ipsec != nil {
		m := assemble("routed", []*path{ipsec, underlay, standalone},
			map[string]*pathResult{Overlay: all[len(all)-1], Underlay: shared[Underlay], Standalone: shared[Standalone]})
		m.Backend = backend.IPsec
		res.Modes = append(res.Modes, m)
	}
	if m, err := r.measureTCP443(ctx, routed, []*path{underlay, standalone}, shared); err != nil {
		res.Notes = append(res.Notes, "No tcp443 mode: "+err.Error())
	} else {
		res.Modes = append(res.Modes, m)
	}
	if len(res.Modes) > 0 {
		res.Ratios = res.Modes[0].Ratios
	}
	res.Comparison = compare(res.Modes)
	res.DurationS = round(time.Since(r.start).Seconds(), 1)
	return res, ctx.Err()
}

// assemble builds a mode's results from its paths' results and computes
// its ratios.
func assemble(mode string, paths []*path, by map[string]*pathResult) ModeResult {
	m := ModeResult{Mode: mode}
	for _, p := range paths {
		pr := by[p.info.Name]
		if pr == nil {
			continue
		}
		m.Paths = append(m.Paths, p.info)
		if pr.rtt != nil {
			m.RTT = append(m.RTT, *pr.rtt)
		}
		m.TCP = append(m.TCP, pr.tcp...)
		m.UDP = append(m.UDP, pr.udp...)
		if pr.overhead != nil {
			m.Overhead = append(m.Overhead, *pr.overhead)
		}
		if pr.loaded != nil {
			m.Loaded = append(m.Loaded, *pr.loaded)
		}
		if pr.memory != nil {
			m.Memory = append(m.Memory, *pr.memory)
		}
		for _, e := range pr.errs {
			m.Errors = append(m.Errors, p.info.Name+": "+e)
		}
	}
	m.Ratios = ratios(m)
	return m
}

// ratios computes a mode's ratios from its results.
func ratios(m ModeResult) Ratios {
	rtt := map[string]Summary{}
	for _, r := range m.RTT {
		rtt[r.Path] = r.Ms
	}
	tcp := map[string]map[int]float64{}
	for _, t := range m.TCP {
		if tcp[t.Path] == nil {
			tcp[t.Path] = map[int]float64{}
		}
		tcp[t.Path][t.Streams] = t.Mbps
	}
	over := map[string]float64{}
	for _, o := range m.Overhead {
		over[o.Path] = o.Ratio
	}
	var x Ratios
	x.RTTP50 = round(Ratio(rtt[Overlay].P50, rtt[Underlay].P50), 4)
	x.RTTMean = round(Ratio(rtt[Overlay].Mean, rtt[Underlay].Mean), 4)
	x.StandaloneRTT = round(Ratio(rtt[Overlay].P50, rtt[Standalone].P50), 4)
	x.Throughput1 = round(Ratio(tcp[Overlay][1], tcp[Underlay][1]), 4)
	x.Throughput4 = round(Ratio(tcp[Overlay][4], tcp[Underlay][4]), 4)
	x.Standalone1 = round(Ratio(tcp[Overlay][1], tcp[Standalone][1]), 4)
	x.Standalone4 = round(Ratio(tcp[Overlay][4], tcp[Standalone][4]), 4)
	x.Overhead = over[Overlay]
	x.OverheadUnderlay = over[Underlay]
	x.OverheadRelative = round(Ratio(over[Overlay], over[Underlay]), 4)
	for _, l := range m.Loaded {
		if l.Path == Overlay {
			x.LoadedRTT = round(Ratio(l.LoadedMs.P50, l.IdleMs.P50), 4)
		}
	}
	return x
}

// delaySweep measures TCP throughput (1 stream) on each path with added
// round-trip delay on the first measured site's internet link, in both
// labs (lab.Impair: half the delay each way). It returns the points and
// the mode's errors.
func (r *labRun) delaySweep(ctx context.Context, paths []*path, errs []string) ([]DelayResult, []string) {
	s := r.cfg.Settings
	if len(s.DelaysMs) == 0 {
		return nil, errs
	}
	var out []DelayResult
	labs := []*lab.Lab{r.l, r.ref}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		for _, l := range labs {
			if err := l.Clear(cctx, r.a); err != nil {
				errs = append(errs, "clearing the delay: "+err.Error())
			}
		}
	}()
	dur := time.Duration(s.TransferS * float64(time.Second))
	for _, ms := range s.DelaysMs {
		d := time.Duration(ms * float64(time.Millisecond))
		r.progress("throughput vs delay: %v added to the round trip on %s's internet link", d, r.a)
		var err error
		for _, l := range labs {
			err = errors.Join(err, l.Impair(ctx, r.a, lab.Impairment{Delay: d / 2}))
		}
		if err != nil {
			errs = append(errs, fmt.Sprintf("delay %v: %v", d, err))
			continue
		}
		for _, p := range paths {
			pt := DelayResult{Path: p.info.Name, DelayMs: ms}
			if ping, err := lab.Ping(ctx, p.from, p.to, 5, 50*time.Millisecond); err == nil && ping.Received > 0 {
				pt.RTTMs = round(float64(ping.Avg)/float64(time.Millisecond), 3)
			}
			// A point is only worth plotting if the delay is on the path.
			if pt.RTTMs < ms/2 {
				errs = append(errs, fmt.Sprintf("%s: delay %v: not in effect (measured RTT %.3f ms); point left out", p.info.Name, d, pt.RTTMs))
				continue
			}
			t, err := measureTCP(ctx, p, dur, 1)
			if err != nil {
				errs = append(errs, fmt.Sprintf("%s: delay %v: %v", p.info.Name, d, err))
				continue
			}
			pt.Mbps = t.Mbps
			out = append(out, pt)
		}
	}
	return out, errs
}
