package wireguard

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// socketDir is where userspace WireGuard devices put their UAPI sockets.
const socketDir = "/var/run/wireguard"

// userspaceStartTimeout bounds the wait for a new userspace device.
const userspaceStartTimeout = 5 * time.Second

// startUserspace starts WGDevCommand+name as a detached process (its own
// session, stdin /dev/null, output appended to the log file) that outlives
// the agent, and waits until its device answers on its UAPI socket.
func (d *Driver) startUserspace(ctx context.Context, name string) error {
	logPath := d.cfg.WGDevLog
	if logPath == "" {
		logPath = filepath.Join(socketDir, name+".log")
	}
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return fmt.Errorf("starting userspace WireGuard for %s: %w", name, err)
	}
	logFile, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("starting userspace WireGuard for %s: log file: %w", name, err)
	}
	defer logFile.Close()
	logStart, _ := logFile.Seek(0, io.SeekEnd)

	argv, err := d.wgdevCommand(name)
	if err != nil {
		return err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting userspace WireGuard for %s (%s): %w", name, strings.Join(argv, " "), err)
	}
	pid := cmd.Process.Pid
	d.pidsMu.Lock()
	d.pids = append(d.pids, pid)
	d.pidsMu.Unlock()
	// Reap the process when it exits (it normally outlives us).
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	deadline := time.Now().Add(userspaceStartTimeout)
	for {
		select {
		case err := <-exited:
			return fmt.Errorf("userspace WireGuard for %s (%s, pid %d) exited at start: %v%s",
				name, strings.Join(argv, " "), pid, err, logTail(logPath, logStart))
		default:
		}
		if d.deviceAnswers(ctx, name) {
			d.logf("wireguard: userspace WireGuard for %s started (pid %d, log %s)", name, pid, logPath)
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			cmd.Process.Kill()
			return fmt.Errorf("userspace WireGuard for %s (%s, pid %d) did not answer within %v; killed it%s",
				name, strings.Join(argv, " "), pid, userspaceStartTimeout, logTail(logPath, logStart))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// retireUserspace runs after the TUN interface of a userspace device was
// deleted. A working device exits at once and removes its socket; wait for
// that, so that a new device of the same name finds the socket free. A hung
// device (stopped, wedged) does neither: kill it, found by the socket's peer
// credentials, and remove its socket.
func (d *Driver) retireUserspace(ctx context.Context, name string) {
	sock := filepath.Join(socketDir, name+".sock")
	if waitUntil(ctx, 2*time.Second, func() bool { _, err := os.Lstat(sock); return err != nil }) {
		return
	}
	if pid := socketOwner(sock); pid > 0 {
		d.logf("wireguard: userspace WireGuard for %s (pid %d) did not exit after its interface was deleted; killing it", name, pid)
		syscall.Kill(pid, syscall.SIGKILL)
		// Its UDP port is free only once it is dead.
		waitUntil(ctx, 5*time.Second, func() bool { return exited(pid) })
	}
	os.Remove(sock)
}

// exited reports whether process pid is gone or a zombie (dead, its files
// closed, not yet reaped).
func exited(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// pid (comm) state ...; comm may hold spaces and parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] == 'Z' || s[i+2] == 'X'
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

// wgdevCommand returns the argv that starts the userspace device name.
func (d *Driver) wgdevCommand(name string) ([]string, error) {
	argv := d.cfg.WGDevCommand
	if len(argv) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("starting userspace WireGuard for %s: finding this executable: %w", name, err)
		}
		argv = []string{exe, "wgdev"}
	}
	return append(slices.Clone(argv), name), nil
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
