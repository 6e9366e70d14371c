package demo_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/demo"
	"github.com/fednet/fednet/internal/lab"
	"github.com/fednet/fednet/internal/spec"
)

// mixedSpec is examples/ipsec-mixed.yaml for a lab named name: its
// pre-shared key lives in that lab's directory.
func mixedSpec(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("../../examples/ipsec-mixed.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return strings.ReplaceAll(string(b), "/run/fednet-lab/demo/", "/run/fednet-lab/"+name+"/")
}

// TestIPsecMixed runs the demo's checks on a federation with one link on
// IPsec (strongSwan, userspace ESP) and two on WireGuard: every pair
// answers, isolation and MTU hold, IKE/ESP is on the wire and nothing in
// clear.
func TestIPsecMixed(t *testing.T) {
	needRoot(t)
	if _, err := os.Stat(lab.CharonPath); err != nil {
		t.Fatalf("strongSwan's charon is missing (make deps installs it): %v", err)
	}
	const name = "e2eipsec"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	t.Cleanup(func() { lab.Down(context.Background(), name) })
	var progress strings.Builder
	r, err := demo.Run(ctx, demo.Config{Binary: binary, LabName: name, SpecYAML: mixedSpec(t, name), Static: true, Throughput: time.Second, Progress: &progress})
	t.Log("\n" + progress.String())
	if err != nil {
		t.Fatalf("demo: %v", err)
	}
	if r.PairsOK != r.PairsTotal || r.PairsTotal != 24 {
		t.Errorf("pairs %d/%d; want 24/24", r.PairsOK, r.PairsTotal)
	}
	if r.IPsecPackets == 0 || r.WireGuardPackets == 0 || r.NonWireGuardPackets != 0 || r.PlaintextPackets != 0 {
		t.Errorf("wire: %d IPsec, %d WireGuard, %d other, %d plaintext; want both tunnels' packets, nothing else", r.IPsecPackets, r.WireGuardPackets, r.NonWireGuardPackets, r.PlaintextPackets)
	}
	// aws-eu to azure-we goes over IPsec: the MTU check used its MTU.
	if r.MTURouted != 1399 {
		t.Errorf("routed MTU %d; want 1399 (IPsec's, the hosts' path)", r.MTURouted)
	}
	noLab(t, name)
}

// TestIPsecWrongKey: one side of the IPsec link has another pre-shared
// key. The link stays down, its agent logs the reason naming the link,
// and the WireGuard links of the same gateways carry traffic.
func TestIPsecWrongKey(t *testing.T) {
	needRoot(t)
	const name = "e2eipsecbad"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lab.Down(ctx, name)
	f, err := spec.Parse([]byte(mixedSpec(t, name)))
	if err != nil {
		t.Fatal(err)
	}
	l, err := lab.Up(ctx, lab.Config{Federation: f, Name: name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Down(context.Background()) })
	// Every gateway reads the key from one path (the lab's gateways share
	// a file system): the file changes once aws-gw's agent has loaded its
	// key into its charon, before azure-gw's agent starts.
	psk := f.Overlay.IPsec.PSK.File
	if err := l.EnsurePSK(psk); err != nil {
		t.Fatal(err)
	}
	d, err := demo.DeployHook(ctx, l, binary, func(d *demo.Deployment, gateway string) {
		if gateway != "azure-gw" {
			return
		}
		for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			if a := d.Agent("aws-gw"); a != nil && strings.Contains(a.LogText(), "load-conn fednet-azure-gw") {
				break
			}
		}
		if err := os.WriteFile(psk, []byte("a-different-key-of-enough-length\n"), 0o600); err != nil {
			t.Error(err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Stop(context.Background()) })
	pairs, _ := demo.RoutedPairs(l, f)
	var ipsecPairs, wgPairs []demo.Pair
	for _, p := range pairs {
		if (p.From.Site == "aws-eu" && p.To.Site == "azure-we") || (p.From.Site == "azure-we" && p.To.Site == "aws-eu") {
			ipsecPairs = append(ipsecPairs, p)
		} else {
			wgPairs = append(wgPairs, p)
		}
	}
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	_, err = demo.WaitReachable(wctx, wgPairs, d.AgentsAlive)
	wcancel()
	if err != nil {
		t.Errorf("the WireGuard links with a broken IPsec link beside them: %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	var logged bool
	for !logged && time.Now().Before(deadline) {
		for _, gw := range []string{"aws-gw", "azure-gw"} {
			if strings.Contains(d.Agent(gw).LogText(), "ipsec link to ") && strings.Contains(d.Agent(gw).LogText(), "authentication failed") {
				logged = true
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !logged {
		t.Errorf("no agent logged the IPsec link's authentication failure; aws-gw's log:\n%s", d.Agent("aws-gw").LogText())
	}
	for _, res := range demo.PingAll(ctx, ipsecPairs, 1, 100*time.Millisecond) {
		if res.Received > 0 {
			t.Errorf("a pair over the IPsec link with mismatched keys answered: %+v", res)
		}
	}
}
