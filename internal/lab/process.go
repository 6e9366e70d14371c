package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// StopTimeout is how long Stop and Down wait after SIGTERM before SIGKILL.
const StopTimeout = 3 * time.Second

// gatewayWrapper runs a program in a private mount namespace where the
// gateway's own directory is mounted on /run/wireguard, so userspace
// WireGuard control sockets of different gateways never collide. $1 is the
// directory, the rest is the program and its arguments. (/var/run is /run
// on Debian; mounting on /var/run/wireguard covers either layout.)
const gatewayWrapper = `d=$1; shift; mkdir -p /var/run/wireguard && mount --bind "$d" /var/run/wireguard && exec "$@"`

// Command returns a command that runs program name with args inside the
// node's network namespace (through `ip netns exec`). For a gateway, the
// program also sees the gateway's WireGuardDir as /run/wireguard, in a
// private mount namespace. The command is not started; ctx kills it as
// exec.CommandContext does, and Wait gives up on output pipes that a
// leftover child holds open two seconds after the program exits.
func (n *Node) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	argv := []string{"netns", "exec", n.Namespace}
	if n.Role == RoleGateway {
		argv = append(argv, "unshare", "--mount", "--propagation", "private",
			"sh", "-c", gatewayWrapper, "sh", n.WireGuardDir())
	}
	argv = append(argv, name)
	argv = append(argv, args...)
	cmd := exec.CommandContext(ctx, "ip", argv...)
	cmd.WaitDelay = 2 * time.Second
	return cmd
}

// Run runs a program in the node (see Command) and returns its combined
// output; a failure's error includes the output.
func (n *Node) Run(ctx context.Context, name string, args ...string) (string, error) {
	var out bytes.Buffer
	cmd := n.Command(ctx, name, args...)
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s in %s: %w: %s", name, strings.Join(args, " "), n.Name, err, tail(out.String(), 2000))
	}
	return out.String(), nil
}

// tail returns the last n bytes of s, trimmed.
func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		s = "..." + s[len(s)-n:]
	}
	return s
}

// Process is a long-lived program started by (*Lab).Start.
type Process struct {
	// Node the process runs in.
	Node *Node
	// Args are the program and its arguments.
	Args []string
	// PID of the program (after `ip netns exec` and the gateway wrapper
	// exec it, the PID is the program's own).
	PID int
	// Log is the file holding its standard output and error.
	Log string

	cmd  *exec.Cmd
	done chan struct{}
	err  error // set before done closes
}

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err returns the process's exit error once Done is closed (nil for exit
// status 0), and nil before.
func (p *Process) Err() error {
	select {
	case <-p.done:
		return p.err
	default:
		return nil
	}
}

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// LogText returns the process's log so far (at most the last 64 KiB).
func (p *Process) LogText() string {
	b, err := os.ReadFile(p.Log)
	if err != nil {
		return ""
	}
	return tail(string(b), 64<<10)
}

// Signal sends sig to the process unless it has exited.
func (p *Process) Signal(sig os.Signal) error {
	if p.Exited() {
		return nil
	}
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signalling %s (pid %d): %w", p.Args[0], p.PID, err)
	}
	return nil
}

// Stop ends the process: SIGTERM, then SIGKILL after StopTimeout (or when
// ctx ends), and waits for it to exit. Stopping an exited process is a
// no-op. It returns an error only if the process could not be ended; an
// exit caused by the signal is not an error.
func (p *Process) Stop(ctx context.Context) error {
	if err := p.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	t := time.NewTimer(StopTimeout)
	defer t.Stop()
	select {
	case <-p.done:
		return nil
	case <-t.C:
	case <-ctx.Done():
	}
	if err := p.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	// SIGKILL cannot be ignored; bound the wait anyway.
	select {
	case <-p.done:
		return nil
	case <-time.After(StopTimeout):
		return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.Args[0], p.PID)
	}
}

// wait reaps the process and records how it ended.
func (p *Process) wait(logFile *os.File) {
	err := p.cmd.Wait()
	logFile.Close()
	p.err = err
	close(p.done)
}
