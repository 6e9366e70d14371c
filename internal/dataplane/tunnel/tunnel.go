// Package tunnel is the seam between the data plane's backend-neutral core
// (package dataplane: the tunnel interface's MTU, state and address,
// routes, the firewall, bridged networks, ownership) and the tunnel
// drivers, one per backend (backend.Name). A driver owns what is
// particular to its backend: creating the tunnel interface and the device
// behind it, the device's own settings, its peers, and what makes a link
// "established".
//
// A driver works like the core: it diffs the state it reads against the
// plan with a pure function (Driver.Diff) into ops, each of which renders
// itself as a command (Op.Change), applies itself to an in-memory State (the
// fake data plane, Op.Apply) and is executed on Linux by the driver
// (Machine.Exec). Adding a backend is a package implementing Driver and
// Machine, its entry in package backend's table, and its line in the data
// plane's registry (dataplane.Config).
package tunnel

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/fednet/fednet/internal/backend"
	"github.com/fednet/fednet/internal/plan"
)

// Change is one change made to the machine, rendered like the command an
// operator would have typed ("ip route add 10.2.0.0/24 dev fed0").
type Change string

// MarkPrefix starts the interface alias (IFLA_IFALIAS) of every tunnel
// interface fednet made; Mark gives the whole alias.
const MarkPrefix = "fednet-tunnel:"

// Mark returns the alias fednet gives the tunnel interface of backend b
// ("fednet-tunnel:wireguard"): fednet changes or deletes an existing
// interface only when it carries this mark (or the driver recognizes it as
// its own, Driver.Adopt).
func Mark(b backend.Name) string { return MarkPrefix + string(b) }

// Interface is a network interface as the data plane reads it.
type Interface struct {
	Name string
	// Kind is the kernel's link kind (IFLA_INFO_KIND: "wireguard",
	// "vxlan", ...), "tun" or "tap" for TUN/TAP devices.
	Kind string
	// Alias is the interface alias, "" for none.
	Alias string
	MTU   int
	Up    bool
	// Addresses are the interface's addresses with their prefix lengths,
	// sorted; IPv6 link-local addresses are left out.
	Addresses []netip.Prefix
}

// Clone returns a deep copy of i.
func (i Interface) Clone() Interface {
	i.Addresses = slices.Clone(i.Addresses)
	return i
}

// State is one tunnel of the machine: its interface and the driver's
// device behind it.
type State struct {
	// Link is the tunnel interface, nil when absent.
	Link *Interface
	// Device is the driver's device on Link, nil when there is none or it
	// does not answer.
	Device Device
}

// Clone returns a deep copy of s.
func (s State) Clone() State {
	c := State{}
	if s.Link != nil {
		l := s.Link.Clone()
		c.Link = &l
	}
	if s.Device != nil {
		c.Device = s.Device.Clone()
	}
	return c
}

// Device is a driver's view of the device behind its tunnel interface: its
// own settings and its peers. Each driver defines its own.
type Device interface {
	// Clone returns a deep copy.
	Clone() Device
	// String renders the device's configuration, one fact a line, in a
	// canonical order, without counters or timestamps: two devices
	// configured alike render alike.
	String() string
}

// Target says what an op changes. The core uses it to skip the ops on an
// interface whose creation failed, to predict what deleting an interface
// takes with it, and its tests to check that every op stays inside what
// fednet owns.
type Target struct {
	// Interface is the interface the op creates, changes or deletes; ""
	// for none.
	Interface string
	// Creates is true when the op creates Interface, Deletes when it
	// deletes it.
	Creates, Deletes bool
	// Port is an interface that is not fednet's which the op enslaves to
	// a bridge of fednet's or releases from one ("" for none).
	Port string
	// Prefixes are what the op routes or lets through a tunnel: route
	// destinations and allowed IPs.
	Prefixes []netip.Prefix
	// Table is the nftables table the op replaces or deletes.
	Table string
}

// Op is one change a driver makes to the machine.
type Op interface {
	// Change renders the op like the command an operator would type.
	Change() Change
	// Target says what the op changes.
	Target() Target
	// Apply changes s as the machine would. The fake data plane runs it,
	// and the core runs it on a copy to predict the tunnel after a
	// driver's Setup ops.
	Apply(s *State)
}

// Diff is what a driver's Diff returns, in two parts around the core's own
// changes to the interface.
type Diff struct {
	// Setup creates or recreates the tunnel interface (marked with Mark)
	// and configures the device; the core then sets the interface's MTU,
	// brings it up and sets its address.
	Setup []Op
	// Peers sets up, changes and removes the links to peers, after the
	// address.
	Peers []Op
}

// LinkState is the state of the link to one peer, as its driver reports
// it.
type LinkState struct {
	// Peer is the peer gateway's name.
	Peer    string
	Backend backend.Name
	// Established is the driver's verdict that the tunnel to the peer
	// works (WireGuard: a handshake within the rekey window). The link-up
	// rule combines it with the link probes (docs/probe.md).
	Established bool
	// LastHandshake is the last completed handshake, zero for never or
	// for backends without handshakes.
	LastHandshake time.Time
	// Endpoint is the peer's current endpoint (ip:port), "" when unknown.
	Endpoint string
	// Transport is how the link's packets travel now (backend.TransportUDP
	// or TransportTCP443 for WireGuard), "" when the backend does not say.
	Transport backend.Transport
	// RxBytes and TxBytes count what the tunnel carried from and to the
	// peer.
	RxBytes, TxBytes int64
	// Reason says why a link that is not established failed last, as its
	// driver knows it ("authentication failed: ..."); "" when unknown.
	Reason string
}

// Driver is the pure part of a tunnel backend: no I/O, so the fake data
// plane and the core's planning of changes run it anywhere. Methods are
// safe for concurrent use.
type Driver interface {
	// Backend is the backend the driver serves; the tunnels and peers of
	// a plan with this backend are the driver's.
	Backend() backend.Name
	// Check reports what of t and its peers the driver cannot apply, one
	// error each, naming the field ("peer b: wireguard.persistentKeepalive
	// 70000 is out of range 0-65535"). A plan with an error is refused
	// whole.
	Check(t plan.Tunnel, peers []plan.Peer) []error
	// Configured reports whether the driver sets up the link to p now
	// (WireGuard: once the peer's public key is known). Peers that are not
	// are skipped and have no LinkState.
	Configured(p plan.Peer) bool
	// Adopt reports whether cur, an interface named like t that does not
	// carry fednet's mark, is nevertheless this driver's (WireGuard: its
	// device holds this gateway's private key, as one made by a fednet
	// from before marks does), so that fednet may mark it and take it
	// over. Anything else named like a plan's tunnel is refused.
	Adopt(cur State) bool
	// Diff returns the ops that bring cur (the tunnel named t.Name,
	// absent or fednet's) to t with peers, those of peers that
	// Configured accepts. Only differences produce ops: applying them to
	// cur yields a state whose diff is empty.
	Diff(cur State, t plan.Tunnel, peers []plan.Peer) Diff
	// Down returns the ops that remove the tunnel cur (fednet's), and with
	// it its device and peers.
	Down(cur State) []Op
	// Status returns the state of the link to every configured peer of
	// peers, in their order, from cur (Device nil: no figures, not
	// established).
	Status(cur State, peers []plan.Peer, now time.Time) []LinkState
}

// Machine is a driver that also reads and changes a real machine (Linux):
// the Linux data plane needs one for each backend of a plan. Methods are
// safe for concurrent use.
type Machine interface {
	Driver
	// Read returns the device behind link (an interface with link's
	// name), nil when none answers there (a TUN left without its userspace
	// process). An error means the device cannot be read and nothing may
	// be concluded from it.
	Read(ctx context.Context, link Interface) (Device, error)
	// Exec runs one of the driver's ops and returns the change it made,
	// which may say more than op.Change (WireGuard's Auto mode renders the
	// userspace device it fell back to).
	Exec(ctx context.Context, op Op) (Change, error)
	// Settle runs after Apply executed its changes, with the driver's ops
	// that succeeded (WireGuard: start the handshake with new peers). Best
	// effort: it reports nothing.
	Settle(ctx context.Context, t plan.Tunnel, peers []plan.Peer, done []Op)
}

// Helpers for the core and the drivers, on the prefixes and addresses
// they read from and give to the kernel.

// ComparePrefix orders prefixes by address, then length.
func ComparePrefix(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}

// CanonicalPrefixes returns ps masked, sorted and without duplicates, in a
// new slice (nil when empty).
func CanonicalPrefixes(ps []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range ps {
		out = append(out, p.Masked())
	}
	slices.SortFunc(out, ComparePrefix)
	return slices.Compact(out)
}

// Join renders prefixes or addresses comma-separated, `""` when empty (as
// wg and ip take them).
func Join[T fmt.Stringer](xs []T) string {
	if len(xs) == 0 {
		return `""`
	}
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = x.String()
	}
	return strings.Join(s, ",")
}

// PrefixOf converts a kernel's address and mask; IPv4 comes out as IPv4,
// not IPv4-mapped IPv6.
func PrefixOf(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, bits := n.Mask.Size()
	if bits == 0 {
		return netip.Prefix{}, false
	}
	if bits == 32 {
		a = a.Unmap()
	}
	return netip.PrefixFrom(a, ones), true
}

// IPNet converts p, masked, for the kernel.
func IPNet(p netip.Prefix) net.IPNet {
	p = p.Masked()
	return net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// OrNone returns s, or "(none)" for "".
func OrNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// Event is something that happened to a tunnel outside Apply: the process
// behind its device died and the driver replaced it (Restored), or the
// tunnel is lost and only applying the plan again brings it back.
type Event struct {
	// Interface is the tunnel interface.
	Interface string
	Backend   backend.Name
	// Restored is true when the driver replaced the device and restored
	// its configuration itself, the interface (its addresses, MTU and
	// routes) kept; false when the interface or its device is lost and
	// the core must apply the plan again.
	Restored bool
	// Cause says what happened, for the log ("pid 4242 exited: signal:
	// killed").
	Cause string
	// Took is how long the repair took, from the death being noticed to
	// the device answering with its configuration; 0 when not Restored.
	Took time.Duration
}

// Supervisor is implemented by a Machine whose tunnels can die on their
// own, such as a device run by a process of its own. OnEvent sets the
// one function called, from the driver's goroutine, after each Event
// (nil: none); the function must not block.
type Supervisor interface {
	OnEvent(f func(Event))
}
