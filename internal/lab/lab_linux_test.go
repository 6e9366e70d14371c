//go:build linux

package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/await"
)

// needRoot skips tests that build namespaces unless running as root.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("lab tests need root to create network namespaces (CI runs as root)")
	}
	for _, tool := range []string{"ip", "unshare", "ping", "iperf3", "tcpdump"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("lab tests need %s: %v (make deps installs it)", tool, err)
		}
	}
	cleanStale(t)
}

// testName names a lab after this test process, so concurrent test runs
// on one machine never share a lab.
func testName(suffix string) string { return "t" + strconv.Itoa(os.Getpid()) + suffix }

var staleRE = regexp.MustCompile(`^` + Prefix + `(t(\d+)[a-z]+)-`)

// cleanStale removes labs left by test processes that no longer run.
func cleanStale(t *testing.T) {
	entries, _ := os.ReadDir(netnsDir)
	done := map[string]bool{}
	for _, e := range entries {
		m := staleRE.FindStringSubmatch(e.Name())
		if m == nil || done[m[1]] {
			continue
		}
		done[m[1]] = true
		pid, _ := strconv.Atoi(m[2])
		if syscall.Kill(pid, 0) == nil || pid == os.Getpid() {
			continue // its test process still runs
		}
		t.Logf("removing lab %s left by test process %d", m[1], pid)
		if err := Down(context.Background(), m[1]); err != nil {
			t.Logf("removing stale lab %s: %v", m[1], err)
		}
	}
}

// rootState renders the root namespace's links, addresses and routes.
func rootState(t *testing.T) string {
	t.Helper()
	var out []string
	var addrs []struct {
		IfName   string `json:"ifname"`
		AddrInfo []struct {
			Local     string `json:"local"`
			PrefixLen int    `json:"prefixlen"`
		} `json:"addr_info"`
	}
	ipJSON(t, &addrs, "-j", "addr")
	for _, l := range addrs {
		out = append(out, "link "+l.IfName)
		for _, a := range l.AddrInfo {
			out = append(out, fmt.Sprintf("addr %s %s/%d", l.IfName, a.Local, a.PrefixLen))
		}
	}
	for _, fam := range []string{"-4", "-6"} {
		var routes []map[string]any
		ipJSON(t, &routes, fam, "-j", "route", "show", "table", "all")
		for _, r := range routes {
			out = append(out, fmt.Sprintf("route %v %v %v %v %v", r["table"], r["type"], r["dst"], r["gateway"], r["dev"]))
		}
	}
	slices.Sort(out)
	return strings.Join(out, "\n")
}

func ipJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	b, err := exec.Command("ip", args...).Output()
	if err != nil {
		t.Fatalf("ip %v: %v", args, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("ip %v: %v", args, err)
	}
}

func TestLab(t *testing.T) {
	needRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	before := rootState(t)
	name := testName("e")

	start := time.Now()
	l, err := Up(ctx, Config{Federation: threeSites(), Name: name})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("up: %d namespaces in %v", len(l.Nodes()), time.Since(start).Round(time.Millisecond))
	t.Cleanup(func() { _ = l.Down(context.Background()) })
	aws, azure, onprem := l.Gateway("aws-gw"), l.Gateway("azure-gw"), l.Gateway("onprem-gw")

	if _, err := Up(ctx, Config{Federation: threeSites(), Name: name}); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("second Up of lab %s: %v, want an 'already exists' error", name, err)
	}

	t.Run("Open", func(t *testing.T) {
		o, err := Open(ctx, Config{Federation: threeSites(), Name: name})
		if err != nil {
			t.Fatal(err)
		}
		if o.Node("lab-h2").LAN != l.Node("lab-h2").LAN || o.Dir != l.Dir {
			t.Errorf("Open gave another layout")
		}
		f := threeSites()
		f.Sites = f.Sites[:2]
		if _, err := Open(ctx, Config{Federation: f, Name: name}); err == nil || !strings.Contains(err.Error(), "does not match") {
			t.Errorf("Open with another spec: %v", err)
		}
		if _, err := Open(ctx, Config{Federation: f, Name: testName("none")}); err == nil || !strings.Contains(err.Error(), "does not exist") {
			t.Errorf("Open of a missing lab: %v", err)
		}
	})

	t.Run("HostsReachTheirGateway", func(t *testing.T) {
		for _, s := range l.Sites() {
			gw := l.SiteGateways(s)[0]
			for _, h := range l.Hosts(s) {
				r, err := Ping(ctx, h, gw.LAN.Addr(), 2, 20*time.Millisecond)
				if err != nil || r.Received != 2 || len(r.RTTs) != 2 || r.Avg <= 0 {
					t.Errorf("%s -> %s (%s): %v, %v", h, gw, gw.LAN.Addr(), r, err)
				}
			}
		}
	})

	// Echo, this process's own pinger, against the kernel: every request
	// answered with a round trip like ping's; to a host the sites do not
	// route to, every request sent and none answered, without an error; to
	// an address with no route, an error.
	t.Run("Echo", func(t *testing.T) {
		h := l.Hosts("aws-eu")[0]
		gw := l.SiteGateways("aws-eu")[0]
		const n = 20
		start := time.Now()
		r, err := Echo(ctx, h, gw.LAN.Addr(), n, 10*time.Millisecond)
		took := time.Since(start)
		if err != nil || r.Sent != n || r.Received != n || len(r.RTTs) != n {
			t.Fatalf("%s -> %s: %v, %v; want %d sent and answered", h, gw.LAN.Addr(), r, err, n)
		}
		for _, d := range r.RTTs {
			if d <= 0 || d >= ProbeTimeout {
				t.Errorf("round trip %v, want within (0, %v)", d, ProbeTimeout)
			}
		}
		if r.Min > r.Avg || r.Avg > r.Max || r.Min <= 0 {
			t.Errorf("min/avg/max %v/%v/%v out of order", r.Min, r.Avg, r.Max)
		}
		// 19 intervals apart: at least 190 ms; the replies all came, so
		// no waiting for late ones.
		if took < 19*10*time.Millisecond || took > ProbeTimeout+5*time.Second {
			t.Errorf("%d requests 10 ms apart took %v", n, took)
		}
		other := l.Hosts("azure-we")[0]
		r, err = Echo(ctx, h, other.LAN.Addr(), 2, 20*time.Millisecond)
		if err != nil || r.Sent != 2 || r.Received != 0 || len(r.RTTs) != 0 {
			t.Errorf("%s -> %s (no route back): %v, %v; want 2 sent, none answered", h, other, r, err)
		}
		// No route there at all: no request leaves, which is an error.
		if r, err := Echo(ctx, h, gw.Public.Addr(), 2, 20*time.Millisecond); err == nil || !strings.Contains(err.Error(), "unreachable") || r.Received != 0 {
			t.Errorf("%s -> %s (no route): %v, %v; want a 'network is unreachable' error", h, gw.Public.Addr(), r, err)
		}
	})

	t.Run("GatewaysReachEachOther", func(t *testing.T) {
		for _, a := range l.Gateways() {
			for _, b := range l.Gateways() {
				if a == b {
					continue
				}
				r, err := Ping(ctx, a, b.Public.Addr(), 2, 20*time.Millisecond)
				if err != nil || r.Received != 2 {
					t.Errorf("%s -> %s (%s): %v, %v", a, b, b.Public.Addr(), r, err)
				}
			}
		}
	})

	t.Run("SitesIsolatedWithoutTunnels", func(t *testing.T) {
		h1, h2 := l.Hosts("aws-eu")[0], l.Hosts("azure-we")[0]
		r, err := Ping(ctx, h1, h2.LAN.Addr(), 2, 20*time.Millisecond)
		if err != nil || r.Sent != 2 || r.Received != 0 {
			t.Errorf("%s -> %s: %v, %v; want 2 sent, none received", h1, h2, r, err)
		}
		// A host has no route but the supernet's: the internet is unreachable.
		if r, err := Ping(ctx, h1, aws.Public.Addr(), 1, 20*time.Millisecond); err == nil && r.Received > 0 {
			t.Errorf("%s reached %s: %v", h1, aws.Public.Addr(), r)
		}
	})

	t.Run("Routes", func(t *testing.T) {
		h := l.Hosts("lab")[1]
		out, err := h.Run(ctx, "ip", "-4", "-o", "route", "show", "table", "main")
		if err != nil {
			t.Fatal(err)
		}
		got := strings.Join(strings.Fields(out), " ")
		want := "10.0.0.0/8 via 10.5.0.254 dev eth0 10.5.0.0/24 dev eth0 proto kernel scope link src 10.5.0.2"
		if got != want {
			t.Errorf("routes of %s:\n%s\nwant\n%s", h, got, want)
		}
		out, err = onprem.Run(ctx, "ip", "-4", "-o", "addr", "show", "dev", PublicInterface)
		if err != nil || !strings.Contains(out, "inet 198.51.100.30/32") {
			t.Errorf("public address of %s: %q, %v", onprem, out, err)
		}
	})

	t.Run("GatewayPrivateRunWireGuard", func(t *testing.T) {
		const probe = "fednet-lab-probe.sock"
		real := filepath.Join("/run/wireguard", probe)
		if exists(real) {
			t.Fatalf("%s exists before the test", real)
		}
		if _, err := aws.Run(ctx, "sh", "-c", "echo x > /run/wireguard/"+probe); err != nil {
			t.Fatal(err)
		}
		if !exists(filepath.Join(aws.WireGuardDir(), probe)) {
			t.Errorf("%s not in %s", probe, aws.WireGuardDir())
		}
		if _, err := aws.Run(ctx, "test", "-e", "/var/run/wireguard/"+probe); err != nil {
			t.Errorf("a second command in %s does not see its /var/run/wireguard: %v", aws, err)
		}
		if _, err := azure.Run(ctx, "test", "!", "-e", "/run/wireguard/"+probe); err != nil {
			t.Errorf("%s sees %s's /run/wireguard: %v", azure, aws, err)
		}
		if exists(real) {
			t.Errorf("%s leaked into the real /run/wireguard", probe)
		}
		mounts, _ := os.ReadFile("/proc/self/mountinfo")
		if strings.Contains(string(mounts), aws.WireGuardDir()) {
			t.Errorf("the bind mount of %s leaked into the test's mount namespace", aws.WireGuardDir())
		}
	})

	t.Run("Iperf3Underlay", func(t *testing.T) {
		tp, err := Iperf3(ctx, aws, azure, azure.Public.Addr(), time.Second, 1)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("iperf3 %s -> %s over the bare underlay: %v", aws, azure, tp)
		if tp.Mbps <= 0 || tp.Duration <= 0 {
			t.Errorf("throughput %v", tp)
		}
	})

	t.Run("CaptureAndAnalyze", func(t *testing.T) {
		c, err := StartCapture(ctx, l)
		if err != nil {
			t.Fatal(err)
		}
		// ICMP between gateways (same range and across ranges): not WireGuard.
		for _, to := range []*Node{onprem, azure} {
			if r, err := Ping(ctx, aws, to.Public.Addr(), 3, 20*time.Millisecond); err != nil || r.Received != 3 {
				t.Fatalf("ping %s: %v, %v", to, r, err)
			}
		}
		// A UDP flow on the WireGuard port: counted as WireGuard.
		var recv, send *net.UDPConn
		if err := azure.Do(func() (err error) {
			recv, err = net.ListenUDP("udp4", &net.UDPAddr{IP: azure.Public.Addr().AsSlice(), Port: 51820})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer recv.Close()
		if err := aws.Do(func() (err error) {
			send, err = net.DialUDP("udp4", &net.UDPAddr{Port: 51820}, &net.UDPAddr{IP: azure.Public.Addr().AsSlice(), Port: 51820})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer send.Close()
		const datagrams = 20
		for i := range datagrams {
			if _, err := fmt.Fprintf(send, "datagram %d", i); err != nil {
				t.Fatal(err)
			}
		}
		got := 0
		buf := make([]byte, 1500)
		_ = recv.SetReadDeadline(time.Now().Add(3 * time.Second))
		for got < datagrams {
			if _, err := recv.Read(buf); err != nil {
				break
			}
			got++
		}
		if got != datagrams {
			t.Errorf("received %d of %d datagrams", got, datagrams)
		}
		// An overlay address sent in clear: the leak the wire check exists for.
		if _, err := Ping(ctx, aws, l.Hosts("azure-we")[0].LAN.Addr(), 1, 20*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		path, err := c.Stop()
		if err != nil {
			t.Fatal(err)
		}
		r, err := AnalyzeWire(path, l.Supernet, 51820)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("wire: %v; dropped %d; plaintext %q", r, c.Dropped(), r.PlaintextSamples)
		// Each packet a gateway sends is captured once, entering the router.
		if r.NonWireGuard != 12 || r.WireGuard != datagrams || r.Plaintext != 1 || r.Gateway != 12+datagrams {
			t.Errorf("wire report %v; want 12 ICMP packets between gateways, %d WireGuard, 1 plaintext", r, datagrams)
		}
	})

	t.Run("StatusAndDown", func(t *testing.T) {
		tracked, err := l.Start(aws, "sleep", "300")
		if err != nil {
			t.Fatal(err)
		}
		host := l.Hosts("aws-eu")[0]
		untracked := host.Command(context.Background(), "sleep", "300")
		if err := untracked.Start(); err != nil {
			t.Fatal(err)
		}
		untrackedDone := make(chan struct{})
		go func() { _ = untracked.Wait(); close(untrackedDone) }()
		if tracked.Exited() {
			t.Fatalf("sleep exited at once: %s", tracked.LogText())
		}
		// Processes join their namespace a moment after Start returns.
		var st State
		await.Until(t, 5*time.Second, func() (bool, string) {
			st, err = Status(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			pids := map[int]bool{}
			for _, ns := range st.Namespaces {
				for _, p := range ns.Processes {
					pids[p.PID] = true
				}
			}
			return pids[tracked.PID] && pids[untracked.Process.Pid], fmt.Sprintf("status lacks the sleeps %d and %d:\n%s", tracked.PID, untracked.Process.Pid, st)
		})
		if len(st.Namespaces) != len(l.Nodes()) || st.Dir != l.Dir {
			t.Errorf("status:\n%s", st)
		}
		t.Logf("status:\n%s", st)

		start := time.Now()
		if err := l.Down(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("down: %v", time.Since(start).Round(time.Millisecond))
		if !tracked.Exited() {
			t.Errorf("tracked process %d still runs", tracked.PID)
		}
		select {
		case <-untrackedDone:
		case <-time.After(5 * time.Second):
			t.Errorf("untracked process %d still runs", untracked.Process.Pid)
		}
		if st, err := Status(ctx, name); err != nil || st.Exists() {
			t.Errorf("after Down: %v\n%s", err, st)
		}
		if exists(l.Dir) {
			t.Errorf("state directory %s left behind", l.Dir)
		}
		if err := l.Down(ctx); err != nil {
			t.Errorf("second Down: %v", err)
		}
		if err := Down(ctx, name); err != nil {
			t.Errorf("package Down after Down: %v", err)
		}
	})

	if after := rootState(t); after != before {
		t.Errorf("root namespace changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

func TestLabDownAfterCrash(t *testing.T) {
	needRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := testName("c")
	f := threeSites()
	f.Sites = f.Sites[:2]
	l, err := Up(ctx, Config{Federation: f, Name: name, HostsPerSite: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = Down(context.Background(), name) })
	// Processes the program that built the lab does not know about, and
	// that are not its children: what a crashed `fednet lab demo` leaves.
	for _, n := range []*Node{l.Gateways()[0], l.Hosts("azure-we")[0], l.Internet} {
		if _, err := n.Run(ctx, "sh", "-c", "sleep 300 >/dev/null 2>&1 &"); err != nil {
			t.Fatal(err)
		}
	}
	// One ignores SIGTERM: Down must fall back to SIGKILL.
	if _, err := l.Gateways()[1].Run(ctx, "sh", "-c", "(trap '' TERM; exec sleep 300) >/dev/null 2>&1 &"); err != nil {
		t.Fatal(err)
	}
	dir := l.Dir
	l = nil // the crash: only the name is left

	st, err := Status(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, ns := range st.Namespaces {
		for _, p := range ns.Processes {
			pids = append(pids, p.PID)
		}
	}
	if len(st.Namespaces) != 7 || len(pids) != 4 {
		t.Fatalf("before Down, want 7 namespaces and 4 processes:\n%s", st)
	}
	if err := Down(ctx, name); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if running(pid) {
			t.Errorf("process %d survived Down", pid)
		}
	}
	if st, err := Status(ctx, name); err != nil || st.Exists() {
		t.Errorf("after Down: %v\n%s", err, st)
	}
	if exists(dir) {
		t.Errorf("state directory %s left behind", dir)
	}
	if err := Down(ctx, name); err != nil {
		t.Errorf("second Down: %v", err)
	}
	if err := Down(ctx, testName("never")); err != nil {
		t.Errorf("Down of a lab that never existed: %v", err)
	}
	if err := Down(ctx, "Bad-Name"); err == nil {
		t.Error("Down accepted an invalid lab name")
	}
}

func TestUpFailureLeavesNothing(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "precious"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// Refused before anything is built.
	_, err := Up(context.Background(), Config{Federation: threeSites(), Name: testName("d"), Dir: dir})
	if err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("Up in a foreign non-empty directory: %v", err)
	}
	if !exists(filepath.Join(dir, "precious")) {
		t.Error("Up removed a file it does not own")
	}
	if st, _ := Status(context.Background(), testName("d")); st.Exists() {
		t.Errorf("Up left something behind:\n%s", st)
	}

	// Failing half way (no veth takes this MTU) removes what was built.
	f := threeSites()
	f.Overlay.UnderlayMTU = 70000
	_, err = Up(context.Background(), Config{Federation: f, Name: testName("d")})
	if err == nil || !strings.Contains(err.Error(), "adding veth") {
		t.Errorf("Up with MTU 70000: %v; want a failure adding a veth", err)
	}
	if st, _ := Status(context.Background(), testName("d")); st.Exists() {
		t.Errorf("failed Up left something behind:\n%s", st)
	}
}

// TestLabManager: a lab with a manager node puts it on the internet with a
// public address of its own that gateways reach and hosts do not.
func TestLabManager(t *testing.T) {
	needRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := testName("m")
	t.Cleanup(func() { Down(context.Background(), name) })
	l, err := Up(ctx, Config{Federation: threeSites(), Name: name, Manager: true})
	if err != nil {
		t.Fatal(err)
	}
	m := l.Manager
	if m == nil || m.Role != RoleManager || !m.Public.IsValid() || l.Node("manager") != m {
		t.Fatalf("manager node %+v", m)
	}
	for _, g := range l.Gateways() {
		if g.Public == m.Public {
			t.Errorf("manager and %s share %s", g, m.Public)
		}
		if r, err := Ping(ctx, g, m.Public.Addr(), 1, 200*time.Millisecond); err != nil || r.Received != 1 {
			t.Errorf("%s -> manager %s: %v %v", g, m.Public.Addr(), r, err)
		}
	}
	h := l.Hosts(l.Sites()[0])[0]
	if r, err := Ping(ctx, h, m.Public.Addr(), 1, 200*time.Millisecond); err == nil && r.Received != 0 {
		t.Errorf("host %s reaches the manager's public address without a gateway route", h)
	}
	if err := l.Down(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _ := Status(ctx, name); st.Exists() {
		t.Errorf("left behind:\n%s", st)
	}
}
