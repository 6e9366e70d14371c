package cli

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/fednet/fednet/internal/agent"
	"github.com/fednet/fednet/internal/await"
	"github.com/fednet/fednet/internal/dataplane/nstest"
)

// TestAgentRestartKeepsTheDataplane: gateway a's agent (a real `fednet
// agent --plan` process, userspace WireGuard) is killed with SIGKILL and
// started again while b pings a's transit address through the tunnel
// every 10 ms. Not one ping is lost, the WireGuard process and the
// interface are the same ones, the device's configuration and its peer
// (counters, handshake) are untouched, and the new agent changes nothing:
// it adopts the running data plane, supervision included (the device,
// killed next, is replaced).
//
//	b-up       (in B) fednet agent --once for b: its device outlives it
//	a-restart  (in A) the agent, killed and started again, pinged from B
//	b-down     (in B) fednet agent --down for b
func TestAgentRestartKeepsTheDataplane(t *testing.T) {
	if nstest.Inner(t) {
		agentRestartPhase(t, nstest.Phase())
		return
	}
	a, b := nstest.New(t), nstest.New(t)
	b.WireGuardDir = t.TempDir()
	a.Exec(t, "ip", "link", "add", "veth-a", "type", "veth", "peer", "name", "veth-b", "netns", b.Name)
	a.Exec(t, "ip", "address", "add", "192.168.77.1/24", "dev", "veth-a")
	a.Exec(t, "ip", "link", "set", "veth-a", "up")
	b.Exec(t, "ip", "address", "add", "192.168.77.2/24", "dev", "veth-b")
	b.Exec(t, "ip", "link", "set", "veth-b", "up")

	dir := t.TempDir()
	var pubs [2]string
	for i, gw := range []string{"a", "b"} {
		k, err := wgtypes.GeneratePrivateKey()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, gw+".key"), []byte(k.String()+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		pubs[i] = k.PublicKey().String()
	}
	spec := fmt.Sprintf(`apiVersion: fednet/v1
kind: Federation
name: restart
overlay:
  supernet: 10.0.0.0/8
  transit: 10.255.0.0/16
  listenPort: 51820
sites:
  - name: sa
    provider: aws
    region: eu-west-1
    index: 0
    gateways:
      - name: a
        endpoint: 192.168.77.1:51820
        publicKey: %s
  - name: sb
    provider: azure
    region: westeurope
    index: 0
    gateways:
      - name: b
        endpoint: 192.168.77.2:51820
        publicKey: %s
networks:
  - name: apps
    id: 100
    mode: routed
    sites: [sa, sb]
`, pubs[0], pubs[1])
	specFile := filepath.Join(dir, "spec.yaml")
	if err := os.WriteFile(specFile, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, gw := range []string{"a", "b"} {
		out, err := run(t, "plan", "-f", specFile, "--gateway", gw, "-o", "json")
		if err != nil {
			t.Fatalf("plan %s: %v\n%s", gw, err, out)
		}
		if err := os.WriteFile(filepath.Join(dir, gw+".plan.json"), []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env := []string{nstest.EnvWGDev + "=1", "FEDNET_TEST_DIR=" + dir, "FEDNET_TEST_NETNS_B=" + b.Name}
	b.RunPhase(t, "b-up", env...)
	a.RunPhase(t, "a-restart", env...)
	b.RunPhase(t, "b-down", env...)
}

func agentRestartPhase(t *testing.T, phase string) {
	dir := os.Getenv("FEDNET_TEST_DIR")
	file := func(name string) string { return filepath.Join(dir, name) }
	switch phase {
	case "b-up":
		if out, err := run(t, "agent", "--plan", file("b.plan.json"), "--key", file("b.key"), "--once", "--wireguard", "userspace"); err != nil {
			t.Fatalf("agent --once: %v\n%s", err, out)
		}
		return
	case "b-down":
		if out, err := run(t, "agent", "--plan", file("b.plan.json"), "--down"); err != nil {
			t.Fatalf("agent --down: %v\n%s", err, out)
		}
		return
	case "a-restart":
	default:
		t.Fatalf("unknown phase %q", phase)
	}
	t.Cleanup(func() {
		if out, err := run(t, "agent", "--plan", file("a.plan.json"), "--down"); err != nil {
			t.Errorf("agent --down: %v\n%s", err, out)
		}
	})
	pa, err := agent.LoadPlan(file("a.plan.json"))
	if err != nil {
		t.Fatal(err)
	}
	transit := pa.Tunnels[0].Address.Addr().String()

	first := startAgentProcess(t, file("a.plan.json"), file("a.key"))
	if err := await.Poll(20*time.Second, await.NoError(func() error {
		peers, err := readPeers()
		if err != nil {
			return err
		}
		for _, p := range peers {
			if p.LastHandshakeTime.Unix() <= 0 {
				return fmt.Errorf("no handshake with b yet; agent log:\n%s", first.log.String())
			}
		}
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	pid, index, peer := wgdevPid(t), linkIndex(t), wgPeers(t)[0]

	ping := nstest.StartPing(t, os.Getenv("FEDNET_TEST_NETNS_B"), transit, 10*time.Millisecond)
	await.Until(t, 10*time.Second, func() (bool, string) { return len(ping.Replies()) >= 20, "no replies:\n" + ping.Output() })

	first.kill(t)
	second := startAgentProcess(t, file("a.plan.json"), file("a.key"))
	const adopted = "supervising the running userspace WireGuard for fed0"
	await.Until(t, 20*time.Second, func() (bool, string) {
		return strings.Contains(second.log.String(), adopted), "the new agent has not read the device yet:\n" + second.log.String()
	})
	// A second of pings with the new agent in charge.
	seen := len(ping.Replies())
	await.Until(t, 20*time.Second, func() (bool, string) {
		return len(ping.Replies()) >= seen+100, "pings stopped:\n" + ping.Output()
	})
	ping.Stop()
	replies := ping.Replies()
	lost := nstest.Lost(replies)
	t.Logf("10 ms pings from b through the tunnel across the agent's restart: %d answered, %d lost, longest gap %v",
		len(replies), lost, nstest.LongestGap(replies).Round(time.Millisecond))
	if lost != 0 {
		t.Errorf("%d pings lost across the agent restart:\n%s", lost, ping.Output())
	}
	if now := wgdevPid(t); now != pid {
		t.Errorf("the WireGuard process is %d, was %d", now, pid)
	}
	if now := linkIndex(t); now != index {
		t.Errorf("fed0 has index %d, had %d: it was made anew", now, index)
	}
	p := wgPeers(t)[0]
	if p.LastHandshakeTime.Before(peer.LastHandshakeTime) || p.ReceiveBytes < peer.ReceiveBytes || p.Endpoint.String() != peer.Endpoint.String() {
		t.Errorf("peer b was reset: before %+v, after %+v", peer, p)
	}
	log := second.log.String()
	if strings.Contains(log, "applied plan") || strings.Contains(log, "started (pid") {
		t.Errorf("the restarted agent changed the data plane:\n%s", log)
	}

	// The new agent supervises the device it adopted: killed, it is
	// replaced with its peer.
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	await.Until(t, 20*time.Second, func() (bool, string) {
		return strings.Contains(second.log.String(), "restarted it in"), "the adopted device was not replaced:\n" + second.log.String()
	})
	if now := wgdevPid(t); now == pid {
		t.Errorf("the WireGuard process is still %d", now)
	}
	if p := wgPeers(t)[0]; p.PublicKey != peer.PublicKey || len(p.AllowedIPs) != len(peer.AllowedIPs) {
		t.Errorf("after the replacement, peer %+v; want %+v", p, peer)
	}
	second.stop(t)
}

// agentProcess is a `fednet agent` process of the test.
type agentProcess struct {
	cmd  *exec.Cmd
	log  *nstest.Buffer
	done chan struct{}
}

// startAgentProcess runs `fednet agent --plan plan --key key` (this test binary
// as fednet) until the test ends.
func startAgentProcess(t *testing.T, plan, key string) *agentProcess {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	a := &agentProcess{log: &nstest.Buffer{}, done: make(chan struct{})}
	a.cmd = exec.Command(exe, "agent", "--plan", plan, "--key", key, "--wireguard", "userspace", "--metrics-listen", "")
	a.cmd.Env = append(os.Environ(), envMain+"=1")
	a.cmd.Stdout, a.cmd.Stderr = a.log, a.log
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		a.cmd.Wait()
		close(a.done)
	}()
	t.Cleanup(func() {
		a.cmd.Process.Kill()
		<-a.done
	})
	return a
}

// kill kills the agent with SIGKILL and waits until it is gone.
func (a *agentProcess) kill(t *testing.T) {
	t.Helper()
	a.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-a.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the agent outlived SIGKILL by 10 s")
	}
}

// stop stops the agent with SIGTERM.
func (a *agentProcess) stop(t *testing.T) {
	t.Helper()
	a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.done:
	case <-time.After(10 * time.Second):
		t.Errorf("the agent did not stop within 10 s of SIGTERM:\n%s", a.log.String())
	}
}

// wgdevPid returns the pid of the process running `wgdev fed0`.
func wgdevPid(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		args := strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
		if err == nil && slices.Contains(args, "wgdev") && args[len(args)-1] == "fed0" { // flags such as --tcp-fallback may come between
			pids = append(pids, pid)
		}
	}
	// Only this namespace's processes are ours; b's device is in another.
	var ours []int
	self, _ := os.Readlink("/proc/self/ns/net")
	for _, pid := range pids {
		if ns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid)); ns == self {
			ours = append(ours, pid)
		}
	}
	if len(ours) != 1 {
		t.Fatalf("wgdev fed0 processes in this namespace: %v", ours)
	}
	return ours[0]
}

func linkIndex(t *testing.T) int {
	t.Helper()
	link, err := netlink.LinkByName("fed0")
	if err != nil {
		t.Fatal(err)
	}
	return link.Attrs().Index
}

// wgPeers returns fed0's peers, b alone.
func wgPeers(t *testing.T) []wgtypes.Peer {
	t.Helper()
	peers, err := readPeers()
	if err != nil {
		t.Fatal(err)
	}
	return peers
}

func readPeers() ([]wgtypes.Peer, error) {
	c, err := wgctrl.New()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	dev, err := c.Device("fed0")
	if err != nil {
		return nil, fmt.Errorf("reading fed0: %w", err)
	}
	if len(dev.Peers) != 1 {
		return nil, fmt.Errorf("fed0 has %d peers, want b", len(dev.Peers))
	}
	return dev.Peers, nil
}
