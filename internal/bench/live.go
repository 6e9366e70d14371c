package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"time"
)

// LiveConfig configures a run on a live federation, from the machine bench
// runs on (a host of one site, or its gateway) against targets that run
// `iperf3 -s` on IperfPort.
type LiveConfig struct {
	// Overlay is the overlay address of a host in another site.
	Overlay string
	// Underlay is an address reached without the overlay on the same
	// route: the other site gateway's public address, or a machine next to
	// it. Optional (then there are no overlay/underlay ratios).
	Underlay string
	// WireInterface, when bench runs on a gateway, is its public
	// interface: its transmit counters during a transfer give the traffic
	// overhead. Optional.
	WireInterface string
	// Source, when valid, is the address the probes and transfers leave
	// from (ping -I, iperf3 -B). On a gateway it must be the gateway's LAN
	// address: what the gateway itself sends into the overlay otherwise
	// leaves with its transit address, which the remote gateways' forward
	// chains drop (they forward only between site prefixes).
	Source   netip.Addr
	Settings Settings
	Quick    bool
	Progress io.Writer
}

// local runs programs on this machine, ping and iperf3 from src when it
// is valid. Its iperf3 clients give up on a server that does not answer
// within connectTimeout, instead of TCP's minutes.
type local struct{ src netip.Addr }

// connectTimeout bounds the setup of an iperf3 client's control
// connection on a live run.
const connectTimeout = 5 * time.Second

func (l local) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	switch name {
	case "iperf3":
		pre := []string{"--connect-timeout", strconv.FormatInt(connectTimeout.Milliseconds(), 10)}
		if l.src.IsValid() {
			pre = append(pre, "-B", l.src.String())
		}
		args = append(pre, args...)
	case "ping":
		if l.src.IsValid() {
			args = append([]string{"-I", l.src.String()}, args...)
		}
	}
	return exec.CommandContext(ctx, name, args...)
}

func (l local) String() string {
	if l.src.IsValid() {
		return "this machine (from " + l.src.String() + ")"
	}
	return "this machine"
}

// RunLive measures a live federation: the same measurements as on a lab
// but the delay sweep and the standalone tunnel, which need a lab. Overlay
// traffic leaves from cfg.Source when it is set (on a gateway: its LAN
// address). The
// traffic overhead is measured only with WireInterface, and there counts
// what the interface reports: segmentation offloads make it count fewer,
// larger packets than the wire carries (bench does not change a live
// machine's interfaces).
func RunLive(ctx context.Context, cfg LiveConfig) (*Results, error) {
	start := time.Now()
	if len(cfg.Settings.Streams) == 0 {
		cfg.Settings = DefaultSettings()
	}
	progress := func(format string, args ...any) {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "[%6.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
		}
	}
	if cfg.Overlay == "" {
		return nil, errors.New("--overlay-target: give the overlay address of a host in another site (it must run iperf3 -s)")
	}
	host, _ := os.Hostname()
	var wire []wireIface
	if cfg.WireInterface != "" {
		wire = []wireIface{{at: local{}, iface: cfg.WireInterface}}
	}
	var paths []*path
	for _, t := range []struct{ name, addr, flag string }{{Overlay, cfg.Overlay, "--overlay-target"}, {Underlay, cfg.Underlay, "--underlay-target"}} {
		if t.addr == "" {
			continue
		}
		a, err := netip.ParseAddr(t.addr)
		if err != nil {
			return nil, fmt.Errorf("%s %q: want an IP address: %w", t.flag, t.addr, err)
		}
		from := local{}
		if t.name == Overlay {
			from.src = cfg.Source // the underlay target is outside the overlay: the default route's source
		}
		paths = append(paths, &path{info: PathInfo{Name: t.name, From: host, To: a.String(), Address: a.String()},
			from: from, to: a, port: IperfPort, wire: wire, keepOffloads: true})
	}
	if cfg.Source.IsValid() {
		progress("sending into the overlay from %s", cfg.Source)
	}
	for _, p := range paths {
		if err := waitIperfReachable(ctx, p); err != nil {
			return nil, err
		}
	}
	s := cfg.Settings
	s.DelaysMs = nil
	res := &Results{Schema: Schema, Started: start.UTC(), Settings: s, Target: Target{Kind: "live", Quick: cfg.Quick}}
	res.Notes = append(res.Notes, "Live run: no standalone tunnel and no delay sweep (they need a lab).")
	if cfg.WireInterface != "" {
		res.Notes = append(res.Notes, "Traffic overhead from the counters of "+cfg.WireInterface+" as the interface reports them; segmentation offloads make them count fewer headers than the wire carries.")
	}
	by := map[string]*pathResult{}
	for i, r := range measurePaths(ctx, s, paths, progress) {
		by[paths[i].info.Name] = r
	}
	m := assemble("routed", paths, by)
	res.Modes = []ModeResult{m}
	res.Ratios = m.Ratios
	res.DurationS = round(time.Since(start).Seconds(), 1)
	return res, ctx.Err()
}

// waitIperfReachable checks that an iperf3 server answers at the path's
// target, with a one-second test.
func waitIperfReachable(ctx context.Context, p *path) error {
	_, err := transfer{from: p.from, to: p.to, port: p.port, duration: time.Second, streams: 1}.run(ctx)
	if err != nil {
		return fmt.Errorf("%s target %s: no iperf3 server answers on TCP port %d from %s: %w; "+
			"run iperf3 -s there, and check that no firewall drops the port on the way "+
			"(the target's own, a cloud security group; on a gateway, fednet's: run bench there with --source set to "+
			"the gateway's LAN address, since gateways forward only traffic between site prefixes, not the transit "+
			"address a gateway sends from by default)", p.info.Name, p.to, p.port, p.from, err)
	}
	return nil
}
