// Package ipsec is the data plane's driver for IPsec tunnels
// (backend.IPsec): IKEv2 and ESP in tunnel mode by strongSwan's charon,
// which the driver configures over its vici socket (load-conn,
// load-shared, unload-conn, list-conns, list-sas; never by writing files).
// The links are route-based: one tunnel interface per gateway (ipsec0)
// carries every IPsec link, the core routes the peers' prefixes into it,
// and each link's CHILD_SA selects its traffic by the peer's allowed IPs,
// as WireGuard's peers do.
//
// The interface is an XFRM interface (kernel ESP; the connections carry
// its if_id) where the kernel has them, or the TUN device of charon's
// kernel-libipsec plugin (userspace ESP) where the kernel has no ESP
// ciphers or XFRM interfaces, as in fednet's lab. See README.md and
// docs/interop.md.
//
// It implements tunnel.Driver (pure: this file) and tunnel.Machine (Linux:
// ipsec_linux.go).
package ipsec

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fednet/fednet/internal/backend"
	"github.com/fednet/fednet/internal/dataplane/tunnel"
	"github.com/fednet/fednet/internal/plan"
)

// ConnPrefix starts the name of every connection fednet loads into charon
// ("fednet-" + peer gateway); the driver never touches other connections.
const ConnPrefix = "fednet-"

// DefaultSocket is charon's vici socket on a machine running strongSwan as
// a service.
const DefaultSocket = "/var/run/charon.vici"

// DefaultIfID is the XFRM interface id of fednet's IPsec interface and of
// its connections' SAs and policies (kernel ESP).
const DefaultIfID = 0xfed

// Device is charon's state as far as fednet's links go: the connections
// fednet loaded, and their security associations.
type Device struct {
	// Conns are fednet's connections, sorted by peer.
	Conns []Conn
	// SAs are the IKE_SAs of fednet's connections, by peer; not rendered.
	SAs map[string]SA
}

// Conn is one connection fednet loaded.
type Conn struct {
	// Peer is the peer gateway (the connection is ConnPrefix+Peer).
	Peer string
	// Config is the fingerprint of the configuration it was loaded with
	// (its CHILD_SA's name carries it).
	Config string
	// Remote is the peer's address ("%any" when unknown).
	Remote string
	// RemoteTS are the CHILD_SA's remote traffic selectors.
	RemoteTS []netip.Prefix
}

// SA is the state of one connection's IKE_SA and CHILD_SAs.
type SA struct {
	// State is the IKE_SA's state (ESTABLISHED, CONNECTING, ...).
	State string
	// Installed is true when a CHILD_SA is installed.
	Installed bool
	// Established is when the IKE_SA was established, zero if not.
	Established time.Time
	// Remote is the peer's address and port.
	Remote string
	// RxBytes and TxBytes count the CHILD_SAs' traffic.
	RxBytes, TxBytes int64
}

// Clone implements tunnel.Device.
func (d *Device) Clone() tunnel.Device {
	c := &Device{SAs: map[string]SA{}}
	for _, x := range d.Conns {
		x.RemoteTS = slices.Clone(x.RemoteTS)
		c.Conns = append(c.Conns, x)
	}
	for k, v := range d.SAs {
		c.SAs[k] = v
	}
	return c
}

// String implements tunnel.Device: one line per connection.
func (d *Device) String() string {
	var b strings.Builder
	for _, c := range d.Conns {
		fmt.Fprintf(&b, "ipsec conn %s%s remote %s ts %s config %s\n", ConnPrefix, c.Peer, c.Remote, tunnel.Join(c.RemoteTS), c.Config)
	}
	return b.String()
}

func (d *Device) conn(peer string) (Conn, bool) {
	for _, c := range d.Conns {
		if c.Peer == peer {
			return c, true
		}
	}
	return Conn{}, false
}

// Config configures the driver (New).
type Config struct {
	// Socket is charon's vici socket (default DefaultSocket).
	Socket string
	// IfID is the XFRM interface id (default DefaultIfID).
	IfID uint32
	// Timeout bounds each vici call (default 10 s).
	Timeout time.Duration
	// Logf receives notices (a link failing, and why); nil discards them.
	Logf func(format string, args ...any)
}

// Driver is the IPsec tunnel driver. Its methods are safe for concurrent
// use.
type Driver struct {
	ifID    uint32
	socket  string
	timeout time.Duration
	logf    func(format string, args ...any)
	reasons *reasons
	// watchOnce starts the follower of charon's log (Linux).
	watchOnce sync.Once

	mu sync.Mutex
	// initiating maps the peers whose connections this side initiates to
	// their CHILD_SAs' names; pending marks those with a retry scheduled.
	initiating map[string][]string
	pending    map[string]bool
}

// New returns a driver configured by cfg.
func New(cfg Config) *Driver {
	if cfg.Socket == "" {
		cfg.Socket = DefaultSocket
	}
	if cfg.IfID == 0 {
		cfg.IfID = DefaultIfID
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	return &Driver{ifID: cfg.IfID, socket: cfg.Socket, timeout: cfg.Timeout, logf: cfg.Logf, reasons: newReasons(),
		initiating: map[string][]string{}, pending: map[string]bool{}}
}

// Backend implements tunnel.Driver.
func (*Driver) Backend() backend.Name { return backend.IPsec }

// Check implements tunnel.Driver.
func (*Driver) Check(t plan.Tunnel, peers []plan.Peer) []error {
	var errs []error
	for _, p := range peers {
		ip := p.IPsec
		switch {
		case ip == nil:
			errs = append(errs, fmt.Errorf("peer %s: backend ipsec without its ipsec block: this plan was not made by fednet plan or the manager, which give every IPsec peer one; make it again with them", p.Gateway))
		case ip.LocalID == "" || ip.RemoteID == "":
			errs = append(errs, fmt.Errorf("peer %s: ipsec.localID and ipsec.remoteID are required (the IKE identities)", p.Gateway))
		case len(ip.IKE) == 0 || len(ip.ESP) == 0:
			errs = append(errs, fmt.Errorf("peer %s: ipsec.ike and ipsec.esp need at least one proposal each", p.Gateway))
		case !strings.HasPrefix(ip.PSKFile, "/"):
			errs = append(errs, fmt.Errorf("peer %s: ipsec.pskFile %q is not an absolute path", p.Gateway, ip.PSKFile))
		case ip.Initiator && ip.RemoteAddress == "":
			errs = append(errs, fmt.Errorf("peer %s: ipsec.initiator without ipsec.remoteAddress: nothing to connect to", p.Gateway))
		case len(p.AllowedIPs) == 0:
			errs = append(errs, fmt.Errorf("peer %s: no allowed IPs: the link would carry nothing", p.Gateway))
		}
	}
	return errs
}

// Configured implements tunnel.Driver: every IPsec peer is set up at once
// (its key is the pre-shared key file, read when the link is loaded).
func (*Driver) Configured(p plan.Peer) bool { return p.Backend == backend.IPsec }

// Adopt implements tunnel.Driver: charon's kernel-libipsec TUN, which
// charon made and names itself, is fednet's IPsec interface.
func (*Driver) Adopt(cur tunnel.State) bool { return cur.Link != nil && cur.Link.Kind == "tun" }

// Diff implements tunnel.Driver.
func (d *Driver) Diff(cur tunnel.State, t plan.Tunnel, peers []plan.Peer) tunnel.Diff {
	var out tunnel.Diff
	dev, _ := cur.Device.(*Device)
	if cur.Link == nil {
		out.Setup = append(out.Setup, linkAdd{name: t.Name, ifID: d.ifID})
	}
	if dev == nil {
		dev = &Device{}
	}
	want := map[string]bool{}
	for _, p := range peers {
		if !d.Configured(p) {
			continue
		}
		want[p.Gateway] = true
		c := conn{peer: p, ifID: d.ifID, iface: t.Name}
		have, ok := dev.conn(p.Gateway)
		if !ok || have.Config != c.fingerprint() {
			out.Peers = append(out.Peers, connLoad{c})
		}
	}
	for _, c := range dev.Conns {
		if !want[c.Peer] {
			out.Peers = append(out.Peers, connUnload{peer: c.Peer})
		}
	}
	return out
}

// Down implements tunnel.Driver: it unloads fednet's connections (which
// closes their SAs) and removes the interface (an XFRM interface is
// deleted; charon's TUN stays with charon, released: unmarked, without
// addresses).
func (*Driver) Down(cur tunnel.State) []tunnel.Op {
	var ops []tunnel.Op
	if dev, ok := cur.Device.(*Device); ok {
		for _, c := range dev.Conns {
			ops = append(ops, connUnload{peer: c.Peer})
		}
	}
	if cur.Link != nil {
		ops = append(ops, linkDel{name: cur.Link.Name, tun: cur.Link.Kind == "tun"})
	}
	return ops
}

// Status implements tunnel.Driver: a link is established when its IKE_SA
// is and a CHILD_SA is installed.
func (d *Driver) Status(cur tunnel.State, peers []plan.Peer, now time.Time) []tunnel.LinkState {
	dev, _ := cur.Device.(*Device)
	var out []tunnel.LinkState
	for _, p := range peers {
		if p.Backend != backend.IPsec {
			continue
		}
		l := tunnel.LinkState{Peer: p.Gateway, Backend: backend.IPsec, Endpoint: p.Endpoint}
		if dev != nil {
			if sa, ok := dev.SAs[p.Gateway]; ok {
				l.Established = sa.State == "ESTABLISHED" && sa.Installed
				l.LastHandshake = sa.Established
				l.RxBytes, l.TxBytes = sa.RxBytes, sa.TxBytes
				if sa.Remote != "" {
					l.Endpoint = sa.Remote
				}
			}
		}
		if !l.Established && d.reasons != nil {
			l.Reason = d.reasons.get(p.Gateway)
		}
		out = append(out, l)
	}
	return out
}

// conn is the connection of one peer as the driver loads it.
type conn struct {
	peer plan.Peer
	ifID uint32
	// iface is the tunnel interface (an XFRM interface takes if_ids).
	iface string
}

// fingerprint is a short digest of everything the connection is loaded
// with; a change of any of it reloads the connection.
func (c conn) fingerprint() string {
	b, _ := json.Marshal(struct {
		IPsec      *plan.IPsecPeer
		AllowedIPs []netip.Prefix
		IfID       uint32
	}{c.peer.IPsec, c.peer.AllowedIPs, c.ifID})
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:6])
}

func (c conn) name() string { return ConnPrefix + c.peer.Gateway }

// childName is the name of the connection's i-th CHILD_SA: ConnPrefix and
// the fingerprint, then "-i" from the second on.
func (c conn) childName(i int) string {
	if i == 0 {
		return ConnPrefix + c.fingerprint()
	}
	return fmt.Sprintf("%s%s-%d", ConnPrefix, c.fingerprint(), i)
}

// children are the connection's CHILD_SAs: the plan's, or one with the
// local selectors and the peer's allowed IPs.
func (c conn) children() []plan.ChildSA {
	if len(c.peer.IPsec.Children) > 0 {
		return c.peer.IPsec.Children
	}
	return []plan.ChildSA{{LocalTS: c.peer.IPsec.LocalTS, RemoteTS: c.peer.AllowedIPs}}
}

func (c conn) remote() string {
	if c.peer.IPsec.RemoteAddress == "" {
		return "%any"
	}
	return c.peer.IPsec.RemoteAddress
}

// Ops.
type (
	// linkAdd creates the IPsec interface: an XFRM interface with the
	// driver's if_id, or (no XFRM interfaces) takes charon's
	// kernel-libipsec TUN of that name.
	linkAdd struct {
		name string
		ifID uint32
	}
	// linkDel deletes the XFRM interface, or releases charon's TUN.
	linkDel struct {
		name string
		tun  bool
	}
	// connLoad loads (or replaces) a peer's connection and its key.
	connLoad struct{ c conn }
	// connUnload unloads a peer's connection and closes its SAs.
	connUnload struct{ peer string }
)

func (o linkAdd) Change() tunnel.Change {
	return tunnel.Change(fmt.Sprintf("ip link add %s type xfrm if_id %#x (or charon's kernel-libipsec TUN %s)", o.name, o.ifID, o.name))
}
func (o linkAdd) Target() tunnel.Target { return tunnel.Target{Interface: o.name, Creates: true} }
func (o linkAdd) Apply(s *tunnel.State) {
	s.Link = &tunnel.Interface{Name: o.name, Kind: "xfrm", Alias: tunnel.Mark(backend.IPsec), MTU: 1500}
	if s.Device == nil {
		s.Device = &Device{SAs: map[string]SA{}}
	}
}

func (o linkDel) Change() tunnel.Change {
	if o.tun {
		return tunnel.Change(fmt.Sprintf("ip link set %s alias '' && ip address flush dev %s (charon's TUN)", o.name, o.name))
	}
	return tunnel.Change("ip link del " + o.name)
}
func (o linkDel) Target() tunnel.Target {
	return tunnel.Target{Interface: o.name, Deletes: true}
}
func (o linkDel) Apply(s *tunnel.State) { *s = tunnel.State{} }

func (o connLoad) Change() tunnel.Change {
	p := o.c.peer
	version := ""
	if p.IPsec.IKEVersion == 1 {
		version = " ikev1"
	}
	children := ""
	if n := len(p.IPsec.Children); n > 1 {
		children = fmt.Sprintf(" (%d child SAs)", n)
	}
	return tunnel.Change(fmt.Sprintf("swanctl load-conn %s remote %s ts %s%s ike %s esp %s%s initiator %t (psk %s)",
		o.c.name(), o.c.remote(), tunnel.Join(p.AllowedIPs), children, strings.Join(p.IPsec.IKE, ","), strings.Join(p.IPsec.ESP, ","), version, p.IPsec.Initiator, p.IPsec.PSKFile))
}
func (o connLoad) Target() tunnel.Target {
	return tunnel.Target{Prefixes: slices.Clone(o.c.peer.AllowedIPs)}
}
func (o connLoad) Apply(s *tunnel.State) {
	dev := ensure(s)
	c := Conn{Peer: o.c.peer.Gateway, Config: o.c.fingerprint(), Remote: o.c.remote(), RemoteTS: tunnel.CanonicalPrefixes(o.c.peer.AllowedIPs)}
	dev.Conns = slices.DeleteFunc(dev.Conns, func(x Conn) bool { return x.Peer == c.Peer })
	dev.Conns = append(dev.Conns, c)
	slices.SortFunc(dev.Conns, func(a, b Conn) int { return strings.Compare(a.Peer, b.Peer) })
}

func (o connUnload) Change() tunnel.Change {
	return tunnel.Change("swanctl unload-conn " + ConnPrefix + o.peer)
}
func (o connUnload) Target() tunnel.Target { return tunnel.Target{} }
func (o connUnload) Apply(s *tunnel.State) {
	dev := ensure(s)
	dev.Conns = slices.DeleteFunc(dev.Conns, func(x Conn) bool { return x.Peer == o.peer })
	delete(dev.SAs, o.peer)
}

func ensure(s *tunnel.State) *Device {
	dev, ok := s.Device.(*Device)
	if !ok {
		dev = &Device{SAs: map[string]SA{}}
		s.Device = dev
	}
	if dev.SAs == nil {
		dev.SAs = map[string]SA{}
	}
	return dev
}
