package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fednet/fednet/internal/demo"
	"github.com/fednet/fednet/internal/lab"
	"github.com/fednet/fednet/internal/spec"
)

// DefaultLabName names the lab bench builds when it is not given one.
const DefaultLabName = "bench"

// LabConfig configures a run on a lab.
type LabConfig struct {
	// Lab names an existing, federated lab (`fednet lab up --federate`,
	// `fednet lab demo --keep`). Empty: bench builds a lab from SpecYAML
	// named Name, federates it with one agent per gateway (plan files) and
	// removes it afterwards.
	Lab string
	// SpecYAML is the lab's spec. For an existing lab, empty means the spec
	// in the lab's state directory (SpecFile).
	SpecYAML string
	// SpecName says where the spec came from, for the report.
	SpecName string
	// Name names the lab bench builds (default DefaultLabName).
	Name string
	// Binary is the fednet executable for agents and the standalone
	// tunnel's devices (default: this one).
	Binary   string
	Settings Settings
	Quick    bool
	// Keep leaves the labs bench built running.
	Keep bool
	// LogsDir, when set, is where the logs of the labs bench built (the
	// agents', the devices', iperf3's) are copied before the labs go, a
	// directory per lab.
	LogsDir string
	// Between, when not empty, names the two sites to measure between
	// (--between); empty: ChoosePairs picks them.
	Between []string
	// Progress receives one line per step; nil discards.
	Progress io.Writer
}

// labRun is one run's state.
type labRun struct {
	cfg    LabConfig
	start  time.Time
	f      *spec.Federation
	l, ref *lab.Lab
	a, b   string // the two measured sites
	// pairs are the measured pairs (ChoosePairs): a and b, and the IPsec
	// pair when there is one.
	pairs Pairs
	// bridged are the lab's bridged networks (demo.LabBridged).
	bridged  []lab.BridgedNetwork
	cleanups []func(context.Context) error
}

func (r *labRun) progress(format string, args ...any) {
	if r.cfg.Progress != nil {
		fmt.Fprintf(r.cfg.Progress, "[%6.1fs] %s\n", time.Since(r.start).Seconds(), fmt.Sprintf(format, args...))
	}
}

// onCleanup registers fn to run when the run ends, latest first.
func (r *labRun) onCleanup(fn func(context.Context) error) { r.cleanups = append(r.cleanups, fn) }

// saveLogsFirst registers, to run before the cleanups registered so far
// (l's removal), the copy of l's logs to LogsDir/NAME: the lab's own
// (logs/) and each gateway's devices' (NODE/wireguard/*.log). A copy that
// fails is said on Progress; it does not fail the run.
func (r *labRun) saveLogsFirst(l *lab.Lab) {
	if r.cfg.LogsDir == "" {
		return
	}
	r.onCleanup(func(context.Context) error {
		dest := filepath.Join(r.cfg.LogsDir, l.Name)
		var n int
		var errs []error
		for _, pattern := range []string{filepath.Join(l.Dir, "logs", "*.log"), filepath.Join(l.Dir, "*", "wireguard", "*.log")} {
			files, _ := filepath.Glob(pattern) // the patterns are well formed
			for _, f := range files {
				rel, _ := filepath.Rel(l.Dir, f) // f is under l.Dir
				if err := copyFile(f, filepath.Join(dest, rel)); err != nil {
					errs = append(errs, err)
					continue
				}
				n++
			}
		}
		if err := errors.Join(errs...); err != nil {
			r.progress("lab %q: copying its logs to %s: %v", l.Name, dest, err)
		} else {
			r.progress("lab %q: %d logs copied to %s", l.Name, n, dest)
		}
		return nil
	})
}

// copyFile copies file from to to, creating to's directory.
func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o644)
}

// RunLab measures a lab: the overlay between the first hosts of its first
// two sites (and, per bridged network of both, between their bridged
// hosts) against the underlay and a standalone wireguard-go tunnel in a
// reference lab of the same two sites. Measurements that fail are listed
// in the mode's Errors and the run goes on; the error is non-nil when
// nothing could be measured or something was left behind.
func RunLab(ctx context.Context, cfg LabConfig) (res *Results, err error) {
	r := &labRun{cfg: cfg, start: time.Now()}
	if r.cfg.Name == "" {
		r.cfg.Name = DefaultLabName
	}
	if r.cfg.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("finding the fednet executable: %w", err)
		}
		r.cfg.Binary = exe
	}
	if len(r.cfg.Settings.Streams) == 0 {
		r.cfg.Settings = DefaultSettings()
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		var errs []error
		for i := len(r.cleanups) - 1; i >= 0; i-- {
			errs = append(errs, r.cleanups[i](cctx))
		}
		if cerr := errors.Join(errs...); cerr != nil {
			err = errors.Join(err, fmt.Errorf("cleaning up: %w", cerr))
		}
	}()
	if err := r.setUp(ctx); err != nil {
		return nil, err
	}
	return r.measure(ctx)
}

// setUp opens or builds the measured lab and builds the reference lab.
func (r *labRun) setUp(ctx context.Context) error {
	if err := r.readSpec(); err != nil {
		return err
	}
	chosen, err := ChoosePairs(r.f, r.cfg.Between)
	if err != nil {
		return err
	}
	r.pairs, r.a, r.b = chosen, chosen.A, chosen.B
	if r.cfg.Lab != "" {
		err = r.openLab(ctx)
	} else {
		err = r.buildLab(ctx)
	}
	if err != nil {
		return err
	}
	for _, pair := range [][2]string{{r.a, r.b}, {r.pairs.IPsecA, r.pairs.IPsecB}} {
		if pair[0] != "" && (len(r.l.Hosts(pair[0])) == 0 || len(r.l.Hosts(pair[1])) == 0) {
			return fmt.Errorf("lab %q: sites %s and %s need a host each (lab.hostsPerSite)", r.l.Name, pair[0], pair[1])
		}
	}
	pairs := []demo.Pair{{From: r.l.Hosts(r.a)[0], To: r.l.Hosts(r.b)[0]}}
	if r.pairs.IPsecA != "" {
		pairs = append(pairs, demo.Pair{From: r.l.Hosts(r.pairs.IPsecA)[0], To: r.l.Hosts(r.pairs.IPsecB)[0]})
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := demo.WaitReachable(wctx, pairs, nil); err != nil {
		return fmt.Errorf("lab %q is not federated (is it up with --federate?): %w", r.l.Name, err)
	}

	refName := referenceName(r.l.Name)
	r.progress("reference lab %q: sites %s and %s without fednet (underlay, standalone wireguard-go)", refName, r.a, r.b)
	if err := lab.Down(ctx, refName); err != nil {
		return fmt.Errorf("removing an old reference lab %q: %w", refName, err)
	}
	ref, err := lab.Up(ctx, lab.Config{Federation: referenceSpec(r.f, r.a, r.b), Name: refName})
	if err != nil {
		return fmt.Errorf("reference lab: %w", err)
	}
	r.ref = ref
	if !r.cfg.Keep {
		r.onCleanup(ref.Down)
		r.saveLogsFirst(ref)
	}
	mtu := r.tunnelMTU(ctx)
	if _, err := startStandalone(ctx, ref, mtu, standaloneDevice(r.cfg.Binary)); err != nil {
		return err
	}
	rh := []demo.Pair{{From: ref.Hosts(r.a)[0], To: ref.Hosts(r.b)[0]}}
	wctx2, cancel2 := context.WithTimeout(ctx, 15*time.Second)
	defer cancel2()
	if _, err := demo.WaitReachable(wctx2, rh, nil); err != nil {
		return fmt.Errorf("standalone wireguard-go tunnel: %w", err)
	}
	return nil
}

// readSpec parses the configured spec, or for an existing lab the one in
// its state directory.
func (r *labRun) readSpec() error {
	text := r.cfg.SpecYAML
	if text == "" {
		if r.cfg.Lab == "" {
			return errors.New("no spec: give a spec file (--spec) or an existing lab (--lab)")
		}
		b, err := lab.SavedSpec(r.cfg.Lab)
		if err != nil {
			return fmt.Errorf("%w; pass the spec it was built from with --spec", err)
		}
		text, r.cfg.SpecName = string(b), "saved with lab "+r.cfg.Lab
	}
	f, err := spec.Parse([]byte(text))
	if err != nil {
		return fmt.Errorf("spec %s: %w", r.cfg.SpecName, err)
	}
	r.f = f
	r.bridged, err = demo.LabBridged(f)
	return err
}

// measuredBridged returns the lab's bridged networks that join both
// measured sites.
func (r *labRun) measuredBridged() []lab.BridgedNetwork {
	var out []lab.BridgedNetwork
	for _, bn := range r.bridged {
		if slices.Contains(bn.Sites, r.a) && slices.Contains(bn.Sites, r.b) {
			out = append(out, bn)
		}
	}
	return out
}

// openLab opens an existing lab, telling from its namespaces whether it
// has a manager and bridged segments.
func (r *labRun) openLab(ctx context.Context) error {
	st, err := lab.Status(ctx, r.cfg.Lab)
	if err != nil {
		return err
	}
	if !st.Exists() {
		return fmt.Errorf("lab %q does not exist; start one with `fednet lab demo --keep` or `fednet lab up -f SPEC --federate`, or let bench build one (--spec)", r.cfg.Lab)
	}
	cfg := lab.Config{Federation: r.f, Name: r.cfg.Lab}
	for _, ns := range st.Namespaces {
		rest := strings.TrimPrefix(ns.Name, lab.Prefix+r.cfg.Lab+"-")
		switch {
		case rest == "mgr":
			cfg.Manager = true
		case strings.HasPrefix(rest, "br-"):
			cfg.Bridged = r.bridged
		}
	}
	l, err := lab.Open(ctx, cfg)
	if err != nil {
		return err
	}
	r.l = l
	r.progress("lab %q: %d sites, measuring %s -> %s", l.Name, len(l.Sites()), r.a, r.b)
	return nil
}

// buildLab builds the lab, federates it with plan files and registers its
// removal.
func (r *labRun) buildLab(ctx context.Context) error {
	name := r.cfg.Name
	if err := lab.Down(ctx, name); err != nil {
		return fmt.Errorf("removing an old lab %q: %w", name, err)
	}
	r.progress("building lab %q from %s: %d sites", name, r.cfg.SpecName, len(r.f.Sites))
	l, err := lab.Up(ctx, lab.Config{Federation: r.f, Name: name, Bridged: r.bridged})
	if err != nil {
		return err
	}
	r.l = l
	if !r.cfg.Keep {
		r.onCleanup(l.Down)
		r.saveLogsFirst(l)
	}
	if err := l.SaveSpec([]byte(r.cfg.SpecYAML)); err != nil {
		return err
	}
	d, err := demo.Deploy(ctx, l, r.cfg.Binary)
	if err != nil {
		return err
	}
	if !r.cfg.Keep {
		r.onCleanup(d.Stop)
	}
	pairs := demo.CrossSitePairs(l, l.Sites())
	for _, bn := range r.measuredBridged() {
		pairs = append(pairs, demo.Pair{From: l.BridgedHosts(bn.Name, r.a)[0], To: l.BridgedHosts(bn.Name, r.b)[0]})
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	took, err := demo.WaitReachable(wctx, pairs, d.AgentsAlive)
	if err != nil {
		return fmt.Errorf("the lab did not federate: %w", err)
	}
	r.progress("federated: %d host pairs reachable after %v", len(pairs), took.Round(time.Millisecond))
	return nil
}

// tunnelInterface is the federation's WireGuard interface.
func (r *labRun) tunnelInterface() string {
	if r.f.Overlay.Interface != "" {
		return r.f.Overlay.Interface
	}
	return spec.DefaultInterface
}

// tunnelMTU reads the MTU of the first measured gateway's WireGuard
// interface, so the standalone tunnel gets the same (1420 if unreadable).
func (r *labRun) tunnelMTU(ctx context.Context) int {
	if v, err := readSys(ctx, r.l.SiteGateways(r.a)[0], r.tunnelInterface()+"/mtu"); err == nil {
		return v
	}
	return 1420
}

// readSys reads an integer under /sys/class/net/ in a place.
func readSys(ctx context.Context, at lab.Commander, file string) (int, error) {
	out, err := at.Command(ctx, "cat", "/sys/class/net/"+file).Output()
	if err != nil {
		return 0, fmt.Errorf("reading %s in %s: %w", file, at, err)
	}
	return strconv.Atoi(strings.TrimSpace(string(out)))
}
