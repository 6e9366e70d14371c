package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fednet/fednet/internal/demo"
	"github.com/fednet/fednet/internal/lab"
	"github.com/fednet/fednet/internal/spec"
)

// An A/B comparison of userspace WireGuard devices: the same two-site
// tunnel of the reference lab (no fednet, no firewall), run in turn with
// each device command, round after round, so that every variant sees the
// same machine and the same noise. It tells what a device change costs
// or saves apart from everything else on fednet's path.

// DeviceVariant is one device to compare.
type DeviceVariant struct {
	// Name labels the variant in the results.
	Name string
	// Env is added to the device's environment (KEY=VALUE).
	Env []string
	// Flags are `fednet wgdev`'s flags (the interface name is added).
	Flags []string
	// Firewall loads a ruleset of the shape of a fednet gateway's into
	// both gateways: an input chain that drops what it does not accept,
	// connection tracking and per-prefix rules in the forward hook, MSS
	// clamping (FirewallTracked), or variations (FirewallUntracked,
	// FirewallTunnelFirst).
	Firewall Firewall
}

// Firewall says what ruleset a device variant's gateways get.
type Firewall int

const (
	// FirewallNone: no ruleset, as the standalone tunnel.
	FirewallNone Firewall = iota
	// FirewallTracked: a fednet gateway's forward and MSS chains.
	FirewallTracked
	// FirewallUntracked: the same, forwarded traffic not tracked.
	FirewallUntracked
	// FirewallTunnelFirst: FirewallTracked with the tunnel's UDP port
	// accepted first in the input chain, before connection tracking's
	// rules.
	FirewallTunnelFirst
	// FirewallTunnelRaw: FirewallTunnelFirst with the tunnel's UDP
	// exempt from connection tracking (a raw-priority prerouting rule for
	// datagrams to the port on this host, an output rule for those from
	// it), as internal/dataplane's firewall does.
	FirewallTunnelRaw
)

// firewallTokens are the variant string's firewall words.
var firewallTokens = map[string]Firewall{"@nft": FirewallTracked, "@nft-notrack": FirewallUntracked, "@nft-udpfirst": FirewallTunnelFirst, "@nft-raw": FirewallTunnelRaw}

// ParseDeviceVariant reads "NAME: [@nft|@nft-notrack|@nft-udpfirst|@nft-raw] [KEY=VALUE ...]
// [FLAGS ...]", e.g. "ref: --tun wireguard-go --aqm off --bind wireguard-go --procs 0" or "one: @nft
// GOMAXPROCS=1 --aqm off".
func ParseDeviceVariant(s string) (DeviceVariant, error) {
	name, rest, ok := strings.Cut(s, ":")
	name = strings.TrimSpace(name)
	if !ok || name == "" {
		return DeviceVariant{}, fmt.Errorf("device variant %q: want NAME: [KEY=VALUE ...] [FLAGS ...]", s)
	}
	v := DeviceVariant{Name: name}
	for _, f := range strings.Fields(rest) {
		if fw, ok := firewallTokens[f]; ok && len(v.Flags) == 0 {
			v.Firewall = fw
			continue
		}
		if len(v.Flags) == 0 && !strings.HasPrefix(f, "-") && strings.Contains(f, "=") {
			v.Env = append(v.Env, f)
			continue
		}
		v.Flags = append(v.Flags, f)
	}
	return v, nil
}

// argv is the command that starts the variant's device.
func (v DeviceVariant) argv(binary string) []string {
	var a []string
	if len(v.Env) > 0 {
		a = append([]string{"env"}, v.Env...)
	}
	return append(append(append(a, binary), "wgdev"), v.Flags...)
}

// DeviceConfig configures RunDevices.
type DeviceConfig struct {
	// SpecYAML is a federation whose first two sites make the lab.
	SpecYAML string
	// Name names the lab (default "benchdev").
	Name string
	// Binary is the fednet executable (default: this one).
	Binary   string
	Variants []DeviceVariant
	// Rounds is how often every variant is measured (default 3).
	Rounds int
	// Transfer is each TCP test's length (default 3 s); Streams the
	// parallel streams of each (default 1 and 4); Pings the idle pings
	// (default 100, 10 ms apart).
	Transfer time.Duration
	Streams  []int
	Pings    int
	// UDPRatesMbps, when set, measures UDP at these offered rates too
	// (iperf3, 1200-byte datagrams, Transfer long each).
	UDPRatesMbps []float64
	// PathDelay, when set, adds this much to the round trip of every
	// measurement on the first site's internet link, for the whole run.
	// The lab's delay line passes datagrams on one by one: the receiving
	// device gets them unmerged, as across a path that does not merge
	// them. Not with Delay.
	PathDelay time.Duration
	// Loaded measures the round trip under load (pings during a bulk
	// transfer) too.
	Loaded bool
	// Delay, when set, measures TCP (1 stream) again with this much added
	// to the round trip on the first site's internet link.
	Delay time.Duration
	// Progress receives one line per step; nil discards.
	Progress io.Writer
}

// DeviceResult is one variant's figures in one round.
type DeviceResult struct {
	Variant string `json:"variant"`
	Round   int    `json:"round"`
	// RTTP50Ms is the idle round trip's median.
	RTTP50Ms float64     `json:"rtt_p50_ms"`
	TCP      []TCPResult `json:"tcp"`
	// LoadedP99Ms and LoadedLossPct are the pings' under load
	// (DeviceConfig.Loaded).
	LoadedP99Ms   float64 `json:"loaded_p99_ms,omitempty"`
	LoadedLossPct float64 `json:"loaded_loss_percent,omitempty"`
	// DelayMbps is TCP's rate with DeviceConfig.Delay added.
	DelayMbps float64 `json:"delay_mbps,omitempty"`
	// UDP is one result per DeviceConfig.UDPRatesMbps.
	UDP    []UDPResult `json:"udp,omitempty"`
	Errors []string    `json:"errors,omitempty"`
}

// RunDevices measures every variant's tunnel between the first hosts of
// the spec's first two sites, cfg.Rounds times in turn.
func RunDevices(ctx context.Context, cfg DeviceConfig) (res []DeviceResult, err error) {
	if len(cfg.Variants) == 0 {
		return nil, errors.New("no device variants to compare")
	}
	if cfg.Name == "" {
		cfg.Name = "benchdev"
	}
	if cfg.Binary == "" {
		if cfg.Binary, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("finding the fednet executable: %w", err)
		}
	}
	cfg.Rounds = max(cfg.Rounds, 1)
	if cfg.Transfer <= 0 {
		cfg.Transfer = 3 * time.Second
	}
	if len(cfg.Streams) == 0 {
		cfg.Streams = []int{1, 4}
	}
	if cfg.Pings <= 0 {
		cfg.Pings = 100
	}
	progress := func(format string, args ...any) {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, format+"\n", args...)
		}
	}
	f, err := spec.Parse([]byte(cfg.SpecYAML))
	if err != nil {
		return nil, fmt.Errorf("spec: %w", err)
	}
	if len(f.Sites) < 2 {
		return nil, errors.New("the device comparison needs a spec of at least two sites")
	}
	a, b := f.Sites[0].Name, f.Sites[1].Name
	if cfg.PathDelay > 0 && cfg.Delay > 0 {
		return nil, errors.New("the device comparison takes a delay on the whole path or one for TCP, not both")
	}
	if err := lab.Down(ctx, cfg.Name); err != nil {
		return nil, fmt.Errorf("removing an old lab %q: %w", cfg.Name, err)
	}
	l, err := lab.Up(ctx, lab.Config{Federation: referenceSpec(f, a, b), Name: cfg.Name})
	if err != nil {
		return nil, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		err = errors.Join(err, l.Down(cctx))
	}()
	if cfg.PathDelay > 0 {
		if err := l.Impair(ctx, a, lab.Impairment{Delay: cfg.PathDelay / 2}); err != nil {
			return nil, fmt.Errorf("delaying the path: %w", err)
		}
		progress("path: %v added to the round trip on %s's internet link", cfg.PathDelay, a)
	}
	from, to := l.Hosts(a)[0], l.Hosts(b)[0]
	srv, err := l.Start(to, "iperf3", "-s", "-p", fmt.Sprint(IperfPort))
	if err != nil {
		return nil, err
	}
	defer srv.Stop(context.WithoutCancel(ctx))
	if err := waitIperfServer(ctx, to, IperfPort); err != nil {
		return nil, err
	}
	// The tunnel MTU the planner gives WireGuard over the lab's IPv4
	// underlay.
	mtu := f.Overlay.UnderlayMTU - 60
	gws := l.Gateways()
	for round := 1; round <= cfg.Rounds; round++ {
		for _, v := range cfg.Variants {
			if err := ctx.Err(); err != nil {
				return res, err
			}
			progress("round %d: %s (%s)", round, v.Name, strings.Join(v.argv("fednet"), " "))
			r := DeviceResult{Variant: v.Name, Round: round}
			procs, err := startStandalone(ctx, l, mtu, v.argv(cfg.Binary))
			if err == nil && v.Firewall != FirewallNone {
				err = loadFirewall(ctx, l, v.Firewall, mtu-40, f.Overlay.ListenPort)
			}
			if err == nil {
				wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
				_, err = demo.WaitReachable(wctx, []demo.Pair{{From: from, To: to}}, nil)
				cancel()
			}
			if err != nil {
				err = errors.Join(err, stopStandalone(ctx, l, procs))
				return res, fmt.Errorf("variant %s: %w", v.Name, err)
			}
			p := hostPath(v.Name, from, to, nil)
			p.cost.pids = wgdevPIDs(standaloneIface, gws...)
			if rtt, err := measureRTT(ctx, p, cfg.Pings, 10*time.Millisecond); err != nil {
				r.Errors = append(r.Errors, err.Error())
			} else {
				r.RTTP50Ms = rtt.Ms.P50
			}
			for _, n := range cfg.Streams {
				t, err := measureTCP(ctx, p, cfg.Transfer, n)
				if err != nil {
					r.Errors = append(r.Errors, err.Error())
					continue
				}
				r.TCP = append(r.TCP, t)
				progress("  %d stream(s): %.0f Mbit/s, wgdev %.2f CPU s/GB, machine %.2f CPU s/GB", n, t.Mbps, t.WgdevCPUSecondsPerGB, t.CPUSecondsPerGB)
			}
			for _, rate := range cfg.UDPRatesMbps {
				u, err := measureUDP(ctx, p, cfg.Transfer, rate)
				if err != nil {
					r.Errors = append(r.Errors, err.Error())
					continue
				}
				r.UDP = append(r.UDP, u)
				progress("  UDP at %g Mbit/s: %.0f Mbit/s received, loss %.2f %%, wgdev %.2f CPU s/GB", rate, u.Mbps, u.LossPct, u.WgdevCPUSecondsPerGB)
			}
			progress("  idle RTT p50 %.3f ms", r.RTTP50Ms)
			if cfg.Loaded {
				if ld, err := measureLoaded(ctx, p, cfg.Transfer, 10*time.Millisecond, Summary{P50: r.RTTP50Ms}); err != nil {
					r.Errors = append(r.Errors, err.Error())
				} else {
					r.LoadedP99Ms, r.LoadedLossPct = ld.LoadedMs.P99, ld.LossPct
					progress("  under load: RTT p99 %.3f ms, loss %.1f %%", r.LoadedP99Ms, r.LoadedLossPct)
				}
			}
			if cfg.Delay > 0 {
				if err := l.Impair(ctx, a, lab.Impairment{Delay: cfg.Delay / 2}); err != nil {
					r.Errors = append(r.Errors, err.Error())
				} else if t, err := measureTCP(ctx, p, cfg.Transfer, 1); err != nil {
					r.Errors = append(r.Errors, err.Error())
				} else {
					r.DelayMbps = t.Mbps
					progress("  +%v: %.0f Mbit/s", cfg.Delay, t.Mbps)
				}
				if err := l.Clear(ctx, a); err != nil {
					return res, fmt.Errorf("clearing the delay: %w", err)
				}
			}
			res = append(res, r)
			if err := stopStandalone(ctx, l, procs); err != nil {
				return res, fmt.Errorf("variant %s: %w", v.Name, err)
			}
			// Each variant's processes log to the lab; keep their logs.
			for _, pr := range procs {
				if t := pr.LogText(); strings.Contains(t, "panic") {
					return res, fmt.Errorf("variant %s: device %s: %s", v.Name, filepath.Base(pr.Log), t)
				}
			}
		}
	}
	return res, nil
}

// DeviceTable sums up RunDevices' results in markdown: per variant the
// median over the rounds of each figure; UDP's columns (received rate,
// loss, wgdev CPU per gigabyte received) when there are UDP results.
func DeviceTable(res []DeviceResult, streams []int) string {
	var names []string
	var rates []float64
	for _, r := range res {
		if !slices.Contains(names, r.Variant) {
			names = append(names, r.Variant)
		}
		for _, u := range r.UDP {
			if !slices.Contains(rates, u.OfferedMbps) {
				rates = append(rates, u.OfferedMbps)
			}
		}
	}
	slices.Sort(rates)
	var sb strings.Builder
	sb.WriteString("| variant | rounds | idle RTT p50 ms |")
	for _, n := range streams {
		fmt.Fprintf(&sb, " TCP %d Mbit/s | wgdev CPU s/GB | machine CPU s/GB |", n)
	}
	sb.WriteString(" loaded RTT p99 ms | loaded loss % | TCP with delay Mbit/s |")
	for _, rate := range rates {
		fmt.Fprintf(&sb, " UDP %g received Mbit/s | loss %% | wgdev CPU s/GB |", rate)
	}
	sb.WriteString("\n|---|---|---|")
	for range streams {
		sb.WriteString("---|---|---|")
	}
	sb.WriteString("---|---|---|")
	for range rates {
		sb.WriteString("---|---|---|")
	}
	sb.WriteString("\n")
	for _, name := range names {
		var rtt, loaded, loss, delay []float64
		mbps, wg, mach := map[int][]float64{}, map[int][]float64{}, map[int][]float64{}
		udp, udpLoss, udpWg := map[float64][]float64{}, map[float64][]float64{}, map[float64][]float64{}
		rounds := 0
		for _, r := range res {
			if r.Variant != name {
				continue
			}
			rounds++
			if r.RTTP50Ms > 0 {
				rtt = append(rtt, r.RTTP50Ms)
			}
			if r.LoadedP99Ms > 0 {
				loaded, loss = append(loaded, r.LoadedP99Ms), append(loss, r.LoadedLossPct)
			}
			if r.DelayMbps > 0 {
				delay = append(delay, r.DelayMbps)
			}
			for _, t := range r.TCP {
				mbps[t.Streams] = append(mbps[t.Streams], t.Mbps)
				wg[t.Streams] = append(wg[t.Streams], t.WgdevCPUSecondsPerGB)
				mach[t.Streams] = append(mach[t.Streams], t.CPUSecondsPerGB)
			}
			for _, u := range r.UDP {
				udp[u.OfferedMbps] = append(udp[u.OfferedMbps], u.Mbps)
				udpLoss[u.OfferedMbps] = append(udpLoss[u.OfferedMbps], u.LossPct)
				udpWg[u.OfferedMbps] = append(udpWg[u.OfferedMbps], u.WgdevCPUSecondsPerGB)
			}
		}
		fmt.Fprintf(&sb, "| %s | %d | %.3f |", name, rounds, Summarize(rtt).P50)
		for _, n := range streams {
			fmt.Fprintf(&sb, " %.0f | %.2f | %.2f |", Summarize(mbps[n]).P50, Summarize(wg[n]).P50, Summarize(mach[n]).P50)
		}
		fmt.Fprintf(&sb, " %.3f | %.1f | %.0f |", Summarize(loaded).P50, Summarize(loss).P50, Summarize(delay).P50)
		for _, rate := range rates {
			fmt.Fprintf(&sb, " %.1f | %.2f | %.2f |", Summarize(udp[rate]).P50, Summarize(udpLoss[rate]).P50, Summarize(udpWg[rate]).P50)
		}
		sb.WriteString("\n")
	}
	return sb.String()
}

// loadFirewall loads a ruleset of the shape of a fednet gateway's (see
// internal/dataplane's firewall) into both gateways of the two-site lab
// l, for the standalone tunnel's interface, clamping TCP's MSS to mss:
// what a routed packet meets on a fednet gateway besides WireGuard. Deleting the interface does not
// remove it; each load replaces the last.
func loadFirewall(ctx context.Context, l *lab.Lab, fw Firewall, mss, port int) error {
	gws := l.Gateways()
	for i, gw := range gws {
		local, remote := prefixesOf(l, gw.Site), prefixesOf(l, gws[1-i].Site)
		var rs strings.Builder
		fmt.Fprintf(&rs, "table inet benchfw\ndelete table inet benchfw\ntable inet benchfw {\n")
		if fw == FirewallUntracked {
			fmt.Fprintf(&rs, "chain raw { type filter hook prerouting priority raw; policy accept;\n")
			fmt.Fprintf(&rs, "  iifname %q ip saddr %s ip daddr %s notrack\n", lab.LANInterface, local, remote)
			fmt.Fprintf(&rs, "  iifname %q ip saddr %s ip daddr %s notrack\n}\n", standaloneIface, remote, local)
		}
		if fw == FirewallTunnelRaw {
			fmt.Fprintf(&rs, "chain notrack-in { type filter hook prerouting priority raw; policy accept;\n")
			fmt.Fprintf(&rs, "  udp dport %d fib daddr type local notrack\n}\n", port)
			fmt.Fprintf(&rs, "chain notrack-out { type filter hook output priority raw; policy accept;\n")
			fmt.Fprintf(&rs, "  udp sport %d notrack\n}\n", port)
		}
		fmt.Fprintf(&rs, "chain input { type filter hook input priority filter; policy drop;\n")
		if fw == FirewallTunnelFirst || fw == FirewallTunnelRaw {
			fmt.Fprintf(&rs, "  udp dport %d accept\n", port)
		}
		fmt.Fprintf(&rs, "  iifname \"lo\" accept\n  ct state established,related accept\n  ct state invalid drop\n")
		fmt.Fprintf(&rs, "  iifname != %q udp dport 4789 drop\n  tcp dport 443 accept\n  udp dport %d accept\n", standaloneIface, port)
		fmt.Fprintf(&rs, "  icmp type echo-request limit rate 10/second accept\n}\n")
		fmt.Fprintf(&rs, "chain forward { type filter hook forward priority filter; policy accept;\n")
		fmt.Fprintf(&rs, "  ct state established,related accept\n")
		fmt.Fprintf(&rs, "  iifname %q ct state invalid drop\n  oifname %q ct state invalid drop\n", standaloneIface, standaloneIface)
		fmt.Fprintf(&rs, "  oifname %q ip saddr %s ip daddr %s accept\n", standaloneIface, local, remote)
		fmt.Fprintf(&rs, "  iifname %q ip saddr %s ip daddr %s accept\n", standaloneIface, remote, local)
		fmt.Fprintf(&rs, "  iifname %q drop\n  oifname %q drop\n}\n", standaloneIface, standaloneIface)
		fmt.Fprintf(&rs, "chain mss { type filter hook forward priority mangle; policy accept;\n")
		for _, dir := range []string{"oifname", "iifname"} {
			fmt.Fprintf(&rs, "  %s %q tcp flags syn tcp option maxseg size > %d tcp option maxseg size set %d\n", dir, standaloneIface, mss, mss)
		}
		fmt.Fprintf(&rs, "}\n}\n")
		cmd := gw.Command(ctx, "nft", "-f", "-")
		cmd.Stdin = strings.NewReader(rs.String())
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("loading the firewall in %s: %w: %s\n%s", gw, err, out, rs.String())
		}
	}
	return nil
}

// prefixesOf returns site's prefixes in nft's set notation.
func prefixesOf(l *lab.Lab, site string) string {
	var ps []string
	for _, s := range l.Federation.Sites {
		if s.Name == site {
			for _, p := range s.Prefixes {
				ps = append(ps, p.String())
			}
		}
	}
	return "{ " + strings.Join(ps, ", ") + " }"
}
