package dataplane

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"
	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/fednet/fednet/internal/await"
	"github.com/fednet/fednet/internal/backend"
	"github.com/fednet/fednet/internal/dataplane/nstest"
	"github.com/fednet/fednet/internal/dataplane/wireguard"
	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/wgdev"
)

// The tests below change the kernel. Each runs its body in a fresh network
// namespace with a private /run/wireguard (see package nstest); they skip
// when not root.

// inner reports whether this is the inner run of t; in the outer run it
// creates the namespace, runs t inside it and returns false.
func inner(t *testing.T) bool {
	if nstest.Inner(t) {
		return true
	}
	nstest.New(t).Run(t, envWGDevChild+"=1")
	return false
}

func newPrivateKey(t *testing.T) plan.Key {
	k, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	return plan.Key(k)
}

// testLinux returns a Linux dataplane with key priv, WireGuard mode and
// the test binary as `fednet wgdev`.
func testLinux(t *testing.T, priv plan.Key, mode wireguard.Mode) *linuxDataplane {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	d, err := newLinux(Config{WireGuard: wireguard.Config{PrivateKey: priv, Mode: mode, WGDevCommand: []string{exe, "wgdev"}}, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// newTestLinux is testLinux that takes planA down and leaves no device
// process behind when t ends.
func newTestLinux(t *testing.T, priv plan.Key, mode wireguard.Mode) *linuxDataplane {
	t.Helper()
	d := testLinux(t, priv, mode)
	cleanupLinux(t, d)
	return d
}

// cleanupLinux takes planA down and kills any device process d started
// that is left when t ends.
func cleanupLinux(t *testing.T, d *linuxDataplane) {
	t.Cleanup(func() {
		// Whatever happened, leave no device process behind.
		d.Down(context.Background(), planA())
		for _, pid := range d.startedPids() {
			if !nstest.PidGone(pid, 5*time.Second) {
				t.Errorf("userspace WireGuard process %d still runs after Down; killing it", pid)
				if p, err := os.FindProcess(pid); err == nil {
					p.Kill()
				}
			}
		}
	})
}

// wg returns the dataplane's WireGuard driver.
func (d *linuxDataplane) wg() *wireguard.Driver {
	return d.machines[backend.WireGuard].(*wireguard.Driver)
}

func (d *linuxDataplane) startedPids() []int { return d.wg().Started() }

// kernelHasWireGuard reports whether a kernel WireGuard link can be created
// here (inside the test namespace).
func kernelHasWireGuard(t *testing.T) bool {
	l := &netlink.Wireguard{LinkAttrs: netlink.LinkAttrs{Name: "fn-probe0"}}
	if err := netlink.LinkAdd(l); err != nil {
		t.Logf("kernel WireGuard: %v", err)
		return false
	}
	netlink.LinkDel(l)
	return true
}

// asFake rewrites what differs between a real machine and the fake for the
// same plans: the link kind the machine chose and its key.
func asFake(changes []Change) []Change {
	// The guard of the site's hosts (guard_linux.go) is, like the virtual
	// address, outside the state the fake models; TestLinuxGuard covers it.
	out := slices.DeleteFunc(slices.Clone(changes), func(c Change) bool {
		return strings.HasPrefix(string(c), "nft replace table bridge "+GuardTable) || string(c) == "nft delete table bridge "+GuardTable
	})
	for i, c := range out {
		if rest, ok := strings.CutPrefix(string(c), "fednet wgdev "); ok {
			name, mark, _ := strings.Cut(rest, " ")
			out[i] = Change("ip link add " + name + " type wireguard " + mark)
		}
	}
	return out
}

// stateAsFake reads the machine for p and rewrites what differs from the
// fake: the link kind the machine chose and the key.
func (d *linuxDataplane) stateAsFake(t *testing.T, p plan.Gateway) State {
	t.Helper()
	s, err := d.read(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if ts := s.tunnel("fed0"); ts != nil && ts.Link != nil && ts.Link.Kind == wireguard.KindUserspace {
		ts.Link.Kind = wireguard.KindKernel
	}
	if dev := wgDevice(s); dev != nil && dev.PublicKey == d.wg().PublicKey() {
		dev.PublicKey = FakePublicKey
	}
	return s
}

func sh(t *testing.T, cmdline string) string {
	t.Helper()
	out, err := exec.Command("sh", "-c", cmdline).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v: %s", cmdline, err, out)
	}
	return string(out)
}

func kernelDevice(t *testing.T, name string) *wgtypes.Device {
	t.Helper()
	c, err := wgctrl.New()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	dev, err := c.Device(name)
	if err != nil {
		t.Fatalf("wgctrl device %s: %v", name, err)
	}
	return dev
}

func peerEndpoints(dev *wgtypes.Device) map[plan.Key]string {
	m := map[plan.Key]string{}
	for _, p := range dev.Peers {
		ep := ""
		if p.Endpoint != nil {
			ep = p.Endpoint.String()
		}
		m[plan.Key(p.PublicKey)] = ep
	}
	return m
}

// TestLinuxLifecycle applies plans A, B, C and Down to a real kernel and
// checks each step against the fake and against the kernel's own tools.
func TestLinuxLifecycle(t *testing.T) {
	if !inner(t) {
		return
	}
	lifecycle(t, wireguard.Auto)
}

// TestLinuxLifecycleUserspace is TestLinuxLifecycle with the userspace
// device forced, for machines whose kernel has WireGuard.
func TestLinuxLifecycleUserspace(t *testing.T) {
	if !inner(t) {
		return
	}
	lifecycle(t, wireguard.Userspace)
}

func lifecycle(t *testing.T, mode wireguard.Mode) {
	ctx := context.Background()
	d := newTestLinux(t, newPrivateKey(t), mode)
	f := NewFake()
	// A new namespace may inherit forwarding from the root namespace.
	f.SetState(State{Forwarding: strings.TrimSpace(sh(t, "cat /proc/sys/net/ipv4/ip_forward")) == "1"})

	step := func(name string, p plan.Gateway) []Change { return applyBoth(t, d, f, name, p) }

	// A: everything is created.
	changes := step("A", planA())
	wantLink := "ip link add fed0 type wireguard && ip link set fed0 alias fednet-tunnel:wireguard"
	if mode == wireguard.Userspace || !kernelHasWireGuard(t) {
		wantLink = "fednet wgdev fed0 && ip link set fed0 alias fednet-tunnel:wireguard"
	}
	if !slices.Contains(changes, Change(wantLink)) {
		t.Errorf("changes lack %q:\n%s", wantLink, render(changes))
	}
	link, err := netlink.LinkByName("fed0")
	if err != nil {
		t.Fatal(err)
	}
	if a := link.Attrs(); a.MTU != 1420 || a.Flags&(1<<0) == 0 {
		t.Errorf("fed0 mtu %d flags %v, want 1420 and up", a.MTU, a.Flags)
	}
	if out := sh(t, "ip -o -4 address show dev fed0"); !strings.Contains(out, "inet 10.255.0.1/16") {
		t.Errorf("ip address show dev fed0:\n%s", out)
	}
	dev := kernelDevice(t, "fed0")
	if plan.Key(dev.PublicKey) != d.wg().PublicKey() || dev.ListenPort != 51820 || len(dev.Peers) != 2 {
		t.Errorf("device: key %s port %d peers %d; want key %s port 51820 peers 2", dev.PublicKey, dev.ListenPort, len(dev.Peers), d.wg().PublicKey())
	}
	if got, want := sh(t, "ip route show proto 254"), "10.2.0.0/24 dev fed0 scope link \n10.3.0.0/24 dev fed0 scope link \n"; got != want {
		t.Errorf("ip route show proto 254:\n%swant:\n%s", got, want)
	}
	if got := strings.TrimSpace(sh(t, "cat /proc/sys/net/ipv4/ip_forward")); got != "1" {
		t.Errorf("ip_forward = %s, want 1", got)
	}
	wantFW, err := RenderFirewall(planA().Firewall)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantFW, sh(t, "nft list table inet fednet")); diff != "" {
		t.Errorf("nft list table inet fednet differs from the rendering (-want +got):\n%s", diff)
	}

	// B: c removed, d added, a route added and one deleted, MTU lowered,
	// b's allowed IPs grown.
	step("B", planB())
	dev = kernelDevice(t, "fed0")
	eps := peerEndpoints(dev)
	if _, ok := eps[keyC]; ok || len(eps) != 2 || eps[keyB] != "192.0.2.2:51820" || eps[keyD] != "" {
		t.Errorf("peers after B: %v; want b at 192.0.2.2:51820 and d without endpoint", eps)
	}
	if link, _ := netlink.LinkByName("fed0"); link == nil || link.Attrs().MTU != 1380 {
		t.Errorf("fed0 after B: %v, want MTU 1380", link)
	}
	if got, want := sh(t, "ip route show proto 254"), "10.2.0.0/24 dev fed0 scope link \n10.2.1.0/24 dev fed0 scope link \n10.4.0.0/24 dev fed0 scope link \n"; got != want {
		t.Errorf("ip route show proto 254 after B:\n%swant:\n%s", got, want)
	}

	// d's device learns an endpoint (as from d's packets through a NAT);
	// changing only allowed IPs must keep it, and keep b's.
	c, err := wgctrl.New()
	if err != nil {
		t.Fatal(err)
	}
	learned := netip.MustParseAddrPort("203.0.113.7:40001")
	err = c.ConfigureDevice("fed0", wgtypes.Config{Peers: []wgtypes.PeerConfig{{PublicKey: wgtypes.Key(keyD), UpdateOnly: true, Endpoint: net.UDPAddrFromAddrPort(learned)}}})
	c.Close()
	if err != nil {
		t.Fatal(err)
	}
	p := planB()
	p.Peers[0].AllowedIPs = pfx("10.2.0.0/23", "10.255.0.2/32")
	p.Peers[1].AllowedIPs = pfx("10.4.0.0/24", "10.4.1.0/24", "10.255.0.4/32")
	changes, err = d.Apply(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	want := "wg set fed0 peer " + keyB.String() + " allowed-ips 10.2.0.0/23,10.255.0.2/32\n" +
		"wg set fed0 peer " + keyD.String() + " allowed-ips +10.4.1.0/24\n" // added, the others not replaced
	if got := render(changes); got != want {
		t.Errorf("allowed-IPs-only changes:\n%swant:\n%s", got, want)
	}
	for _, peer := range kernelDevice(t, "fed0").Peers {
		if plan.Key(peer.PublicKey) == keyD {
			var got []netip.Prefix
			for _, a := range peer.AllowedIPs {
				p, _ := netip.AddrFromSlice(a.IP)
				ones, _ := a.Mask.Size()
				got = append(got, netip.PrefixFrom(p.Unmap(), ones))
			}
			slices.SortFunc(got, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
			if w := pfx("10.4.0.0/24", "10.4.1.0/24", "10.255.0.4/32"); !slices.Equal(got, w) {
				t.Errorf("d's allowed IPs in the device after an addition: %v, want %v", peer.AllowedIPs, w)
			}
		}
	}
	eps = peerEndpoints(kernelDevice(t, "fed0"))
	if eps[keyB] != "192.0.2.2:51820" || eps[keyD] != learned.String() {
		t.Errorf("endpoints after an allowed-IPs change: %v; want b 192.0.2.2:51820, d %s", eps, learned)
	}
	mustApply(t, f, p)
	// The fake does not know d's learned endpoint; C removes d anyway.

	// C: address changed, c back, d gone, b moved.
	step("C", planC())
	if out := sh(t, "ip -o -4 address show dev fed0"); !strings.Contains(out, "inet 10.255.0.11/16") || strings.Contains(out, "10.255.0.1/") {
		t.Errorf("ip address show dev fed0 after C:\n%s", out)
	}

	// Down: nothing left, and the userspace device exits by itself.
	changes, err = d.Down(ctx, planC())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := render(changes), "ip link del fed0\nnft delete table inet fednet\n"; got != want {
		t.Errorf("Down changes:\n%swant:\n%s", got, want)
	}
	assertNothingLeft(t, d)
	if changes, err := d.Down(ctx, planC()); err != nil || len(changes) != 0 {
		t.Errorf("second Down = %q, %v; want no changes", changes, err)
	}
}

func assertNothingLeft(t *testing.T, d *linuxDataplane) {
	t.Helper()
	if _, err := netlink.LinkByName("fed0"); err == nil {
		t.Error("fed0 still exists")
	}
	if out := sh(t, "nft list tables"); strings.Contains(out, "fednet") {
		t.Errorf("nft list tables:\n%s", out)
	}
	if out := sh(t, "ip route show proto 254; ip -6 route show proto 254"); out != "" {
		t.Errorf("fednet routes left:\n%s", out)
	}
	assertNoDevices(t, d)
}

// assertNoDevices checks that every userspace device d started exits.
func assertNoDevices(t *testing.T, d *linuxDataplane) {
	t.Helper()
	for _, pid := range d.startedPids() {
		start := time.Now()
		if !nstest.PidGone(pid, 5*time.Second) {
			t.Errorf("userspace WireGuard process %d did not exit within 5s of its interface's deletion", pid)
		} else {
			t.Logf("userspace WireGuard process %d exited %v after Down", pid, time.Since(start).Round(time.Millisecond))
		}
	}
}

// TestLinuxFirewall checks that the table the dataplane builds is the one
// RenderFirewall shows, that its fingerprint reads back, and that replacing
// and deleting work whether or not the table exists.
func TestLinuxFirewall(t *testing.T) {
	if !inner(t) {
		return
	}
	mixed := planA().Firewall
	mixed.Local = pfx("10.1.0.0/23", "fd00:1::/64", "192.0.2.9/32")
	mixed.Remote = pfx("10.9.0.0/16", "fd00:9::/64")
	mixed.Transit = netip.MustParsePrefix("fd00:ffff::/48")
	mixed.Flows = flows("fd00:1::/64", "fd00:2::/64", "0.0.0.0/0", "10.2.0.0/24", "10.1.0.0/16", "10.9.0.128/25")
	mixed.MSS = 0
	mixed.Neighbors = []plan.NeighborRule{{Address: netip.MustParseAddr("10.1.0.10"), Port: 4790}, {Address: netip.MustParseAddr("fd00:1::10"), Port: 4791}}
	mixed.TunnelPorts = []int{4789, 5790}
	mixed.Admit = []plan.Admission{
		{Protocol: backend.TCP, Port: 22, Sources: pfx("203.0.113.64/26", "0.0.0.0/0", "2001:db8::/29")},
		{Protocol: backend.UDP, Port: 161, Sources: pfx("192.0.2.7/32")},
	}
	for _, fw := range []plan.Firewall{planA().Firewall, planB().Firewall, planC().Firewall, mixed} {
		rs := buildRuleset(fw)
		fp := rs.fingerprint()
		if err := replaceTable(rs, fp); err != nil {
			t.Fatal(err)
		}
		want, err := RenderFirewall(fw)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, sh(t, "nft list table inet fednet")); diff != "" {
			t.Errorf("nft list table differs from the rendering (-want +got):\n%s", diff)
		}
		ts, err := readTable("fednet")
		if err != nil || ts == nil || ts.Fingerprint != fp {
			t.Errorf("readTable = %+v, %v; want fingerprint %s", ts, err, fp)
		}
	}
	if err := deleteTable("fednet"); err != nil {
		t.Fatal(err)
	}
	if ts, err := readTable("fednet"); ts != nil || err != nil {
		t.Errorf("readTable after delete = %+v, %v", ts, err)
	}
	if err := deleteTable("fednet"); err != nil {
		t.Errorf("deleting a missing table: %v", err)
	}
	// A table of that name not built by fednet has no fingerprint: it is
	// not fednet's (TestLinuxLeavesForeignObjects).
	sh(t, "nft add table inet fednet; nft add chain inet fednet input")
	if ts, err := readTable("fednet"); err != nil || ts == nil || ts.Fingerprint != "" || ts.Owned() {
		t.Errorf("readTable of a foreign table = %+v, %v; want no fingerprint", ts, err)
	}
	deleteTable("fednet")
	// Several tunnels, and the public ports of other backends.
	multi := planA().Firewall
	multi.Tunnels = []string{"fed0", "fed1"}
	multi.Public = []backend.Port{{Protocol: backend.UDP, Port: 51820}, {Protocol: backend.TCP, Port: 443}, {Protocol: backend.ESP}}
	multi.TunnelPorts = []int{4789}
	rs := buildRuleset(multi)
	if err := replaceTable(rs, rs.fingerprint()); err != nil {
		t.Fatal(err)
	}
	want, err := RenderFirewall(multi)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, sh(t, "nft list table inet fednet")); diff != "" {
		t.Errorf("nft list table of two tunnels differs from the rendering (-want +got):\n%s", diff)
	}
	deleteTable("fednet")
}

// TestLinuxReplacesOrphanTUN: fednet's TUN interface (marked) with no
// WireGuard device behind it (its userspace process is gone) is deleted
// and the device started again.
func TestLinuxReplacesOrphanTUN(t *testing.T) {
	if !inner(t) {
		return
	}
	sh(t, "ip tuntap add fed0 mode tun && ip link set fed0 alias fednet-tunnel:wireguard")
	d := newTestLinux(t, newPrivateKey(t), wireguard.Userspace)
	changes, err := d.Apply(context.Background(), planA())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(changes, "ip link del fed0") || !slices.Contains(changes, "fednet wgdev fed0 && ip link set fed0 alias fednet-tunnel:wireguard") {
		t.Errorf("changes lack the recreation:\n%s", render(changes))
	}
	if dev := kernelDevice(t, "fed0"); len(dev.Peers) != 2 {
		t.Errorf("device has %d peers, want 2", len(dev.Peers))
	}
	if _, err := d.Down(context.Background(), planA()); err != nil {
		t.Fatal(err)
	}
	assertNothingLeft(t, d)
}

// TestLinuxKernelModeWithoutKernelWireGuard: Kernel mode on a kernel without
// WireGuard fails clearly, applies what does not need the interface and
// leaves no interface.
func TestLinuxKernelModeWithoutKernelWireGuard(t *testing.T) {
	if !inner(t) {
		return
	}
	if kernelHasWireGuard(t) {
		t.Skip("this kernel has WireGuard")
	}
	d := newTestLinux(t, newPrivateKey(t), wireguard.Kernel)
	changes, err := d.Apply(context.Background(), planA())
	if err == nil || !strings.Contains(err.Error(), "creating WireGuard interface fed0") {
		t.Errorf("Apply = %v, want an error about creating fed0", err)
	}
	t.Logf("Apply error: %v", err)
	if got := render(changes); !strings.HasPrefix(got, "nft replace table") || !strings.HasSuffix(got, "sysctl -w net.ipv4.ip_forward=1\n") || len(changes) != 2 {
		t.Errorf("changes:\n%swant the firewall and forwarding only", got)
	}
	if _, err := netlink.LinkByName("fed0"); err == nil {
		t.Error("fed0 exists")
	}
	if _, err := d.Down(context.Background(), planA()); err != nil {
		t.Fatal(err)
	}
}

func TestNewLinuxConfig(t *testing.T) {
	if _, err := NewLinux(Config{WireGuard: wireguard.Config{PrivateKey: plan.Key{1}, Mode: wireguard.Mode(7)}}); err == nil {
		t.Error("NewLinux with mode 7 = nil error")
	}
	if _, err := NewLinux(Config{}); err != nil {
		t.Errorf("NewLinux without a private key (for Down) = %v", err)
	}
}

// Two gateways, each in its own namespace, joined by a veth: each applies
// its plan with the other as peer, and a ping between their transit
// addresses goes through the tunnel. Phases run in turn:
//
//	b-up    (in B) apply b's plan and exit: b's device outlives its agent
//	a-ping  (in A) apply a's plan, ping b's transit address, Down
//	b-down  (in B) re-apply b's plan (a restarted agent: no changes), Down
func TestLinuxTwoGateways(t *testing.T) {
	if nstest.Inner(t) {
		twoGatewaysPhase(t, nstest.Phase())
		return
	}
	a, b := nstest.New(t), nstest.New(t)
	b.WireGuardDir = t.TempDir()
	joinNamespaces(t, a, "veth-a", "192.168.77.1/24", b, "veth-b", "192.168.77.2/24")
	ka, kb := newPrivateKey(t), newPrivateKey(t)
	// a's public key sorts first, so a starts the handshake by itself.
	pubA, pubB := wgtypes.Key(ka).PublicKey(), wgtypes.Key(kb).PublicKey()
	if bytes.Compare(pubA[:], pubB[:]) > 0 {
		ka, kb = kb, ka
	}
	// Both devices log their handshakes, for the failure message.
	env := append(keyEnv(ka, kb), wgdev.VerboseEnv+"=1")
	t.Cleanup(func() {
		if t.Failed() {
			logTail(t, "b's userspace WireGuard", filepath.Join(b.WireGuardDir, "fed0.log"))
		}
	})
	b.RunPhase(t, "b-up", env...)
	a.RunPhase(t, "a-ping", env...)
	b.RunPhase(t, "b-down", env...)
}

func twoGatewaysPhase(t *testing.T, phase string) {
	ka, kb := keysFromEnv(t)
	pa, pb := twoGatewayPlans(ka, kb)
	ctx := context.Background()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dp := func(priv plan.Key) *linuxDataplane {
		d, err := newLinux(Config{WireGuard: wireguard.Config{PrivateKey: priv, WGDevCommand: []string{exe, "wgdev"}}, Logf: t.Logf})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	switch phase {
	case "b-up":
		d := dp(kb)
		if _, err := d.Apply(ctx, pb); err != nil {
			t.Fatal(err)
		}
		t.Logf("b is up; its device (pids %v) stays when this process exits", d.startedPids())
	case "a-ping":
		d := newTestLinux(t, ka, wireguard.Auto)
		if _, err := d.Apply(ctx, pa); err != nil {
			t.Fatal(err)
		}
		// Without any traffic, the lower key (a) initiates the handshake
		// of the new link. It normally completes in one round trip;
		// the wait covers WireGuard's retries (5 s apart) on a machine
		// busy enough to lose the first two.
		err := await.Poll(20*time.Second, await.NoError(func() error {
			for _, p := range kernelDevice(t, "fed0").Peers {
				if p.LastHandshakeTime.IsZero() {
					return fmt.Errorf("no handshake with %s yet", p.PublicKey)
				}
			}
			return nil
		}))
		if err != nil {
			logTail(t, "a's userspace WireGuard", "/run/wireguard/fed0.log")
			t.Fatalf("a did not start the handshake by itself: %v", err)
		}
		var out []byte
		err = await.Poll(15*time.Second, await.NoError(func() error {
			var err error
			out, err = exec.Command("ping", "-c", "1", "-W", "1", "10.255.0.2").CombinedOutput()
			return err
		}))
		if err != nil {
			t.Fatalf("ping 10.255.0.2 through the tunnel: %v\n%s", err, out)
		}
		t.Logf("ping through the tunnel:\n%s", out)
		for _, p := range kernelDevice(t, "fed0").Peers {
			if p.LastHandshakeTime.IsZero() {
				t.Errorf("peer %s has no handshake", p.PublicKey)
			}
		}
		// The driver reports the link established, with its figures.
		links, err := d.Status(ctx, pa)
		if err != nil || len(links) != 1 || links[0].Peer != "b" || !links[0].Established || links[0].LastHandshake.IsZero() ||
			links[0].RxBytes == 0 || links[0].TxBytes == 0 || links[0].Endpoint != "192.168.77.2:51820" {
			t.Errorf("Status = %+v, %v; want the link to b established, with a handshake, bytes both ways and b's endpoint", links, err)
		}
		if _, err := d.Down(ctx, pa); err != nil {
			t.Fatal(err)
		}
		assertNothingLeft(t, d)
	case "b-down":
		d := dp(kb)
		changes, err := d.Apply(ctx, pb)
		if err != nil || len(changes) != 0 {
			t.Errorf("re-applying b's plan after an agent restart = %q, %v; want no changes", changes, err)
		}
		if _, err := d.Down(ctx, pb); err != nil {
			t.Fatal(err)
		}
		if _, err := netlink.LinkByName("fed0"); err == nil {
			t.Error("fed0 still exists")
		}
	default:
		t.Fatalf("unknown phase %q", phase)
	}
}

func twoGatewayPlans(ka, kb plan.Key) (plan.Gateway, plan.Gateway) {
	mk := func(self, peer string, priv plan.Key, peerPub plan.Key, n int) plan.Gateway {
		other := 3 - n
		return plan.Gateway{
			Federation: "demo", Name: self, Site: "site-" + self,
			Tunnels: []plan.Tunnel{{Backend: backend.WireGuard, Name: "fed0", ListenPort: 51820, Address: netip.MustParsePrefix(fmt.Sprintf("10.255.0.%d/16", n)), MTU: 1420}},
			Peers: []plan.Peer{{
				Gateway: peer, Site: "site-" + peer, Backend: backend.WireGuard, WireGuard: plan.WireGuardPeer{PublicKey: peerPub},
				Endpoint:   fmt.Sprintf("192.168.77.%d:51820", other),
				AllowedIPs: pfx(fmt.Sprintf("10.%d.0.0/24", other), fmt.Sprintf("10.255.0.%d/32", other)),
			}},
			Routes:     routes(fmt.Sprintf("10.%d.0.0/24", other)),
			Forwarding: true,
			Firewall: plan.Firewall{
				Table: "fednet", Tunnels: []string{"fed0"}, Public: []backend.Port{{Protocol: backend.UDP, Port: 51820}},
				Local:   pfx(fmt.Sprintf("10.%d.0.0/24", n)),
				Transit: netip.MustParsePrefix("10.255.0.0/16"),
				Flows:   flows(fmt.Sprintf("10.%d.0.0/24", n), fmt.Sprintf("10.%d.0.0/24", other)),
				MSS:     1380,
			},
			Bounds: planA().Bounds,
		}
	}
	pubA := plan.Key(wgtypes.Key(ka).PublicKey())
	pubB := plan.Key(wgtypes.Key(kb).PublicKey())
	return mk("a", "b", ka, pubB, 1), mk("b", "a", kb, pubA, 2)
}

// TestLinuxReplacesHungDevice: a userspace device that stops answering (here
// stopped with SIGSTOP) does not hang Apply; it is killed and replaced.
func TestLinuxReplacesHungDevice(t *testing.T) {
	if !inner(t) {
		return
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	d, err := newLinux(Config{WireGuard: wireguard.Config{PrivateKey: newPrivateKey(t), Mode: wireguard.Userspace,
		WGDevCommand: []string{exe, "wgdev"}, Timeout: time.Second}, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	cleanupLinux(t, d)
	mustApply(t, d, planA())
	old := d.startedPids()
	if len(old) != 1 {
		t.Fatalf("started pids %v, want one", old)
	}
	if err := syscall.Kill(old[0], syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	err = await.Poll(5*time.Second, await.NoError(func() error {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", old[0]))
		if err != nil {
			return err
		}
		if s := string(b); !strings.Contains(s[strings.LastIndexByte(s, ')'):], ") T ") {
			return fmt.Errorf("process %d is not stopped: %s", old[0], s)
		}
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	changes := mustApply(t, d, planA())
	t.Logf("Apply with a hung device took %v:\n%s", time.Since(start).Round(time.Millisecond), render(changes))
	if !slices.Contains(changes, "ip link del fed0") || !slices.Contains(changes, "fednet wgdev fed0 && ip link set fed0 alias fednet-tunnel:wireguard") {
		t.Errorf("changes lack the recreation:\n%s", render(changes))
	}
	if !nstest.PidGone(old[0], 5*time.Second) {
		t.Errorf("hung device %d still exists", old[0])
	}
	if dev := kernelDevice(t, "fed0"); len(dev.Peers) != 2 {
		t.Errorf("new device has %d peers, want 2", len(dev.Peers))
	}
	if c := mustApply(t, d, planA()); len(c) != 0 {
		t.Errorf("Apply after the replacement made changes:\n%s", render(c))
	}
	if _, err := d.Down(context.Background(), planA()); err != nil {
		t.Fatal(err)
	}
	assertNothingLeft(t, d)
}

// joinNamespaces joins namespaces a and b with a veth, ifA with address
// addrA in a and ifB with addrB in b, both up.
func joinNamespaces(t *testing.T, a *nstest.Netns, ifA, addrA string, b *nstest.Netns, ifB, addrB string) {
	t.Helper()
	a.Exec(t, "ip", "link", "add", ifA, "type", "veth", "peer", "name", ifB, "netns", b.Name)
	for _, x := range []struct {
		ns        *nstest.Netns
		dev, addr string
	}{{a, ifA, addrA}, {b, ifB, addrB}} {
		x.ns.Exec(t, "ip", "address", "add", x.addr, "dev", x.dev)
		x.ns.Exec(t, "ip", "link", "set", x.dev, "up")
	}
}

// keyEnv passes two gateways' private keys to the inner test runs.
func keyEnv(ka, kb plan.Key) []string {
	return []string{envWGDevChild + "=1", "FEDNET_TEST_KEY_A=" + ka.String(), "FEDNET_TEST_KEY_B=" + kb.String()}
}

// keysFromEnv reads the keys keyEnv passed.
func keysFromEnv(t *testing.T) (ka, kb plan.Key) {
	t.Helper()
	ka, err := plan.ParseKey(os.Getenv("FEDNET_TEST_KEY_A"))
	if err != nil {
		t.Fatal(err)
	}
	kb, err = plan.ParseKey(os.Getenv("FEDNET_TEST_KEY_B"))
	if err != nil {
		t.Fatal(err)
	}
	return ka, kb
}

// logTail logs the last lines of a file a failed test wants seen (a
// userspace WireGuard's log), or why it cannot.
func logTail(t *testing.T, what, path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Logf("%s: %v", what, err)
		return
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	t.Logf("%s (%s), last lines:\n%s", what, path, strings.Join(lines, "\n"))
}
