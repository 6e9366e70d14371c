package dataplane

import (
	"context"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/fednet/fednet/internal/await"
	"github.com/fednet/fednet/internal/backend"
	"github.com/fednet/fednet/internal/dataplane/nstest"
	"github.com/fednet/fednet/internal/dataplane/wireguard"
	"github.com/fednet/fednet/internal/plan"
)

// TestTransitPassesTheSourceCheck: gateway b maps site a's prefix
// (10.1.0.0/24) to another peer (c), as a remote gateway does while a
// path moves. A host behind a pinging a host behind b gets no answer when
// a sends plain — b's WireGuard drops a source a's peer does not allow —
// and answers as soon as a sends it through its transit device
// (encapsulated, outer source a's transit address, which b accepts from
// a); it stops again when a sends plain again. b sends its replies
// through its transit device throughout (its route to 10.1.0.0/24 goes to
// c, which does not exist).
func TestTransitPassesTheSourceCheck(t *testing.T) {
	if nstest.Inner(t) {
		transitPhase(t, nstest.Phase())
		return
	}
	a, b, ha, hb := nstest.New(t), nstest.New(t), nstest.New(t), nstest.New(t)
	a.WireGuardDir, b.WireGuardDir = t.TempDir(), t.TempDir()
	joinNamespaces(t, a, "veth-a", "192.168.77.1/24", b, "veth-b", "192.168.77.2/24")
	for _, h := range []struct {
		gw, host *nstest.Netns
		n        string
	}{{a, ha, "1"}, {b, hb, "2"}} {
		h.gw.Exec(t, "ip", "link", "add", "eth1", "type", "veth", "peer", "name", "eth0", "netns", h.host.Name)
		h.gw.Exec(t, "ip", "address", "add", "10."+h.n+".0.1/24", "dev", "eth1")
		h.gw.Exec(t, "ip", "link", "set", "eth1", "up")
		h.host.Exec(t, "ip", "address", "add", "10."+h.n+".0.2/24", "dev", "eth0")
		h.host.Exec(t, "ip", "link", "set", "eth0", "up")
		h.host.Exec(t, "ip", "route", "add", "default", "via", "10."+h.n+".0.1")
	}
	ka, kb := newPrivateKey(t), newPrivateKey(t)
	env := keyEnv(ka, kb)
	b.RunPhase(t, "b-up", env...)
	a.RunPhase(t, "a-up", env...)
	// The tunnel works: a's transit address answers b.
	if err := await.Poll(20*time.Second, await.NoError(func() error { return pingOnce(b, "10.255.0.1") })); err != nil {
		t.Fatalf("b does not reach a's transit address through the tunnel: %v", err)
	}
	// Plain: dropped by b's source check.
	for range 3 {
		if pingOnce(ha, "10.2.0.2") == nil {
			t.Fatal("host a reached host b with a sending plain: b's source check should drop 10.1.0.2 from a")
		}
	}
	a.RunPhase(t, "a-encap", env...)
	if err := await.Poll(10*time.Second, await.NoError(func() error { return pingOnce(ha, "10.2.0.2") })); err != nil {
		t.Fatalf("host a does not reach host b with a sending through its transit device: %v", err)
	}
	if got := a.Exec(t, "ip", "route", "show", "table", "51825"); !strings.Contains(got, "10.2.0.0/24 via 10.255.0.2 dev fednet-tx") {
		t.Errorf("a's transit table:\n%s\nwant 10.2.0.0/24 via 10.255.0.2 dev fednet-tx", got)
	}
	// What a transit device unwraps is routed by the main table only,
	// never encapsulated again.
	if got := b.Exec(t, "ip", "rule"); !strings.Contains(got, "31824:\tfrom all iif fednet-tx lookup main") || !strings.Contains(got, "31825:\tfrom all lookup 51825") {
		t.Errorf("b's rules:\n%s\nwant 31824 iif fednet-tx lookup main, 31825 lookup 51825", got)
	}
	a.RunPhase(t, "a-plain", env...)
	for range 3 {
		if pingOnce(ha, "10.2.0.2") == nil {
			t.Fatal("host a reached host b after a went back to plain: the transit routes were not removed")
		}
	}
	// b takes a's site from a again and answers plain through the tunnel,
	// while a still encapsulates (a move's other half): what b's transit
	// device unwraps must pass b's reverse-path check although b's route
	// back to its source leaves by the tunnel, not by the transit device.
	b.RunPhase(t, "b-plain", env...)
	a.RunPhase(t, "a-encap", env...)
	if err := await.Poll(10*time.Second, await.NoError(func() error { return pingOnce(ha, "10.2.0.2") })); err != nil {
		t.Fatalf("host a does not reach host b encapsulated while b answers plain (b's reverse-path check drops what its transit device unwraps?): %v", err)
	}
	a.RunPhase(t, "a-plain", env...)
	a.RunPhase(t, "a-down", env...)
	b.RunPhase(t, "b-down", env...)
}

func transitPhase(t *testing.T, phase string) {
	ka, kb := keysFromEnv(t)
	pa, pb := twoGatewayPlans(ka, kb)
	// b maps 10.1.0.0/24 to c, a gateway that never answers.
	kc, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	pb.Peers[0].AllowedIPs = pfx("10.255.0.1/32")
	pb.Peers = append(pb.Peers, plan.Peer{Gateway: "c", Site: "site-a", Backend: backend.WireGuard,
		WireGuard: plan.WireGuardPeer{PublicKey: plan.Key(kc.PublicKey())}, AllowedIPs: pfx("10.1.0.0/24", "10.255.0.3/32")})
	pb.Routes = []plan.Route{{Destination: netip.MustParsePrefix("10.1.0.0/24"), Device: "fed0", Via: "c"}}
	if phase == "b-plain" {
		_, pb = twoGatewayPlans(ka, kb)
	}
	d, p := phaseDataplane(t, phase, ka, kb, pa, pb)
	ctx := context.Background()
	self := p.TransitAddress()
	sync := func(encap map[netip.Prefix]netip.Addr) {
		changes, err := SyncTransit(TransitConfig{Local: self, MTU: 1420, Encap: encap})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("transit changes:\n%s", render(changes))
	}
	switch phase {
	case "a-up", "b-up":
		if _, err := d.Apply(ctx, p); err != nil {
			t.Fatal(err)
		}
		if phase == "b-up" {
			sync(map[netip.Prefix]netip.Addr{netip.MustParsePrefix("10.1.0.0/24"): netip.MustParseAddr("10.255.0.1")})
		} else {
			sync(nil)
		}
	case "a-encap":
		sync(map[netip.Prefix]netip.Addr{netip.MustParsePrefix("10.2.0.0/24"): netip.MustParseAddr("10.255.0.2")})
		// Apply leaves the transit device alone (it is not a bridged
		// network's device).
		if c, err := d.Apply(ctx, p); err != nil || len(c) != 0 {
			t.Errorf("applying the plan again with the transit device up = %q, %v; want no changes", c, err)
		}
		if _, err := netlink.LinkByName(TransitDevice); err != nil {
			t.Errorf("%s after an Apply: %v", TransitDevice, err)
		}
	case "b-plain":
		if _, err := d.Apply(ctx, p); err != nil {
			t.Fatal(err)
		}
		sync(nil)
	case "a-plain":
		sync(nil)
		if c, err := SyncTransit(TransitConfig{Local: self, MTU: 1420}); err != nil || len(c) != 0 {
			t.Errorf("syncing the same transit state again = %q, %v; want no changes", c, err)
		}
	case "a-down", "b-down":
		if _, err := d.Down(ctx, p); err != nil {
			t.Fatal(err)
		}
		if _, err := netlink.LinkByName(TransitDevice); err == nil {
			t.Errorf("%s still exists after Down", TransitDevice)
		}
	default:
		t.Fatalf("unknown phase %q", phase)
	}
}

// phaseDataplane returns the data plane and plan of the gateway a phase
// runs on: b for phases named b-..., else a.
func phaseDataplane(t *testing.T, phase string, ka, kb plan.Key, pa, pb plan.Gateway) (*linuxDataplane, plan.Gateway) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	priv, p := ka, pa
	if strings.HasPrefix(phase, "b-") {
		priv, p = kb, pb
	}
	d, err := newLinux(Config{WireGuard: wireguard.Config{PrivateKey: priv, WGDevCommand: []string{exe, "wgdev"}}, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	return d, p
}

// pingOnce sends one ping from namespace ns to addr and waits a second for
// the answer.
func pingOnce(ns *nstest.Netns, addr string) error {
	return exec.Command("ip", "netns", "exec", ns.Name, "ping", "-c", "1", "-W", "1", addr).Run()
}
