package dataplane

import (
	"fmt"

	"github.com/fednet/fednet/internal/plan"
)

// Mode says which WireGuard implementation the Linux dataplane uses.
type Mode int

const (
	// Auto uses kernel WireGuard when the kernel has it, else userspace.
	Auto Mode = iota
	// Kernel uses kernel WireGuard only.
	Kernel
	// Userspace uses a userspace device (fednet wgdev, wireguard-go) only.
	Userspace
)

// String returns "auto", "kernel" or "userspace".
func (m Mode) String() string {
	switch m {
	case Auto:
		return "auto"
	case Kernel:
		return "kernel"
	case Userspace:
		return "userspace"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// ParseMode is the inverse of Mode.String.
func ParseMode(s string) (Mode, error) {
	for _, m := range []Mode{Auto, Kernel, Userspace} {
		if m.String() == s {
			return m, nil
		}
	}
	return Auto, fmt.Errorf("WireGuard mode %q is not valid: use auto, kernel or userspace", s)
}

// Config configures the Linux dataplane (NewLinux).
type Config struct {
	// PrivateKey is this gateway's WireGuard private key. Required.
	PrivateKey plan.Key
	// WireGuard chooses kernel or userspace WireGuard; Auto by default.
	WireGuard Mode
	// WGDevCommand is the argv that starts the userspace device; the
	// interface name is appended. The process must serve the UAPI socket
	// /var/run/wireguard/NAME.sock and live until its interface is deleted
	// (see package wgdev). Default: this executable with argument "wgdev".
	WGDevCommand []string
	// WGDevLog is the file the userspace device's output goes to, appended.
	// Default: /var/run/wireguard/NAME.log, next to its socket.
	WGDevLog string
	// Logf receives notices (a userspace device started, a dead one
	// replaced); nil discards them. Errors are returned, not logged.
	Logf func(format string, args ...any)
}
