//go:build linux

// Package nstest runs parts of a test inside fresh network namespaces, for
// tests that change the kernel (links, routes, nftables, WireGuard).
//
// The test binary re-executes itself inside the namespace with
//
//	ip netns exec NS unshare --mount --propagation private sh -c \
//	  'mkdir -p /run/wireguard && mount -t tmpfs fednet-test /run/wireguard && exec "$0" "$@"' \
//	  TESTBINARY -test.run '^TestName$' -test.v
//
// so the inner run sees only its own namespace and has a private
// /run/wireguard for userspace WireGuard sockets (or Netns.WireGuardDir
// bind-mounted there). The root namespace is never
// changed. A test looks like this:
//
//	func TestX(t *testing.T) {
//		if !nstest.Inner(t) {
//			ns := nstest.New(t)
//			ns.Run(t)
//			return
//		}
//		// runs inside ns
//	}
//
// Namespaces are deleted in t.Cleanup, after every process still inside is
// killed (by PID) and reported as a test error.
package nstest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/await"
)

const (
	envInner = "FEDNET_NSTEST_INNER"
	envPhase = "FEDNET_NSTEST_PHASE"
)

// Timeout bounds one inner run.
const Timeout = 2 * time.Minute

// Inner reports whether this process is an inner run of t, started by
// Netns.Run.
func Inner(t testing.TB) bool { return os.Getenv(envInner) == t.Name() }

// Phase returns the phase an inner run was started for (see Netns.RunPhase),
// "" for Netns.Run.
func Phase() string { return os.Getenv(envPhase) }

// Netns is a network namespace created for one test.
type Netns struct {
	Name string
	// WireGuardDir, when set, is bind-mounted on /run/wireguard in inner
	// runs instead of a fresh tmpfs, so that successive runs (an agent
	// restart) see the same userspace WireGuard sockets.
	WireGuardDir string
}

// tools are the programs New and Run need, with the Debian package that
// provides each.
var tools = []tool{
	{"ip", "iproute2"},
	{"unshare", "util-linux"},
	{"mount", "mount"},
	{"sh", "dash"},
}

// tool is a program a kernel test runs and the Debian package it comes in.
type tool struct{ name, pkg string }

// missingTools returns an error naming every one of tools that is not on
// PATH, with the Debian packages to install; nil when all are there.
func missingTools(tools []tool) error {
	var missing, pkgs []string
	for _, tl := range tools {
		if _, err := exec.LookPath(tl.name); err != nil {
			missing = append(missing, fmt.Sprintf("%s (Debian package %s)", tl.name, tl.pkg))
			pkgs = append(pkgs, tl.pkg)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("missing %s: install with `apt-get install %s`", strings.Join(missing, ", "), strings.Join(pkgs, " "))
}

// New creates a fresh network namespace named fn-dp-<random> with its
// loopback up. Not as root it skips t, saying so. As root (CI) every
// kernel test must run, so a missing tool (ip, unshare, mount, sh) fails
// t, naming the Debian packages to install, instead of skipping. The
// namespace is deleted in t.Cleanup after any process left in it is
// killed.
func New(t testing.TB) *Netns {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces (CI runs as root)")
	}
	if err := missingTools(tools); err != nil {
		t.Fatalf("kernel test %s cannot run: %v", t.Name(), err)
	}
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	n := &Netns{Name: "fn-dp-" + hex.EncodeToString(b[:])}
	if out, err := exec.Command("ip", "netns", "add", n.Name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", n.Name, err, out)
	}
	t.Cleanup(func() { n.cleanup(t) })
	n.Exec(t, "ip", "link", "set", "lo", "up")
	return n
}

// Exec runs argv inside the namespace (ip netns exec) and returns its
// combined output; a failure fails t.
func (n *Netns) Exec(t testing.TB, argv ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args := append([]string{"netns", "exec", n.Name}, argv...)
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip netns exec %s %s: %v: %s", n.Name, strings.Join(argv, " "), err, out)
	}
	return string(out)
}

// Run re-executes the current test (t.Name()) inside the namespace with a
// private /run/wireguard and fails t if the inner run fails. env entries
// (KEY=VALUE) are added to the inner environment.
func (n *Netns) Run(t testing.TB, env ...string) {
	t.Helper()
	n.RunPhase(t, "", env...)
}

// RunPhase is Run with Phase() returning phase in the inner run, for tests
// that run several steps in different namespaces.
func (n *Netns) RunPhase(t testing.TB, phase string, env ...string) {
	t.Helper()
	var pattern []string
	for _, part := range strings.Split(t.Name(), "/") {
		pattern = append(pattern, "^"+regexp.QuoteMeta(part)+"$")
	}
	// Not /proc/self/exe: in the shell that names the shell.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	const script = `mkdir -p /run/wireguard && ` +
		`if [ -n "$FEDNET_NSTEST_WGDIR" ]; then mount --bind "$FEDNET_NSTEST_WGDIR" /run/wireguard; ` +
		`else mount -t tmpfs fednet-test /run/wireguard; fi && exec "$0" "$@"`
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", n.Name,
		"unshare", "--mount", "--propagation", "private",
		"sh", "-c", script,
		self, "-test.run", strings.Join(pattern, "/"), "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), envInner+"="+t.Name(), envPhase+"="+phase, "FEDNET_NSTEST_WGDIR="+n.WireGuardDir)
	cmd.Env = append(cmd.Env, env...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	cmd.WaitDelay = 5 * time.Second
	err = cmd.Run()
	what := "inner run"
	if phase != "" {
		what += " (phase " + phase + ")"
	}
	t.Logf("%s in %s:\n%s", what, n.Name, indent(out.String()))
	if err != nil {
		t.Fatalf("%s in %s: %v", what, n.Name, err)
	}
	if !strings.Contains(out.String(), "--- PASS: "+t.Name()) {
		t.Fatalf("%s in %s did not run %s (no PASS line)", what, n.Name, t.Name())
	}
}

// Pids returns the processes whose network namespace is n.
func (n *Netns) Pids() ([]int, error) {
	var want syscall.Stat_t
	if err := syscall.Stat(filepath.Join("/run/netns", n.Name), &want); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join("/proc", e.Name(), "ns/net"), &st); err != nil {
			continue // gone, or a kernel thread
		}
		if st.Dev == want.Dev && st.Ino == want.Ino {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

func (n *Netns) cleanup(t testing.TB) {
	// A process may be on its way out (a userspace WireGuard device whose
	// interface was just deleted): give it a moment.
	var pids []int
	var listErr error
	_ = await.Poll(3*time.Second, func() (bool, string) {
		pids, listErr = n.Pids()
		return listErr == nil && len(pids) == 0, fmt.Sprintf("%d processes left", len(pids))
	})
	if listErr != nil && !errors.Is(listErr, os.ErrNotExist) {
		t.Errorf("listing processes in %s: %v", n.Name, listErr)
	}
	for _, pid := range pids {
		t.Errorf("process %d (%s) was left in %s; killing it", pid, cmdline(pid), n.Name)
		syscall.Kill(pid, syscall.SIGKILL)
	}
	if len(pids) > 0 {
		if err := await.Poll(5*time.Second, func() (bool, string) {
			left, _ := n.Pids()
			return len(left) == 0, fmt.Sprintf("processes %v still in %s after SIGKILL", left, n.Name)
		}); err != nil {
			t.Error(err)
		}
	}
	if out, err := exec.Command("ip", "netns", "del", n.Name).CombinedOutput(); err != nil {
		t.Errorf("ip netns del %s: %v: %s", n.Name, err, out)
	}
}

func cmdline(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
}

func indent(s string) string {
	return "\t" + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n\t")
}

// PidGone waits up to timeout for process pid to exit (and be reaped) and
// reports whether it did.
func PidGone(pid int, timeout time.Duration) bool {
	return await.Poll(timeout, func() (bool, string) {
		return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH), fmt.Sprintf("process %d is alive", pid)
	}) == nil
}
