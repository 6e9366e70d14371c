package controlplane

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fednet/fednet/internal/client"
	"github.com/fednet/fednet/internal/manager"
)

// managerProc is one fednet manager process of the bench.
type managerProc struct {
	name    string
	dir     string // data directory
	addr    string // 127.0.0.1:PORT
	log     string // its log file
	args    []string
	binary  string
	cmd     *exec.Cmd
	done    chan struct{}
	started time.Time
	starts  int // how many times start ran
	// logFrom is the size of the log when the process started: what it
	// wrote since is after it.
	logFrom int64
}

func (m *managerProc) url() string { return "https://" + m.addr }

// freePort returns a free loopback address.
func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// start runs the manager process (again).
func (m *managerProc) start() error {
	logf, err := os.OpenFile(m.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(m.binary, m.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.WaitDelay = 2 * time.Second
	m.starts++
	cmd.Env = os.Environ()
	if dir := os.Getenv(ProfileEnv); dir != "" {
		cmd.Env = append(cmd.Env, fmt.Sprintf("%s=%s", manager.ProfileEnv, filepath.Join(dir, fmt.Sprintf("%s-%d.pprof", m.name, m.starts))),
			fmt.Sprintf("%s=%s", manager.HeapProfileEnv, filepath.Join(dir, fmt.Sprintf("%s-%d.heap.pprof", m.name, m.starts))))
	}
	if os.Getenv("GODEBUG") == "" {
		// A line per garbage collection, with its CPU time, on the log:
		// gcCPU counts each change's.
		cmd.Env = append(cmd.Env, "GODEBUG=gctrace=1")
	}
	if fi, err := logf.Stat(); err == nil {
		m.logFrom = fi.Size()
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("starting manager %s: %w", m.name, err)
	}
	m.cmd, m.done, m.started = cmd, make(chan struct{}), time.Now()
	go func() {
		cmd.Wait()
		logf.Close()
		close(m.done)
	}()
	return nil
}

// stop ends the process: SIGTERM (the manager shuts down gracefully),
// SIGKILL after ten seconds.
func (m *managerProc) stop() {
	if m.cmd == nil {
		return
	}
	select {
	case <-m.done:
		return
	default:
	}
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.done:
		return
	case <-time.After(10 * time.Second):
	}
	_ = m.cmd.Process.Signal(syscall.SIGKILL)
	<-m.done
}

// running reports whether the process runs.
func (m *managerProc) running() bool {
	if m.cmd == nil {
		return false
	}
	select {
	case <-m.done:
		return false
	default:
		return true
	}
}

// waitUp waits until the manager answers over TLS (pinned to fp), at most
// until ctx ends; it fails at once when the process exits, with its log's
// end.
func (m *managerProc) waitUp(ctx context.Context, fp string) error {
	cl, err := client.New(client.Config{URL: m.url(), CAFingerprint: fp, Timeout: 2 * time.Second})
	if err != nil {
		return err
	}
	defer cl.Close()
	for {
		_, err := cl.Revisions(ctx) // 401 without a token: it answers
		if err == nil || client.StatusOf(err) != 0 {
			return nil
		}
		if !m.running() {
			return fmt.Errorf("manager %s exited: %s", m.name, tailFile(m.log, 2000))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("manager %s did not answer: %w (%v)", m.name, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// caFingerprint reads the CA certificate of a data directory.
func caFingerprint(dir string) (string, error) {
	data, err := os.ReadFile(filepath.Join(dir, manager.CACertFile))
	if err != nil {
		return "", err
	}
	b, _ := pem.Decode(data)
	if b == nil {
		return "", fmt.Errorf("%s holds no certificate", manager.CACertFile)
	}
	sum := sha256.Sum256(b.Bytes)
	return hex.EncodeToString(sum[:]), nil
}

// waitFile waits for a file to appear (the first manager writes its CA and
// admin token at start).
func waitFile(ctx context.Context, path string, m *managerProc) error {
	for {
		if fi, err := os.Stat(path); err == nil && fi.Size() > 0 {
			return nil
		}
		if !m.running() {
			return fmt.Errorf("manager %s exited: %s", m.name, tailFile(m.log, 2000))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", path, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func copyFiles(from, to string, names ...string) error {
	if err := os.MkdirAll(to, 0o700); err != nil {
		return err
	}
	for _, n := range names {
		data, err := os.ReadFile(filepath.Join(from, n))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(to, n), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

func tailFile(path string, n int) string {
	data, _ := os.ReadFile(path)
	s := strings.TrimSpace(string(data))
	if len(s) > n {
		s = "..." + s[len(s)-n:]
	}
	return s
}

// usage is a process's CPU time and peak resident memory.
type usage struct {
	cpu  time.Duration
	peak int64 // bytes (VmHWM)
	rss  int64 // bytes (VmRSS)
}

// clockTick is the kernel's USER_HZ, 100 on Linux.
const clockTick = 100

// kiB parses a /proc/PID/status size (" 1234 kB") into bytes.
func kiB(v string) int64 {
	kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
	return kb << 10
}

// processUsage reads /proc for pid.
func processUsage(pid int) (usage, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return usage{}, err
	}
	// Fields after the command (which may hold spaces) start after ")".
	rest := string(stat)
	if i := strings.LastIndexByte(rest, ')'); i >= 0 {
		rest = rest[i+2:]
	}
	f := strings.Fields(rest)
	if len(f) < 13 {
		return usage{}, errors.New("short /proc stat")
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	u := usage{cpu: time.Duration(ut+st) * time.Second / clockTick}
	status, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, err
	}
	defer status.Close()
	sc := bufio.NewScanner(status)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			u.peak = kiB(v)
		}
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			u.rss = kiB(v)
		}
	}
	return u, nil
}

// plannedLine is the manager's log line for one planning: how many
// plans, how long, for which generation, and how (how many plans were
// edited and how many computed whole, and why).
var plannedLine = regexp.MustCompile(`planned (\d+) gateways in ([0-9.]+) ms \(generation (\d+)\)(?:: ([^\n]*))?`)

// planning is one planning of a manager's log.
type planning struct {
	ms  float64
	how string
}

// plannings returns, from a manager's log, how long its planning of each
// generation took, in milliseconds, and how it went.
func plannings(logPath string) map[int64]planning {
	out := map[int64]planning{}
	data, err := os.ReadFile(logPath)
	if err != nil {
		return out
	}
	for _, m := range plannedLine.FindAllStringSubmatch(string(data), -1) {
		ms, _ := strconv.ParseFloat(m[2], 64)
		gen, _ := strconv.ParseInt(m[3], 10, 64)
		out[gen] = planning{ms: ms, how: m[4]}
	}
	return out
}

// gcLine is the Go runtime's line for one garbage collection with
// GODEBUG=gctrace=1: when (seconds since the process started) and its CPU
// time in milliseconds, by phase ("0.02+1.2/0.8/3.1+0.01 ms cpu").
var gcLine = regexp.MustCompile(`(?m)^gc \d+ @([0-9.]+)s [^:]*: [^,]* ms clock, ([0-9.+/]+) ms cpu`)

// gcCPU returns the CPU time of the garbage collections of the manager's
// current process that began between from and to, from its log.
func (m *managerProc) gcCPU(from, to time.Time) time.Duration {
	f, err := os.Open(m.log)
	if err != nil {
		return 0
	}
	defer f.Close()
	if _, err := f.Seek(m.logFrom, io.SeekStart); err != nil {
		return 0
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return 0
	}
	var sum time.Duration
	for _, l := range gcLine.FindAllSubmatch(data, -1) {
		at, err := strconv.ParseFloat(string(l[1]), 64)
		if err != nil {
			continue
		}
		if t := m.started.Add(time.Duration(at * float64(time.Second))); t.Before(from) || t.After(to) {
			continue
		}
		for _, part := range strings.FieldsFunc(string(l[2]), func(r rune) bool { return r == '+' || r == '/' }) {
			if ms, err := strconv.ParseFloat(part, 64); err == nil {
				sum += time.Duration(ms * float64(time.Millisecond))
			}
		}
	}
	return sum
}

// spansLine is the manager's log line of where a spec change's time
// went; spanPart one part of it.
var (
	spansLine = regexp.MustCompile(`change of generation (\d+) \([^)]*\): (.*)`)
	spanPart  = regexp.MustCompile(`([a-z-]+) ([0-9.]+) ms`)
)

// applySpans returns, from a manager's log, where the time of each change
// it made went (see manager logSpans), by generation, in milliseconds by
// part.
func applySpans(logPath string) map[int64]map[string]float64 {
	out := map[int64]map[string]float64{}
	data, err := os.ReadFile(logPath)
	if err != nil {
		return out
	}
	for _, m := range spansLine.FindAllStringSubmatch(string(data), -1) {
		gen, _ := strconv.ParseInt(m[1], 10, 64)
		parts := map[string]float64{}
		for _, p := range spanPart.FindAllStringSubmatch(m[2], -1) {
			parts[p[1]], _ = strconv.ParseFloat(p[2], 64)
		}
		out[gen] = parts
	}
	return out
}

// group runs f on every manager at once and waits.
func group(ms []*managerProc, f func(*managerProc)) {
	var wg sync.WaitGroup
	for _, m := range ms {
		wg.Go(func() { f(m) })
	}
	wg.Wait()
}
