package bench_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/bench"
	"github.com/fednet/fednet/internal/demo"
	"github.com/fednet/fednet/internal/lab"
)

// binary is the fednet executable built by TestMain for the agents (root
// only).
var binary string

func TestMain(m *testing.M) { os.Exit(demo.RunTests(m, &binary)) }

// smallSpec is two sites with one host each, joined by a routed and a
// bridged network: the smallest lab that has every mode.
const smallSpec = `apiVersion: fednet/v1
kind: Federation
name: benche2e
sites:
  - name: aws
    provider: aws
    index: 0
    gateways:
      - name: aws-gw
        endpoint: 198.51.100.10:51820
        bridgePorts: {lan: b1}
  - name: azure
    provider: azure
    index: 0
    gateways:
      - name: azure-gw
        endpoint: 203.0.113.11:51820
        bridgePorts: {lan: b1}
networks:
  - name: apps
    id: 100
    mode: routed
    sites: [aws, azure]
  - name: lan
    id: 200
    mode: bridged
    subnet: 192.168.50.0/24
    sites: [aws, azure]
lab:
  hostsPerSite: 1
`

// TestBenchQuick runs `fednet bench --quick` twice: on a lab it builds from
// a spec (kept), then on that running lab by name (--lab). Each run must
// write every output, with every ratio measured and no measurement failed,
// and leave no lab behind but the kept one, which the test removes.
func TestBenchQuick(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the lab creates network namespaces (CI runs as root)")
	}
	const name = "e2ebench"
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	t.Cleanup(func() {
		for _, n := range []string{name, name + "ref"} {
			if err := lab.Down(context.Background(), n); err != nil {
				t.Error(err)
			}
		}
	})
	dir := t.TempDir()
	specPath := filepath.Join(dir, "spec.yaml")
	if err := os.WriteFile(specPath, []byte(smallSpec), 0o644); err != nil {
		t.Fatal(err)
	}

	built := filepath.Join(dir, "built")
	run(ctx, t, "bench", "--quick", "--spec", specPath, "--name", name, "--keep", "--out", built)
	checkOutputs(t, built, 2)

	byName := filepath.Join(dir, "by-name")
	run(ctx, t, "bench", "--quick", "--lab", name, "--out", byName)
	r := checkOutputs(t, byName, 2)
	if r.Target.Lab != name || r.Target.Spec == "" {
		t.Errorf("target %+v: want lab %s and its saved spec", r.Target, name)
	}
	st, err := lab.Status(ctx, name+"ref")
	if err != nil {
		t.Fatal(err)
	}
	if st.Exists() {
		t.Errorf("the reference lab of the run by name is left behind:\n%s", st)
	}

	// Live mode, as on a host of a live federation: from aws-h1 against an
	// iperf3 server on azure-h1 (lab down ends it).
	run(ctx, t, "lab", "exec", "--name", name, "-f", specPath, "azure-h1", "--", "iperf3", "-s", "-D")
	live := filepath.Join(dir, "live")
	run(ctx, t, "lab", "exec", "--name", name, "-f", specPath, "aws-h1", "--",
		binary, "bench", "--live", "--quick", "--overlay-target", "10.2.0.1", "--out", live)
	b, err := os.ReadFile(filepath.Join(live, bench.JSONFile))
	if err != nil {
		t.Fatal(err)
	}
	var lr bench.Results
	if err := json.Unmarshal(b, &lr); err != nil {
		t.Fatal(err)
	}
	if lr.Target.Kind != "live" || len(lr.Modes) != 1 {
		t.Fatalf("live run: target %+v, %d modes", lr.Target, len(lr.Modes))
	}
	m := lr.Modes[0]
	if len(m.Errors) > 0 || len(m.RTT) != 1 || m.RTT[0].Received == 0 || len(m.TCP) != 2 || m.TCP[0].Mbps <= 0 || len(m.Loaded) != 1 {
		t.Errorf("live run: %+v", m)
	}
}

func run(ctx context.Context, t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.CommandContext(ctx, binary, args...).CombinedOutput()
	t.Logf("fednet %s:\n%s", strings.Join(args, " "), out)
	if err != nil {
		t.Fatalf("fednet %s: %v", strings.Join(args, " "), err)
	}
}

// checkOutputs checks dir holds every output of a run of modes modes and
// returns the results.
func checkOutputs(t *testing.T, dir string, modes int) *bench.Results {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, bench.JSONFile))
	if err != nil {
		t.Fatal(err)
	}
	var r bench.Results
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if r.Schema != bench.Schema || len(r.Modes) != modes {
		t.Fatalf("%s: schema %q, %d modes; want %q and %d", dir, r.Schema, len(r.Modes), bench.Schema, modes)
	}
	page, err := os.ReadFile(filepath.Join(dir, bench.HTMLFile))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, bench.MDFile)); err != nil {
		t.Error(err)
	}
	for _, m := range r.Modes {
		key := m.Mode
		if m.Network != "" {
			key += "-" + m.Network
		}
		if len(m.Errors) > 0 {
			t.Errorf("%s: measurements failed: %v", key, m.Errors)
		}
		x := m.Ratios
		for what, v := range map[string]float64{
			"RTT p50 overlay/underlay": x.RTTP50, "RTT fednet/standalone": x.StandaloneRTT,
			"TCP 1 overlay/underlay": x.Throughput1, "TCP 4 overlay/underlay": x.Throughput4,
			"TCP 1 fednet/standalone": x.Standalone1, "TCP 4 fednet/standalone": x.Standalone4,
			"loaded/idle RTT": x.LoadedRTT, "overhead overlay/underlay": x.OverheadRelative,
		} {
			if !(v > 0) {
				t.Errorf("%s: ratio %s = %v, want > 0", key, what, v)
			}
		}
		// Headers travel with every payload byte.
		if !(x.Overhead > 1) || !(x.OverheadUnderlay > 1) {
			t.Errorf("%s: traffic overhead %v (underlay %v), want > 1", key, x.Overhead, x.OverheadUnderlay)
		}
		plots := []string{"rtt-cdf", "rtt-series", "rtt-box", "throughput", "udp"}
		if m.Mode == "routed" {
			plots = append(plots, "throughput-delay")
			if want := len(r.Settings.DelaysMs) * 3; len(m.Delay) != want {
				t.Errorf("%s: %d throughput-vs-delay points, want %d", key, len(m.Delay), want)
			}
		}
		for _, p := range plots {
			for _, ext := range []string{".svg", ".png"} {
				f := key + "-" + p + ext
				if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
					t.Errorf("plot %s missing or empty (%v)", f, err)
				}
				if !strings.Contains(string(page), `"`+f+`"`) {
					t.Errorf("index.html does not show %s", f)
				}
			}
		}
	}
	if r.Ratios != r.Modes[0].Ratios {
		t.Errorf("headline ratios %+v are not the routed mode's", r.Ratios)
	}
	return &r
}
