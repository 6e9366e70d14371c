package demo_test

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/demo"
	"github.com/fednet/fednet/internal/lab"
	"github.com/fednet/fednet/internal/spec"
)

// TestBridgedNetwork stretches one subnet across three sites over the full
// mesh: hosts of different sites on it reach each other directly (their ARP
// broadcasts cross the tunnels by head-end replication), routed networks
// keep working beside it, and nothing of it shows on the internet in clear.
func TestBridgedNetwork(t *testing.T) {
	needRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	data, err := os.ReadFile(filepath.Join("..", "..", "examples", "bridged.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := spec.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	var subnet netip.Prefix
	var members []string
	for _, n := range f.Networks {
		if n.Mode == spec.Bridged {
			subnet, members = n.Subnet, n.Sites
		}
	}
	if !subnet.IsValid() || len(members) < 3 {
		t.Fatalf("examples/bridged.yaml: want a bridged network with a subnet over 3 sites")
	}
	const name = "e2ebridged"
	lab.Down(ctx, name)
	l, err := lab.Up(ctx, lab.Config{Federation: f, Name: name,
		Bridged: []lab.BridgedNetwork{{Name: "lan", Subnet: subnet, Sites: members}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		l.Down(context.Background())
		noLab(t, name)
	})
	for _, s := range f.Sites {
		gw := s.Gateways[0]
		if got := l.BridgedPort("lan", gw.Name); got != gw.BridgePorts["lan"] {
			t.Fatalf("%s: the lab's port for lan is %q, the spec says %q", gw.Name, got, gw.BridgePorts["lan"])
		}
	}
	d, err := demo.Deploy(ctx, l, binary)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Stop(context.Background()) })

	var bridged []demo.Pair
	for _, a := range members {
		for _, b := range members {
			if a == b {
				continue
			}
			for _, ha := range l.BridgedHosts("lan", a) {
				for _, hb := range l.BridgedHosts("lan", b) {
					bridged = append(bridged, demo.Pair{From: ha, To: hb})
				}
			}
		}
	}
	routed := demo.CrossSitePairs(l, l.Sites())
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	took, err := demo.WaitReachable(wctx, append(bridged, routed...), d.AgentsAlive)
	if err != nil {
		t.Fatalf("bridged and routed hosts did not all reach each other: %v", err)
	}
	t.Logf("%d bridged and %d routed host pairs reachable after %v", len(bridged), len(routed), took.Round(time.Millisecond))
	// The wire check watches the steady state (at start-up a gateway may
	// answer a handshake that arrives before its device listens with an
	// ICMP port unreachable, which is not a leak).
	capture, err := lab.StartCapture(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range demo.PingAll(ctx, bridged, 3, 50*time.Millisecond) {
		if r.Received != r.Sent {
			t.Errorf("bridged %s -> %s: %s", bridged[i].From, bridged[i].To, r)
		}
	}
	pcap, err := capture.Stop()
	if err != nil {
		t.Fatal(err)
	}
	for _, clear := range []netip.Prefix{f.Overlay.Supernet, subnet} {
		wire, err := lab.AnalyzeWire(pcap, clear, f.Overlay.ListenPort)
		if err != nil {
			t.Fatal(err)
		}
		if wire.Plaintext != 0 || wire.NonWireGuard != 0 || wire.WireGuard == 0 {
			t.Errorf("wire (clear check for %s): %v %v %v", clear, wire, wire.PlaintextSamples, wire.NonWireGuardSamples)
		}
	}
	// The bridged hosts learned each other's MAC addresses: ARP crossed.
	h := l.BridgedHosts("lan", members[0])[0]
	out, err := h.Run(ctx, "ip", "neigh", "show", "dev", lab.HostInterface)
	if err != nil {
		t.Fatal(err)
	}
	for _, other := range l.BridgedHosts("lan", members[1]) {
		if !containsLine(out, other.LAN.Addr().String()) {
			t.Errorf("%s has no neighbour entry for %s:\n%s", h, other.LAN.Addr(), out)
		}
	}
}

// containsLine reports whether a line of text has word as a field.
func containsLine(text, word string) bool {
	for _, line := range strings.Split(text, "\n") {
		if contains(strings.Fields(line), word) {
			return true
		}
	}
	return false
}
