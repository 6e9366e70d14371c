package dataplane

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
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
	"github.com/fednet/fednet/internal/dataplane/wireguard"
)

// TestLinuxLeavesForeignObjects: on a machine with an uplink holding the
// default route (uplink0), a LAN port (eth1), another WireGuard interface
// (wgvpn: a userspace device with its own key, address and peer), TUN
// devices named fed0 and fed9 without fednet's mark, and the operator's
// nftables table inet filter with an ssh rule, every plan of `malicious`
// is refused by Apply and changes nothing, nor does Down of it, and so is
// an honest plan whose tunnel is fed0; a good plan (tunnel fed1) applies
// beside them without touching them, and Down leaves the machine as it
// was.
func TestLinuxLeavesForeignObjects(t *testing.T) {
	if !inner(t) {
		return
	}
	sh(t, "ip link add uplink0 type veth peer name uplink0p && ip address add 192.0.2.10/24 dev uplink0 && "+
		"ip link set uplink0 up && ip link set uplink0p up && ip route add default via 192.0.2.1")
	sh(t, "ip link add eth1 type veth peer name eth1p && ip link set eth1 up && ip link set eth1p up")
	sh(t, "ip tuntap add fed0 mode tun && ip tuntap add fed9 mode tun")
	sh(t, `nft add table inet filter && nft add chain inet filter input '{ type filter hook input priority 0; policy accept; }' && `+
		`nft add rule inet filter input tcp dport 22 accept`)
	startForeignWireGuard(t, "wgvpn")

	ctx := context.Background()
	before := snapshot(t, nil)
	t.Logf("the machine:\n%s", before)
	d := newTestLinux(t, newPrivateKey(t), wireguard.Auto)
	var names []string
	for n := range malicious {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, name := range names {
		tc := malicious[name]
		p := planA()
		tc.edit(&p)
		changes, err := d.Apply(ctx, p)
		if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.want) || len(changes) != 0 {
			t.Errorf("%s: Apply = %q, %v; want a refusal containing %q", name, changes, err, tc.want)
		}
		if changes, _ := d.Down(ctx, p); len(changes) != 0 {
			t.Errorf("%s: Down changed %q", name, changes)
		}
		if diff := cmp.Diff(before, snapshot(t, nil)); diff != "" {
			t.Errorf("%s changed the machine (-before +after):\n%s", name, diff)
		}
	}

	// fed0 is someone else's TUN: even an honest plan on it is refused.
	if changes, err := d.Apply(ctx, planA()); !errors.Is(err, ErrRefused) || len(changes) != 0 ||
		!strings.Contains(err.Error(), "tunnels[0].name fed0: interface exists and is not fednet's (a tun link, without fednet's mark fednet-tunnel:wireguard)") {
		t.Errorf("Apply over the foreign fed0 = %q, %v", changes, err)
	}

	// Nor does Status read another's interface as fednet's tunnel.
	p := planA()
	malicious["tunnel wgvpn"].edit(&p)
	if links, err := d.Status(ctx, p); err == nil || slices.ContainsFunc(links, func(l LinkState) bool { return l.Established || l.RxBytes > 0 }) {
		t.Errorf("Status of a plan on wgvpn = %+v, %v; want an error and no figures", links, err)
	}

	// A good plan, with a bridge on eth1, beside all that.
	good := bridged()
	good.Tunnels[0].Name, good.Firewall.Tunnels = "fed1", []string{"fed1"}
	for i := range good.Routes {
		good.Routes[i].Device = "fed1"
	}
	if _, err := d.Apply(ctx, good); err != nil {
		t.Fatalf("the good plan: %v", err)
	}
	fednets := []string{"fed1", "fbr100", "fvx100", "eth1"}
	if diff := cmp.Diff(snapshot(t, fednets), snapshot(t, fednets)); diff != "" {
		t.Fatalf("snapshot is not stable:\n%s", diff)
	}
	if diff := cmp.Diff(snapshotWithout(before, fednets), snapshot(t, fednets)); diff != "" {
		t.Errorf("applying the good plan changed what is not fednet's (-before +after):\n%s", diff)
	}
	if _, err := d.Down(ctx, good); err != nil {
		t.Fatal(err)
	}
	assertNoDevices(t, d)
	if diff := cmp.Diff(before, snapshot(t, nil)); diff != "" {
		t.Errorf("after Down of the good plan the machine differs (-before +after):\n%s", diff)
	}
}

// startForeignWireGuard starts a userspace WireGuard device name (the test
// binary as wgdev) that is not fednet's, with its own key, port, address
// and a peer, and stops it when t ends.
func startForeignWireGuard(t *testing.T, name string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "wgdev", name)
	cmd.Env = append(os.Environ(), envWGDevChild+"=1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		exec.Command("ip", "link", "del", name).Run()
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			cmd.Process.Signal(syscall.SIGKILL)
			<-exited
		}
	})
	key, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	peer, _ := wgtypes.GeneratePrivateKey()
	port := 51000
	_, allowed, _ := net.ParseCIDR("192.168.9.0/24")
	err = await.Poll(5*time.Second, await.NoError(func() error {
		c, err := wgctrl.New()
		if err != nil {
			return err
		}
		defer c.Close()
		return c.ConfigureDevice(name, wgtypes.Config{PrivateKey: &key, ListenPort: &port,
			Peers: []wgtypes.PeerConfig{{PublicKey: peer.PublicKey(), AllowedIPs: []net.IPNet{*allowed}}}})
	}))
	if err != nil {
		t.Fatalf("configuring the foreign WireGuard device %s: %v", name, err)
	}
	sh(t, "ip address add 192.168.9.1/24 dev "+name+" && ip link set "+name+" up")
}

// snapshot renders what the test's machine has, one fact a line, sorted:
// the interfaces (kind, alias, MTU, up, master, IPv4 addresses), the IPv4
// routes of every table but fednet's, the nftables ruleset and the
// WireGuard devices' configuration; the interfaces named in skip, and
// whatever is enslaved to them, are left out.
func snapshot(t *testing.T, skip []string) string {
	t.Helper()
	links, err := netlink.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	names := map[int]string{}
	for _, l := range links {
		names[l.Attrs().Index] = l.Attrs().Name
	}
	var lines []string
	for _, l := range links {
		a := l.Attrs()
		if slices.Contains(skip, a.Name) || slices.Contains(skip, names[a.MasterIndex]) {
			continue
		}
		s := fmt.Sprintf("link %s type %s alias %q mtu %d up %t master %q", a.Name, l.Type(), a.Alias, a.MTU, a.Flags&net.FlagUp != 0, names[a.MasterIndex])
		addrs, _ := netlink.AddrList(l, netlink.FAMILY_V4)
		for _, ad := range addrs {
			s += " " + ad.IPNet.String()
		}
		lines = append(lines, s)
		if l.Type() == "tuntap" || l.Type() == "wireguard" {
			c, err := wgctrl.New()
			if err != nil {
				t.Fatal(err)
			}
			if dev, err := c.Device(a.Name); err == nil {
				s := fmt.Sprintf("wireguard %s key %s port %d", a.Name, dev.PublicKey, dev.ListenPort)
				for _, p := range dev.Peers {
					s += fmt.Sprintf(" peer %s %v", p.PublicKey, p.AllowedIPs)
				}
				lines = append(lines, s)
			}
			c.Close()
		}
	}
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: 0}, netlink.RT_FILTER_TABLE)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range routes {
		if r.Protocol == RouteProtocol || slices.Contains(skip, names[r.LinkIndex]) {
			continue
		}
		lines = append(lines, fmt.Sprintf("route table %d %v via %v dev %s proto %d", r.Table, r.Dst, r.Gw, names[r.LinkIndex], r.Protocol))
	}
	slices.Sort(lines)
	ruleset := sh(t, "nft list ruleset")
	if len(skip) > 0 {
		ruleset = withoutTable(withoutTable(ruleset, "inet fednet"), "bridge "+GuardTable)
	}
	return strings.Join(lines, "\n") + "\n" + ruleset
}

// snapshotWithout drops from a snapshot the interfaces of skip and
// fednet's table, as snapshot(t, skip) leaves them out.
func snapshotWithout(s string, skip []string) string {
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		f := strings.Fields(l)
		if len(f) > 2 && (f[0] == "link" || f[0] == "wireguard") && slices.Contains(skip, f[1]) {
			continue
		}
		lines = append(lines, l)
	}
	return withoutTable(strings.Join(lines, "\n"), "inet fednet")
}

// withoutTable drops table name from an nft ruleset listing.
func withoutTable(ruleset, name string) string {
	i := strings.Index(ruleset, "table "+name+" {")
	if i < 0 {
		return ruleset
	}
	j := strings.Index(ruleset[i:], "\n}\n")
	if j < 0 {
		return ruleset[:i]
	}
	return ruleset[:i] + ruleset[i+j+3:]
}
