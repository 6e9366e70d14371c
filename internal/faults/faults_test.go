package faults

import (
	"encoding/json"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/lab"
	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/spec"
)

// haPlans plans examples/ha.yaml with in.
func haPlans(t *testing.T, in plan.Inputs) map[string]plan.Gateway {
	t.Helper()
	b, err := os.ReadFile("../../examples/ha.yaml")
	if err != nil {
		t.Fatal(err)
	}
	f, err := spec.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	gws, err := plan.Compute(f, in)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]plan.Gateway{}
	for _, g := range gws {
		out[g.Name] = g
	}
	return out
}

func routed(from, fromSite, to, toSite, addr string) Pair {
	return Pair{From: from, To: to, FromSite: fromSite, ToSite: toSite, Address: netip.MustParseAddr(addr)}
}

var (
	awsToAzure = routed("aws-eu-h1", "aws-eu", "azure-we-h1", "azure-we", "10.2.0.1")
	gcpToAzure = routed("gcp-ew-h1", "gcp-ew", "azure-we-h1", "azure-we", "10.2.0.1")
	gcpToLab   = routed("gcp-ew-h1", "gcp-ew", "lab-h1", "lab", "10.5.0.1")
	labToAws   = routed("lab-h1", "lab", "aws-eu-h1", "aws-eu", "10.1.0.1")
	bridgedAA  = Pair{From: "lan-aws-eu-h1", To: "lan-azure-we-h1", FromSite: "aws-eu", ToSite: "azure-we", Address: netip.MustParseAddr("192.168.50.17"), Network: "lan"}
	bridgedLab = Pair{From: "lan-aws-eu-h1", To: "lan-lab-h1", FromSite: "aws-eu", ToSite: "lab", Address: netip.MustParseAddr("192.168.50.33"), Network: "lan"}
)

// Paths follow the plans: direct where the link is used, through aws-gw
// where examples/ha.yaml relays gcp-ew <-> azure-we, to the HA site's
// active gateway, and for bridged pairs along the VXLAN ports.
func TestPath(t *testing.T) {
	def := haPlans(t, plan.Inputs{})
	gw2 := haPlans(t, plan.Inputs{}.WithActive("lab", "onprem-gw2"))
	down := haPlans(t, plan.Inputs{}.WithLinkDown("aws-eu", "azure-we"))
	for _, tc := range []struct {
		plans map[string]plan.Gateway
		pair  Pair
		want  []string
	}{
		{def, awsToAzure, []string{"aws-gw", "azure-gw"}},
		{def, gcpToAzure, []string{"gcp-gw", "aws-gw", "azure-gw"}},
		{def, gcpToLab, []string{"gcp-gw", "onprem-gw1"}},
		{gw2, gcpToLab, []string{"gcp-gw", "onprem-gw2"}},
		{gw2, labToAws, []string{"onprem-gw2", "aws-gw"}},
		{down, awsToAzure, []string{"aws-gw", "onprem-gw1", "azure-gw"}},
		{def, bridgedAA, []string{"aws-gw", "azure-gw"}},
		{def, bridgedLab, []string{"aws-gw", "onprem-gw1"}},
		{gw2, bridgedLab, []string{"aws-gw", "onprem-gw2"}},
		{down, bridgedAA, []string{"aws-gw", "onprem-gw1", "azure-gw"}},
	} {
		got, err := Path(tc.plans, tc.pair)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%s: path %v (%v), want %v", tc.pair, got, err, tc.want)
		}
	}
	if _, err := Path(def, routed("x", "aws-eu", "y", "gcp-ew", "10.99.0.1")); err == nil {
		t.Error("a path to an address nobody routes")
	}
	if _, err := Path(def, Pair{From: "x", To: "y", FromSite: "aws-eu", ToSite: "gcp-ew", Network: "lan"}); err == nil {
		t.Error("a bridged path to a site outside the network")
	}
}

// A fault concerns the pairs whose path crosses what it fails, and the
// pairs of the sites it names.
func TestConcerned(t *testing.T) {
	plans := haPlans(t, plan.Inputs{})
	site := func(gw string) string { return plans[gw].Site }
	for _, tc := range []struct {
		name  string
		blast Blast
		yes   []Pair
		no    []Pair
	}{
		{"relay aws-gw down", Blast{Gateways: []string{"aws-gw"}, Sites: []string{"aws-eu"}},
			[]Pair{awsToAzure, gcpToAzure, labToAws, bridgedAA}, []Pair{gcpToLab}},
		{"aws-azure link cut", Blast{Links: []plan.SitePair{plan.Pair("azure-we", "aws-eu")}},
			[]Pair{awsToAzure, gcpToAzure, bridgedAA}, []Pair{gcpToLab, labToAws, bridgedLab}},
		{"lab's active down", Blast{Gateways: []string{"onprem-gw1"}, Sites: []string{"lab"}},
			[]Pair{gcpToLab, labToAws, bridgedLab}, []Pair{awsToAzure, gcpToAzure, bridgedAA}},
		{"lab's standby down", Blast{Gateways: []string{"onprem-gw2"}},
			nil, []Pair{gcpToLab, labToAws, awsToAzure, bridgedLab}},
	} {
		for _, p := range append(slices.Clone(tc.yes), tc.no...) {
			path, err := Path(plans, p)
			if err != nil {
				t.Fatal(err)
			}
			want := slices.Contains(tc.yes, p)
			if got := tc.blast.Concerned(p, path, site); got != want {
				t.Errorf("%s: %s over %v concerned %v, want %v", tc.name, p, path, got, want)
			}
		}
	}
}

// probeLog builds a log from a pattern: one character per probe, 10 ms
// apart, '.' answered and 'x' lost.
func probeLog(pattern string) lab.ProbeLog {
	g := lab.ProbeLog{Interval: 10 * time.Millisecond}
	for i, c := range pattern {
		g.Probes = append(g.Probes, lab.Probe{Sent: time.Duration(i) * 10 * time.Millisecond, Answered: c == '.'})
	}
	return g
}

// measure attributes losses to concerned and unconcerned pairs from the
// injection on, takes the longest outage of the concerned pairs and finds
// when the last pair answered again after the repair.
func TestMeasure(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	pairs := []Pair{awsToAzure, gcpToAzure, gcpToLab}
	logs := []lab.ProbeLog{
		//         0    50   100  150  200
		probeLog("x.........xxxxx.............."), // concerned: 5 lost, 60 ms
		probeLog("..........xxxxxxxxx.........."), // concerned: 9 lost, 100 ms, back at 190 ms
		probeLog("x............x..............."), // unconcerned: 1 lost after the injection
	}
	var res Result
	recovered, ok := measure(&res, logs, pairs, []bool{true, true, false}, nil, ms(50), ms(120))
	if !ok || recovered != ms(190) {
		t.Fatalf("recovered at %v %v, want 190ms", recovered, ok)
	}
	want := Result{Pairs: 2, Sent: 2 * 24, Lost: 14, OutageMs: 100, Recovered: true, RecoveredS: 0.07,
		UnconcernedPairs: 1, UnconcernedSent: 24, UnconcernedLost: 1}
	got := res
	got.Losses = nil
	if !jsonEqual(got, want) {
		t.Errorf("result %+v\nwant %+v", got, want)
	}
	if len(res.Losses) != 3 || !res.Losses[1].Concerned || res.Losses[2].Concerned || res.Losses[2].Lost != 1 {
		t.Errorf("losses %+v", res.Losses)
	}
	if g := res.Losses[0].Gaps; !slices.Equal(g, []string{"+0.05 s for 50 ms"}) {
		t.Errorf("gaps of %s: %q; want the run after the injection, timed from it", res.Losses[0].Pair, g)
	}

	// The way back: what every pair lost from the repair (120 ms) on.
	if n := lostAfter(logs, ms(120)); n != 3+7+1 {
		t.Errorf("lostAfter the repair = %d, want 11", n)
	}

	// A pair that never answers again: not recovered.
	res = Result{}
	if _, ok := measure(&res, []lab.ProbeLog{probeLog("....xxxx")}, pairs[:1], []bool{true}, nil, 0, ms(50)); ok || res.Recovered {
		t.Error("recovered with the last probes lost")
	}
	// No pair concerned: every pair is measured, and every pair is an
	// unconcerned one too.
	res = Result{}
	measure(&res, logs[2:], pairs[2:], []bool{false}, nil, 0, 0)
	if res.Pairs != 1 || res.Lost != 2 || res.UnconcernedLost != 2 {
		t.Errorf("no pair concerned: %+v", res)
	}
	// A pair of a site the fault takes down is measured apart: its
	// outage does not count in the fault's.
	res = Result{}
	measure(&res, logs, pairs, []bool{true, true, false}, []bool{false, true, false}, ms(50), ms(120))
	if res.Pairs != 1 || res.Lost != 5 || res.OutageMs != 60 || res.SiteDownPairs != 1 || res.SiteDownLost != 9 || res.SiteDownOutageMs != 100 || res.UnconcernedLost != 1 {
		t.Errorf("a pair of a failed site: %+v", res)
	}
}

func jsonEqual(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// The checks apply the thresholds per fault.
func TestEvaluate(t *testing.T) {
	three, zero := 3, 0
	good := []Result{
		{Name: ActiveGatewayDown, HeldMs: 5000, OutageMs: 900, TCPSurvived: true, Recovered: true},
		{Name: ActiveUplinkCut, HeldMs: 5000, OutageMs: 1000, TCPSurvived: true, Recovered: true},
		{Name: WGDevKilled, OutageMs: 300, TCPSurvived: true, Recovered: true},
		{Name: AgentKilled, Sent: 100, Recovered: true},
		{Name: StandbyDown, Sent: 100, Recovered: true},
		{Name: LinkCut, HeldMs: 5000, OutageMs: 2500, Recovered: true, WayBackLost: &zero},
		{Name: LinkCutOneWay, HeldMs: 5000, OutageMs: 3000, Recovered: true},
		{Name: LinkFlap, HeldMs: 2000, OutageMs: 9000, Recovered: true, LinkChanges: 10, PathChanges: &three},
		{Name: RelayDown, HeldMs: 5000, OutageMs: 100, Recovered: true},
		{Name: SiteLANSplit, HeldMs: 5000, OutageMs: 5000, Recovered: true},
		{Name: ManagerKilled, HeldMs: 5000, Recovered: true},
		{Name: OperatorActivate, HeldMs: 5000, TCPSurvived: true, Recovered: true},
	}
	checks := Evaluate(good)
	if !Passed(checks) {
		t.Fatalf("good results fail: %+v", checks)
	}
	if len(checks) != 2*len(good)+11 {
		t.Errorf("%d checks for %d results, want %d", len(checks), len(good), 2*len(good)+11)
	}
	if Passed(nil) {
		t.Error("no checks passed")
	}
	for _, tc := range []struct {
		name   string
		change func(r *Result)
		fault  string
	}{
		{"outage over 1 s", func(r *Result) { r.OutageMs = 1001 }, ActiveGatewayDown},
		{"TCP broke", func(r *Result) { r.TCPSurvived = false }, ActiveUplinkCut},
		{"wgdev outage", func(r *Result) { r.OutageMs = 7000 }, WGDevKilled},
		{"held too short", func(r *Result) { r.HeldMs = 900 }, ActiveGatewayDown},
		{"link outage over 3 s", func(r *Result) { r.OutageMs = 3001 }, RelayDown},
		{"link held too short", func(r *Result) { r.HeldMs, r.OutageMs = 2000, 2000 }, LinkCut},
		{"agent-killed lost one", func(r *Result) { r.Lost = 1 }, AgentKilled},
		{"standby-down lost one", func(r *Result) { r.Lost = 1 }, StandbyDown},
		{"unconcerned lost one", func(r *Result) { r.UnconcernedLost = 1 }, SiteLANSplit},
		{"not recovered", func(r *Result) { r.Recovered = false }, ManagerKilled},
		{"flapping paths", func(r *Result) { r.PathChanges = new(int); *r.PathChanges = 11 }, LinkFlap},
		{"paths not counted", func(r *Result) { r.PathChanges = nil }, LinkFlap},
		{"an error", func(r *Result) { r.Error = "boom" }, LinkCut},
		{"TCP broke on a handover", func(r *Result) { r.TCPSurvived = false }, OperatorActivate},
		{"a handover lost one", func(r *Result) { r.Lost, r.OutageMs = 1, 20 }, OperatorActivate},
		{"the way back lost one", func(r *Result) { r.WayBackLost = new(int); *r.WayBackLost = 1 }, LinkCut},
	} {
		results := slices.Clone(good)
		i := slices.IndexFunc(results, func(r Result) bool { return r.Name == tc.fault })
		tc.change(&results[i])
		checks := Evaluate(results)
		if Passed(checks) {
			t.Errorf("%s: passed", tc.name)
		}
		for _, c := range checks {
			if !c.Passed && !strings.HasPrefix(c.Name, tc.fault+": ") {
				t.Errorf("%s: check %q of another fault failed", tc.name, c.Name)
			}
		}
	}
}

// Lines and the table carry each fault's figures; a failed check marks
// its line.
func TestRender(t *testing.T) {
	rs := []Result{
		{Name: LinkCut, Target: "aws-gw<->azure-gw", Manager: ManagerDown, HeldMs: 5000, Sent: 900, Lost: 500, OutageMs: 5020, Recovered: true, RecoveredS: 0.03, UnconcernedSent: 1000},
		{Name: AgentKilled, Target: "onprem-gw1", Manager: ManagerRunning, Sent: 900, TCPSurvived: true, Recovered: true},
		{Name: RelayDown, Error: "the spec relays no routed traffic"},
	}
	checks := Evaluate(rs)
	lines := []string{Line(rs[0], checks), Line(rs[1], checks), Line(rs[2], checks)}
	for i, want := range [][]string{
		{"FAIL", "link-cut", "aws-gw<->azure-gw", "900 sent", "500 lost", "5020 ms", "TCP broke", "recovered 0.03 s", "manager down"},
		{"ok  ", "agent-killed", "TCP survived", "lost 0 of 0"},
		{"FAIL", "relay-down", "relays no routed traffic"},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i], w) {
				t.Errorf("line %q lacks %q", lines[i], w)
			}
		}
	}
	table := Table(rs)
	if n := strings.Count(table, "\n"); n != 2+len(rs) {
		t.Errorf("table of %d lines:\n%s", n, table)
	}
	if !strings.Contains(table, "| link-cut | aws-gw<->azure-gw | down | 900 | 500 | 5020 | false | yes (0.03) | 0 |") {
		t.Errorf("table:\n%s", table)
	}
	// The JSON ends with checks_passed.
	b, err := json.Marshal(Report{Faults: rs, Checks: checks})
	if err != nil || !strings.HasSuffix(string(b), `"checks_passed":false}`) {
		t.Errorf("report JSON %s (%v) does not end with checks_passed", b, err)
	}
}

func TestSelected(t *testing.T) {
	all, err := Selected(nil)
	if err != nil || !slices.Equal(all, Names) {
		t.Errorf("Selected(nil) = %v, %v", all, err)
	}
	got, err := Selected([]string{LinkCut, AgentKilled})
	if err != nil || !slices.Equal(got, []string{AgentKilled, LinkCut}) {
		t.Errorf("Selected = %v, %v; want the suite's order", got, err)
	}
	if _, err := Selected([]string{"gateway-down"}); err == nil || !strings.Contains(err.Error(), ActiveGatewayDown) {
		t.Errorf("an unknown fault: %v; want an error listing the faults", err)
	}
}

func TestPathChangePattern(t *testing.T) {
	logs := "agent: link to aws-gw: the last 5 probes were lost; link down\n" +
		"agent: path change: 10.2.0.0/24 via onprem-gw1 (was azure-gw)\n" +
		"agent: Path changed back to direct\n"
	if n := len(DefaultPathChange.FindAllStringIndex(logs, -1)); n != 2 {
		t.Errorf("%d path changes in\n%s\nwant 2", n, logs)
	}
}

func TestConfigDefaults(t *testing.T) {
	c := Config{}
	if err := c.defaults(); err != nil {
		t.Fatal(err)
	}
	if c.Interval != 10*time.Millisecond || c.Hold != 5*time.Second || c.FlapPeriod != 2*time.Second || c.PathChanges == nil {
		t.Errorf("defaults %+v", c)
	}
	for _, bad := range []Config{
		{Interval: time.Microsecond},
		{After: 100 * time.Millisecond},
		{FlapPeriod: 2 * time.Second, FlapDuration: 3 * time.Second},
		{TransferRate: -1},
	} {
		if err := bad.defaults(); err == nil {
			t.Errorf("config %+v accepted", bad)
		}
	}
}

// Cutting a link of the bridged network's full mesh moves the network onto
// a relay tree: every pair of it is concerned. A link outside the network
// (gcp-ew is no member; lab's two links are its tree's) rebuilds nothing.
func TestRebuiltNetworks(t *testing.T) {
	before := haPlans(t, plan.Inputs{})
	if got := rebuilt(before, haPlans(t, plan.Inputs{}.WithLinkDown("aws-eu", "azure-we"))); !slices.Equal(got, []string{"lan"}) {
		t.Errorf("aws-eu <-> azure-we down rebuilds %v, want [lan]", got)
	}
	if got := rebuilt(before, haPlans(t, plan.Inputs{}.WithLinkDown("gcp-ew", "aws-eu"))); len(got) != 0 {
		t.Errorf("gcp-ew <-> aws-eu down rebuilds %v, want none", got)
	}
	b := Blast{Networks: []string{"lan"}}
	if !b.Concerned(Pair{Network: "lan", FromSite: "aws-eu", ToSite: "lab"}, nil, nil) || b.Concerned(routed("a", "aws-eu", "b", "lab", "10.5.0.10"), nil, nil) {
		t.Error("Blast.Networks concerns the bridged pairs of the network, and only those")
	}
}
