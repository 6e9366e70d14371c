package dataplane

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"

	"github.com/fednet/fednet/internal/await"
	"github.com/fednet/fednet/internal/dataplane/nstest"
	"github.com/fednet/fednet/internal/dataplane/wireguard"
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
	d := newTestLinux(t, newPrivateKey(t), wireguard.Auto)
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
	want := "bridge fdb append 00:00:00:00:00:00 dev fvx100 dst 10.255.0.4\n" +
		"bridge fdb del 00:00:00:00:00:00 dev fvx100 dst 10.255.0.3\n"
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
	if got, want := render(changes), "nft delete table bridge fednet-guard\nip link del fvx100\nip link del fbr100\nip link del fed0\nnft delete table inet fednet\n"; got != want {
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
	if diff := cmp.Diff(f.State().String(), d.stateAsFake(t, p).String()); diff != "" {
		t.Errorf("after Apply(%s) the kernel state differs from the fake's (-fake +kernel):\n%s", name, diff)
	}
	if again, err := d.Apply(ctx, p); err != nil || len(again) != 0 {
		t.Errorf("Apply(%s) again = %q, %v; want no changes", name, again, err)
	}
	return got
}

// TestLinuxBridgeForeignName: a plan naming as its bridge an interface
// that is not fednet's is refused whole: nothing is created, the bridge is
// neither used nor deleted, by Apply or Down.
func TestLinuxBridgeForeignName(t *testing.T) {
	if !inner(t) {
		return
	}
	sh(t, "ip link add fbr100 type bridge && ip link add eth1 type veth peer name eth1p")
	d := newTestLinux(t, newPrivateKey(t), wireguard.Auto)
	changes, err := d.Apply(context.Background(), bridged())
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "bridges[0].name fbr100: interface exists and is not fednet's") || len(changes) != 0 {
		t.Errorf("Apply = %q, %v; want a refusal naming fbr100", changes, err)
	}
	if _, err := netlink.LinkByName("fed0"); err == nil {
		t.Error("a refused plan created fed0")
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
	a, b, ha, _ := bridgedPair(t)
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

// bridgedPair makes two gateway namespaces joined by a veth (192.168.77.1
// and .2) and a host behind each on the bridged network's port eth1 (host
// A 192.168.50.1, MAC 02:00:00:00:50:01; host B .2, :02).
func bridgedPair(t *testing.T) (a, b, ha, hb *nstest.Netns) {
	t.Helper()
	a, b, ha, hb = nstest.New(t), nstest.New(t), nstest.New(t), nstest.New(t)
	b.WireGuardDir = t.TempDir()
	a.WireGuardDir = t.TempDir()
	joinNamespaces(t, a, "veth-a", "192.168.77.1/24", b, "veth-b", "192.168.77.2/24")
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
	return a, b, ha, hb
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
	d, p := phaseDataplane(t, phase, ka, kb, pa, pb)
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

// TestLinuxNeighborLifecycle applies every step of neighborPlans to a real
// kernel in a fresh namespace, checking each against the fake: the
// neighbor devices share the network's VNI with the bridge's VXLAN device
// on ports of their own, and are enslaved to the bridge. Down deletes them.
func TestLinuxNeighborLifecycle(t *testing.T) {
	if !inner(t) {
		return
	}
	sh(t, "ip link add eth1 type veth peer name eth1p && ip link set eth1 up && ip link set eth1p up")
	d := newTestLinux(t, newPrivateKey(t), wireguard.Auto)
	f := NewFake()
	f.SetState(State{Forwarding: strings.TrimSpace(sh(t, "cat /proc/sys/net/ipv4/ip_forward")) == "1"})

	applyBoth(t, d, f, "1-add", withNeighbors())
	br, err := netlink.LinkByName("fbr100")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []struct {
		name, remote string
		port         int
	}{{"fnb0", "10.1.0.10", 4790}, {"fnb3", "10.1.0.11", 4793}} {
		l, err := netlink.LinkByName(want.name)
		if err != nil {
			t.Fatal(err)
		}
		v, ok := l.(*netlink.Vxlan)
		if !ok || v.VxlanId != 100 || v.Port != want.port || v.Group != nil || v.SrcAddr.String() != "10.1.0.254" ||
			v.MTU != 1370 || v.MasterIndex != br.Attrs().Index || v.Flags&1 == 0 {
			t.Errorf("%s = %+v, want VXLAN id 100 local 10.1.0.254 dstport %d mtu 1370, no default remote, up, in fbr100", want.name, l, want.port)
		}
		// The host is a flood entry, as the gateways are on fvx100.
		if fdb := sh(t, "bridge fdb show dev "+want.name); !strings.Contains(fdb, "00:00:00:00:00:00 dst "+want.remote+" self permanent") {
			t.Errorf("bridge fdb show dev %s lacks the flood entry to %s:\n%s", want.name, want.remote, fdb)
		}
	}
	// The reason for a port per host: the kernel refuses a second device
	// with the VNI on a port already used for it.
	if out, err := exec.Command("sh", "-c", "ip link add fnbx type vxlan id 100 local 10.1.0.254 remote 10.1.0.12 dstport 4790").CombinedOutput(); err == nil ||
		!strings.Contains(string(out), "already exists") {
		t.Errorf("a second VXLAN device with VNI 100 on port 4790: %v %s; want refused", err, out)
	}

	for _, name := range sortedKeys(neighborPlans)[1:] {
		applyBoth(t, d, f, name, neighborPlans[name]())
	}
	applyBoth(t, d, f, "1-add again", withNeighbors())
	// A device of the fednet before one L2 model (alias fednet-neighbor:,
	// a default remote) is replaced by one of this model.
	sh(t, "ip link del fnb0 && ip link add fnb0 mtu 1370 type vxlan id 100 local 10.1.0.254 remote 10.1.0.10 dstport 4790 && "+
		"ip link set fnb0 alias fednet-neighbor:lan/web1 && ip link set fnb0 master fbr100 && ip link set fnb0 up")
	if got := render(mustApply(t, d, withNeighbors())); !strings.HasPrefix(got, "ip link del fnb0\nip link add fnb0 mtu 1370 type vxlan id 100 local 10.1.0.254 dstport 4790 && ip link set fnb0 alias fednet:lan\n") {
		t.Errorf("Apply over an old neighbor device:\n%s", got)
	}
	if diff := cmp.Diff(f.State().String(), d.stateAsFake(t, withNeighbors()).String()); diff != "" {
		t.Errorf("after replacing the old device the kernel differs from the fake (-fake +kernel):\n%s", diff)
	}
	// A device deleted behind fednet's back is recreated by the next Apply.
	sh(t, "ip link del fnb3")
	if got := render(mustApply(t, d, withNeighbors())); !strings.Contains(got, "ip link add fnb3") {
		t.Errorf("Apply after fnb3 was deleted:\n%s", got)
	}
	changes, err := d.Down(context.Background(), withNeighbors())
	if err != nil {
		t.Fatal(err)
	}
	if got := render(changes); !strings.HasPrefix(got, "nft delete table bridge fednet-guard\nip link del fnb0\nip link del fnb3\nip link del fvx100\n") {
		t.Errorf("Down changes:\n%s", got)
	}
	assertNothingLeft(t, d)
}

// TestLinuxNeighborTunnel: a host and its gateway, each in a namespace,
// on one LAN (a veth). The gateway applies a plan with a neighbor tunnel
// to the host (a VXLAN port with a flood entry to the host, no default
// remote) and gives its bridge an address; the host sets up its end
// (ApplyHost, a flood entry to the gateway); a ping from the host's
// address on the bridged network to the bridge's crosses the tunnel both
// ways.
//
//	gateway       (in G) apply the plan, address the bridge
//	host          (in H) ApplyHost, ping the bridge, RemoveHost
//	gateway-down  (in G) Down
func TestLinuxNeighborTunnel(t *testing.T) {
	if nstest.Inner(t) {
		neighborPhase(t, nstest.Phase())
		return
	}
	g, h := nstest.New(t), nstest.New(t)
	g.WireGuardDir = t.TempDir()
	joinNamespaces(t, g, "lan0", "10.1.0.254/24", h, "eth0", "10.1.0.10/24")
	env := []string{envWGDevChild + "=1", "FEDNET_TEST_KEY_A=" + newPrivateKey(t).String()}
	g.RunPhase(t, "gateway", env...)
	h.RunPhase(t, "host", env...)
	g.RunPhase(t, "gateway-down", env...)
}

func neighborPhase(t *testing.T, phase string) {
	ctx := context.Background()
	p := withNeighbors()
	p.Bridges[0].Port = ""
	p.Bridges[0].VXLANs = slices.DeleteFunc(p.Bridges[0].VXLANs, func(v plan.VXLAN) bool { return v.Name == "fnb3" })
	p.Firewall.Neighbors = p.Firewall.Neighbors[:1]
	key, err := plan.ParseKey(os.Getenv("FEDNET_TEST_KEY_A"))
	if err != nil {
		t.Fatal(err)
	}
	switch phase {
	case "gateway":
		d := testLinux(t, key, wireguard.Auto)
		if _, err := d.Apply(ctx, p); err != nil {
			t.Fatal(err)
		}
		sh(t, "ip address add 192.168.50.1/24 dev fbr100")
	case "host":
		ht := hostTunnel()
		changes, err := ApplyHost(ctx, ht, netip.MustParsePrefix("192.168.50.40/24"))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("host changes:\n%s", render(changes))
		var out []byte
		err = await.Poll(15*time.Second, await.NoError(func() error {
			var err error
			out, err = exec.Command("ping", "-c", "1", "-W", "1", "192.168.50.1").CombinedOutput()
			return err
		}))
		if err != nil {
			t.Fatalf("ping through the neighbor tunnel: %v\n%s", err, out)
		}
		t.Logf("ping through the neighbor tunnel:\n%s", out)
		if _, err := RemoveHost(ht.Device); err != nil {
			t.Fatal(err)
		}
	case "gateway-down":
		d := testLinux(t, key, wireguard.Auto)
		if _, err := d.Down(ctx, p); err != nil {
			t.Fatal(err)
		}
		assertNothingLeft(t, d)
	default:
		t.Fatalf("unknown phase %q", phase)
	}
}

// TestLinuxBridgeShapeSwitch: a bridged network's two gateways move from a
// relay tree's port (fvx100-1, its own UDP port) to the full mesh's
// (fvx100, 4789) one after the other, as the gateways of a federation apply
// a way back tens of milliseconds apart, with host A pinging host B every
// 10 ms. Both first make the mesh's port ahead, flooding at once, with the
// shapes kept apart (SeparateShapes) and the tree's port learning nothing
// (the agent's lead): with both gateways flooding through both shapes, a
// broadcast from host A reaches host B a bounded number of times (without
// the separation it would go round: b takes it from the mesh into the
// tree, a from the tree into the mesh). Then a switches (its tree port
// goes), then b, and the pings flow at every step. Then b drains
// (plan.Bridge.Drain): its port loses its flood entries but keeps what it
// learned, and the pings still flow.
//
//	a-tree, b-tree  the tree's port on both
//	a-lead, b-lead  + the mesh's port, flooding; shapes apart; no loop
//	a-mesh          a in the mesh shape; pings must flow (b not switched)
//	b-mesh          both in the mesh shape; pings must flow
//	b-drain         b's bridge draining; pings must flow, b's port keeps
//	                host A's MAC and has no flood entry
//	a-down, b-down  Down
func TestLinuxBridgeShapeSwitch(t *testing.T) {
	if nstest.Inner(t) {
		shapePhase(t, nstest.Phase())
		return
	}
	a, b, ha, hb := bridgedPair(t)
	ka, kb := newPrivateKey(t), newPrivateKey(t)
	env := keyEnv(ka, kb)
	b.RunPhase(t, "b-tree", env...)
	a.RunPhase(t, "a-tree", env...)
	if err := await.Poll(20*time.Second, await.NoError(func() error { return pingOnce(ha, "192.168.50.2") })); err != nil {
		t.Fatalf("host A does not reach host B through the tree's port: %v", err)
	}
	ping := nstest.StartPing(t, ha.Name, "192.168.50.2", 10*time.Millisecond)
	// flowing waits until host A got 20 answers after the step began.
	flowing := func(step string, since time.Time) {
		t.Helper()
		if err := await.Poll(10*time.Second, func() (bool, string) { return nstest.After(ping.Replies(), since) >= 20, "too few answers" }); err != nil {
			t.Fatalf("%s: host A's pings to host B got %d answers in 10 s: frames do not flow\n%s\na:\n%s\nb:\n%s", step,
				nstest.After(ping.Replies(), since), tail(ping.Output(), 600),
				a.Exec(t, "bridge", "fdb", "show", "br", "fbr100"), b.Exec(t, "bridge", "fdb", "show", "br", "fbr100"))
		}
	}
	for _, step := range []struct {
		ns    *nstest.Netns
		phase string
	}{{a, "a-lead"}, {b, "b-lead"}, {a, "a-mesh"}, {b, "b-mesh"}, {b, "b-drain"}} {
		since := time.Now()
		step.ns.RunPhase(t, step.phase, env...)
		flowing(step.phase, since)
		var rs []nstest.Reply
		for _, r := range ping.Replies() {
			if r.At.After(since) {
				rs = append(rs, r)
			}
		}
		t.Logf("%s: %d pings lost, longest gap %v", step.phase, nstest.Lost(rs), nstest.LongestGap(rs))
		if step.phase == "b-lead" {
			noLoop(t, ha, hb)
			// The tree's port forgot what the bridge had learned behind
			// it, and neither shape's port learns: every frame to a host
			// behind the other gateway floods through both shapes (a
			// relay that learned a host behind the mesh's port would
			// send the tree's frames to it there, where the separation
			// drops them).
			for _, gw := range []*nstest.Netns{a, b} {
				for _, dev := range []string{"fvx100-1", "fvx100"} {
					if l := learned(t, gw, dev); len(l) > 0 {
						t.Errorf("%s: during the lead the bridge has entries behind %s: %s", gw.Name, dev, strings.Join(l, "; "))
					}
				}
			}
		}
		if step.phase == "b-mesh" {
			// The switch turned learning on behind the mesh's port.
			if err := await.Poll(5*time.Second, func() (bool, string) {
				l := learned(t, b, "fvx100")
				return slices.ContainsFunc(l, func(e string) bool { return strings.HasPrefix(e, "02:00:00:00:50:01 ") }),
					fmt.Sprintf("b's bridge learned %q behind fvx100, not host A", l)
			}); err != nil {
				t.Error(err)
			}
		}
	}
	fdb := b.Exec(t, "bridge", "fdb", "show", "dev", "fvx100")
	if strings.Contains(fdb, "00:00:00:00:00:00") {
		t.Errorf("b's draining port still floods:\n%s", fdb)
	}
	if !strings.Contains(fdb, "02:00:00:00:50:01 dst 10.255.0.1") {
		t.Errorf("b's draining port forgot host A's MAC behind a:\n%s", fdb)
	}
	ping.Stop()
	rs := ping.Replies()
	t.Logf("%d answers, %d pings lost between the first and the last, longest gap %v", len(rs), nstest.Lost(rs), nstest.LongestGap(rs))
	a.RunPhase(t, "a-down", env...)
	b.RunPhase(t, "b-down", env...)
}

// learned returns the entries gw's bridge fbr100 learned behind its port
// dev ("MAC master fbr100 ...", permanent ones left out).
func learned(t *testing.T, gw *nstest.Netns, dev string) []string {
	t.Helper()
	var out []string
	for _, line := range strings.Split(gw.Exec(t, "bridge", "fdb", "show", "dev", dev), "\n") {
		if strings.Contains(line, "master fbr100") && !strings.Contains(line, "permanent") {
			out = append(out, strings.TrimSpace(line))
		}
	}
	return out
}

func shapePhase(t *testing.T, phase string) {
	ka, kb := keysFromEnv(t)
	pa, pb := twoGatewayPlans(ka, kb)
	tree := plan.RelayPortBase + 1
	port := func(name string, udp int, self, other string) plan.VXLAN {
		return plan.VXLAN{Name: name, Kind: plan.ToGateways, Local: netip.MustParseAddr(self), Remotes: addrs(other), UDPPort: udp, To: "members"}
	}
	shape := func(p *plan.Gateway, self, other string, which string) {
		b := plan.Bridge{Network: "lan", VNI: 100, Name: "fbr100", Port: "eth1", MTU: 1370}
		switch which {
		case "tree":
			b.VXLANs = []plan.VXLAN{port("fvx100-1", tree, self, other)}
		case "lead":
			// The agent's lead: the bridge learns behind neither shape.
			b.VXLANs = []plan.VXLAN{port("fvx100", plan.VXLANPort, self, other), port("fvx100-1", tree, self, other)}
			b.VXLANs[0].NoLearning, b.VXLANs[1].NoLearning = true, true
		case "mesh", "drain", "down":
			b.VXLANs = []plan.VXLAN{port("fvx100", plan.VXLANPort, self, other)}
			b.Drain = which == "drain"
		}
		p.Bridges = []plan.Bridge{b}
		p.Firewall.TunnelPorts = []int{}
		for _, v := range b.VXLANs {
			p.Firewall.TunnelPorts = append(p.Firewall.TunnelPorts, v.UDPPort)
		}
		slices.Sort(p.Firewall.TunnelPorts)
	}
	_, which, _ := strings.Cut(phase, "-")
	shape(&pa, "10.255.0.1", "10.255.0.2", which)
	shape(&pb, "10.255.0.2", "10.255.0.1", which)
	d, p := phaseDataplane(t, phase, ka, kb, pa, pb)
	ctx := context.Background()
	switch which {
	case "tree", "lead", "mesh", "drain":
		if which == "lead" {
			// The agent's lead: the shapes kept apart, the tree's port
			// learning nothing, before the mesh's port floods.
			if err := SeparateShapes([]Shapes{{Mesh: "fvx100", TreePrefix: "fvx100-"}}); err != nil {
				t.Fatal(err)
			}
			if err := errors.Join(SetPortLearning("fvx100-1", false), ForgetPort("fvx100-1")); err != nil {
				t.Fatal(err)
			}
		}
		changes, err := d.Apply(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("changes:\n%s", render(changes))
		if which == "mesh" {
			if _, err := netlink.LinkByName("fvx100-1"); err == nil {
				t.Errorf("the tree's port fvx100-1 is still there in the mesh shape")
			}
			if err := SeparateShapes(nil); err != nil {
				t.Fatal(err)
			}
			if out := sh(t, "nft list tables"); strings.Contains(out, ShapeTable) {
				t.Errorf("the separation is still there after SeparateShapes(nil):\n%s", out)
			}
			// Again, with no table left (an agent starting, Down): no error.
			if err := SeparateShapes(nil); err != nil {
				t.Errorf("SeparateShapes(nil) without a table: %v", err)
			}
		}
	case "down":
		if _, err := d.Down(ctx, p); err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatalf("unknown phase %q", phase)
	}
}

// noLoop sends one broadcast from host ha and checks, for a second, that
// host hb receives a bounded number of packets: a broadcast going round
// between two gateways arrives again and again.
func noLoop(t *testing.T, ha, hb *nstest.Netns) {
	t.Helper()
	rx := func() int {
		n, err := strconv.Atoi(strings.TrimSpace(hb.Exec(t, "cat", "/sys/class/net/eth0/statistics/rx_packets")))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := rx()
	// A broadcast ping: every bridge floods it through every port.
	_ = exec.Command("ip", "netns", "exec", ha.Name, "ping", "-b", "-c", "1", "-W", "1", "192.168.50.255").Run()
	await.Holds(t, time.Second, 50*time.Millisecond, func() (bool, string) {
		got := rx() - before
		return got < 500, fmt.Sprintf("host B received %d packets after one broadcast: a loop", got)
	})
}
