package demo_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/demo"
	"github.com/fednet/fednet/internal/lab"
)

// TestInterop runs `fednet lab interop`'s scenario: WireGuard over UDP, an
// IPsec link between fednet gateways, a UDP-blocked site on TCP 443, and
// two external sites (profiles aws and openstack-vpnaas) played by
// standalone strongSwans configured only from `fednet external config
// --format json`. Every pair answers in each category, external sites
// reach only the sites of their networks, their VPN gateways send only
// IKE/ESP, the blocked site only TLS on 443, nothing crosses in clear.
func TestInterop(t *testing.T) {
	needRoot(t)
	if _, err := os.Stat(lab.CharonPath); err != nil {
		t.Fatalf("strongSwan's charon is missing (make deps installs it): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	t.Cleanup(func() { lab.Down(context.Background(), demo.InteropLab) })
	var progress strings.Builder
	r, err := demo.RunInterop(ctx, demo.InteropConfig{Binary: binary, Throughput: time.Second, Progress: &progress})
	t.Log("\n" + progress.String())
	if err != nil {
		t.Fatalf("interop: %v", err)
	}
	for _, c := range r.Checks {
		if !c.Passed {
			t.Errorf("check %q failed: %s", c.Name, c.Detail)
		}
	}
	for _, x := range []struct {
		what      string
		ok, total int
		want      int
	}{
		{"external pairs", r.ExternalPairsOK, r.ExternalPairsTotal, 10},
		{"ipsec pairs", r.IPsecPairsOK, r.IPsecPairsTotal, 2},
		{"tcp443 pairs", r.TCP443PairsOK, r.TCP443PairsTotal, 8},
		{"external links", r.ExternalLinksUp, r.ExternalLinksTotal, 2},
	} {
		if x.ok != x.total || x.total != x.want {
			t.Errorf("%s %d/%d; want %d/%d", x.what, x.ok, x.total, x.want, x.want)
		}
	}
	if r.ExternalIsolatedPairs == 0 || r.ExternalIsolatedReached != 0 {
		t.Errorf("external isolation: %d of %d isolated pairs reached; want 0 of some", r.ExternalIsolatedReached, r.ExternalIsolatedPairs)
	}
	if r.ExternalWireIKE == 0 || r.ExternalWireOther != 0 || r.TCP443WireUDP != 0 || r.TCP443WireTCP == 0 || r.PlaintextPackets != 0 {
		t.Errorf("wire: external %d IKE/ESP-in-UDP, %d other; blocked site %d TCP, %d UDP; %d plaintext", r.ExternalWireIKE, r.ExternalWireOther, r.TCP443WireTCP, r.TCP443WireUDP, r.PlaintextPackets)
	}
	if r.ThroughputIPsecMbps <= 0 || r.ThroughputTCP443Mbps <= 0 || r.ThroughputUDPMbps <= 0 {
		t.Errorf("throughput ipsec %.0f, tcp443 %.0f, udp %.0f Mbit/s; want each measured", r.ThroughputIPsecMbps, r.ThroughputTCP443Mbps, r.ThroughputUDPMbps)
	}
	noLab(t, demo.InteropLab)
}
