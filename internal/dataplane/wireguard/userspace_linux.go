package wireguard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/fednet/fednet/internal/wgdev"
	"github.com/fednet/fednet/internal/wgdev/fallback"
)

// socketDir is where userspace WireGuard devices put their UAPI sockets.
const socketDir = "/var/run/wireguard"

// userspaceStartTimeout bounds the wait for a new userspace device.
const userspaceStartTimeout = 5 * time.Second

// process is a userspace device process this driver started.
type process struct {
	pid int
	// done is closed once the process exited and was reaped; err is then
	// its exit status (nil for status 0).
	done chan struct{}
	err  error
}

// startUserspace starts WGDevCommand+name (with the TCP fallback on
// fallbackPort unless 0) as a detached process (its own
// session, stdin /dev/null, output appended to the log file) that outlives
// the agent, and waits until its device answers on its UAPI socket. When
// no interface name exists it first makes it a persistent TUN (see
// makePersistentTUN), which the process attaches to; when one exists (a
// replaced process), the process attaches to it.
func (d *Driver) startUserspace(ctx context.Context, name string, fallbackPort int) (*process, error) {
	logPath := d.cfg.WGDevLog
	if logPath == "" {
		logPath = filepath.Join(socketDir, name+".log")
	}
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, fmt.Errorf("starting userspace WireGuard for %s: %w", name, err)
	}
	logFile, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("starting userspace WireGuard for %s: log file: %w", name, err)
	}
	defer logFile.Close()
	logStart, _ := logFile.Seek(0, io.SeekEnd)

	argv, err := d.wgdevCommand(name, fallbackPort)
	if err != nil {
		return nil, err
	}
	made := false
	if _, err := netlink.LinkByName(name); err != nil {
		if err := makePersistentTUN(name); err != nil {
			// The device then makes a TUN of its own, which goes with it.
			d.logf("wireguard: %v; the userspace device makes a TUN that dies with it", err)
		} else {
			made = true
		}
	}
	// undo deletes the persistent TUN made above when no device serves it.
	undo := func() {
		if made {
			if link, err := netlink.LinkByName(name); err == nil {
				netlink.LinkDel(link)
			}
		}
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		undo()
		return nil, fmt.Errorf("starting userspace WireGuard for %s (%s): %w", name, strings.Join(argv, " "), err)
	}
	p := &process{pid: cmd.Process.Pid, done: make(chan struct{})}
	d.pidsMu.Lock()
	d.pids = append(d.pids, p.pid)
	d.pidsMu.Unlock()
	// Reap the process when it exits (it normally outlives us).
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()

	deadline := time.Now().Add(userspaceStartTimeout)
	for {
		select {
		case <-p.done:
			undo()
			return nil, fmt.Errorf("userspace WireGuard for %s (%s, pid %d) exited at start: %v%s",
				name, strings.Join(argv, " "), p.pid, p.err, logTail(logPath, logStart))
		default:
		}
		if d.deviceAnswers(ctx, name) {
			d.logf("wireguard: userspace WireGuard for %s started (pid %d, log %s)", name, p.pid, logPath)
			return p, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			cmd.Process.Kill()
			undo()
			return nil, fmt.Errorf("userspace WireGuard for %s (%s, pid %d) did not answer within %v; killed it%s",
				name, strings.Join(argv, " "), p.pid, userspaceStartTimeout, logTail(logPath, logStart))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// makePersistentTUN creates the TUN interface name and makes it
// persistent (TUNSETPERSIST): it then lives on, with its addresses, MTU,
// routes and the VXLAN devices over it, when the process attached to it
// dies, and only the WireGuard device must be restored when a new process
// attaches. Deleting the interface (ip link del) still removes it, and
// the process attached exits. The flags are wireguard-go's.
func makePersistentTUN(name string) error {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("making persistent TUN %s: %w", name, err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return fmt.Errorf("making persistent TUN %s: %w", name, err)
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		return fmt.Errorf("making persistent TUN %s: TUNSETIFF: %w", name, err)
	}
	// Without persistence, closing fd removes the interface again.
	if err := unix.IoctlSetInt(fd, unix.TUNSETPERSIST, 1); err != nil {
		return fmt.Errorf("making persistent TUN %s: TUNSETPERSIST: %w", name, err)
	}
	return nil
}

// retireUserspace runs after the TUN interface of a userspace device was
// deleted; owner is the process that served it (0: unknown). A working
// device exits at once and removes its socket; wait for that, so that a new
// device of the same name finds the socket free, and for the process to be
// gone, so that it finds the UDP port free. A hung device (stopped,
// wedged) does neither: kill it, found by the socket's peer credentials,
// and remove its socket.
func (d *Driver) retireUserspace(ctx context.Context, name string, owner int) {
	sock := filepath.Join(socketDir, name+".sock")
	if !waitUntil(ctx, 2*time.Second, func() bool { _, err := os.Lstat(sock); return err != nil }) {
		if pid := socketOwner(sock); pid > 0 {
			d.logf("wireguard: userspace WireGuard for %s (pid %d) did not exit after its interface was deleted; killing it", name, pid)
			syscall.Kill(pid, syscall.SIGKILL)
			owner = pid
		}
		os.Remove(sock)
	}
	// Its UDP port is free only once it is dead: a new device that
	// starts before then fails to bind it when it comes up (wireguard-go
	// then runs with no port, and only logs it).
	if owner > 0 && !waitUntil(ctx, 5*time.Second, func() bool { return exited(owner) }) {
		d.logf("wireguard: userspace WireGuard for %s (pid %d) has not exited 5s after its interface was deleted", name, owner)
	}
}

// exited reports whether process pid is gone: no such process, or a zombie
// (dead, not yet reaped) none of whose threads still runs. A process's
// leader is a zombie as soon as its own thread exits; the files the
// process shares among its threads (its UDP socket) close with the last.
func exited(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// pid (comm) state ...; comm may hold spaces and parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if !(i < 0 || i+2 >= len(s) || s[i+2] == 'Z' || s[i+2] == 'X') {
		return false
	}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	return err != nil || len(tasks) <= 1
}

// socketOwner returns the pid of the process listening on the unix socket
// path, 0 if none.
func socketOwner(path string) int {
	c, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return 0
	}
	defer c.Close()
	raw, err := c.(*net.UnixConn).SyscallConn()
	if err != nil {
		return 0
	}
	pid := 0
	raw.Control(func(fd uintptr) {
		if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
			pid = int(cred.Pid)
		}
	})
	return pid
}

// deviceAnswers reports whether the interface exists and wgctrl reaches its
// WireGuard device.
func (d *Driver) deviceAnswers(ctx context.Context, name string) bool {
	if _, err := netlink.LinkByName(name); err != nil {
		return false
	}
	_, err := d.wgDevice(ctx, name)
	return err == nil
}

// wgdevCommand returns the argv that starts the userspace device name,
// with the TCP fallback on fallbackPort unless 0.
func (d *Driver) wgdevCommand(name string, fallbackPort int) ([]string, error) {
	argv := d.cfg.WGDevCommand
	if len(argv) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("starting userspace WireGuard for %s: finding this executable: %w", name, err)
		}
		argv = []string{exe, "wgdev"}
	}
	argv = slices.Clone(argv)
	if fallbackPort != 0 {
		argv = append(argv, "--tcp-fallback", strconv.Itoa(fallbackPort))
	}
	return append(argv, name), nil
}

func waitUntil(ctx context.Context, timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// logTail returns the log written since offset, shortened, for an error.
func logTail(path string, offset int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return ""
	}
	b, _ := io.ReadAll(io.LimitReader(f, 64<<10))
	s := strings.TrimSpace(string(b))
	if len(s) > 1000 {
		s = "..." + s[len(s)-1000:]
	}
	if s == "" {
		return " (log " + path + " is empty)"
	}
	return "; log " + path + ":\n" + s
}

// readFallback fills in the fallback of the userspace device name from
// the status file its bind writes (none: no fallback).
func readFallback(name string, dev *Device) error {
	st, err := fallback.ReadStatus(wgdev.FallbackStatusPath(name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	dev.FallbackPort = int(st.ListenPort)
	dev.OnStream = st.TCP
	return nil
}
