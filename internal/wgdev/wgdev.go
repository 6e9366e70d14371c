// Package wgdev runs a userspace WireGuard device (wireguard-go) for
// machines whose kernel has no WireGuard module.
//
// The device is meant to live in its own long-lived process ("fednet wgdev
// fed0"), separate from the agent, so that restarting the agent never drops
// a tunnel. It is configured like a kernel device: through the standard UAPI
// socket /var/run/wireguard/NAME.sock, which wgctrl and the wg tool speak.
// That path is shared by every network namespace of a machine; several
// devices with the same name on one machine need private mounts of
// /run/wireguard, and a process that configures a device must see the same
// mount as the device (an agent restarted with a fresh mount would not find
// its device).
//
// The device stops when its interface is deleted: wireguard-go closes the
// device when reading the TUN fails, which it does at once after
// `ip link del NAME` (measured: Run returns within ~20-35 ms). So deleting
// the interface is how the dataplane stops a userspace device.
//
// When the interface exists already, Run attaches to it instead of
// creating it: the agent makes it a persistent TUN first, so that it
// outlives a device process that dies (with its addresses and routes) and
// a replacement attaches to it (docs/dataplane.md). A persistent TUN stays
// when Run returns; one Run created stays only as long as Run.
package wgdev

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// MTU is the MTU the TUN interface is created with; the dataplane sets the
// plan's MTU afterwards.
const MTU = 1420

// SocketDir is where wireguard-go puts the UAPI sockets.
const SocketDir = "/var/run/wireguard"

// SocketPath returns the UAPI socket path of the device name.
func SocketPath(name string) string { return SocketDir + "/" + name + ".sock" }

// ErrUnsupported is returned by Run on platforms fednet has no userspace
// device for.
var ErrUnsupported = errors.New("userspace WireGuard is only supported on Linux")

// validName reports why name cannot be an interface name, or nil.
func validName(name string) error {
	switch {
	case name == "":
		return errors.New("interface name is empty")
	case len(name) > 15:
		return errors.New("interface name " + name + " is longer than 15 bytes")
	}
	for _, r := range name {
		if r == '/' || r == ':' || r <= ' ' || r > '~' {
			return errors.New("interface name " + name + " has a character that is not allowed (/, :, space or non-ASCII)")
		}
	}
	if name == "." || name == ".." {
		return errors.New("interface name " + name + " is not allowed")
	}
	return nil
}

// VerboseEnv, when set to anything in the environment of `fednet wgdev` (or
// of the agent that starts it), makes the device log wireguard-go's
// verbose messages: handshakes, keepalives, timers.
const VerboseEnv = "FEDNET_WGDEV_VERBOSE"

// ProfileEnv, when set in the environment of `fednet wgdev` (or of the
// agent that starts it) to a directory, makes the device write a CPU
// profile of itself there (wgdev-NAME-PID.pprof, for `go tool pprof`)
// until it stops: to find where the data path spends its time.
const ProfileEnv = "FEDNET_WGDEV_CPUPROFILE"

// TUN says which TUN device the WireGuard device runs on.
type TUN string

const (
	// TUNOffload is fednet's TUN device (package tundev) with every
	// offload the kernel takes: TSO, USO and, on Linux 6.17+, UDP-tunnel
	// GSO, so that bridged networks' VXLAN crosses in super-packets. The
	// default.
	TUNOffload TUN = "offload"
	// TUNNoTunnel is fednet's device without UDP-tunnel GSO, as on a
	// kernel before 6.17.
	TUNNoTunnel TUN = "no-tunnel"
	// TUNNone is fednet's device without offloads: one packet per system
	// call.
	TUNNone TUN = "none"
	// TUNWireGuardGo is wireguard-go's own TUN device (TSO and USO), what
	// a standalone wireguard-go runs on.
	TUNWireGuardGo TUN = "wireguard-go"
)

// TUNs lists the valid TUN values.
var TUNs = []TUN{TUNOffload, TUNNoTunnel, TUNNone, TUNWireGuardGo}

// TUNEnv, when set in the environment of `fednet wgdev` (or of the agent
// that starts it), chooses the TUN device when no flag does.
const TUNEnv = "FEDNET_WGDEV_TUN"

// ParseTUN checks a TUN value; "" is the default, TUNOffload.
func ParseTUN(s string) (TUN, error) {
	if s == "" {
		return TUNOffload, nil
	}
	for _, t := range TUNs {
		if string(t) == s {
			return t, nil
		}
	}
	return "", fmt.Errorf("TUN device %q unknown: use one of %s", s, tunList())
}

func tunList() string {
	var s []string
	for _, t := range TUNs {
		s = append(s, string(t))
	}
	return strings.Join(s, ", ")
}

// AQMEnv, when set in the environment of `fednet wgdev` (or of the agent
// that starts it), configures the queue management (see ParseAQM); unset,
// it is on with its defaults.
const AQMEnv = "FEDNET_WGDEV_AQM"

// AQM configures the queue management of the device's queues (package
// aqm): CoDel with a target sojourn time and an interval.
type AQM struct {
	// Off turns it off: wireguard-go's queues as they are.
	Off              bool
	Target, Interval time.Duration
}

// ParseAQM reads an AQM setting: "off", "on" or "" (the defaults), or
// "target=DURATION,interval=DURATION" (either may be left out).
func ParseAQM(s string) (AQM, error) {
	switch s {
	case "", "on":
		return AQM{}, nil
	case "off":
		return AQM{Off: true}, nil
	}
	var a AQM
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		d, err := time.ParseDuration(v)
		if !ok || err != nil || d <= 0 {
			return a, fmt.Errorf("queue management %q: want off, on, or target=DURATION,interval=DURATION (like target=5ms,interval=100ms)", s)
		}
		switch k {
		case "target":
			a.Target = d
		case "interval":
			a.Interval = d
		default:
			return a, fmt.Errorf("queue management %q: unknown setting %q; want target or interval", s, k)
		}
	}
	return a, nil
}

// Bind says which UDP bind the device sends and receives on.
type Bind string

const (
	// BindBatch is fednet's bind (package udpbind): up to a whole batch
	// per receive call when datagrams arrive one by one. The default: in
	// the lab it moved more for less CPU than BindWireGuardGo where
	// datagrams arrived unmerged, and as much where they arrived merged
	// (docs/bench.md, session 7).
	BindBatch Bind = "batch"
	// BindWireGuardGo is wireguard-go's StdNetBind, what a standalone
	// wireguard-go runs on.
	BindWireGuardGo Bind = "wireguard-go"
)

// Binds lists the valid Bind values.
var Binds = []Bind{BindBatch, BindWireGuardGo}

// BindEnv, when set in the environment of `fednet wgdev` (or of the agent
// that starts it), chooses the bind when no flag does.
const BindEnv = "FEDNET_WGDEV_BIND"

// ParseBind checks a Bind value; "" is the default, BindBatch.
func ParseBind(s string) (Bind, error) {
	if s == "" {
		return BindBatch, nil
	}
	for _, b := range Binds {
		if string(b) == s {
			return b, nil
		}
	}
	var names []string
	for _, b := range Binds {
		names = append(names, string(b))
	}
	return "", fmt.Errorf("bind %q unknown: use one of %s", s, strings.Join(names, ", "))
}

// ProcsEnv, when set in the environment of `fednet wgdev` (or of the agent
// that starts it), sets Config.Procs when no flag does.
const ProcsEnv = "FEDNET_WGDEV_PROCS"

// ProcsPerCPU, as Config.Procs, leaves Go's default: one thread running
// Go code per CPU, as a standalone wireguard-go runs.
const ProcsPerCPU = -1

// ParseProcs reads a Procs setting: "" (the default, DefaultProcs), "0"
// (ProcsPerCPU: Go's default, one per CPU), or a number of threads from 1
// to 256.
func ParseProcs(s string) (int, error) {
	switch s {
	case "":
		return 0, nil
	case "0":
		return ProcsPerCPU, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 256 {
		return 0, fmt.Errorf("threads %q: want a number from 1 to 256, or 0 for one per CPU (Go's default); unset: half the CPUs", s)
	}
	return n, nil
}

// DefaultProcs is how many threads run the device's Go code at once when
// nothing says otherwise, given the CPUs Go would use (perCPU): half of
// them, at least one.
//
// A userspace WireGuard device is a pipeline of goroutines (read, encrypt,
// send; receive, decrypt, write) handing each batch of packets on. With a
// thread per CPU, every hand-off to an idle thread wakes it on another
// CPU, which then spins looking for work: on the 2-core lab machine that
// took a quarter of the device's CPU, more with small packets. Half the
// CPUs leaves the other half to the kernel's share of the work (the TUN
// and UDP system calls and the forwarding they run), and hands most
// batches on within a thread. Measured side by side on 2 cores
// (docs/bench.md, session 9): one thread against two, 0.75 of the CPU per
// byte of one TCP stream, 1.2 times its throughput, 0.6 of the CPU per
// byte of a 100 Mbit/s UDP stream, and idle round trips 0.88 as long.
func DefaultProcs(perCPU int) int { return max(1, perCPU/2) }

// Config configures a userspace WireGuard device.
type Config struct {
	// Name is the interface.
	Name string
	// TUN is the TUN device; empty: TUNOffload.
	TUN TUN
	// AQM configures the queue management.
	AQM AQM
	// Bind is the UDP bind; empty: BindBatch.
	Bind Bind
	// FallbackPort is the TCP port of the UDP-blocked fallback (see
	// WithFallback); 0: none.
	FallbackPort uint16
	// Procs is how many threads run the device's Go code at once: Serve
	// sets the process's GOMAXPROCS (the device is meant to be a process
	// of its own). 0: DefaultProcs, half the CPUs; ProcsPerCPU: Go's
	// default, one per CPU.
	Procs int
	// Logf receives wireguard-go's error messages and the device's own
	// notices; nil discards them.
	Logf func(string, ...any)
}
