package demo_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/await"
	"github.com/fednet/fednet/internal/demo"
	"github.com/fednet/fednet/internal/lab"
	"github.com/fednet/fednet/internal/neighbor"
	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/spec"
)

// TestNeighborTunnels runs examples/neighbors.yaml under a manager: a
// bridged network over three sites, one of which (aws-eu) declares
// fabric: dropsUnknownMACs, so the lab's switches there drop frames whose
// source MAC is not the sending port's. A host on aws-eu's segment of the
// network cannot reach the other sites' hosts through the gateway's bridge
// port (the replies, from remote MACs, are dropped by the fabric). A host
// of aws-eu that joins through a neighbor tunnel (the code of fednet host
// join, in the host's namespace) reaches them, ARP included, with the
// network's MTU on its tunnel device; after it leaves, its device and the
// gateway's end are gone.
func TestNeighborTunnels(t *testing.T) {
	needRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	data, err := os.ReadFile(filepath.Join("..", "..", "examples", "neighbors.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := spec.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	const dropSite, network = "aws-eu", "lan"
	var subnet netip.Prefix
	var members []string
	for _, n := range f.Networks {
		if n.Name == network {
			subnet, members = n.Subnet, n.Sites
		}
	}
	if !f.Sites[0].DropsUnknownMACs() || f.Sites[0].Name != dropSite || len(members) != 3 {
		t.Fatalf("examples/neighbors.yaml: want site %s first with fabric: dropsUnknownMACs and network %s over 3 sites", dropSite, network)
	}
	const name = "e2enb"
	lab.Down(ctx, name)
	l, err := lab.Up(ctx, lab.Config{Federation: f, Name: name, Manager: true,
		Bridged: []lab.BridgedNetwork{{Name: network, Subnet: subnet, Sites: members}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		l.Down(context.Background())
		noLab(t, name)
	})
	m, err := demo.StartManaged(ctx, l, binary)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Stop(context.Background()) })
	if _, err := m.Apply(ctx, string(data)); err != nil {
		t.Fatal(err)
	}
	for _, gw := range l.Gateways() {
		if err := m.Enroll(ctx, gw.Name); err != nil {
			t.Fatal(err)
		}
	}

	// The other two sites' bridged hosts reach each other: the network is
	// up, and what follows fails because of the fabric, not too early.
	var others []demo.Pair
	for _, a := range members[1:] {
		for _, b := range members[1:] {
			if a != b {
				others = append(others, demo.Pair{From: l.BridgedHosts(network, a)[0], To: l.BridgedHosts(network, b)[0]})
			}
		}
	}
	wctx, wcancel := context.WithTimeout(ctx, 45*time.Second)
	defer wcancel()
	if _, err := demo.WaitReachable(wctx, others, m.AgentsAlive); err != nil {
		t.Fatalf("bridged hosts of %v did not reach each other: %v", members[1:], err)
	}
	remote := l.BridgedHosts(network, members[1])[0]
	plain := l.BridgedHosts(network, dropSite)[0]
	if r, err := lab.Ping(ctx, plain, remote.LAN.Addr(), 3, 200*time.Millisecond); err == nil && r.Received != 0 {
		t.Fatalf("%s on %s's plain bridged segment reached %s (%s): the fabric should drop the replies from remote MACs", plain, dropSite, remote, r)
	}
	t.Logf("%s -> %s through the bridge port: no answer (the fabric drops frames from remote MACs)", plain, remote.LAN.Addr())

	// A host of the site's own segment joins through a neighbor tunnel.
	host := l.Hosts(dropSite)[0]
	tok, err := m.Admin.CreateHostToken(ctx, dropSite, network, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	a4 := subnet.Addr().As4()
	a4[3] += 20 // not a lab host's (.1-.2, .17-.18, .33-.34)
	overlay := netip.PrefixFrom(netip.AddrFrom4(a4), subnet.Bits())
	dir := t.TempDir()
	cfg := neighbor.Config{DataDir: dir, Token: tok.Token, Network: network, Name: "web1", LANAddress: host.LAN.Addr(),
		Address: overlay, Resync: 500 * time.Millisecond, WatchTimeout: 5 * time.Second,
		DialContext: m.Dialer(), Logf: t.Logf}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- host.Do(func() error { return neighbor.Run(runCtx, cfg) }) }()
	stopped := false
	stopRun := func() {
		if !stopped {
			stopped = true
			stop()
			if err := <-done; err != nil {
				t.Errorf("host join: %v", err)
			}
		}
	}
	t.Cleanup(stopRun)

	await.Until(t, 20*time.Second, func() (bool, string) {
		hosts, err := m.Admin.Hosts(ctx)
		return err == nil && len(hosts) == 1, fmt.Sprintf("the host to join: hosts %v, %v", hosts, err)
	})
	// The network's MTU, as the gateway's plan has it, is on the host's
	// device.
	resp, _, err := m.Admin.WatchPlan(ctx, f.Sites[0].Gateways[0].Name, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Plan.Bridges) != 1 || len(resp.Plan.Bridges[0].Ports(plan.ToHost)) != 1 {
		t.Fatalf("plan of %s: bridges %+v, want one with one neighbor tunnel", resp.Plan.Name, resp.Plan.Bridges)
	}
	br := resp.Plan.Bridges[0]
	tunnel := br.Ports(plan.ToHost)[0]
	if !strings.Contains(br.MTUReason, "neighbor tunnels at "+dropSite) {
		t.Errorf("the network MTU has no neighbor-tunnel term: %s", br.MTUReason)
	}
	device := plan.HostDevice(br.VNI)
	await.Until(t, 20*time.Second, func() (bool, string) {
		out, err := host.Run(ctx, "ip", "-o", "link", "show", device)
		return err == nil && strings.Contains(out, " mtu "+strconv.Itoa(br.MTU)+" "), fmt.Sprintf("the host's tunnel device with mtu %d: %s %v", br.MTU, out, err)
	})
	t.Logf("%s: %s mtu %d (%s)", host, device, br.MTU, br.MTUReason)

	// It reaches a bridged host of every other site, and they reach it.
	var pairs []demo.Pair
	for _, s := range members[1:] {
		for _, h := range l.BridgedHosts(network, s) {
			pairs = append(pairs, demo.Pair{From: host, To: h})
		}
	}
	took, err := demo.WaitReachable(wctx, pairs, m.AgentsAlive)
	if err != nil {
		t.Fatalf("the host on its neighbor tunnel did not reach the other sites: %v", err)
	}
	t.Logf("%d pairs reachable through the neighbor tunnel after %v", len(pairs), took.Round(time.Millisecond))
	if r, err := lab.Ping(ctx, remote, overlay.Addr(), 3, 50*time.Millisecond); err != nil || r.Received != r.Sent {
		t.Errorf("%s -> %s (the joined host): %v %v", remote, overlay.Addr(), r, err)
	}
	out, err := host.Run(ctx, "ip", "neigh", "show", "dev", device)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pairs {
		if !containsLine(out, p.To.LAN.Addr().String()) {
			t.Errorf("%s has no neighbour entry for %s on %s (ARP did not cross):\n%s", host, p.To.LAN.Addr(), device, out)
		}
	}
	// Another machine of the LAN cannot use web1's tunnel port: the
	// gateway's firewall takes VXLAN on it from web1's address only.
	intruder := l.Hosts(dropSite)[1]
	a4[3]++
	forged := netip.PrefixFrom(netip.AddrFrom4(a4), subnet.Bits())
	if _, err := intruder.Run(ctx, "sh", "-c", "ip link add "+device+" type vxlan id "+strconv.Itoa(br.VNI)+
		" local "+intruder.LAN.Addr().String()+" remote "+tunnel.Local.String()+" dstport "+strconv.Itoa(tunnel.UDPPort)+
		" && ip address add "+forged.String()+" dev "+device+" && ip link set "+device+" up"); err != nil {
		t.Fatal(err)
	}
	if r, err := lab.Ping(ctx, intruder, remote.LAN.Addr(), 3, 200*time.Millisecond); err == nil && r.Received != 0 {
		t.Errorf("%s reached %s through web1's tunnel port: %s", intruder, remote.LAN.Addr(), r)
	}
	if _, err := intruder.Run(ctx, "ip", "link", "del", device); err != nil {
		t.Fatal(err)
	}
	// A deleted device comes back.
	if _, err := host.Run(ctx, "ip", "link", "del", device); err != nil {
		t.Fatal(err)
	}
	await.Until(t, 20*time.Second, func() (bool, string) {
		_, err := host.Run(ctx, "ip", "link", "show", device)
		return err == nil, fmt.Sprintf("the deleted tunnel device to come back: %v", err)
	})

	// A spec change reaches the host through its watch: a smaller
	// underlay MTU shrinks the network's MTU, on the host's device too.
	smaller := strings.Replace(string(data), "underlayMTU: 1500", "underlayMTU: 1400", 1)
	if smaller == string(data) {
		t.Fatal("examples/neighbors.yaml has no underlayMTU: 1500 line to change")
	}
	if _, err := m.Apply(ctx, smaller); err != nil {
		t.Fatal(err)
	}
	resp, _, err = m.Admin.WatchPlan(ctx, f.Sites[0].Gateways[0].Name, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Plan.Bridges) != 1 || resp.Plan.Bridges[0].MTU >= br.MTU {
		t.Fatalf("after underlayMTU 1400 the plan's bridges are %+v, want a smaller MTU than %d", resp.Plan.Bridges, br.MTU)
	}
	newMTU := resp.Plan.Bridges[0].MTU
	took = await.Until(t, 20*time.Second, func() (bool, string) {
		out, err := host.Run(ctx, "ip", "-o", "link", "show", device)
		return err == nil && strings.Contains(out, " mtu "+strconv.Itoa(newMTU)+" "), fmt.Sprintf("the host's device to follow the new MTU %d: %s %v", newMTU, out, err)
	})
	t.Logf("the host's %s followed the network MTU %d -> %d within %v", device, br.MTU, newMTU, took.Round(time.Millisecond))

	// Leaving removes both ends.
	stopRun()
	var leaveErr error
	if err := host.Do(func() error { _, leaveErr = neighbor.Leave(ctx, cfg); return nil }); err != nil || leaveErr != nil {
		t.Fatalf("host leave: %v %v", err, leaveErr)
	}
	if _, err := host.Run(ctx, "ip", "link", "show", device); err == nil {
		t.Errorf("%s still has %s after leaving", host, device)
	}
	gw := l.Gateway(f.Sites[0].Gateways[0].Name)
	await.Until(t, 20*time.Second, func() (bool, string) {
		out, err := gw.Run(ctx, "ip", "-o", "link", "show", "type", "vxlan")
		return err == nil && !strings.Contains(out, tunnel.Name+":"), fmt.Sprintf("the gateway's end of the tunnel to go: %s %v", out, err)
	})
	if hosts, err := m.Admin.Hosts(ctx); err != nil || len(hosts) != 0 {
		t.Errorf("hosts after leaving = %v, %v; want none", hosts, err)
	}
}
