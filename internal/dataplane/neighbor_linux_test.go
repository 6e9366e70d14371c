package dataplane

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
)

// TestLinuxNeighborLifecycle applies every step of neighborPlans to a real
// kernel in a fresh namespace, checking each against the fake: the
// neighbor devices share the network's VNI with the bridge's VXLAN device
// on ports of their own, and are enslaved to the bridge. Down deletes them.
func TestLinuxNeighborLifecycle(t *testing.T) {
	if !inner(t) {
		return
	}
	sh(t, "ip link add eth1 type veth peer name eth1p && ip link set eth1 up && ip link set eth1p up")
	d := newTestLinux(t, newPrivateKey(t), Auto)
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
		if !ok || v.VxlanId != 100 || v.Port != want.port || v.Group.String() != want.remote || v.SrcAddr.String() != "10.1.0.254" ||
			v.MTU != 1370 || v.MasterIndex != br.Attrs().Index || v.Flags&1 == 0 {
			t.Errorf("%s = %+v, want VXLAN id 100 local 10.1.0.254 remote %s dstport %d mtu 1370, up, in fbr100", want.name, l, want.remote, want.port)
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
	// A device deleted behind fednet's back is recreated by the next Apply.
	sh(t, "ip link del fnb3")
	if got := render(mustApply(t, d, withNeighbors())); !strings.Contains(got, "ip link add fnb3") {
		t.Errorf("Apply after fnb3 was deleted:\n%s", got)
	}
	changes, err := d.Down(context.Background(), withNeighbors())
	if err != nil {
		t.Fatal(err)
	}
	if got := render(changes); !strings.HasPrefix(got, "ip link del fnb0\nip link del fnb3\nip link del fvx100\n") {
		t.Errorf("Down changes:\n%s", got)
	}
	assertNothingLeft(t, d)
}
