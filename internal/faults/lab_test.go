package faults

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/demo"
	"github.com/fednet/fednet/internal/lab"
)

// binary is the fednet executable TestMain builds for the manager and the
// agents (as root only).
var binary string

func TestMain(m *testing.M) { os.Exit(demo.RunTests(m, &binary)) }

// TestShortSuite is `make test`'s short form of the fault suite: four
// faults on examples/ha.yaml with real agents and a manager, short holds.
// It asserts what holds today and must keep holding, never a timing: the
// suite measures, repairs and cleans up; killing the agent and downing the
// standby lose nothing; a cut link loses probes on exactly the pairs that
// cross it, and nothing elsewhere; every fault recovers; the report is
// consistent.
func TestShortSuite(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the fault suite builds a lab of network namespaces and needs root (CI runs as root)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	specYAML, err := os.ReadFile("../../examples/ha.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// A name the lab tests' stale-lab cleaner recognises (t<pid>...).
	name := "t" + strconv.Itoa(os.Getpid()) + "fs"
	t.Cleanup(func() { lab.Down(context.Background(), name) })
	rep, err := Run(ctx, Config{
		SpecYAML: string(specYAML),
		Only:     []string{LinkCut, StandbyDown, AgentKilled, ActiveGatewayDown},
		Binary:   binary,
		LabName:  name,
		Settle:   time.Second,
		Hold:     2 * time.Second,
		After:    5 * time.Second,
		// Short: link-cut does not wait for its way back.
		NoWayBack: true,
	})
	if rep == nil {
		t.Fatalf("the suite did not run: %v", err)
	}
	for _, r := range rep.Faults {
		t.Log(Line(r, rep.Checks))
	}
	if (err == nil) != rep.ChecksPassed || rep.ChecksPassed != Passed(rep.Checks) {
		t.Errorf("checks_passed %v, error %v, checks %+v: inconsistent", rep.ChecksPassed, err, rep.Checks)
	}
	if st, err := lab.Status(context.Background(), name); err != nil || st.Exists() {
		t.Errorf("the lab is left after the run (%v):\n%s", err, st)
	}
	if rep.HASite != "lab" || (rep.VirtualAddress != "agents" && rep.VirtualAddress != "suite") || rep.Pairs != 36 {
		t.Errorf("report: HA site %q, virtual address held by %q, %d pairs; want lab, agents or suite, 36 (24 routed, 12 bridged)", rep.HASite, rep.VirtualAddress, rep.Pairs)
	}
	var names []string
	for _, r := range rep.Faults {
		names = append(names, r.Name)
	}
	if !slices.Equal(names, []string{ActiveGatewayDown, AgentKilled, StandbyDown, LinkCut}) {
		t.Fatalf("faults run: %v", names)
	}
	for _, r := range rep.Faults {
		switch {
		case r.Error != "":
			t.Errorf("%s: %s", r.Name, r.Error)
		case r.Target == "" || r.Path == "" || r.Manager != ManagerRunning:
			t.Errorf("%s: target %q, path %q, manager %q", r.Name, r.Target, r.Path, r.Manager)
		case r.Sent == 0 || r.Lost < 0 || r.Lost > r.Sent || r.OutageMs < 0 || r.UnconcernedLost > r.UnconcernedSent:
			t.Errorf("%s: %d sent, %d lost, outage %v ms, unconcerned %d of %d lost: inconsistent", r.Name, r.Sent, r.Lost, r.OutageMs, r.UnconcernedLost, r.UnconcernedSent)
		case r.Pairs+r.SiteDownPairs+r.UnconcernedPairs != rep.Pairs:
			t.Errorf("%s: %d concerned, %d of a failed site and %d unconcerned pairs of %d", r.Name, r.Pairs, r.SiteDownPairs, r.UnconcernedPairs, rep.Pairs)
		case !r.Recovered || r.RecoveredS < 0:
			t.Errorf("%s: recovered %v (%v s): every pair must answer again after the repair", r.Name, r.Recovered, r.RecoveredS)
		case r.UnconcernedLost != 0:
			t.Errorf("%s: pairs the fault does not concern lost %d probes: %+v", r.Name, r.UnconcernedLost, r.Losses)
		}
		if (r.Lost == 0) != (r.OutageMs == 0) {
			t.Errorf("%s: %d lost but outage %v ms", r.Name, r.Lost, r.OutageMs)
		}
	}
	byName := map[string]Result{}
	for _, r := range rep.Faults {
		byName[r.Name] = r
	}
	// Killing the agent leaves the data plane alone; a standby carries
	// nothing.
	for _, n := range []string{AgentKilled, StandbyDown} {
		if r := byName[n]; r.Lost != 0 || !r.TCPSurvived {
			t.Errorf("%s: %d of %d probes lost, TCP survived %v (%s); want nothing lost", n, r.Lost, r.Sent, r.TCPSurvived, r.TCPDetail)
		}
	}
	// After the active gateway went down, the manager shows the new
	// active (the gateway holding the virtual address) and the failover
	// with its cause, as the agents reported them.
	if r := byName[ActiveGatewayDown]; r.SiteActive == "" || r.SiteActive == r.Target || r.SiteActive != r.VirtualAddressHolder ||
		r.LastFailover == nil || r.LastFailover.From != r.Target || r.LastFailover.To != r.SiteActive || !strings.Contains(r.LastFailover.Cause, r.Target) {
		t.Errorf("after %s (%s down): site active %q, virtual address at %q, last failover %+v; want the other gateway, from %s, with a cause naming it",
			r.Name, r.Target, r.SiteActive, r.VirtualAddressHolder, r.LastFailover, r.Target)
	}
	// The cut concerns aws-eu <-> azure-we (4 routed pairs), gcp-ew <->
	// azure-we, relayed by aws-gw over the same link (4), and the bridged
	// network lan, whose ports the reroute rebuilds at every member (12).
	if r := byName[LinkCut]; r.Target != "aws-gw<->azure-gw" || r.Pairs != 20 || r.Lost == 0 {
		t.Errorf("link-cut: target %s, %d concerned pairs, %d lost; want aws-gw<->azure-gw, 20 pairs, losses (the cut cuts until the reroute)", r.Target, r.Pairs, r.Lost)
	}
}
