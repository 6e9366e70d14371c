// Package wireguard is the data plane's driver for WireGuard tunnels
// (backend.WireGuard): one WireGuard interface per gateway, kernel
// (`ip link add fed0 type wireguard`) or userspace (`fednet wgdev fed0`,
// wireguard-go in its own long-lived process), configured the same way
// through wgctrl. It implements tunnel.Driver (pure: this file) and
// tunnel.Machine (Linux: wireguard_linux.go). See README.md.
package wireguard

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/fednet/fednet/internal/backend"
	"github.com/fednet/fednet/internal/dataplane/tunnel"
	"github.com/fednet/fednet/internal/plan"
)

// Mode says which WireGuard implementation the driver uses on Linux.
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

// Link kinds of a WireGuard interface as the kernel reports them.
const (
	// KindKernel is a kernel WireGuard interface.
	KindKernel = "wireguard"
	// KindUserspace is the TUN interface of a userspace device.
	KindUserspace = "tun"
)

// DefaultMTU is the MTU a new WireGuard interface has, kernel or
// userspace.
const DefaultMTU = 1420

// EstablishedWithin is how recent a handshake must be for a link to count
// as established. WireGuard rekeys every two minutes while traffic flows
// (the link probes are traffic), so a handshake older than three minutes
// means the tunnel itself is broken.
const EstablishedWithin = 3 * time.Minute

// DefaultTimeout bounds every call to a device (wgctrl sets no deadline on
// a userspace device's socket).
const DefaultTimeout = 5 * time.Second

// Config configures the driver.
type Config struct {
	// PrivateKey is this gateway's WireGuard private key. Apply needs it;
	// without one (zero) the driver still reads devices and takes them
	// down, and refuses every plan with a WireGuard tunnel.
	PrivateKey plan.Key
	// Mode chooses kernel or userspace WireGuard; Auto by default.
	Mode Mode
	// WGDevCommand is the argv that starts the userspace device; the
	// interface name is appended. The process must serve the UAPI socket
	// /var/run/wireguard/NAME.sock and live until its interface is deleted
	// (see package wgdev). Default: this executable with argument "wgdev".
	WGDevCommand []string
	// WGDevLog is the file the userspace device's output goes to, appended.
	// Default: /var/run/wireguard/NAME.log, next to its socket.
	WGDevLog string
	// Timeout bounds each call to a device (default DefaultTimeout).
	Timeout time.Duration
	// Restart bounds the restarts of userspace device processes that die
	// (see Supervision in README.md); zero: DefaultRestartPolicy.
	Restart RestartPolicy
	// Logf receives notices (a userspace device started, a dead one
	// replaced); nil discards them. Errors are returned, not logged.
	Logf func(format string, args ...any)
}

// Driver is the WireGuard driver. It is safe for concurrent use.
//
// On Linux it supervises the userspace devices it starts or finds running
// (tunnel.Supervisor): a device process that dies is replaced at once and
// its configuration restored, and OnEvent's function hears of it.
type Driver struct {
	cfg  Config
	pub  plan.Key // zero without a private key
	logf func(string, ...any)

	pidsMu sync.Mutex
	pids   []int // userspace devices started; guarded by pidsMu

	snapMu sync.Mutex
	// snaps is the configuration each device was last read with or
	// brought to, by interface: what a replaced device gets back.
	// Guarded by snapMu.
	snaps map[string]*Device

	supMu   sync.Mutex
	watches map[string]*watch  // supervised userspace devices by interface; guarded by supMu
	onEvent func(tunnel.Event) // guarded by supMu
}

// New returns a driver for cfg.
func New(cfg Config) (*Driver, error) {
	if cfg.Mode < Auto || cfg.Mode > Userspace {
		return nil, fmt.Errorf("wireguard: Config.Mode %v is not valid: use Auto, Kernel or Userspace", cfg.Mode)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Restart == (RestartPolicy{}) {
		cfg.Restart = DefaultRestartPolicy
	}
	if err := cfg.Restart.validate(); err != nil {
		return nil, err
	}
	cfg.WGDevCommand = slices.Clone(cfg.WGDevCommand)
	d := &Driver{cfg: cfg, logf: cfg.Logf, snaps: map[string]*Device{}, watches: map[string]*watch{}}
	if d.logf == nil {
		d.logf = func(string, ...any) {}
	}
	if !cfg.PrivateKey.IsZero() {
		d.pub = PublicKey(cfg.PrivateKey)
	}
	return d, nil
}

// PublicKey returns the public key of private key k.
func PublicKey(k plan.Key) plan.Key { return plan.Key(wgtypes.Key(k).PublicKey()) }

// Backend implements tunnel.Driver.
func (d *Driver) Backend() backend.Name { return backend.WireGuard }

// PublicKey returns the public key of the driver's private key, zero for
// none.
func (d *Driver) PublicKey() plan.Key { return d.pub }

// Started returns the pids of the userspace devices this driver started.
func (d *Driver) Started() []int {
	d.pidsMu.Lock()
	defer d.pidsMu.Unlock()
	return slices.Clone(d.pids)
}

// OnEvent implements tunnel.Supervisor: f hears of every userspace device
// that died and was replaced (Restored) or is lost with its interface. f
// runs on the driver's goroutine and must not block (nor call Apply: hand
// the event on). Supervision is on while a function is set: with none (at
// first, or after OnEvent(nil)) a dead device is left for Apply to
// recreate, so that of two drivers on one machine (an agent's old and new
// data plane after a key rotation, tests) only one replaces it.
func (d *Driver) OnEvent(f func(tunnel.Event)) {
	d.supMu.Lock()
	defer d.supMu.Unlock()
	d.onEvent = f
}

// supervising reports whether OnEvent's function is set.
func (d *Driver) supervising() bool {
	d.supMu.Lock()
	defer d.supMu.Unlock()
	return d.onEvent != nil
}

// emit hands e to OnEvent's function.
func (d *Driver) emit(e tunnel.Event) {
	d.supMu.Lock()
	f := d.onEvent
	d.supMu.Unlock()
	e.Backend = backend.WireGuard
	if f != nil {
		f(e)
	}
}

// remember records dev as the configuration of the device on name.
func (d *Driver) remember(name string, dev *Device) {
	d.snapMu.Lock()
	defer d.snapMu.Unlock()
	d.snaps[name] = dev.Clone().(*Device)
}

// track applies op, done on the machine, to the configuration remembered
// for its interface: the snapshot follows every change the driver makes
// between two reads.
func (d *Driver) track(op tunnel.Op) {
	name := op.Target().Interface
	d.snapMu.Lock()
	defer d.snapMu.Unlock()
	s := tunnel.State{}
	if dev, ok := d.snaps[name]; ok {
		s.Device = dev
	} else if _, creates := op.(linkAdd); !creates {
		return // nothing known to change
	}
	op.Apply(&s)
	if dev := device(s); dev != nil {
		d.snaps[name] = dev
	} else {
		delete(d.snaps, name)
	}
}

// snapshot returns a copy of the configuration remembered for name, nil
// for none.
func (d *Driver) snapshot(name string) *Device {
	d.snapMu.Lock()
	defer d.snapMu.Unlock()
	if dev, ok := d.snaps[name]; ok {
		return dev.Clone().(*Device)
	}
	return nil
}

// Device is a WireGuard device: what wgctrl reads and sets.
type Device struct {
	// PublicKey is the public key of the device's private key, zero when
	// no private key is set.
	PublicKey  plan.Key
	ListenPort int
	// FallbackPort is the TCP port of a userspace device's UDP-blocked
	// fallback (fednet wgdev --tcp-fallback), 0 for none; kernel devices
	// have none.
	FallbackPort int
	// Peers are sorted by public key (base64).
	Peers []Peer
	// OnStream lists the peer endpoints (as Peer.Endpoint) whose packets
	// go over the fallback stream now: a figure, not configuration;
	// String leaves it out.
	OnStream []string
}

// Peer is one peer of a device.
type Peer struct {
	PublicKey plan.Key
	// Endpoint is ip:port as the device reports it, "" for none.
	Endpoint string
	// AllowedIPs are sorted.
	AllowedIPs []netip.Prefix
	// PersistentKeepalive in seconds, 0 for off.
	PersistentKeepalive int
	// LastHandshake (zero for never) and the byte counters are the
	// device's figures; they are not configuration and String leaves them
	// out.
	LastHandshake    time.Time
	RxBytes, TxBytes int64
}

// Clone implements tunnel.Device.
func (v *Device) Clone() tunnel.Device {
	c := *v
	c.OnStream = slices.Clone(v.OnStream)
	c.Peers = nil
	for _, p := range v.Peers {
		p.AllowedIPs = slices.Clone(p.AllowedIPs)
		c.Peers = append(c.Peers, p)
	}
	return &c
}

// normalize sorts the peers and their allowed IPs.
func (v *Device) normalize() {
	slices.SortFunc(v.Peers, func(a, b Peer) int { return strings.Compare(a.PublicKey.String(), b.PublicKey.String()) })
	for i := range v.Peers {
		slices.SortFunc(v.Peers[i].AllowedIPs, tunnel.ComparePrefix)
	}
}

// String implements tunnel.Device.
func (v *Device) String() string {
	c := v.Clone().(*Device)
	c.normalize()
	var b strings.Builder
	fmt.Fprintf(&b, "wireguard public-key %s listen-port %d", tunnel.OrNone(c.PublicKey.String()), c.ListenPort)
	if c.FallbackPort != 0 {
		fmt.Fprintf(&b, " tcp-fallback %d", c.FallbackPort)
	}
	b.WriteString("\n")
	for _, p := range c.Peers {
		fmt.Fprintf(&b, "peer %s endpoint %s allowed-ips %s persistent-keepalive %d\n",
			p.PublicKey, tunnel.OrNone(p.Endpoint), tunnel.Join(p.AllowedIPs), p.PersistentKeepalive)
	}
	return b.String()
}

func (v *Device) peer(k plan.Key) *Peer {
	for i := range v.Peers {
		if v.Peers[i].PublicKey == k {
			return &v.Peers[i]
		}
	}
	return nil
}

// device returns s's device, nil when it has none (or another driver's).
func device(s tunnel.State) *Device {
	v, _ := s.Device.(*Device)
	return v
}

// Check implements tunnel.Driver.
func (d *Driver) Check(t plan.Tunnel, peers []plan.Peer) []error {
	var errs []error
	if d.cfg.PrivateKey.IsZero() {
		errs = append(errs, errors.New("the WireGuard driver has no private key: applying a plan needs this gateway's key (taking one down does not)"))
	}
	for _, p := range peers {
		if k := p.WireGuard.PersistentKeepalive; k < 0 || k > 65535 {
			errs = append(errs, fmt.Errorf("peer %s: wireguard.persistentKeepalive %d is out of range 0-65535", p.Gateway, k))
		}
		if p.Endpoint != "" {
			if _, _, err := splitEndpoint(p.Endpoint); err != nil {
				errs = append(errs, fmt.Errorf("peer %s: endpoint %q: %w", p.Gateway, p.Endpoint, err))
			}
		}
	}
	return errs
}

// splitEndpoint splits host:port, with a port 1-65535.
func splitEndpoint(s string) (host string, port uint16, err error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		if ap.Port() == 0 {
			return "", 0, errors.New("port 0 is not a port")
		}
		return ap.Addr().String(), ap.Port(), nil
	}
	h, p, err := splitHostPort(s)
	if err != nil {
		return "", 0, err
	}
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil || n == 0 {
		return "", 0, fmt.Errorf("port %q is not a number 1-65535", p)
	}
	return h, uint16(n), nil
}

// splitHostPort is net.SplitHostPort without the import of net.
func splitHostPort(s string) (host, port string, err error) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return "", "", errors.New("want host:port")
	}
	host, port = s[:i], s[i+1:]
	if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	}
	if host == "" || strings.ContainsAny(host, "[] /") {
		return "", "", errors.New("want host:port")
	}
	return host, port, nil
}

// Configured implements tunnel.Driver: a peer is set up once its public
// key is known.
func (d *Driver) Configured(p plan.Peer) bool { return !p.WireGuard.PublicKey.IsZero() }

// Adopt implements tunnel.Driver: an unmarked WireGuard interface is this
// gateway's when its device holds this gateway's private key, as one made
// by a fednet from before tunnel marks does. Another's interface (another
// key, no key, no device answering) is not.
func (d *Driver) Adopt(cur tunnel.State) bool {
	dev := device(cur)
	return cur.Link != nil && (cur.Link.Kind == KindKernel || cur.Link.Kind == KindUserspace) &&
		dev != nil && !d.pub.IsZero() && dev.PublicKey == d.pub
}

// kindFits reports whether an existing interface of kind serves mode.
func (m Mode) kindFits(kind string) bool {
	switch m {
	case Kernel:
		return kind == KindKernel
	case Userspace:
		return kind == KindUserspace
	}
	return kind == KindKernel || kind == KindUserspace
}

// kind returns the link kind mode creates; Auto predicts kernel.
func (m Mode) kind() string {
	if m == Userspace {
		return KindUserspace
	}
	return KindKernel
}

// Diff implements tunnel.Driver. The interface is recreated when it is of
// a kind the mode does not use or no device answers on it (a userspace
// process that is gone or hung). Peers whose public key is zero are
// skipped. An existing peer is changed only in the fields that differ: a
// peer whose allowed IPs changed keeps its endpoint and session, and a plan
// peer without endpoint never clears the endpoint the device learned.
func (d *Driver) Diff(cur tunnel.State, t plan.Tunnel, peers []plan.Peer) tunnel.Diff {
	var out tunnel.Diff
	link, dev := cur.Link, device(cur)
	// A userspace device gets its fallback port when it starts: another
	// port means a new device.
	if link != nil && (dev == nil || !d.cfg.Mode.kindFits(link.Kind) ||
		(link.Kind == KindUserspace && dev.FallbackPort != t.FallbackPort)) {
		out.Setup = append(out.Setup, linkDel{name: t.Name})
		link, dev = nil, nil
	}
	if link == nil {
		out.Setup = append(out.Setup, linkAdd{name: t.Name, mode: d.cfg.Mode, fallbackPort: t.FallbackPort})
		dev = &Device{}
	}
	ds := deviceSet{name: t.Name, listenPort: -1}
	if dev.PublicKey != d.pub {
		ds.privateKey, ds.publicKey = true, d.pub
	}
	if port := t.ListenPort; port != 0 && dev.ListenPort != port {
		ds.listenPort = port
	}
	if ds.privateKey || ds.listenPort >= 0 {
		out.Setup = append(out.Setup, ds)
	}
	out.Peers = diffPeers(t.Name, dev.Peers, peers)
	return out
}

func diffPeers(dev string, have []Peer, want []plan.Peer) []tunnel.Op {
	var ops []tunnel.Op
	current := map[plan.Key]Peer{}
	for _, h := range have {
		current[h.PublicKey] = h
	}
	wanted := map[plan.Key]bool{}
	for _, w := range want {
		if !w.WireGuard.PublicKey.IsZero() {
			wanted[w.WireGuard.PublicKey] = true
		}
	}
	var removed []plan.Key
	for k := range current {
		if !wanted[k] {
			removed = append(removed, k)
		}
	}
	slices.SortFunc(removed, func(a, b plan.Key) int { return strings.Compare(a.String(), b.String()) })
	for _, k := range removed {
		ops = append(ops, peerRemove{dev: dev, key: k})
	}
	// owner is the peer each allowed IP of the plan belongs to: a prefix
	// that moves from one peer to another is taken by adding it to its new
	// peer (the device takes it from the old one), so the old peer's other
	// prefixes are never replaced, and for a moment missing, for it.
	owner := map[netip.Prefix]plan.Key{}
	for _, w := range want {
		for _, a := range tunnel.CanonicalPrefixes(w.AllowedIPs) {
			owner[a] = w.WireGuard.PublicKey
		}
	}
	done := map[plan.Key]bool{}
	for _, w := range want {
		key := w.WireGuard.PublicKey
		if key.IsZero() || done[key] {
			continue
		}
		done[key] = true
		allowed := tunnel.CanonicalPrefixes(w.AllowedIPs)
		h, ok := current[key]
		if !ok {
			ops = append(ops, peerSet{
				dev: dev, key: key, create: true,
				endpoint:      w.Endpoint,
				setAllowedIPs: true, allowedIPs: allowed,
				setKeepalive: w.WireGuard.PersistentKeepalive != 0, keepalive: w.WireGuard.PersistentKeepalive,
			})
			continue
		}
		ps := peerSet{dev: dev, key: key}
		if w.Endpoint != "" && w.Endpoint != h.Endpoint {
			ps.endpoint = w.Endpoint
		}
		if had := tunnel.CanonicalPrefixes(h.AllowedIPs); !slices.Equal(allowed, had) {
			added := slices.DeleteFunc(slices.Clone(allowed), func(a netip.Prefix) bool { return slices.Contains(had, a) })
			moved := !slices.ContainsFunc(had, func(a netip.Prefix) bool {
				k, ok := owner[a]
				return !slices.Contains(allowed, a) && (!ok || k == key)
			})
			switch {
			case !moved:
				// A prefix leaves the device: only a replace drops it.
				ps.setAllowedIPs, ps.allowedIPs = true, allowed
			case len(added) > 0:
				ps.setAllowedIPs, ps.addOnly, ps.allowedIPs = true, true, added
			}
		}
		if k := w.WireGuard.PersistentKeepalive; k != h.PersistentKeepalive {
			ps.setKeepalive, ps.keepalive = true, k
		}
		if ps.endpoint != "" || ps.setAllowedIPs || ps.setKeepalive {
			ops = append(ops, ps)
		}
	}
	return ops
}

// Down implements tunnel.Driver: deleting the interface takes its peers
// (and, for a userspace device, its process) with it.
func (d *Driver) Down(cur tunnel.State) []tunnel.Op {
	if cur.Link == nil {
		return nil
	}
	return []tunnel.Op{linkDel{name: cur.Link.Name}}
}

// Status implements tunnel.Driver: a link is established when its last
// handshake is less than EstablishedWithin old. The endpoint is the one
// the device uses, else the plan's.
func (d *Driver) Status(cur tunnel.State, peers []plan.Peer, now time.Time) []tunnel.LinkState {
	dev := device(cur)
	var out []tunnel.LinkState
	for _, p := range peers {
		if !d.Configured(p) {
			continue
		}
		l := tunnel.LinkState{Peer: p.Gateway, Backend: backend.WireGuard, Endpoint: p.Endpoint, Transport: backend.TransportUDP}
		if dev != nil {
			if h := dev.peer(p.WireGuard.PublicKey); h != nil {
				if h.Endpoint != "" {
					l.Endpoint = h.Endpoint
				}
				if h.Endpoint != "" && slices.Contains(dev.OnStream, h.Endpoint) {
					l.Transport = backend.TransportTCP443
				}
				l.LastHandshake, l.RxBytes, l.TxBytes = h.LastHandshake, h.RxBytes, h.TxBytes
				l.Established = Established(h.LastHandshake, now)
			}
		}
		out = append(out, l)
	}
	return out
}

// Established applies WireGuard's half of the link-up rule: a handshake
// within EstablishedWithin before now; the zero time means never.
func Established(last, now time.Time) bool {
	return !last.IsZero() && now.Sub(last) < EstablishedWithin
}

// The driver's ops. Each renders like the command an operator would type
// and applies itself to a tunnel.State; wireguard_linux.go executes them.
type (
	// linkDel deletes the interface; its peers go with it, and a
	// userspace device exits.
	linkDel struct{ name string }
	// linkAdd creates the interface with a WireGuard device on it, marked
	// as fednet's; a userspace device gets the TCP fallback on
	// fallbackPort (0: none; kernel devices have none).
	linkAdd struct {
		name         string
		mode         Mode
		fallbackPort int
	}
	// deviceSet sets the private key (to the configured one, whose public
	// half is publicKey) and/or the listen port.
	deviceSet struct {
		name       string
		privateKey bool
		publicKey  plan.Key
		listenPort int // -1: unchanged
	}
	peerRemove struct {
		dev string
		key plan.Key
	}
	// peerSet adds a peer (create) or changes only the fields marked set.
	peerSet struct {
		dev    string
		key    plan.Key
		create bool
		// endpoint is "" for unchanged.
		endpoint      string
		setAllowedIPs bool
		// addOnly adds allowedIPs to the peer's rather than replacing
		// them (each taken from the peer that had it).
		addOnly      bool
		allowedIPs   []netip.Prefix
		setKeepalive bool
		keepalive    int
	}
)

// starter is an op after which links start anew: Settle starts their
// handshakes.
type starter interface {
	// starts returns the keys of the peers of peers whose links the op
	// starts.
	starts(peers []plan.Peer) []plan.Key
}

// starts: a new peer's link is new.
func (o peerSet) starts([]plan.Peer) []plan.Key {
	if o.create {
		return []plan.Key{o.key}
	}
	return nil
}

// starts: with a new private key every link is new.
func (o deviceSet) starts(peers []plan.Peer) []plan.Key {
	var out []plan.Key
	if o.privateKey {
		for _, p := range peers {
			out = append(out, p.WireGuard.PublicKey)
		}
	}
	return out
}

func (o linkDel) Change() tunnel.Change { return tunnel.Change("ip link del " + o.name) }
func (o linkAdd) Change() tunnel.Change {
	mark := " && ip link set " + o.name + " alias " + tunnel.Mark(backend.WireGuard)
	if o.mode == Userspace {
		return tunnel.Change("fednet wgdev " + o.fallbackArgs() + o.name + mark)
	}
	return tunnel.Change("ip link add " + o.name + " type wireguard" + mark)
}
func (o deviceSet) Change() tunnel.Change {
	s := "wg set " + o.name
	if o.listenPort >= 0 {
		s += " listen-port " + strconv.Itoa(o.listenPort)
	}
	if o.privateKey {
		s += " private-key (set)"
	}
	return tunnel.Change(s)
}
func (o peerRemove) Change() tunnel.Change {
	return tunnel.Change("wg set " + o.dev + " peer " + o.key.String() + " remove")
}
func (o peerSet) Change() tunnel.Change {
	s := "wg set " + o.dev + " peer " + o.key.String()
	if o.endpoint != "" {
		s += " endpoint " + o.endpoint
	}
	switch {
	case o.setAllowedIPs && o.addOnly:
		s += " allowed-ips +" + strings.ReplaceAll(tunnel.Join(o.allowedIPs), ",", ",+")
	case o.setAllowedIPs && (len(o.allowedIPs) > 0 || !o.create):
		s += " allowed-ips " + tunnel.Join(o.allowedIPs)
	}
	if o.setKeepalive {
		if o.keepalive == 0 {
			s += " persistent-keepalive off"
		} else {
			s += " persistent-keepalive " + strconv.Itoa(o.keepalive)
		}
	}
	return tunnel.Change(s)
}

func (o linkDel) Target() tunnel.Target    { return tunnel.Target{Interface: o.name, Deletes: true} }
func (o linkAdd) Target() tunnel.Target    { return tunnel.Target{Interface: o.name, Creates: true} }
func (o deviceSet) Target() tunnel.Target  { return tunnel.Target{Interface: o.name} }
func (o peerRemove) Target() tunnel.Target { return tunnel.Target{Interface: o.dev} }
func (o peerSet) Target() tunnel.Target {
	return tunnel.Target{Interface: o.dev, Prefixes: slices.Clone(o.allowedIPs)}
}

func (o linkDel) Apply(s *tunnel.State) { *s = tunnel.State{} }
func (o linkAdd) Apply(s *tunnel.State) {
	s.Link = &tunnel.Interface{Name: o.name, Kind: o.mode.kind(), Alias: tunnel.Mark(backend.WireGuard), MTU: DefaultMTU}
	dev := &Device{}
	if o.mode == Userspace {
		dev.FallbackPort = o.fallbackPort
	}
	s.Device = dev
}

// fallbackArgs returns the arguments of fednet wgdev that give the device
// its fallback, "" for none, with a trailing space.
func (o linkAdd) fallbackArgs() string {
	if o.fallbackPort == 0 {
		return ""
	}
	return "--tcp-fallback " + strconv.Itoa(o.fallbackPort) + " "
}
func (o deviceSet) Apply(s *tunnel.State) {
	dev := device(*s)
	if o.privateKey {
		dev.PublicKey = o.publicKey
	}
	if o.listenPort >= 0 {
		dev.ListenPort = o.listenPort
	}
}
func (o peerRemove) Apply(s *tunnel.State) {
	dev := device(*s)
	dev.Peers = slices.DeleteFunc(dev.Peers, func(p Peer) bool { return p.PublicKey == o.key })
}
func (o peerSet) Apply(s *tunnel.State) {
	dev := device(*s)
	p := dev.peer(o.key)
	if p == nil {
		dev.Peers = append(dev.Peers, Peer{PublicKey: o.key})
		p = &dev.Peers[len(dev.Peers)-1]
	}
	if o.endpoint != "" {
		p.Endpoint = o.endpoint
	}
	if o.setAllowedIPs {
		if o.addOnly {
			p.AllowedIPs = append(p.AllowedIPs, o.allowedIPs...)
		} else {
			p.AllowedIPs = slices.Clone(o.allowedIPs)
		}
		// An allowed IP belongs to one peer: the device takes it from any
		// other.
		for j := range dev.Peers {
			if q := &dev.Peers[j]; q.PublicKey != o.key {
				q.AllowedIPs = slices.DeleteFunc(q.AllowedIPs, func(a netip.Prefix) bool { return slices.Contains(o.allowedIPs, a) })
			}
		}
	}
	if o.setKeepalive {
		p.PersistentKeepalive = o.keepalive
	}
	dev.normalize()
}
