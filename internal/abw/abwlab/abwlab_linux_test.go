//go:build linux

package abwlab

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/abw"
	"github.com/fednet/fednet/internal/api"
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
	for i := 0; ; i++ {
		r, err := lab.Ping(ctx, fl.from, dst, 1, time.Second)
		if err == nil && r.Received == 1 {
			break
		}
		if i == 30 {
			t.Fatalf("tunnel from %s to %s never came up: %v %v", fl.from.Name, fl.to.Name, r, err)
		}
	}
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
		time.Sleep(time.Second) // let the flow reach its rate
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

// TestLabEstimate is the short form of the accuracy runs, inside make
// test: one bottleneck with cross traffic, two estimates, each checked
// for correctness with generous bounds (the real accuracy figures are
// `make bench-abw`'s).
func TestLabEstimate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	fl := federatedLab(t, ctx, "a")
	c := abwCase{rate: 50e6, cross: 0.3}
	defer fl.setCase(t, ctx, c)()
	for range 2 {
		res, err := Estimate(ctx, fl.l, fl.from.Name, fl.to.Name, abw.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("bottleneck %v, cross %v: range [%.1f, %.1f] Mbit/s, estimate %.1f (truth %.1f), ADR %.1f, %d bytes (%.1f%% of a 10 s iperf3), %v, %d fleets",
			c.rate/1e6, c.cross, res.Low/1e6, res.High/1e6, res.Estimate/1e6, c.truth()/1e6, res.ADR/1e6, res.Bytes, 100*float64(res.Bytes)/c.budget(), res.Duration.Round(time.Millisecond), len(res.Fleets))
		for _, f := range res.Fleets {
			t.Logf("  fleet %.1f Mbit/s payload %d K %d: %s %v lost %.2f", f.Rate/1e6, f.Payload, f.K, f.Verdict, f.Streams, f.Lost)
		}
		if !(res.Low <= res.High) || res.Estimate <= 0.3*c.truth() || res.Estimate >= 1.5*c.rate {
			t.Errorf("estimate %.1f Mbit/s (range [%.1f, %.1f]) is not of the order of the available %.1f below a %.0f Mbit/s bottleneck",
				res.Estimate/1e6, res.Low/1e6, res.High/1e6, c.truth()/1e6, c.rate/1e6)
		}
		if float64(res.Bytes) > 0.2*c.budget() {
			t.Errorf("sent %d bytes, more than 20%% of a 10 s iperf3 at the bottleneck (%.0f)", res.Bytes, c.budget())
		}
	}
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
// back through the API, and the agent's metrics gauge follows it.
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
	if err := l.Impair(ctx, to.Site, lab.Impairment{Rate: 50e6}); err != nil {
		t.Fatal(err)
	}
	var res *api.BandwidthResult
	for i := 0; ; i++ { // the receiving agent's responder binds once its plan is applied
		res, err = m.Admin.ProbeBandwidth(ctx, from.Name, to.Name)
		if err == nil || i == 10 {
			break
		}
		time.Sleep(time.Second)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("through the manager: %+v", *res)
	if res.From != from.Name || res.To != to.Name || res.EstimateBps < 10e6 || res.EstimateBps > 100e6 || res.Bytes <= 0 {
		t.Errorf("estimate of a 50 Mbit/s link through the manager: %+v", *res)
	}
	if _, err := m.Admin.ProbeBandwidth(ctx, from.Name, "nowhere"); err == nil || !strings.Contains(err.Error(), "no link") {
		t.Errorf("a link to an unknown gateway: %v", err)
	}
}
