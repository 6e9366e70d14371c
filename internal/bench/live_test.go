package bench_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/bench"
	"github.com/fednet/fednet/internal/demo"
	"github.com/fednet/fednet/internal/lab"
	"github.com/fednet/fednet/internal/spec"
)

// gatewaySpec is two sites sharing a routed network, one host each.
const gatewaySpec = `apiVersion: fednet/v1
kind: Federation
name: benchgw
sites:
  - name: aws
    provider: aws
    gateways: [{name: aws-gw, endpoint: "198.51.100.10:51820"}]
  - name: azure
    provider: azure
    gateways: [{name: azure-gw, endpoint: "203.0.113.11:51820"}]
networks:
  - {name: apps, id: 100, mode: routed, sites: [aws, azure]}
lab:
  hostsPerSite: 1
`

// TestLiveBenchFromGateway runs `fednet bench --live` on a gateway of a
// managed lab federation against a host of the other site, as an operator
// would on a real gateway (issue 15). Sent from the gateway's transit
// address, as the kernel picks it, the traffic is dropped by the remote
// gateway's forward chain: the run fails, and its error names the firewall
// and --source. From the gateway's LAN address, which bench takes from the
// plan the agent cached (or --source), it measures the overlay.
func TestLiveBenchFromGateway(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the lab creates network namespaces (CI runs as root)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	f, err := spec.Parse([]byte(gatewaySpec))
	if err != nil {
		t.Fatal(err)
	}
	const name = "e2ebenchgw"
	lab.Down(ctx, name)
	l, err := lab.Up(ctx, lab.Config{Federation: f, Name: name, Manager: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Down(context.Background()); err != nil {
			t.Error(err)
		}
	})
	m, err := demo.StartManaged(ctx, l, binary)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Stop(context.Background()) })
	if _, err := m.Apply(ctx, gatewaySpec); err != nil {
		t.Fatal(err)
	}
	for _, gw := range l.Gateways() {
		if err := m.Enroll(ctx, gw.Name); err != nil {
			t.Fatal(err)
		}
	}
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	if _, err := demo.WaitReachable(wctx, demo.CrossSitePairs(l, l.Sites()), m.AgentsAlive); err != nil {
		t.Fatalf("the federation did not converge: %v", err)
	}

	target := l.Hosts("azure")[0]
	if _, err := target.Run(ctx, "iperf3", "-s", "-D"); err != nil { // ends with the lab
		t.Fatal(err)
	}
	gw := l.SiteGateways("aws")[0]
	out := t.TempDir()
	benchOn := func(dir string, args ...string) (string, error) {
		argv := append([]string{"bench", "--live", "--quick", "--overlay-target", target.LAN.Addr().String(), "--out", filepath.Join(out, dir)}, args...)
		return gw.Run(ctx, binary, argv...)
	}

	// From the transit address (no agent data directory to learn the LAN
	// address from): refused on the way, and the error says where to look.
	start := time.Now()
	log, err := benchOn("transit", "--agent-data-dir", filepath.Join(out, "none"))
	if err == nil {
		t.Fatalf("a live bench from the gateway's transit address worked; the remote forward chain should drop it:\n%s", log)
	}
	for _, want := range []string{"no iperf3 server answers", "firewall", "--source", "LAN address"} {
		if !strings.Contains(log, want) {
			t.Errorf("the failed run's error lacks %q:\n%s", want, log)
		}
	}
	t.Logf("from the transit address: failed after %v, as it should:\n%s", time.Since(start).Round(time.Second), log)

	// From the LAN address the agent's cached plan gives.
	log, err = benchOn("cached", "--agent-data-dir", demo.AgentDir(gw))
	if err != nil {
		t.Fatalf("a live bench from the gateway, with its agent's data directory: %v\n%s", err, log)
	}
	if want := "sending into the overlay from its LAN address " + gw.LAN.Addr().String(); !strings.Contains(log, want) {
		t.Errorf("the run does not say %q:\n%s", want, log)
	}
	checkLive(t, filepath.Join(out, "cached"))

	// And with --source given.
	log, err = benchOn("source", "--agent-data-dir", filepath.Join(out, "none"), "--source", gw.LAN.Addr().String())
	if err != nil {
		t.Fatalf("a live bench from the gateway with --source: %v\n%s", err, log)
	}
	checkLive(t, filepath.Join(out, "source"))
}

// checkLive checks a live run's results: the overlay path alone, every
// measurement of the quick settings made.
func checkLive(t *testing.T, dir string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, bench.JSONFile))
	if err != nil {
		t.Fatal(err)
	}
	var r bench.Results
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if r.Target.Kind != "live" || len(r.Modes) != 1 {
		t.Fatalf("live run: target %+v, %d modes", r.Target, len(r.Modes))
	}
	m := r.Modes[0]
	if len(m.Errors) > 0 || len(m.Paths) != 1 || m.Paths[0].Name != bench.Overlay {
		t.Errorf("live run: errors %v, paths %+v; want the overlay path alone, measured", m.Errors, m.Paths)
	}
	checkPath(t, "live from a gateway", m, bench.Overlay, r.Settings)
}
