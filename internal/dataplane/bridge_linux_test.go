package dataplane

import (
	"context"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"

	"github.com/fednet/fednet/internal/await"
	"github.com/fednet/fednet/internal/dataplane/nstest"
	"github.com/fednet/fednet/internal/plan"
)

// TestLinuxBridgeLifecycle applies a plan with a bridged network (port: a
// veth) to a real kernel, checks links, master and FDB through netlink and
// against the fake, changes the remotes, and takes it down: the port stays.
func TestLinuxBridgeLifecycle(t *testing.T) {
	if !inner(t) {
		return
	}
	ctx := context.Background()
	sh(t, "ip link add eth1 type veth peer name eth1p && ip link set eth1 up && ip link set eth1p up")
	d := newTestLinux(t, newPrivateKey(t), Auto)
	f := NewFake()
	f.SetState(State{Forwarding: strings.TrimSpace(sh(t, "cat /proc/sys/net/ipv4/ip_forward")) == "1"})

	step := func(name string, p plan.Gateway) []Change {
		t.Helper()
		return applyBoth(t, d, f, name, p)
	}

	step("add", bridged())
	br, err := netlink.LinkByName("fbr100")
	if err != nil {
		t.Fatal(err)
	}
	vx, err := netlink.LinkByName("fvx100")
	if err != nil {
		t.Fatal(err)
	}
	port, err := netlink.LinkByName("eth1")
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := vx.(*netlink.Vxlan); !ok || v.VxlanId != 100 || v.Port != 4789 || !v.Learning || v.SrcAddr.String() != "10.255.0.1" {
		t.Errorf("fvx100 = %+v, want VXLAN id 100 local 10.255.0.1 dstport 4789 learning", vx)
	}
	if vx.Attrs().MasterIndex != br.Attrs().Index || port.Attrs().MasterIndex != br.Attrs().Index {
		t.Errorf("fvx100 master %d, eth1 master %d; want fbr100 (%d)", vx.Attrs().MasterIndex, port.Attrs().MasterIndex, br.Attrs().Index)
	}
	if br.Attrs().MTU != 1370 || vx.Attrs().MTU != 1370 || br.Attrs().Alias != "fednet:lan" {
		t.Errorf("fbr100 mtu %d alias %q, fvx100 mtu %d; want 1370, fednet:lan", br.Attrs().MTU, br.Attrs().Alias, vx.Attrs().MTU)
	}
	fdb := sh(t, "bridge fdb show dev fvx100")
	for _, want := range []string{"00:00:00:00:00:00 dst 10.255.0.2 self permanent", "00:00:00:00:00:00 dst 10.255.0.3 self permanent"} {
		if !strings.Contains(fdb, want) {
			t.Errorf("bridge fdb show dev fvx100 lacks %q:\n%s", want, fdb)
		}
	}

	// An entry fednet did not make (as learned: a real MAC) is left alone.
	sh(t, "bridge fdb add 02:00:00:00:00:01 dev fvx100 dst 10.255.0.2")
	if c := mustApply(t, d, bridged()); len(c) != 0 {
		t.Errorf("Apply with a foreign FDB entry made changes:\n%s", render(c))
	}

	changes := step("remotes", bridgePlans["2-remotes"]())
	want := "bridge fdb del 00:00:00:00:00:00 dev fvx100 dst 10.255.0.3\n" +
		"bridge fdb append 00:00:00:00:00:00 dev fvx100 dst 10.255.0.4\n"
	if got := render(changes); got != want {
		t.Errorf("changes of the remotes:\n%swant:\n%s", got, want)
	}
	if fdb := sh(t, "bridge fdb show dev fvx100"); !strings.Contains(fdb, "02:00:00:00:00:01 dst 10.255.0.2") || strings.Contains(fdb, "dst 10.255.0.3") {
		t.Errorf("bridge fdb show dev fvx100 after the change:\n%s", fdb)
	}
	step("mtu", bridgePlans["3-mtu"]())
	step("no-port", bridgePlans["4-no-port"]())
	if l, _ := netlink.LinkByName("eth1"); l == nil || l.Attrs().MasterIndex != 0 {
		t.Errorf("eth1 = %v, want it released", l)
	}
	step("add again", bridged())

	changes, err = d.Down(ctx, bridged())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := render(changes), "ip link del fvx100\nip link del fbr100\nip link del fed0\nnft delete table inet fednet\n"; got != want {
		t.Errorf("Down changes:\n%swant:\n%s", got, want)
	}
	for _, n := range []string{"fbr100", "fvx100"} {
		if _, err := netlink.LinkByName(n); err == nil {
			t.Errorf("%s still exists after Down", n)
		}
	}
	if l, err := netlink.LinkByName("eth1"); err != nil || l.Attrs().MasterIndex != 0 {
		t.Errorf("port eth1 after Down = %v, %v; want it there, released", l, err)
	}
	assertNothingLeft(t, d)
}

// applyBoth applies p to the kernel and to the fake, checks that both made
// the same changes and reached the same state, and that applying p again
// changes nothing; it returns the kernel's changes.
func applyBoth(t *testing.T, d *linuxDataplane, f *Fake, name string, p plan.Gateway) []Change {
	t.Helper()
	ctx := context.Background()
	got, err := d.Apply(ctx, p)
	if err != nil {
		t.Fatalf("Apply(%s): %v", name, err)
	}
	want := mustApply(t, f, p)
	if diff := cmp.Diff(render(want), render(asFake(got))); diff != "" {
		t.Errorf("Apply(%s) changes differ from the fake's (-fake +kernel):\n%s", name, diff)
	}
	s, err := d.read(ctx, "fed0", "fednet", p.Bridges)
	if err != nil {
		t.Fatal(err)
	}
	if s.Link != nil && s.Link.Kind == KindUserspace {
		s.Link.Kind = KindKernel
	}
	if s.WireGuard != nil {
		s.WireGuard.PublicKey = FakePublicKey
	}
	if diff := cmp.Diff(f.State().String(), s.String()); diff != "" {
		t.Errorf("after Apply(%s) the kernel state differs from the fake's (-fake +kernel):\n%s", name, diff)
	}
	if again, err := d.Apply(ctx, p); err != nil || len(again) != 0 {
		t.Errorf("Apply(%s) again = %q, %v; want no changes", name, again, err)
	}
	return got
}

// TestLinuxBridgeForeignName: an interface that is not fednet's, named as a
// plan's bridge, is neither used nor deleted; the rest of the plan applies.
func TestLinuxBridgeForeignName(t *testing.T) {
	if !inner(t) {
		return
	}
	sh(t, "ip link add fbr100 type bridge && ip link add eth1 type veth peer name eth1p")
	d := newTestLinux(t, newPrivateKey(t), Auto)
	_, err := d.Apply(context.Background(), bridged())
	if err == nil || !strings.Contains(err.Error(), "fbr100 exists and is not fednet's") {
		t.Errorf("Apply = %v, want an error naming fbr100", err)
	}
	if _, err := netlink.LinkByName("fed0"); err != nil {
		t.Errorf("the rest of the plan was not applied: %v", err)
	}
	if _, err := d.Down(context.Background(), bridged()); err != nil {
		t.Fatal(err)
	}
	if _, err := netlink.LinkByName("fbr100"); err != nil {
		t.Errorf("Down deleted a bridge that is not fednet's: %v", err)
	}
}

// Two gateways joined by WireGuard over a veth, each with a host on a veth
// that is its bridge's port; the hosts share one subnet. A ping between the
// hosts crosses the tunnel (ARP by head-end replication), and a's VXLAN
// device then has learned b's host MAC behind b's transit address.
//
//	b-up, a-up   apply each gateway's plan (devices outlive the process)
//	(outer)      ping host A -> host B, check a's FDB
//	a-down, b-down  Down; the ports stay
func TestLinuxBridgeTwoGateways(t *testing.T) {
	if nstest.Inner(t) {
		bridgePhase(t, nstest.Phase())
		return
	}
	a, b, ha, hb := nstest.New(t), nstest.New(t), nstest.New(t), nstest.New(t)
	b.WireGuardDir = t.TempDir()
	a.WireGuardDir = t.TempDir()
	a.Exec(t, "ip", "link", "add", "veth-a", "type", "veth", "peer", "name", "veth-b", "netns", b.Name)
	a.Exec(t, "ip", "address", "add", "192.168.77.1/24", "dev", "veth-a")
	a.Exec(t, "ip", "link", "set", "veth-a", "up")
	b.Exec(t, "ip", "address", "add", "192.168.77.2/24", "dev", "veth-b")
	b.Exec(t, "ip", "link", "set", "veth-b", "up")
	for _, h := range []struct {
		gw, host *nstest.Netns
		n        string
	}{{a, ha, "1"}, {b, hb, "2"}} {
		h.gw.Exec(t, "ip", "link", "add", "eth1", "type", "veth", "peer", "name", "eth0", "netns", h.host.Name)
		h.gw.Exec(t, "ip", "link", "set", "eth1", "up")
		h.host.Exec(t, "ip", "link", "set", "eth0", "address", "02:00:00:00:50:0"+h.n)
		h.host.Exec(t, "ip", "address", "add", "192.168.50."+h.n+"/24", "dev", "eth0")
		h.host.Exec(t, "ip", "link", "set", "eth0", "up")
	}
	ka, kb := newPrivateKey(t), newPrivateKey(t)
	env := keyEnv(ka, kb)
	b.RunPhase(t, "b-up", env...)
	a.RunPhase(t, "a-up", env...)
	var out string
	err := await.Poll(20*time.Second, await.NoError(func() error {
		o, err := exec.Command("ip", "netns", "exec", ha.Name, "ping", "-c", "1", "-W", "1", "192.168.50.2").CombinedOutput()
		out = string(o)
		return err
	}))
	if err != nil {
		t.Errorf("ping from host A to host B across the bridged network: %v\n%s", err, out)
	} else {
		t.Logf("ping across the bridged network:\n%s", out)
	}
	fdb := a.Exec(t, "bridge", "fdb", "show", "dev", "fvx100")
	if !strings.Contains(fdb, "02:00:00:00:50:02 dst 10.255.0.2") {
		t.Errorf("a's fvx100 has not learned host B's MAC behind 10.255.0.2:\n%s", fdb)
	}
	t.Logf("bridge fdb show dev fvx100 on a:\n%s", fdb)
	a.RunPhase(t, "a-down", env...)
	b.RunPhase(t, "b-down", env...)
}

func bridgePhase(t *testing.T, phase string) {
	ka, kb := keysFromEnv(t)
	pa, pb := twoGatewayPlans(ka, kb)
	lan := func(p *plan.Gateway, self, other string) {
		p.Bridges = []plan.Bridge{{
			Network: "lan", VNI: 100, Name: "fbr100", Port: "eth1", MTU: 1370,
			VXLANs: []plan.VXLAN{{Name: "fvx100", Kind: plan.ToGateways, Local: netip.MustParseAddr(self), Remotes: addrs(other), UDPPort: 4789, To: "members"}},
		}}
	}
	lan(&pa, "10.255.0.1", "10.255.0.2")
	lan(&pb, "10.255.0.2", "10.255.0.1")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	priv, p := ka, pa
	if strings.HasPrefix(phase, "b-") {
		priv, p = kb, pb
	}
	d, err := newLinux(Config{PrivateKey: priv, WGDevCommand: []string{exe, "wgdev"}, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	switch phase {
	case "a-up", "b-up":
		changes, err := d.Apply(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("changes:\n%s", render(changes))
	case "a-down", "b-down":
		if c, err := d.Apply(ctx, p); err != nil || len(c) != 0 {
			t.Errorf("re-applying the plan = %q, %v; want no changes", c, err)
		}
		if _, err := d.Down(ctx, p); err != nil {
			t.Fatal(err)
		}
		for _, n := range []string{"fed0", "fbr100", "fvx100"} {
			if _, err := netlink.LinkByName(n); err == nil {
				t.Errorf("%s still exists after Down", n)
			}
		}
		if _, err := netlink.LinkByName("eth1"); err != nil {
			t.Errorf("the port eth1 is gone after Down: %v", err)
		}
	default:
		t.Fatalf("unknown phase %q", phase)
	}
}
