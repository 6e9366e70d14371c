//go:build linux

package abwlab

import (
	"context"
	"flag"
	"fmt"
	"math"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/fednet/fednet/internal/abw"
	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/await"
	"github.com/fednet/fednet/internal/demo"
	"github.com/fednet/fednet/internal/lab"
)

// fednetBin is the fednet executable TestMain builds for the agents.
var fednetBin string

var (
	benchRuns  = flag.Int("abw.runs", 0, "TestBenchABW: runs per case (0 skips the benchmark)")
	benchCases = flag.String("abw.cases", "", "TestBenchABW: comma-separated cases to run, e.g. 20,100+30% (default all)")
	benchTable = flag.String("abw.table", "", "TestBenchABW: also write the markdown table to this file")
	benchMinP  = flag.Duration("abw.minperiod", 0, "TestBenchABW: Config.MinPeriod (0: default)")
)

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(demo.RunTests(m, &fednetBin))
}

// twoSites builds a two-site lab (with a manager node if manager) that
// the test's cleanup removes; it skips unless root.
func twoSites(t *testing.T, ctx context.Context, suffix string, manager bool) *lab.Lab {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the lab creates network namespaces (CI runs as root)")
	}
	f, err := demo.GenerateSpec(2)
	if err != nil {
		t.Fatal(err)
	}
	l, err := lab.Up(ctx, lab.Config{Federation: f, Name: "t" + strconv.Itoa(os.Getpid()) + suffix, HostsPerSite: 1, Manager: manager})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Down(context.Background()) })
	return l
}

// fedLab is a two-site lab with the federation running: probes go from
// the first gateway to the second, whose site's link gets the bottleneck.
type fedLab struct {
	l        *lab.Lab
	from, to *lab.Node
}

func federatedLab(t *testing.T, ctx context.Context, suffix string) fedLab {
	t.Helper()
	l := twoSites(t, ctx, suffix, false)
	d, err := demo.Deploy(ctx, l, fednetBin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Stop(context.Background()) })
	gws := l.Gateways()
	fl := fedLab{l: l, from: gws[0], to: gws[1]}
	dst, err := TransitAddr(l, fl.to)
	if err != nil {
		t.Fatal(err)
	}
	await.Until(t, 30*time.Second, func() (bool, string) {
		r, err := lab.Ping(ctx, fl.from, dst, 1, time.Second)
		return err == nil && r.Received == 1, fmt.Sprintf("tunnel from %s to %s not up: ping %v, %v", fl.from.Name, fl.to.Name, r, err)
	})
	return fl
}

// abwCase is a bottleneck (tbf on the receiving site's link) with cross
// traffic at a fraction of it into the same site.
type abwCase struct {
	rate, cross float64
}

func (c abwCase) name() string {
	s := strconv.Itoa(int(c.rate / 1e6))
	if c.cross > 0 {
		s += "+" + strconv.Itoa(int(c.cross*100)) + "%"
	}
	return s
}

func (c abwCase) truth() float64 { return c.rate * (1 - c.cross) }

// budget is what a 10 s iperf3 at the bottleneck rate sends, in bytes.
func (c abwCase) budget() float64 { return 10 * c.rate / 8 }

// setCase shapes the link and starts the cross traffic; it returns a
// function that undoes both.
func (fl fedLab) setCase(t *testing.T, ctx context.Context, c abwCase) func() {
	t.Helper()
	if err := fl.l.Impair(ctx, fl.to.Site, lab.Impairment{Rate: c.rate}); err != nil {
		t.Fatal(err)
	}
	stop := func() error { return nil }
	if c.cross > 0 {
		var err error
		if stop, err = fl.l.CrossTraffic(ctx, fl.to.Site, lab.Download, c.rate*c.cross); err != nil {
			t.Fatal(err)
		}
		// The estimate must meet the cross traffic at its rate.
		waitRate(t, fl.to, 0.8*c.rate*c.cross)
	}
	return func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
		if err := fl.l.Clear(ctx, fl.to.Site); err != nil {
			t.Error(err)
		}
	}
}

// waitRate waits until node receives at least rate bit/s, measured over
// the last quarter second or more.
func waitRate(t *testing.T, node *lab.Node, rate float64) {
	t.Helper()
	type sample struct {
		at    time.Time
		bytes uint64
	}
	var seen []sample
	await.Until(t, 10*time.Second, func() (bool, string) {
		now := sample{time.Now(), rxBytes(t, node)}
		seen = append(seen, now)
		for _, s := range slices.Backward(seen) {
			if d := now.at.Sub(s.at); d >= 250*time.Millisecond {
				got := float64(now.bytes-s.bytes) * 8 / d.Seconds()
				return got >= rate, fmt.Sprintf("%s receives %.1f Mbit/s, want %.1f", node.Name, got/1e6, rate/1e6)
			}
		}
		return false, fmt.Sprintf("%s: measuring its receive rate", node.Name)
	})
}

// rxBytes returns the bytes a gateway received on its internet link (the
// interface with its public address): the cross traffic and the tunnel.
func rxBytes(t *testing.T, gw *lab.Node) uint64 {
	t.Helper()
	var n uint64
	err := gw.Do(func() error {
		addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
		if err != nil {
			return err
		}
		for _, a := range addrs {
			if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.Unmap() == gw.Public.Addr() {
				l, err := netlink.LinkByIndex(a.LinkIndex)
				if err != nil {
					return err
				}
				n = l.Attrs().Statistics.RxBytes
				return nil
			}
		}
		return fmt.Errorf("no interface has %s", gw.Public.Addr())
	})
	if err != nil {
		t.Fatalf("counters of %s: %v", gw.Name, err)
	}
	return n
}

// Bounds of the lab tests' estimates, as fractions. They check that the
// estimator measures the available bandwidth, not how accurately: its
// accuracy depends on the CPU (userspace WireGuard's scheduling jitter
// reads as queueing, and hides it), and the accuracy figures are `make
// bench-abw`'s.
//
// Measured on this 2-core machine under the lab lock (other helpers'
// builds may have run beside), at 50 Mbit/s with 30 % cross traffic (35
// available): 69 estimates with no load of ours, 59 of them from 34.0 to
// 40.0 Mbit/s, the others up to 55.9 (medians of three up to 49.0); 6
// with both cores kept busy, from 20.9 to 33.8; 18 with the bench's or
// the demo's lab tests running beside, as `go test ./...` in CI does,
// from 10.7 to 55.1 (medians of three from 33.0 to 53.0). The cross
// traffic kept its rate throughout (14.7 to 15.3 Mbit/s measured during
// each estimate). Without cross traffic (50 available), through the
// manager: 49 estimates from 42.2 to 53.7 with no load of ours, 10 with
// both cores busy from 22.8 to 51.9, 7 beside other lab tests from 49.3
// to 83.0 (medians of three 51.4 and 53.1). Under load userspace
// WireGuard delays and bunches the probes before they reach the
// bottleneck, so single estimates err either way, by up to two thirds; a
// pass/fail bound near the quiet accuracy (±7 % mostly) would fail in CI
// for no fault. So the tests take the median of three estimates and hold
// it between half the available bandwidth (35 % of it without cross
// traffic) and the bottleneck plus 30 %: what an estimator that works
// does not leave, and what a broken one (no trend seen, every trend
// increasing, rates off by a factor) does. An estimator blind to the
// cross traffic reports the capacity and passes; on a loaded machine that
// cannot be told from noise, so it is `make bench-abw`'s to show.
const (
	// With cross traffic: the median estimate within [0.5 × available,
	// 1.3 × bottleneck], and the cross traffic at 0.8 of its rate or more
	// during each estimate (the test's own precondition).
	minOfTruth      = 0.5
	maxOfBottleneck = 1.3
	minCross        = 0.8
	// Without cross traffic (through the manager): the median estimate
	// within [0.35, 1.3] × bottleneck.
	minOfFreeLink = 0.35
	maxOfFreeLink = 1.3
	// reportTimeoutLab is Config.Timeout in the lab tests: a loaded
	// machine may delay the responder's reports past the default 1 s,
	// and waiting for them does not change the measurement.
	reportTimeoutLab = 3 * time.Second
)

// TestLabEstimate is the short form of the accuracy runs, inside make
// test: one bottleneck with cross traffic, three estimates, checked for
// correctness (see minOfTruth and the bounds beside it).
func TestLabEstimate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	fl := federatedLab(t, ctx, "a")
	c := abwCase{rate: 50e6, cross: 0.3}
	defer fl.setCase(t, ctx, c)()
	var estimates []float64
	for range 3 {
		rx0, t0 := rxBytes(t, fl.to), time.Now()
		res, err := Estimate(ctx, fl.l, fl.from.Name, fl.to.Name, abw.Config{Timeout: reportTimeoutLab})
		if err != nil {
			t.Fatal(err)
		}
		// What else crossed the bottleneck meanwhile: the cross traffic.
		cross := (float64(rxBytes(t, fl.to)-rx0) - float64(res.Bytes)) * 8 / time.Since(t0).Seconds()
		t.Logf("bottleneck %v, cross %v (%.1f Mbit/s meanwhile): range [%.1f, %.1f] Mbit/s, estimate %.1f (truth %.1f), ADR %.1f, %d bytes (%.1f%% of a 10 s iperf3), %v, %d fleets",
			c.rate/1e6, c.cross, cross/1e6, res.Low/1e6, res.High/1e6, res.Estimate/1e6, c.truth()/1e6, res.ADR/1e6, res.Bytes, 100*float64(res.Bytes)/c.budget(), res.Duration.Round(time.Millisecond), len(res.Fleets))
		for _, f := range res.Fleets {
			t.Logf("  fleet %.1f Mbit/s payload %d K %d: %s %v lost %.2f", f.Rate/1e6, f.Payload, f.K, f.Verdict, f.Streams, f.Lost)
		}
		if cross < minCross*c.cross*c.rate {
			t.Errorf("cross traffic %.1f Mbit/s during the estimate, want %.1f: the estimate did not meet the bottleneck's load", cross/1e6, c.cross*c.rate/1e6)
		}
		if !(res.Low <= res.High) || res.Estimate != (res.Low+res.High)/2 {
			t.Errorf("range [%.1f, %.1f] with estimate %.1f: want an ordered range and its middle", res.Low/1e6, res.High/1e6, res.Estimate/1e6)
		}
		if float64(res.Bytes) > 0.2*c.budget() {
			t.Errorf("sent %d bytes, more than 20%% of a 10 s iperf3 at the bottleneck (%.0f)", res.Bytes, c.budget())
		}
		estimates = append(estimates, res.Estimate)
	}
	if est := median(estimates); est < minOfTruth*c.truth() || est > maxOfBottleneck*c.rate {
		t.Errorf("median estimate %.1f Mbit/s (of %s): want it within [%.1f, %.1f], from half the available %.1f to the %.0f Mbit/s bottleneck",
			est/1e6, mbps(estimates), minOfTruth*c.truth()/1e6, maxOfBottleneck*c.rate/1e6, c.truth()/1e6, c.rate/1e6)
	}
}

// mbps formats bit/s figures in Mbit/s.
func mbps(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.FormatFloat(x/1e6, 'f', 1, 64)
	}
	return strings.Join(s, ", ")
}

// median returns the middle of an odd number of values.
func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// TestBenchABW is `make bench-abw`: -abw.runs estimates per case at 20,
// 100 and 400 Mbit/s, without and with UDP cross traffic at 30 %, and a
// table of truth, estimate, error, bytes and seconds.
func TestBenchABW(t *testing.T) {
	if *benchRuns <= 0 {
		t.Skip("the accuracy benchmark runs with -abw.runs N (make bench-abw)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	fl := federatedLab(t, ctx, "b")
	var cases []abwCase
	for _, r := range []float64{20e6, 100e6, 400e6} {
		for _, x := range []float64{0, 0.3} {
			c := abwCase{rate: r, cross: x}
			if *benchCases == "" || strings.Contains(","+*benchCases+",", ","+c.name()+",") {
				cases = append(cases, c)
			}
		}
	}
	var table strings.Builder
	fmt.Fprintf(&table, "| case (Mbit/s) | run | truth | range | estimate | error | converged | bytes | of 10 s iperf3 | seconds |\n")
	fmt.Fprintf(&table, "|---|---|---|---|---|---|---|---|---|---|\n")
	var summary strings.Builder
	for _, c := range cases {
		undo := fl.setCase(t, ctx, c)
		good := 0
		var worstBytes, worstTime float64
		for run := 1; run <= *benchRuns; run++ {
			res, err := Estimate(ctx, fl.l, fl.from.Name, fl.to.Name, abw.Config{MinPeriod: *benchMinP})
			if err != nil {
				t.Errorf("case %s run %d: %v", c.name(), run, err)
				continue
			}
			e := (res.Estimate - c.truth()) / c.truth()
			if math.Abs(e) <= 0.15 {
				good++
			}
			share := float64(res.Bytes) / c.budget()
			worstBytes, worstTime = max(worstBytes, share), max(worstTime, res.Duration.Seconds())
			fmt.Fprintf(&table, "| %s | %d | %.1f | %.1f–%.1f | %.1f | %+.1f%% | %v | %d | %.2f%% | %.2f |\n",
				c.name(), run, c.truth()/1e6, res.Low/1e6, res.High/1e6, res.Estimate/1e6, 100*e, res.Converged, res.Bytes, 100*share, res.Duration.Seconds())
		}
		// What a bulk transfer gets on the same tunnel and bottleneck, for
		// reference (payload rate; 400 Mbit/s is above what userspace
		// WireGuard carries on a busy two-core machine).
		tcp := "-"
		if dst, err := TransitAddr(fl.l, fl.to); err == nil {
			if tp, err := lab.Iperf3(ctx, fl.from, fl.to, dst, 3*time.Second, 1); err == nil {
				tcp = fmt.Sprintf("%.1f", tp.Mbps)
			}
		}
		undo()
		fmt.Fprintf(&summary, "| %s | %.1f | %d/%d | %.2f%% | %.2f | %s |\n", c.name(), c.truth()/1e6, good, *benchRuns, 100*worstBytes, worstTime, tcp)
	}
	out := table.String() + "\n| case | truth | within ±15 % | most bytes (of 10 s iperf3) | longest (s) | iperf3 TCP beside it (Mbit/s) |\n|---|---|---|---|---|---|\n" + summary.String()
	t.Log("\n" + out)
	if *benchTable != "" {
		if err := os.WriteFile(*benchTable, []byte(out), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// TestManagedEstimate: `fednet probe bandwidth` without --lab: the
// manager relays the request to the sending gateway's agent, whose
// estimate (against the receiving agent's always-on responder) comes
// back through the API; the median of three is of the order of the link
// (see minOfFreeLink).
func TestManagedEstimate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	l := twoSites(t, ctx, "m", true)
	m, err := demo.StartManaged(ctx, l, fednetBin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop(context.Background()) })
	text, err := demo.GenerateSpecYAML(2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Apply(ctx, text); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, g := range l.Gateways() {
		if err := m.Enroll(ctx, g.Name); err != nil {
			t.Fatal(err)
		}
		names = append(names, g.Name)
	}
	if _, err := m.WaitApplied(ctx, names); err != nil {
		t.Fatal(err)
	}
	from, to := l.Gateways()[0], l.Gateways()[1]
	const rate = 50e6
	if err := l.Impair(ctx, to.Site, lab.Impairment{Rate: rate}); err != nil {
		t.Fatal(err)
	}
	var res *api.BandwidthResult
	// The receiving agent's responder binds once its plan is applied.
	await.Until(t, 30*time.Second, func() (bool, string) {
		res, err = m.Admin.ProbeBandwidth(ctx, from.Name, to.Name)
		return err == nil, fmt.Sprintf("estimate through the manager: %v", err)
	})
	// Three estimates: the median must be of the order of the link.
	estimates := []float64{res.EstimateBps}
	for len(estimates) < 3 {
		if res, err = m.Admin.ProbeBandwidth(ctx, from.Name, to.Name); err != nil {
			t.Fatal(err)
		}
		estimates = append(estimates, res.EstimateBps)
	}
	t.Logf("through the manager: %+v; estimates %s Mbit/s", *res, mbps(estimates))
	if res.From != from.Name || res.To != to.Name || res.Bytes <= 0 || !(res.LowBps <= res.HighBps) {
		t.Errorf("estimate of the link %s -> %s through the manager: %+v; want its gateways, bytes and an ordered range", from.Name, to.Name, *res)
	}
	if est := median(estimates); est < minOfFreeLink*rate || est > maxOfFreeLink*rate {
		t.Errorf("median estimate %.1f Mbit/s (of %s) of a free %.0f Mbit/s link through the manager: want it within [%.1f, %.1f]",
			est/1e6, mbps(estimates), rate/1e6, minOfFreeLink*rate/1e6, maxOfFreeLink*rate/1e6)
	}
	if _, err := m.Admin.ProbeBandwidth(ctx, from.Name, "nowhere"); err == nil || !strings.Contains(err.Error(), "no link") {
		t.Errorf("a link to an unknown gateway: %v", err)
	}
}
