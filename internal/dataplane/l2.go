package dataplane

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/fednet/fednet/internal/dataplane/tunnel"
	"github.com/fednet/fednet/internal/plan"
)

// Bridged networks (plan.Bridge): per network a Linux bridge joining the
// site segment's port and the network's VXLAN ports. A port leads to other
// gateways (plan.ToGateways: between transit addresses, inside the tunnels;
// one to every other member in a full mesh, one per tree neighbor where
// frames are relayed) or to one host of the site that joined through a
// neighbor tunnel (plan.ToHost: over the LAN, on the host's own UDP port,
// since Linux allows one VXLAN device per VNI and port). Every port is the
// same device: a learning VXLAN device with no default remote whose
// all-zero FDB entries ("bridge fdb append 00:00:00:00:00:00 dev fvx100 dst
// 10.255.0.2") replicate broadcast, unknown unicast and multicast to its
// remotes; the (MAC, remote) pairs it learns from received frames keep
// known unicast to one remote. One state type (L2State), one op family,
// one kernel read (l2_linux.go) and one fake serve both kinds; a host's end
// of a neighbor tunnel (host.go) is the same device without a bridge.
//
// Ownership: fednet marks every bridge and VXLAN device it creates with the
// interface alias "fednet:<network>" (IFLA_IFALIAS, `ip -d link show`
// prints it). An interface of kind bridge or vxlan with that alias is
// fednet's: Apply deletes those the plan no longer has, and Down deletes
// them all. An alias survives agent restarts and plan changes (unlike a
// list kept on disk), needs no naming convention, and is visible to an
// operator. A plan naming an interface that exists without the alias is
// refused (see check.go). Ports are the operator's interfaces: fednet
// enslaves and releases them, and leaves their state (up, MTU, addresses)
// alone.
//
// Upgrades: neighbor-tunnel devices made before this model carry the alias
// "fednet-neighbor:<network>/<host>" and a default remote; they are read as
// fednet's and replaced by a device of this model at the next Apply.

// ShapeTable is the nftables table (family bridge) that keeps a bridged
// network's two shapes apart while a gateway holds the ports of both
// (SeparateShapes; docs/resilience.md, "The way back of bridged
// networks").
const ShapeTable = "fednet-shapes"

// Shapes names, for one bridged network, the full mesh's port and the
// prefix of its relay tree's ports ("fvx200" and "fvx200-").
type Shapes struct {
	Mesh, TreePrefix string
}

// AliasPrefix marks the bridges and VXLAN devices fednet owns: their
// interface alias is AliasPrefix followed by the network name.
const AliasPrefix = "fednet:"

// legacyNeighborPrefix is the alias prefix of neighbor-tunnel devices made
// before one L2 model.
const legacyNeighborPrefix = "fednet-neighbor:"

// Link kinds of bridged networks as the kernel reports them.
const (
	KindBridge = "bridge"
	KindVXLAN  = "vxlan"
)

// l2Network returns the network named in a fednet L2 alias, false when the
// alias is not fednet's.
func l2Network(alias string) (string, bool) {
	if n, ok := strings.CutPrefix(alias, AliasPrefix); ok {
		return n, true
	}
	if rest, ok := strings.CutPrefix(alias, legacyNeighborPrefix); ok {
		n, _, _ := strings.Cut(rest, "/")
		return n, true
	}
	return "", false
}

// L2State is what fednet owns of the machine's bridged networks.
type L2State struct {
	// Bridges and VXLANs are sorted by name.
	Bridges []BridgeState
	VXLANs  []VXLANState
}

// BridgeState is a bridge fednet owns.
type BridgeState struct {
	Name string
	// Network is the network named in the bridge's alias.
	Network string
	MTU     int
	Up      bool
	// Ports are the interfaces enslaved to the bridge other than fednet's
	// VXLAN devices, sorted.
	Ports []string
}

// VXLANState is a VXLAN device fednet owns: a port of a bridged network,
// to gateways or to a host, or a host's end of a neighbor tunnel.
type VXLANState struct {
	Name string
	// Network is the network named in the device's alias.
	Network  string
	VNI      int
	Local    netip.Addr
	UDPPort  int
	MTU      int
	Up       bool
	Learning bool
	// Master is the bridge the device is enslaved to, "" for none.
	Master string
	// NoLearning: the bridge learns nothing behind the device (its port
	// flag learning is off; plan.VXLAN.NoLearning). Only an enslaved
	// device has the flag; a new port learns.
	NoLearning bool
	// Remotes are the destinations of the device's all-zero FDB entries
	// (head-end replication), sorted. Learned entries and the bridge's own
	// entries are not listed.
	Remotes []netip.Addr
	// DefaultRemote is the device's default destination (`ip link add ...
	// remote X`). fednet sets none: a device with one was made before one
	// L2 model, and is replaced.
	DefaultRemote netip.Addr
}

func (s L2State) clone() L2State {
	c := L2State{}
	for _, b := range s.Bridges {
		b.Ports = slices.Clone(b.Ports)
		c.Bridges = append(c.Bridges, b)
	}
	for _, v := range s.VXLANs {
		v.Remotes = slices.Clone(v.Remotes)
		c.VXLANs = append(c.VXLANs, v)
	}
	return c
}

func (s L2State) isEmpty() bool { return len(s.Bridges) == 0 && len(s.VXLANs) == 0 }

func (s *L2State) normalize() {
	slices.SortFunc(s.Bridges, func(a, b BridgeState) int { return strings.Compare(a.Name, b.Name) })
	for i := range s.Bridges {
		slices.Sort(s.Bridges[i].Ports)
	}
	slices.SortFunc(s.VXLANs, func(a, b VXLANState) int { return strings.Compare(a.Name, b.Name) })
	for i := range s.VXLANs {
		slices.SortFunc(s.VXLANs[i].Remotes, netip.Addr.Compare)
	}
}

func (s L2State) render(b *strings.Builder) {
	for _, br := range s.Bridges {
		fmt.Fprintf(b, "bridge %s network %s mtu %d up %t ports %s\n", br.Name, br.Network, br.MTU, br.Up, orNone(strings.Join(br.Ports, ",")))
	}
	for _, v := range s.VXLANs {
		fmt.Fprintf(b, "vxlan %s network %s id %d local %s dstport %d mtu %d up %t learning %t master %s remotes %s",
			v.Name, v.Network, v.VNI, v.Local, v.UDPPort, v.MTU, v.Up, v.Learning, orNone(v.Master), tunnel.Join(v.Remotes))
		if v.DefaultRemote.IsValid() {
			fmt.Fprintf(b, " default-remote %s", v.DefaultRemote)
		}
		if v.NoLearning {
			b.WriteString(" port-nolearning")
		}
		b.WriteString("\n")
	}
}

func (s *L2State) bridge(name string) *BridgeState {
	for i := range s.Bridges {
		if s.Bridges[i].Name == name {
			return &s.Bridges[i]
		}
	}
	return nil
}

func (s *L2State) vxlan(name string) *VXLANState {
	for i := range s.VXLANs {
		if s.VXLANs[i].Name == name {
			return &s.VXLANs[i]
		}
	}
	return nil
}

// release removes port from the ports of every bridge.
func (s *L2State) release(port string) {
	for i := range s.Bridges {
		s.Bridges[i].Ports = slices.DeleteFunc(s.Bridges[i].Ports, func(p string) bool { return p == port })
	}
}

// owns reports whether name is a bridge or VXLAN device fednet owns.
func (s *L2State) owns(name string) bool { return s.bridge(name) != nil || s.vxlan(name) != nil }

// The L2 ops.
type (
	// bridgeAdd creates a bridge with its MTU and fednet's alias.
	bridgeAdd struct {
		name, network string
		mtu           int
	}
	// vxlanAdd creates a learning VXLAN device with no default remote and
	// fednet's alias.
	vxlanAdd struct {
		name, network string
		vni           int
		local         netip.Addr
		port, mtu     int
	}
	// l2Del deletes a bridge (releasing its ports) or a VXLAN device (with
	// its FDB).
	l2Del struct{ name string }
	// aliasSet marks a bridge or VXLAN device fednet owns with its network.
	aliasSet struct{ name, network string }
	// masterSet enslaves fednet's VXLAN device dev to the bridge master.
	masterSet struct{ dev, master string }
	// portLearning turns the bridge's learning behind fednet's VXLAN
	// device dev, a port of a bridge, on or off.
	portLearning struct {
		dev string
		on  bool
	}
	// vxlanRelease releases fednet's VXLAN device dev from its bridge: the
	// bridge stops forwarding to and from it at once (deleting a device
	// takes tens of milliseconds).
	vxlanRelease struct{ dev string }
	// portSet enslaves port, an operator's interface, to the bridge.
	portSet struct{ port, bridge string }
	// noMaster releases port, an operator's interface, from its bridge.
	noMaster struct{ port string }
	// fdbAppend adds an all-zero FDB entry (flooding to dst) to dev.
	fdbAppend struct {
		dev string
		dst netip.Addr
	}
	// fdbDel deletes the all-zero FDB entry of dev to dst and, unless
	// keepLearned, the MAC addresses dev learned behind dst (the remote
	// moved away). A draining bridge keeps them: it still forwards known
	// unicast to them.
	fdbDel struct {
		dev         string
		dst         netip.Addr
		keepLearned bool
	}
)

const zeroMAC = "00:00:00:00:00:00"

// onOff renders a flag as iproute2 does.
func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

// The kernel ignores an alias given when a link is created, so creating
// renders as two commands; the Linux dataplane deletes the new link when
// setting its alias fails, so no unmarked link is left behind.
func (o bridgeAdd) change() Change {
	return Change(fmt.Sprintf("ip link add %s mtu %d type bridge && ip link set %s alias %s%s",
		o.name, o.mtu, o.name, AliasPrefix, o.network))
}
func (o vxlanAdd) change() Change {
	return Change(fmt.Sprintf("ip link add %s mtu %d type vxlan id %d local %s dstport %d && ip link set %s alias %s%s",
		o.name, o.mtu, o.vni, o.local, o.port, o.name, AliasPrefix, o.network))
}
func (o l2Del) change() Change { return Change("ip link del " + o.name) }
func (o aliasSet) change() Change {
	return Change("ip link set " + o.name + " alias " + AliasPrefix + o.network)
}
func (o masterSet) change() Change { return Change("ip link set " + o.dev + " master " + o.master) }
func (o portLearning) change() Change {
	return Change("bridge link set dev " + o.dev + " learning " + onOff(o.on))
}
func (o vxlanRelease) change() Change {
	return Change("ip link set " + o.dev + " nomaster")
}
func (o portSet) change() Change  { return Change("ip link set " + o.port + " master " + o.bridge) }
func (o noMaster) change() Change { return Change("ip link set " + o.port + " nomaster") }
func (o fdbAppend) change() Change {
	return Change("bridge fdb append " + zeroMAC + " dev " + o.dev + " dst " + o.dst.String())
}
func (o fdbDel) change() Change {
	c := "bridge fdb del " + zeroMAC + " dev " + o.dev + " dst " + o.dst.String()
	if o.keepLearned {
		c += " (draining: what it learned stays)"
	}
	return Change(c)
}

func (o bridgeAdd) target() tunnel.Target { return tunnel.Target{Interface: o.name, Creates: true} }
func (o vxlanAdd) target() tunnel.Target  { return tunnel.Target{Interface: o.name, Creates: true} }
func (o l2Del) target() tunnel.Target     { return tunnel.Target{Interface: o.name, Deletes: true} }
func (o aliasSet) target() tunnel.Target  { return tunnel.Target{Interface: o.name} }
func (o masterSet) target() tunnel.Target { return tunnel.Target{Interface: o.dev} }
func (o portLearning) target() tunnel.Target {
	return tunnel.Target{Interface: o.dev}
}
func (o vxlanRelease) target() tunnel.Target {
	return tunnel.Target{Interface: o.dev}
}
func (o portSet) target() tunnel.Target   { return tunnel.Target{Interface: o.bridge, Port: o.port} }
func (o noMaster) target() tunnel.Target  { return tunnel.Target{Port: o.port} }
func (o fdbAppend) target() tunnel.Target { return tunnel.Target{Interface: o.dev} }
func (o fdbDel) target() tunnel.Target    { return tunnel.Target{Interface: o.dev} }

func (o bridgeAdd) apply(s *State) {
	s.L2.Bridges = append(s.L2.Bridges, BridgeState{Name: o.name, Network: o.network, MTU: o.mtu})
}
func (o vxlanAdd) apply(s *State) {
	s.L2.VXLANs = append(s.L2.VXLANs, VXLANState{Name: o.name, Network: o.network, VNI: o.vni, Local: o.local,
		UDPPort: o.port, MTU: o.mtu, Learning: true})
}

// apply deletes the interface; a deleted bridge releases its ports and
// VXLAN devices.
func (o l2Del) apply(s *State) {
	l := &s.L2
	l.Bridges = slices.DeleteFunc(l.Bridges, func(b BridgeState) bool { return b.Name == o.name })
	l.VXLANs = slices.DeleteFunc(l.VXLANs, func(v VXLANState) bool { return v.Name == o.name })
	for i := range l.VXLANs {
		if l.VXLANs[i].Master == o.name {
			l.VXLANs[i].Master = ""
		}
	}
}
func (o aliasSet) apply(s *State) {
	if b := s.L2.bridge(o.name); b != nil {
		b.Network = o.network
	}
	if v := s.L2.vxlan(o.name); v != nil {
		v.Network = o.network
	}
}
func (o masterSet) apply(s *State) {
	if v := s.L2.vxlan(o.dev); v != nil {
		v.Master, v.NoLearning = o.master, false
	}
}
func (o portLearning) apply(s *State) {
	if v := s.L2.vxlan(o.dev); v != nil {
		v.NoLearning = !o.on
	}
}
func (o vxlanRelease) apply(s *State) {
	if v := s.L2.vxlan(o.dev); v != nil {
		v.Master, v.NoLearning = "", false
	}
}
func (o portSet) apply(s *State) {
	s.L2.release(o.port)
	if b := s.L2.bridge(o.bridge); b != nil {
		b.Ports = append(b.Ports, o.port)
	}
}
func (o noMaster) apply(s *State) { s.L2.release(o.port) }
func (o fdbAppend) apply(s *State) {
	if v := s.L2.vxlan(o.dev); v != nil {
		v.Remotes = append(v.Remotes, o.dst)
	}
}
func (o fdbDel) apply(s *State) {
	if v := s.L2.vxlan(o.dev); v != nil {
		v.Remotes = slices.DeleteFunc(v.Remotes, func(a netip.Addr) bool { return a == o.dst })
	}
}

// l2 serves a plan's bridged networks (plan.Bridge) on a machine: it checks
// what of them it can serve and diffs the machine's L2 against them. The
// kernel's bridge and VXLAN devices (kernelL2) are the implementation
// fednet has; another that serves the same plan.Bridge (a userspace switch
// in wgdev) would come in here with its own state and ops.
type l2 interface {
	// check reports what of bridges cannot be served, naming the field;
	// taken are interface names the plan gives to other things (name ->
	// field).
	check(bridges []plan.Bridge, taken map[string]string) []error
	// diff returns the ops that bring cur to bridges. It is pure.
	diff(cur L2State, bridges []plan.Bridge) []op
	// down returns the ops that remove everything of cur.
	down(cur L2State) []op
}

// kernelL2 is bridged networks as Linux bridges and VXLAN devices.
type kernelL2 struct{}

var _ l2 = kernelL2{}

// wantedPort is a VXLAN port of the plan with its bridge.
type wantedPort struct {
	bridge plan.Bridge
	port   plan.VXLAN
}

// fits reports whether the existing device v can serve w as it is (else it
// is recreated): same VNI, local address and port, learning, no default
// remote.
func (w wantedPort) fits(v VXLANState) bool {
	return v.VNI == w.bridge.VNI && v.Local == w.port.Local.Unmap() && v.UDPPort == w.port.UDPPort &&
		v.Learning && !v.DefaultRemote.IsValid()
}

// diff returns, in order: deletions (bridges the plan no longer has, VXLAN
// devices it no longer has or that no longer fit and are recreated), ports
// released (a VXLAN device the plan no longer has, of a bridge it keeps, is
// released from the bridge here and deleted last: the bridge stops
// forwarding through it at once, and the new ports' flood entries follow
// within a millisecond, not after a deletion's tens: see "The way back" in
// docs/resilience.md), then per bridge (by VNI): creation or alias of the bridge; per
// VXLAN port creation, alias, MTU and up, enslaving and the port's learning
// (plan.VXLAN.NoLearning); the segment port
// enslaved; MTU and up of the bridge (after enslaving, so an MTU the kernel
// derived from the ports is corrected); the all-zero FDB entries
// (additions first on a bridge's only port to gateways, deletions first
// on a relay's tree ports: diffRemotes; a draining bridge's ports have
// none and keep what they learned).
func (kernelL2) diff(cur L2State, bridges []plan.Bridge) []op {
	want := slices.Clone(bridges)
	slices.SortFunc(want, func(a, b plan.Bridge) int { return a.VNI - b.VNI })
	wantBridge := map[string]plan.Bridge{}
	wantPort := map[string]wantedPort{}
	for _, b := range want {
		wantBridge[b.Name] = b
		for _, v := range b.VXLANs {
			wantPort[v.Name] = wantedPort{b, v}
		}
	}

	var ops []op
	for _, b := range cur.Bridges {
		if _, ok := wantBridge[b.Name]; !ok {
			ops = append(ops, l2Del{name: b.Name})
		}
	}
	var last []op
	for _, v := range cur.VXLANs {
		w, ok := wantPort[v.Name]
		switch {
		case ok && w.fits(v):
		case !ok && wantBridge[v.Master].Name != "" && !portWanted(want, v.VNI, v.UDPPort):
			ops = append(ops, vxlanRelease{dev: v.Name})
			last = append(last, l2Del{name: v.Name})
		default:
			ops = append(ops, l2Del{name: v.Name})
		}
	}
	have := applyL2(cur, ops)
	for _, b := range have.Bridges {
		for _, port := range b.Ports {
			if port != wantBridge[b.Name].Port {
				ops = append(ops, noMaster{port: port})
			}
		}
	}

	for _, w := range want {
		br := have.bridge(w.Name)
		if br == nil {
			ops = append(ops, bridgeAdd{name: w.Name, network: w.Network, mtu: w.MTU})
			br = &BridgeState{Name: w.Name, Network: w.Network, MTU: w.MTU}
		} else if br.Network != w.Network {
			ops = append(ops, aliasSet{name: w.Name, network: w.Network})
		}
		ports := slices.Clone(w.VXLANs)
		slices.SortFunc(ports, func(a, b plan.VXLAN) int { return strings.Compare(a.Name, b.Name) })
		for _, p := range ports {
			ops = append(ops, diffPort(have.vxlan(p.Name), w, p)...)
		}
		if w.Port != "" && !slices.Contains(br.Ports, w.Port) {
			ops = append(ops, portSet{port: w.Port, bridge: w.Name})
		}
		ops = append(ops, setLink(w.Name, br.MTU, br.Up, w.MTU)...)
		for _, p := range ports {
			var remotes []netip.Addr
			if v := have.vxlan(p.Name); v != nil {
				remotes = v.Remotes
			}
			want := p.Remotes
			if w.Drain {
				want = nil
			}
			only := p.Kind == plan.ToGateways && len(w.Ports(plan.ToGateways)) == 1
			ops = append(ops, diffRemotes(p.Name, remotes, want, w.Drain, only)...)
		}
	}
	return append(ops, last...)
}

// portWanted reports whether a VXLAN port of bridges has VNI vni and UDP
// port port (Linux allows one device per VNI and port: an old device on
// them is deleted before the new one is made).
func portWanted(bridges []plan.Bridge, vni, port int) bool {
	for _, b := range bridges {
		for _, v := range b.VXLANs {
			if b.VNI == vni && v.UDPPort == port {
				return true
			}
		}
	}
	return false
}

// applyL2 returns s after ops.
func applyL2(s L2State, ops []op) L2State {
	st := State{L2: s.clone()}
	for _, o := range ops {
		o.apply(&st)
	}
	return st.L2
}

// diffPort returns the ops that create or correct VXLAN port p of bridge w
// (creation, alias, MTU and up, enslaving, learning; up last for a new port
// that must not learn), given its current state v (nil when it does not
// exist or is to be recreated).
func diffPort(v *VXLANState, w plan.Bridge, p plan.VXLAN) []op {
	var ops []op
	if v == nil {
		ops = append(ops, vxlanAdd{name: p.Name, network: w.Network, vni: w.VNI, local: p.Local.Unmap(), port: p.UDPPort, mtu: w.MTU})
		v = &VXLANState{Name: p.Name, Network: w.Network, MTU: w.MTU}
	} else if v.Network != w.Network {
		ops = append(ops, aliasSet{name: p.Name, network: w.Network})
	}
	enslave := v.Master != w.Name
	// A port that must learn nothing (one made ahead of a way back) comes
	// up only once it is enslaved with learning off: up before, a frame
	// that arrives between the enslaving and the learning's turning off
	// is learned behind it (TestLinuxBridgeShapeSwitch caught one in CI).
	// A VXLAN device that is down receives nothing.
	quiet := enslave && p.NoLearning && !v.Up
	ops = append(ops, setLink(p.Name, v.MTU, v.Up || quiet, w.MTU)...)
	noLearning := v.NoLearning
	if enslave {
		// A port enslaved anew learns (the kernel's default).
		ops = append(ops, masterSet{dev: p.Name, master: w.Name})
		noLearning = false
	}
	if noLearning != p.NoLearning {
		ops = append(ops, portLearning{dev: p.Name, on: !p.NoLearning})
	}
	if quiet {
		ops = append(ops, linkSet{name: p.Name, up: true})
	}
	return ops
}

// diffRemotes returns the FDB changes that make dev's flood entries have
// want; keepLearned keeps what dev learned behind the remotes it stops
// flooding to.
//
// With addFirst the new entries go in before the old ones (and what was
// learned behind them) go: a remote that moves (a site's active gateway,
// for a port that is its bridge's only one to gateways, or a host's tunnel)
// is flooded to without a gap, where deleting first dropped every frame
// flooded between the deletion, the forgetting and the addition (one probe
// on every pair from that remote site in the fault suite's handovers).
// Such a port never forwards a frame from one remote to another (a bridge
// never sends a frame out of the port it came in by), so flooding to both
// for a moment delivers a frame twice at most. A relay's tree ports do
// forward between remotes: there a moment with both could close a cycle,
// so deletions go first.
func diffRemotes(dev string, have, want []netip.Addr, keepLearned, addFirst bool) []op {
	var dels, adds []op
	want = canonicalAddrs(want)
	for _, r := range have {
		if !slices.Contains(want, r) {
			dels = append(dels, fdbDel{dev: dev, dst: r, keepLearned: keepLearned})
		}
	}
	for _, r := range want {
		if !slices.Contains(have, r) {
			adds = append(adds, fdbAppend{dev: dev, dst: r})
		}
	}
	if addFirst {
		return append(adds, dels...)
	}
	return append(dels, adds...)
}

// down returns the ops that delete every bridge and VXLAN device fednet
// owns. Deleting a bridge releases its ports; the ports stay.
func (kernelL2) down(cur L2State) []op {
	var ops []op
	for _, v := range cur.VXLANs {
		ops = append(ops, l2Del{name: v.Name})
	}
	for _, b := range cur.Bridges {
		ops = append(ops, l2Del{name: b.Name})
	}
	return ops
}

func canonicalAddrs(as []netip.Addr) []netip.Addr {
	out := make([]netip.Addr, 0, len(as))
	for _, a := range as {
		out = append(out, a.Unmap())
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

// check reports what in bridges cannot be applied, naming the field
// (bridges[i].vni, ...). Interface names must be unique among the bridges'
// and with taken.
func (kernelL2) check(bridges []plan.Bridge, taken map[string]string) []error {
	var errs []error
	names := map[string]string{}
	for n, f := range taken {
		names[n] = f
	}
	vnis := map[int]int{}
	for i, b := range bridges {
		field := func(f string) string { return "bridges[" + strconv.Itoa(i) + "]." + f }
		fail := func(f, format string, args ...any) {
			errs = append(errs, fmt.Errorf("network %q: %s %s", b.Network, field(f), fmt.Sprintf(format, args...)))
		}
		uniqueName := func(f, name string) {
			if err := validInterfaceName(name); err != nil {
				fail(f, "is not valid: %v", err)
			} else if prev, dup := names[name]; dup {
				fail(f, "%s: interface %s is also %s", name, name, prev)
			} else {
				names[name] = field(f)
			}
		}
		if b.Network == "" {
			fail("network", "is empty")
		}
		uniqueName("name", b.Name)
		if b.Port != "" {
			uniqueName("port", b.Port)
		}
		if b.VNI < 1 || b.VNI > 1<<24-1 {
			fail("vni", "%d is out of range 1-16777215", b.VNI)
		} else if j, dup := vnis[b.VNI]; dup {
			fail("vni", "%d is also the VNI of bridges[%d]", b.VNI, j)
		} else {
			vnis[b.VNI] = i
		}
		if b.MTU < 576 || b.MTU > 65535 {
			fail("mtu", "%d is out of range 576-65535", b.MTU)
		}
		ports := map[int]int{}
		for k, v := range b.VXLANs {
			vf := "vxlans[" + strconv.Itoa(k) + "]."
			uniqueName(vf+"name", v.Name)
			if v.Kind != plan.ToGateways && v.Kind != plan.ToHost {
				fail(vf+"kind", "%v is not valid: want gateways or host", v.Kind)
			}
			if !v.Local.IsValid() {
				fail(vf+"local", "is not a valid address")
			}
			if v.Kind == plan.ToHost && len(v.Remotes) != 1 {
				fail(vf+"remotes", "has %d addresses; a port to a host has the host's one", len(v.Remotes))
			}
			for _, r := range v.Remotes {
				switch {
				case !r.IsValid():
					fail(vf+"remotes", "has an address that is not valid")
				case r.Unmap() == v.Local.Unmap():
					fail(vf+"remotes", "%s is the local address", r)
				case v.Local.IsValid() && r.Unmap().Is4() != v.Local.Unmap().Is4():
					fail(vf+"remotes", "%s is not of the local address's family (%s)", r, v.Local)
				}
			}
			if v.UDPPort < 1 || v.UDPPort > 65535 {
				fail(vf+"udpPort", "%d is out of range 1-65535 (VXLAN uses 4789)", v.UDPPort)
			} else if j, dup := ports[v.UDPPort]; dup {
				fail(vf+"udpPort", "%d is also the port of vxlans[%d]: Linux allows one VXLAN device per VNI and port", v.UDPPort, j)
			} else {
				ports[v.UDPPort] = k
			}
		}
	}
	return errs
}
