package controlplane_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fednet/fednet/internal/bench/controlplane"
	"github.com/fednet/fednet/internal/lab/etcdlab"
)

var binary string

// TestMain builds the fednet executable the bench runs as managers.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fednet-cp-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "fednet")
	if out, err := exec.Command("go", "build", "-o", binary, "github.com/fednet/fednet/cmd/fednet").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building fednet: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// TestShort is the short form of the control-plane bench that make test
// runs: 20 agents, against one manager on SQLite and against three on a
// three-member etcd. Every change reaches every affected agent (Run fails
// otherwise), the numbers are there, and every agent reconnects after the
// restart of every manager, with no request failing after the managers
// answered again; the agents' heap is collected before each change.
// Timings are logged, not asserted.
func TestShort(t *testing.T) {
	for _, c := range []controlplane.Config{
		{Gateways: 20, Managers: 1},
		{Gateways: 20, Managers: 3},
	} {
		t.Run(fmt.Sprintf("%d-managers", c.Managers), func(t *testing.T) {
			if c.Managers > 1 {
				if _, err := etcdlab.Binary(); err != nil {
					if os.Geteuid() == 0 {
						t.Fatal(err)
					}
					t.Skipf("not root and %v", err)
				}
			}
			c.Binary, c.Dir = binary, t.TempDir()
			res, err := controlplane.Run(context.Background(), c)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Changes) != 4 {
				t.Fatalf("%d changes measured, want 4", len(res.Changes))
			}
			for _, ch := range res.Changes {
				want := 20
				if ch.Kind == controlplane.GatewayRemoved {
					want = 19
				}
				if ch.Affected != want || ch.Missed != 0 || ch.P99Ms <= 0 || ch.Bytes <= 0 || ch.PlanMs <= 0 {
					t.Errorf("%s: %+v", ch.Kind, ch)
				}
				if ch.APISpansMs["plan"] <= 0 || ch.APISpansMs["commit"] <= 0 || len(ch.APISpansMs) != 13 {
					t.Errorf("%s: the manager's spans of the API call are %v, want its 13 parts, plan and commit above 0", ch.Kind, ch.APISpansMs)
				}
				if ch.Kind == controlplane.SiteAdded && ch.PlanPath != "20 edited, 1 whole" {
					t.Errorf("%s: the manager planned it %q, want 20 plans edited (plan.Update) and the new one whole", ch.Kind, ch.PlanPath)
				}
				if ch.AgentPreGCCPUSeconds <= 0 {
					t.Errorf("%s: no collection of the agents' heap before the change: %+v", ch.Kind, ch)
				}
				if ch.SettleSeconds < 3 || ch.SettleSeconds > 11 {
					t.Errorf("%s: waited %.1f s for the managers to be at rest before the change; want 3 to 10 s", ch.Kind, ch.SettleSeconds)
				}
				if c.Managers > 1 && ch.FollowerPlanMs <= 0 {
					t.Errorf("%s: the other managers did not log their planning: %+v", ch.Kind, ch)
				}
			}
			if st := res.Steady; st.Seconds <= 0 || st.RSSMB <= 0 || (c.Managers > 1) != (st.EtcdCores > 0) {
				t.Errorf("steady: %+v", st)
			}
			if res.StatusReports == 0 {
				t.Error("the agents sent no periodic status report")
			}
			if rc := res.Reconnect; rc.Reconnected != rc.Agents || rc.Agents != 19 || rc.FailedAfterUp != 0 {
				t.Errorf("reconnect: %+v", rc)
			}
			dir := t.TempDir()
			if err := controlplane.Write(dir, []*controlplane.Result{res}); err != nil {
				t.Fatal(err)
			}
			for _, f := range []string{"results.json", "results.md", "propagation-p99.svg", "plan-time.png"} {
				if fi, err := os.Stat(filepath.Join(dir, f)); err != nil || fi.Size() == 0 {
					t.Errorf("%s: %v", f, err)
				}
			}
			md, _ := os.ReadFile(filepath.Join(dir, "results.md"))
			t.Logf("\n%s", md)
			if !strings.Contains(string(md), "network added") {
				t.Error("results.md lacks the network change")
			}
			if !strings.Contains(string(md), "collected before each change") {
				t.Error("results.md does not say the agents' heap was collected before each change")
			}
		})
	}
}
