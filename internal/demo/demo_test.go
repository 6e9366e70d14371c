package demo_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/await"
	"github.com/fednet/fednet/internal/demo"
	"github.com/fednet/fednet/internal/lab"
	"github.com/fednet/fednet/internal/spec"
)

// binary is the fednet executable built by TestMain for the agents (root
// only).
var binary string

func TestMain(m *testing.M) { os.Exit(demo.RunTests(m, &binary)) }

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the lab creates network namespaces (CI runs as root)")
	}
}

// noLab fails the test if anything of the named lab is left.
func noLab(t *testing.T, name string) {
	t.Helper()
	st, err := lab.Status(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	if st.Exists() {
		t.Errorf("lab %q left behind:\n%s", name, st)
	}
}

// TestDemo runs the whole demo as `fednet lab demo` does (with a manager)
// and checks the report, then that nothing is left behind.
func TestDemo(t *testing.T) {
	r := runDemo(t, "e2edemo", false, 0)
	if r.Mode != "managed" || r.PropagationMs <= 0 {
		t.Errorf("mode %q, propagation %.1f ms: want managed with a propagation figure", r.Mode, r.PropagationMs)
	}
	t.Logf("propagation_ms %.1f", r.PropagationMs)
}

// TestDemoStatic runs the demo on plan files, without a manager.
func TestDemoStatic(t *testing.T) {
	r := runDemo(t, "e2estatic", true, 0)
	if r.Mode != "static" {
		t.Errorf("mode %q, want static", r.Mode)
	}
}

// TestDemoThreeManagers runs the demo as `fednet lab demo --managers 3`
// does: three managers on a three-member etcd cluster, in namespaces on
// the lab internet. Every check passes, the wire check included (the
// managers' and etcd's traffic is control traffic, not between gateways).
func TestDemoThreeManagers(t *testing.T) {
	r := runDemo(t, "e2edemo3", false, 3)
	if r.Mode != "managed" || r.PropagationMs <= 0 {
		t.Errorf("mode %q, propagation %.1f ms: want managed with a propagation figure", r.Mode, r.PropagationMs)
	}
}

func runDemo(t *testing.T, name string, static bool, managers int) *demo.Report {
	needRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	t.Cleanup(func() { lab.Down(context.Background(), name) })
	var progress strings.Builder
	r, err := demo.Run(ctx, demo.Config{Binary: binary, LabName: name, Throughput: 2 * time.Second, Progress: &progress, Static: static, Managers: managers})
	t.Log("\n" + progress.String())
	if err != nil {
		t.Fatalf("demo: %v", err)
	}
	if !r.ChecksPassed {
		t.Errorf("checks failed: %+v", r.Checks)
	}
	// apps joins aws and azure, ops aws and onprem: 16 pairs reach, the 8
	// between azure and onprem must not; lan bridges all three sites.
	if r.Sites != 3 || r.Hosts != 6 || r.PairsTotal != 16 || r.PairsOK != 16 || r.IsolatedPairs != 8 || r.IsolatedReached != 0 {
		t.Errorf("sites %d hosts %d pairs %d/%d isolated %d (%d reached), want 3, 6, 16/16, 8 (0)", r.Sites, r.Hosts, r.PairsOK, r.PairsTotal, r.IsolatedPairs, r.IsolatedReached)
	}
	if r.BridgedPairsTotal != 24 || r.BridgedPairsOK != 24 || r.ThroughputBridgedMbps <= 0 {
		t.Errorf("bridged pairs %d/%d, throughput %.1f Mbit/s; want 24/24 and a figure", r.BridgedPairsOK, r.BridgedPairsTotal, r.ThroughputBridgedMbps)
	}
	// The bridged network pays VXLAN's 50 bytes inside the tunnel.
	if r.MTURouted == 0 || r.MTUBridged != r.MTURouted-50 {
		t.Errorf("MTU routed %d, bridged %d; want bridged = routed - 50", r.MTURouted, r.MTUBridged)
	}
	// The kind comes from the link, not from its alias (fednet's mark names
	// the backend on either kind).
	want := "userspace (wireguard-go)"
	if _, err := os.Stat("/sys/module/wireguard"); err == nil {
		want = "kernel"
	}
	if r.WireGuard != want {
		t.Errorf("wireguard %q, want %q", r.WireGuard, want)
	}
	if r.PlaintextPackets != 0 || r.NonWireGuardPackets != 0 || r.WireGuardPackets == 0 {
		t.Errorf("wire: %d plaintext, %d non-WireGuard, %d WireGuard packets", r.PlaintextPackets, r.NonWireGuardPackets, r.WireGuardPackets)
	}
	if r.ThroughputOverlayMbps <= 0 || r.ThroughputUnderlayMbps <= 0 || r.RTTOverlayMs <= 0 || r.RTTUnderlayMs <= 0 {
		t.Errorf("missing measurements: %+v", r)
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	json.Unmarshal(b, &fields)
	for _, k := range []string{"sites", "pairs_total", "pairs_ok", "rtt_overlay_ms", "rtt_underlay_ms", "throughput_overlay_mbps",
		"throughput_underlay_mbps", "throughput_bridged_mbps", "throughput_bridged_ratio", "mtu_routed", "mtu_bridged", "isolated_pairs",
		"plaintext_packets", "converged_s", "checks_passed"} {
		if _, ok := fields[k]; !ok {
			t.Errorf("report JSON lacks %q", k)
		}
	}
	noLab(t, name)
	return r
}

// TestRemoveSite federates three sites, removes one from the spec, re-plans
// and re-applies: the two others keep reaching each other without losing a
// packet, and the removed one becomes unreachable and leaves every peer's
// WireGuard configuration.
func TestRemoveSite(t *testing.T) {
	needRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f, err := demo.GenerateSpec(3)
	if err != nil {
		t.Fatal(err)
	}
	l, d := staticLab(t, ctx, "e2eremove", f, func(l *lab.Lab) []demo.Pair { return demo.CrossSitePairs(l, l.Sites()) })

	text, err := demo.GenerateSpecYAML(3, "onprem")
	if err != nil {
		t.Fatal(err)
	}
	f2, err := spec.Parse([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	// Transit addresses are stable: removing a site moves nobody.
	for _, gw := range []string{"aws-gw", "azure-gw"} {
		g1, _, _ := f.Gateway(gw)
		g2, _, _ := f2.Gateway(gw)
		if g1.TransitAddress != g2.TransitAddress {
			t.Errorf("%s moved from %s to %s", gw, g1.TransitAddress, g2.TransitAddress)
		}
	}

	awsH, azureH, onpremH := l.Hosts("aws")[0], l.Hosts("azure")[0], l.Hosts("onprem")[0]
	// Ping across the change, every 20 ms (pinger returns once the pings
	// run).
	during := pinger(ctx, awsH, azureH, 20*time.Millisecond)
	if err := d.Replan(f2); err != nil {
		t.Fatal(err)
	}

	// The removed site goes away from both remaining gateways.
	for _, gw := range []string{"aws-gw", "azure-gw"} {
		await.Until(t, 10*time.Second, func() (bool, string) {
			out, err := l.Gateway(gw).Run(ctx, "wg", "show", "fed0", "peers")
			return err == nil && len(strings.Fields(out)) == 1, fmt.Sprintf("%s still has peers %q (err %v); agent log:\n%s", gw, out, err, d.Agent(gw).LogText())
		})
	}
	if !demo.Unreachable(ctx, awsH, onpremH.LAN.Addr(), 3) {
		t.Errorf("aws still reaches the removed site")
	}
	if !demo.Unreachable(ctx, onpremH, azureH.LAN.Addr(), 3) {
		t.Errorf("the removed site still reaches azure")
	}
	r := during()
	if r.Received != r.Sent || r.Sent < 100 {
		t.Errorf("aws -> azure lost %d of %d pings while onprem was removed", r.Sent-r.Received, r.Sent)
	}
	t.Logf("aws -> azure during the change: %s", r)
	remaining := demo.CrossSitePairs(l, []string{"aws", "azure"})
	for i, r := range demo.PingAll(ctx, remaining, 2, 100*time.Millisecond) {
		if r.Received == 0 {
			t.Errorf("%s -> %s unreachable after the change", remaining[i].From, remaining[i].To)
		}
	}
	if err := d.AgentsAlive(); err != nil {
		t.Error(err)
	}
}

// TestNetworksIsolate: two sites that share no network have a tunnel but
// cannot reach each other, and what their hosts try never leaves in clear
// by the gateways' default routes.
func TestNetworksIsolate(t *testing.T) {
	needRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	text, err := demo.GenerateSpecYAML(3)
	if err != nil {
		t.Fatal(err)
	}
	// Replace the one network by two: aws+azure and azure+onprem.
	text = text[:strings.Index(text, "networks:")] + `networks:
  - name: apps
    id: 100
    mode: routed
    sites: [aws, azure]
  - name: ops
    id: 200
    mode: routed
    sites: [azure, onprem]
`
	f, err := spec.Parse([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	l, _ := staticLab(t, ctx, "e2eisolate", f, func(l *lab.Lab) []demo.Pair {
		return append(demo.CrossSitePairs(l, []string{"aws", "azure"}), demo.CrossSitePairs(l, []string{"azure", "onprem"})...)
	})

	capture, err := lab.StartCapture(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	forbidden := demo.CrossSitePairs(l, []string{"aws", "onprem"})
	for i, r := range demo.PingAll(ctx, forbidden, 3, 100*time.Millisecond) {
		if r.Received != 0 {
			t.Errorf("%s reaches %s though their sites share no network", forbidden[i].From, forbidden[i].To)
		}
	}
	pcap, err := capture.Stop()
	if err != nil {
		t.Fatal(err)
	}
	wire, err := lab.AnalyzeWire(pcap, f.Overlay.Supernet, f.Overlay.ListenPort)
	if err != nil {
		t.Fatal(err)
	}
	if wire.Plaintext != 0 || wire.NonWireGuard != 0 {
		t.Errorf("pings between isolated sites leaked: %d plaintext, %d non-WireGuard packets (%v %v)",
			wire.Plaintext, wire.NonWireGuard, wire.PlaintextSamples, wire.NonWireGuardSamples)
	}
	// The tunnel between them exists (the mesh), it just carries nothing
	// but the gateways' own transit traffic.
	out, err := l.Gateway("aws-gw").Run(ctx, "wg", "show", "fed0", "allowed-ips")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "10.5.0.0/24") || len(strings.Split(strings.TrimSpace(out), "\n")) != 2 {
		t.Errorf("aws-gw allowed IPs:\n%s\nwant two peers and no onprem prefix", out)
	}
}

// staticLab builds a lab of f, federates it with static agents (plan
// files) and waits until the pairs that reach returns answer.
func staticLab(t *testing.T, ctx context.Context, name string, f *spec.Federation, reach func(*lab.Lab) []demo.Pair) (*lab.Lab, *demo.Deployment) {
	t.Helper()
	return staticLabOf(t, ctx, lab.Config{Federation: f, Name: name}, reach)
}

// staticLabOf is staticLab for a lab config of its own.
func staticLabOf(t *testing.T, ctx context.Context, cfg lab.Config, reach func(*lab.Lab) []demo.Pair) (*lab.Lab, *demo.Deployment) {
	t.Helper()
	name := cfg.Name
	lab.Down(ctx, name)
	l, err := lab.Up(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		l.Down(context.Background())
		noLab(t, name)
	})
	d, err := demo.Deploy(ctx, l, binary)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Stop(context.Background()) })
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := demo.WaitReachable(wctx, reach(l), d.AgentsAlive); err != nil {
		t.Fatalf("the federation did not converge: %v", err)
	}
	return l, d
}
