package dataplane

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/fednet/fednet/internal/await"
	"github.com/fednet/fednet/internal/dataplane/nstest"
	"github.com/fednet/fednet/internal/dataplane/wireguard"
	"github.com/fednet/fednet/internal/plan"
)

// TestLinuxWGDevKilled: two gateways in two namespaces, joined by the
// userspace driver; b pings a's transit address every 10 ms while a's
// WireGuard process is killed (kill -9) five times. Each time the driver
// replaces it on the TUN that outlived it, restores the device's
// configuration (key, port, peers) and the MTU the new process reset,
// and starts the handshake itself (b's pings would otherwise wait for
// b's 15 s timeout); the interface, addresses and routes never went, and
// applying the plan again changes nothing. Then the interface is deleted
// by hand three times: the driver reports the tunnel lost, and applying
// the plan (what the agent's loop does on that event) makes it anew. The
// gaps in b's pings are logged; no timing decides the verdict.
//
//	b-up    (in B) apply b's plan and exit: b's device outlives its agent
//	a-kill  (in A) the kills, pinging from B
//	b-down  (in B) take b down
func TestLinuxWGDevKilled(t *testing.T) {
	if nstest.Inner(t) {
		wgdevKilledPhase(t, nstest.Phase())
		return
	}
	a, b := nstest.New(t), nstest.New(t)
	b.WireGuardDir = t.TempDir()
	joinNamespaces(t, a, "veth-a", "192.168.77.1/24", b, "veth-b", "192.168.77.2/24")
	ka, kb := lowerFirst(t)
	env := append(keyEnv(ka, kb), "FEDNET_TEST_NETNS_B="+b.Name)
	b.RunPhase(t, "b-up", env...)
	a.RunPhase(t, "a-kill", env...)
	b.RunPhase(t, "b-down", env...)
}

// lowerFirst returns two new private keys, the one whose public key sorts
// lower first: that gateway starts a new link's handshake by itself.
func lowerFirst(t *testing.T) (plan.Key, plan.Key) {
	ka, kb := newPrivateKey(t), newPrivateKey(t)
	pubA, pubB := wgtypes.Key(ka).PublicKey(), wgtypes.Key(kb).PublicKey()
	if bytes.Compare(pubA[:], pubB[:]) > 0 {
		ka, kb = kb, ka
	}
	return ka, kb
}

func wgdevKilledPhase(t *testing.T, phase string) {
	ka, kb := keysFromEnv(t)
	pa, pb := twoGatewayPlans(ka, kb)
	ctx := context.Background()
	switch phase {
	case "b-up":
		if _, err := testLinux(t, kb, wireguard.Userspace).Apply(ctx, pb); err != nil {
			t.Fatal(err)
		}
		return
	case "b-down":
		d := testLinux(t, kb, wireguard.Userspace)
		if _, err := d.Down(ctx, pb); err != nil {
			t.Fatal(err)
		}
		return
	case "a-kill":
	default:
		t.Fatalf("unknown phase %q", phase)
	}

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// Five kills in a few seconds: measure immediate restarts, not the
	// backoff (TestRestartPolicy).
	policy := wireguard.DefaultRestartPolicy
	policy.Burst = 10
	d, err := newLinux(Config{WireGuard: wireguard.Config{PrivateKey: ka, Mode: wireguard.Userspace, WGDevCommand: []string{exe, "wgdev"}, Restart: policy}, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	cleanupLinux(t, d)
	events := make(chan TunnelEvent, 16)
	var _ Supervised = d
	d.OnEvent(func(e TunnelEvent) { events <- e })
	mustApply(t, d, pa)
	awaitHandshakes(t)
	before := tunnelFacts(t)
	nsB := os.Getenv("FEDNET_TEST_NETNS_B")

	var gaps []time.Duration
	for i := range 5 {
		pids := d.startedPids()
		old := pids[len(pids)-1]
		gap := pingThrough(t, nsB, "10.255.0.1", func() {
			if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			e := nextEvent(t, events)
			if !e.Restored || e.Interface != "fed0" || !strings.Contains(e.Cause, "signal: killed") {
				t.Fatalf("kill %d: event %+v, want fed0 restored after signal: killed", i+1, e)
			}
			t.Logf("kill %d: the driver restored fed0 in %v", i+1, e.Took.Round(time.Millisecond))
		})
		gaps = append(gaps, gap)
		pids = d.startedPids()
		if now := pids[len(pids)-1]; now == old || !nstest.PidGone(old, 5*time.Second) {
			t.Errorf("kill %d: the device process is %d, the killed one %d", i+1, now, old)
		}
		if after := tunnelFacts(t); after != before {
			t.Errorf("kill %d: fed0 after the restart:\n%s\nbefore:\n%s", i+1, after, before)
		}
		if c := mustApply(t, d, pa); len(c) != 0 {
			t.Errorf("kill %d: applying the plan after the restart changed:\n%s", i+1, render(c))
		}
	}
	t.Logf("wgdev killed (TUN kept, driver restores): longest gap in 10 ms pings %v, median %v (shared machine)", gaps, median(gaps))

	var lostGaps []time.Duration
	for i := range 3 {
		gap := pingThrough(t, nsB, "10.255.0.1", func() {
			link, err := netlink.LinkByName("fed0")
			if err != nil {
				t.Fatal(err)
			}
			if err := netlink.LinkDel(link); err != nil {
				t.Fatal(err)
			}
			if e := nextEvent(t, events); e.Restored || e.Interface != "fed0" {
				t.Fatalf("deleted fed0: event %+v, want fed0 lost", e)
			}
			mustApply(t, d, pa) // as the agent's loop does on the event
		})
		lostGaps = append(lostGaps, gap)
		if after := tunnelFacts(t); after != before {
			t.Errorf("deletion %d: fed0 after applying the plan again:\n%s\nbefore:\n%s", i+1, after, before)
		}
	}
	t.Logf("fed0 deleted (TUN lost, plan applied again): longest gap in 10 ms pings %v, median %v (shared machine)", lostGaps, median(lostGaps))
	if _, err := d.Down(ctx, pa); err != nil {
		t.Fatal(err)
	}
	assertNothingLeft(t, d)
}

// awaitHandshakes waits until every peer of fed0 has a handshake.
func awaitHandshakes(t *testing.T) {
	t.Helper()
	err := await.Poll(15*time.Second, await.NoError(func() error {
		for _, p := range kernelDevice(t, "fed0").Peers {
			if p.LastHandshakeTime.Unix() <= 0 {
				return fmt.Errorf("no handshake with %s yet", p.PublicKey)
			}
		}
		return nil
	}))
	if err != nil {
		// What the device says: its port, and per peer its endpoint and
		// bytes (was anything sent, anything received?), and its log.
		dev := kernelDevice(t, "fed0")
		t.Logf("fed0: listen port %d", dev.ListenPort)
		for _, p := range dev.Peers {
			t.Logf("peer %s: endpoint %v, sent %d bytes, received %d", p.PublicKey, p.Endpoint, p.TransmitBytes, p.ReceiveBytes)
		}
		t.Logf("sockets:\n%s", sh(t, "ss -uanp"))
		if log, err := os.ReadFile("/var/run/wireguard/fed0.log"); err == nil {
			t.Logf("fed0.log (tail):\n%s", log[max(0, len(log)-3000):])
		}
		t.Fatal(err)
	}
}

// tunnelFacts renders what a restart must keep of fed0: the interface
// (index, MTU, addresses, routes) and the device's configuration.
func tunnelFacts(t *testing.T) string {
	t.Helper()
	link, err := netlink.LinkByName("fed0")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "mtu %d up %v\n", link.Attrs().MTU, link.Attrs().Flags&1 != 0)
	b.WriteString(sh(t, "ip -4 -o addr show dev fed0 | sed 's/^[0-9]*: //'"))
	b.WriteString(sh(t, "ip route show dev fed0 | sed 's/ linkdown//'"))
	dev := kernelDevice(t, "fed0")
	fmt.Fprintf(&b, "public-key %s listen-port %d\n", dev.PublicKey, dev.ListenPort)
	for _, p := range dev.Peers {
		var allowed []string
		for _, a := range p.AllowedIPs {
			allowed = append(allowed, a.String())
		}
		slices.Sort(allowed)
		fmt.Fprintf(&b, "peer %s endpoint %v allowed-ips %s keepalive %v\n", p.PublicKey, p.Endpoint, strings.Join(allowed, ","), p.PersistentKeepaliveInterval)
	}
	return b.String()
}

func nextEvent(t *testing.T, events <-chan TunnelEvent) TunnelEvent {
	t.Helper()
	select {
	case e := <-events:
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("no tunnel event within 10 s")
		return TunnelEvent{}
	}
}

// pingThrough pings addr from namespace ns every 10 ms, runs fault once
// replies come, waits until 20 replies came after it, and returns the
// longest gap between two replies (the outage plus one interval).
func pingThrough(t *testing.T, ns, addr string, fault func()) time.Duration {
	t.Helper()
	p := nstest.StartPing(t, ns, addr, 10*time.Millisecond)
	defer p.Stop()
	await.Until(t, 10*time.Second, func() (bool, string) { return len(p.Replies()) >= 10, "no replies yet:\n" + p.Output() })
	at := time.Now()
	fault()
	await.Until(t, 20*time.Second, func() (bool, string) {
		return nstest.After(p.Replies(), at) >= 20, "traffic did not resume:\n" + tail(p.Output(), 600)
	})
	return nstest.LongestGap(p.Replies()).Round(time.Millisecond)
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
