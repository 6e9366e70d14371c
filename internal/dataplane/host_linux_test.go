package dataplane

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/fednet/fednet/internal/plan"
)

func hostTunnel() plan.HostTunnel {
	return plan.HostTunnel{Host: "web1", Network: "lan", VNI: 100, Device: "fvx100",
		Local: netip.MustParseAddr("10.1.0.10"), Remote: netip.MustParseAddr("10.1.0.254"),
		Gateway: "a", UDPPort: 4790, MTU: 1370}
}

// TestLinuxHostTunnel sets up a host's end of a neighbor tunnel in a fresh
// namespace, changes its MTU, address and remote, recreates it after it is
// deleted, and removes it.
func TestLinuxHostTunnel(t *testing.T) {
	if !inner(t) {
		return
	}
	ctx := context.Background()
	addr := netip.MustParsePrefix("192.168.50.40/24")
	apply := func(name string, ht plan.HostTunnel, a netip.Prefix, want string) {
		t.Helper()
		changes, err := ApplyHost(ctx, ht, a)
		if err != nil {
			t.Fatalf("ApplyHost(%s): %v", name, err)
		}
		if got := render(changes); got != want {
			t.Errorf("ApplyHost(%s) changes:\n%swant:\n%s", name, got, want)
		}
		if again, err := ApplyHost(ctx, ht, a); err != nil || len(again) != 0 {
			t.Errorf("ApplyHost(%s) again = %q, %v; want no changes", name, again, err)
		}
	}
	add := "ip link add fvx100 mtu 1370 type vxlan id 100 local 10.1.0.10 dstport 4790 && ip link set fvx100 alias fednet:lan\n" +
		"ip link set fvx100 up\nbridge fdb append 00:00:00:00:00:00 dev fvx100 dst 10.1.0.254\nip address add 192.168.50.40/24 dev fvx100\n"
	apply("add", hostTunnel(), addr, add)
	l, err := netlink.LinkByName("fvx100")
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := l.(*netlink.Vxlan); !ok || v.VxlanId != 100 || v.Port != 4790 || v.Group != nil || v.MTU != 1370 {
		t.Errorf("fvx100 = %+v", l)
	}
	if fdb := sh(t, "bridge fdb show dev fvx100"); !strings.Contains(fdb, "00:00:00:00:00:00 dst 10.1.0.254 self permanent") {
		t.Errorf("bridge fdb show dev fvx100 lacks the flood entry to the gateway:\n%s", fdb)
	}
	mtu := hostTunnel()
	mtu.MTU = 1300
	apply("mtu", mtu, addr, "ip link set fvx100 mtu 1300\n")
	apply("address", mtu, netip.MustParsePrefix("192.168.50.41/24"),
		"ip address del 192.168.50.40/24 dev fvx100\nip address add 192.168.50.41/24 dev fvx100\n")
	moved := hostTunnel()
	moved.Remote = netip.MustParseAddr("10.1.0.253")
	// The device stays; its MTU and address go back to the first step's.
	apply("gateway moves", moved, addr, "ip link set fvx100 mtu 1370\n"+
		"bridge fdb append 00:00:00:00:00:00 dev fvx100 dst 10.1.0.253\n"+
		"bridge fdb del 00:00:00:00:00:00 dev fvx100 dst 10.1.0.254\n"+
		"ip address del 192.168.50.41/24 dev fvx100\nip address add 192.168.50.40/24 dev fvx100\n")
	sh(t, "ip link del fvx100")
	apply("deleted behind fednet's back", moved, addr, strings.ReplaceAll(add, "dst 10.1.0.254", "dst 10.1.0.253"))
	// A device of the fednet before one L2 model (alias fednet-neighbor:,
	// a default remote) is replaced.
	sh(t, "ip link del fvx100 && ip link add fvx100 mtu 1370 type vxlan id 100 local 10.1.0.10 remote 10.1.0.253 dstport 4790 && ip link set fvx100 alias fednet-neighbor:lan/web1")
	apply("old device", moved, addr, "ip link del fvx100\n"+strings.ReplaceAll(add, "dst 10.1.0.254", "dst 10.1.0.253"))

	if c, err := RemoveHost("fvx100"); err != nil || render(c) != "ip link del fvx100\n" {
		t.Errorf("RemoveHost = %q, %v", c, err)
	}
	if c, err := RemoveHost("fvx100"); err != nil || len(c) != 0 {
		t.Errorf("RemoveHost again = %q, %v; want nothing", c, err)
	}
	// An interface of that name that is not fednet's is left alone.
	sh(t, "ip link add fvx100 type bridge")
	if _, err := ApplyHost(ctx, hostTunnel(), addr); err == nil || !strings.Contains(err.Error(), "not fednet's") {
		t.Errorf("ApplyHost over a foreign interface = %v", err)
	}
	if _, err := RemoveHost("fvx100"); err == nil {
		t.Error("RemoveHost deleted a foreign interface")
	}
}
