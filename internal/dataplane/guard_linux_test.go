package dataplane

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/fednet/fednet/internal/await"
	"github.com/fednet/fednet/internal/dataplane/nstest"
	"github.com/fednet/fednet/internal/dataplane/wireguard"
	"github.com/fednet/fednet/internal/plan"
)

// guardPlan has one bridged network whose bridge fbr100 has the site's
// port eth1 and a port to other gateways fvx100.
func guardPlan() plan.Gateway {
	return plan.Gateway{Bridges: []plan.Bridge{{
		Network: "lan", VNI: 100, Name: "fbr100", Port: "eth1", MTU: 1370,
		VXLANs: []plan.VXLAN{{Name: "fvx100", Kind: plan.ToGateways, UDPPort: 4789, To: "members"}},
	}}}
}

// TestLinuxGuard: a gateway's bridge with the site's port (eth1, to host
// A) and a port to other gateways (fvx100; a veth here, to a namespace
// that plays the overlay). A frame from the overlay with host A's source
// — host A's own frame come back round — is dropped before the bridge
// learns from it while host A was heard on eth1 in the last GuardMemory,
// and taken (the bridge learns host A behind fvx100: a host that moved to
// another site) once host A has been silent that long. Without the guard
// the bridge learns host A behind fvx100 at once.
func TestLinuxGuard(t *testing.T) {
	if nstest.Inner(t) {
		guardPhase(t, nstest.Phase())
		return
	}
	gw, host, overlay := nstest.New(t), nstest.New(t), nstest.New(t)
	const mac = "02:00:00:00:50:01"
	gw.Exec(t, "ip", "link", "add", "fbr100", "type", "bridge")
	gw.Exec(t, "ip", "link", "set", "fbr100", "up")
	for _, x := range []struct {
		ns       *nstest.Netns
		port, ip string
	}{{host, "eth1", "192.168.50.1/24"}, {overlay, "fvx100", "192.168.50.2/24"}} {
		// Silent unless told: no IPv6 (router and listener reports),
		// one ARP request per address asked for.
		x.ns.Exec(t, "sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
		gw.Exec(t, "ip", "link", "add", x.port, "type", "veth", "peer", "name", "eth0", "netns", x.ns.Name)
		x.ns.Exec(t, "sysctl", "-q", "-w", "net.ipv4.neigh.eth0.mcast_solicit=1")
		gw.Exec(t, "ip", "link", "set", x.port, "master", "fbr100", "up")
		x.ns.Exec(t, "ip", "link", "set", "eth0", "address", mac)
		x.ns.Exec(t, "ip", "address", "add", x.ip, "dev", "eth0")
		x.ns.Exec(t, "ip", "link", "set", "eth0", "up")
	}
	gw.RunPhase(t, "on")
	// at returns the port the bridge learned host A's address behind.
	at := func() string {
		for _, line := range strings.Split(gw.Exec(t, "bridge", "fdb", "show", "br", "fbr100"), "\n") {
			if f := strings.Fields(line); len(f) >= 3 && f[0] == mac && f[1] == "dev" && !strings.Contains(line, "permanent") {
				return f[2]
			}
		}
		return ""
	}
	// speak makes ns send one broadcast from host A's address (an ARP
	// request for an address nobody has) and returns without waiting
	// for the ping to give up.
	speak := func(ns *nstest.Netns) {
		cmd := exec.Command("ip", "netns", "exec", ns.Name, "ping", "-c", "1", "-W", "1", "192.168.50.77")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go cmd.Wait()
	}
	speak(host)
	if err := await.Poll(5*time.Second, func() (bool, string) { return at() == "eth1", "the bridge has not learned host A behind eth1" }); err != nil {
		t.Fatal(err)
	}
	speak(overlay)
	if err := await.Poll(5*time.Second, func() (bool, string) {
		n := guardDrops(t, gw)
		return n > 0, fmt.Sprintf("the guard dropped %d frames", n)
	}); err != nil {
		t.Fatalf("host A's frame from the overlay: %v; the bridge has host A behind %q\n%s", err, at(), gw.Exec(t, "nft", "list", "table", "bridge", GuardTable))
	}
	if got := at(); got != "eth1" {
		t.Errorf("after host A's own frame came back from the overlay, the bridge has host A behind %q; want eth1", got)
	}
	// Once host A has been silent for GuardMemory, a frame from it through
	// the overlay is a host that moved: taken.
	if err := await.Poll(3*GuardMemory, func() (bool, string) {
		set := gw.Exec(t, "nft", "list", "set", "bridge", GuardTable, guardSet("fbr100"))
		return !strings.Contains(set, mac), "the guard still remembers host A:\n" + set
	}); err != nil {
		t.Fatal(err)
	}
	speak(overlay)
	if err := await.Poll(5*time.Second, func() (bool, string) { return at() == "fvx100", fmt.Sprintf("host A behind %q", at()) }); err != nil {
		t.Errorf("a frame from host A through the overlay after %s of silence on eth1: %v", GuardMemory, err)
	}
	gw.RunPhase(t, "off")
}

var guardCounter = regexp.MustCompile(`counter packets (\d+)`)

// guardDrops returns the packets the guard table's drop rules counted.
func guardDrops(t *testing.T, gw *nstest.Netns) int {
	t.Helper()
	n := 0
	for _, m := range guardCounter.FindAllStringSubmatch(gw.Exec(t, "nft", "list", "table", "bridge", GuardTable), -1) {
		k, _ := strconv.Atoi(m[1])
		n += k
	}
	return n
}

func guardPhase(t *testing.T, phase string) {
	switch phase {
	case "on":
		c, err := syncGuard(guardsOf(guardPlan()))
		if err != nil || len(c) != 1 {
			t.Fatalf("syncGuard = %q, %v; want the table made", c, err)
		}
		if c, err := syncGuard(guardsOf(guardPlan())); err != nil || len(c) != 0 {
			t.Errorf("syncGuard again = %q, %v; want no changes", c, err)
		}
	case "off":
		c, err := syncGuard(nil)
		if err != nil || len(c) != 1 || c[0] != Change("nft delete table bridge "+GuardTable) {
			t.Fatalf("syncGuard(nil) = %q, %v; want the table deleted", c, err)
		}
		if c, err := syncGuard(nil); err != nil || len(c) != 0 {
			t.Errorf("syncGuard(nil) again = %q, %v; want no changes", c, err)
		}
	default:
		t.Fatalf("unknown phase %q", phase)
	}
}

// TestLinuxGuardFailureKeepsThePlan: a kernel that cannot make the guard
// (no bridge-family nftables) runs the plan without it: Apply succeeds,
// the bridge is made, and the failure is logged once, not on every Apply.
func TestLinuxGuardFailureKeepsThePlan(t *testing.T) {
	if !inner(t) {
		return
	}
	sh(t, "ip link add eth1 type veth peer name eth1p && ip link set eth1 up && ip link set eth1p up")
	d := newTestLinux(t, newPrivateKey(t), wireguard.Auto)
	var logs []string
	d.logf = func(format string, args ...any) { logs = append(logs, fmt.Sprintf(format, args...)) }
	d.guard = func([]guard) ([]Change, error) {
		return nil, errors.New("guarding the site's hosts: operation not supported")
	}
	ctx := context.Background()
	for i := range 2 {
		if _, err := d.Apply(ctx, bridged()); err != nil {
			t.Fatalf("Apply %d with the guard failing: %v", i+1, err)
		}
	}
	if _, err := netlink.LinkByName("fbr100"); err != nil {
		t.Errorf("the bridge was not made: %v", err)
	}
	var failures []string
	for _, l := range logs {
		if strings.Contains(l, "operation not supported") {
			failures = append(failures, l)
		}
	}
	if len(failures) != 1 || !strings.Contains(failures[0], "run without it") {
		t.Errorf("logged %q; want the failure once, saying the networks run without the guard", failures)
	}
	d.guard = syncGuard
	c, err := d.Apply(ctx, bridged())
	if err != nil || !slices.ContainsFunc(c, func(c Change) bool { return strings.HasPrefix(string(c), "nft replace table bridge "+GuardTable) }) {
		t.Errorf("Apply with the guard working = %q, %v; want the guard made", c, err)
	}
}
