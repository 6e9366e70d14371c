package dataplane

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/fednet/fednet/internal/plan"
)

// Bridged networks (plan.Bridge): per network a Linux bridge joining the
// site segment's port and the VXLAN devices whose frames go to other
// gateways between transit addresses: one to every other member in a full
// mesh, one per tree neighbor where frames are relayed. Broadcast, unknown
// unicast and multicast are replicated to every remote of a device through
// all-zero FDB entries ("bridge fdb append 00:00:00:00:00:00 dev fvx100 dst
// 10.255.0.2"); the VXLAN device learns (MAC, remote) pairs from received
// frames, so known unicast goes to one remote only.
//
// Ownership: fednet marks every bridge and VXLAN device it creates with the
// interface alias "fednet:<network>" (IFLA_IFALIAS, `ip link show` prints
// it). An interface of kind bridge or vxlan with that alias prefix is
// fednet's: Apply deletes such interfaces the plan no longer has, and Down
// deletes them all. An alias survives agent restarts and plan changes
// (unlike a list kept on disk), needs no naming convention, and is visible
// to an operator. An interface named in the plan that exists without the
// alias (or of another kind) is not touched: Apply reports it and applies
// the rest. Ports are the operator's interfaces: fednet enslaves and
// releases them, and leaves their state (up, MTU, addresses) alone.

// AliasPrefix marks the bridges and VXLAN devices fednet owns: their
// interface alias is AliasPrefix followed by the network name.
const AliasPrefix = "fednet:"

// Link kinds of bridged networks as the kernel reports them.
const (
	KindBridge = "bridge"
	KindVXLAN  = "vxlan"
)

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

// VXLANState is a VXLAN device fednet owns.
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
	// Remotes are the destinations of the device's all-zero FDB entries
	// (head-end replication), sorted. Learned entries and the bridge's own
	// entries are not listed.
	Remotes []netip.Addr
}

func (b BridgeState) clone() BridgeState {
	b.Ports = slices.Clone(b.Ports)
	return b
}

func (v VXLANState) clone() VXLANState {
	v.Remotes = slices.Clone(v.Remotes)
	return v
}

type (
	// bridgeAdd creates a bridge with its MTU and fednet's alias.
	bridgeAdd struct {
		name, network string
		mtu           int
	}
	// vxlanAdd creates a learning VXLAN device with no default remote.
	vxlanAdd struct {
		name, network string
		vni           int
		local         netip.Addr
		port, mtu     int
	}
	// l2Del deletes a bridge (releasing its ports) or a VXLAN device (with
	// its FDB).
	l2Del struct{ name string }
	// aliasSet marks an interface fednet owns with its network.
	aliasSet struct{ name, network string }
	// masterSet enslaves dev to the bridge master.
	masterSet struct{ dev, master string }
	// noMaster releases dev from its bridge.
	noMaster struct{ dev string }
	// fdbAppend adds an all-zero FDB entry (flooding to dst) to dev.
	fdbAppend struct {
		dev string
		dst netip.Addr
	}
	fdbDel struct {
		dev string
		dst netip.Addr
	}
)

const zeroMAC = "00:00:00:00:00:00"

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
func (o masterSet) change() Change {
	return Change("ip link set " + o.dev + " master " + o.master)
}
func (o noMaster) change() Change { return Change("ip link set " + o.dev + " nomaster") }
func (o fdbAppend) change() Change {
	return Change("bridge fdb append " + zeroMAC + " dev " + o.dev + " dst " + o.dst.String())
}
func (o fdbDel) change() Change {
	return Change("bridge fdb del " + zeroMAC + " dev " + o.dev + " dst " + o.dst.String())
}

func (o bridgeAdd) link() string { return "" }
func (o vxlanAdd) link() string  { return "" }
func (o l2Del) link() string     { return "" }
func (o aliasSet) link() string  { return o.name }
func (o masterSet) link() string { return o.master }
func (o noMaster) link() string  { return "" }
func (o fdbAppend) link() string { return o.dev }
func (o fdbDel) link() string    { return o.dev }

// creates returns the interface o creates, "" for none.
func creates(o op) string {
	switch o := o.(type) {
	case linkAdd:
		return o.name
	case bridgeAdd:
		return o.name
	case vxlanAdd:
		return o.name
	}
	return ""
}

// diffBridges returns the ops that bring fednet's bridges and VXLAN devices
// in cur to p.Bridges: first deletions (interfaces the plan no longer has,
// VXLAN devices whose VNI, local address, port or learning differ and are
// recreated), then ports released, then per bridge (by VNI) creation, alias,
// MTU and up of the VXLAN device, enslaving it and the port, MTU and up of
// the bridge (after enslaving, so an MTU the kernel derived from the ports
// is corrected), and the all-zero FDB entries (deletions first). A bridge
// whose bridge or VXLAN name is held by an interface fednet does not own is
// skipped and reported in the error; the other bridges are still diffed.
func diffBridges(cur State, p plan.Gateway) ([]op, error) {
	var errs []error
	foreign := map[string]bool{}
	for _, n := range cur.Foreign {
		foreign[n] = true
	}
	want := slices.Clone(p.Bridges)
	slices.SortFunc(want, func(a, b plan.Bridge) int { return a.VNI - b.VNI })
	type wantedVXLAN struct {
		bridge plan.Bridge
		dev    plan.VXLAN
	}
	wantBridge := map[string]plan.Bridge{}
	wantVXLAN := map[string]wantedVXLAN{}
	skipped := map[string]bool{} // bridges left alone because of a foreign name
	var apply []plan.Bridge
	for _, b := range want {
		wantBridge[b.Name] = b
		for _, v := range gatewayPorts(b) {
			wantVXLAN[v.Name] = wantedVXLAN{b, v}
		}
		names := []string{b.Name}
		for _, v := range gatewayPorts(b) {
			names = append(names, v.Name)
		}
		bad := false
		for _, n := range names {
			if foreign[n] {
				bad = true
				errs = append(errs, fmt.Errorf("network %s: interface %s exists and is not fednet's (no alias %s...): fednet does not touch it; delete or rename it, or choose another name", b.Network, n, AliasPrefix))
			}
		}
		if bad {
			// Leave fednet's own half of this network as it is.
			skipped[b.Name] = true
			continue
		}
		apply = append(apply, b)
	}

	var ops []op
	bridges := map[string]*BridgeState{}
	for _, b := range cur.Bridges {
		if _, ok := wantBridge[b.Name]; !ok {
			ops = append(ops, l2Del{name: b.Name})
			continue
		}
		c := b.clone()
		bridges[b.Name] = &c
	}
	vxlans := map[string]*VXLANState{}
	for _, v := range cur.VXLANs {
		w, ok := wantVXLAN[v.Name]
		keep := ok && skipped[w.bridge.Name]
		if !ok || !keep && (v.VNI != w.bridge.VNI || v.Local != w.dev.Local || v.UDPPort != w.dev.UDPPort || !v.Learning) {
			ops = append(ops, l2Del{name: v.Name})
			continue
		}
		c := v.clone()
		if c.Master != "" && bridges[c.Master] == nil && slices.ContainsFunc(cur.Bridges, func(b BridgeState) bool { return b.Name == c.Master }) {
			c.Master = "" // released by its bridge's deletion
		}
		vxlans[v.Name] = &c
	}

	for _, b := range cur.Bridges {
		br := bridges[b.Name]
		if br == nil || skipped[b.Name] {
			continue
		}
		w := wantBridge[b.Name]
		for _, port := range br.Ports {
			if port != w.Port {
				ops = append(ops, noMaster{dev: port})
			}
		}
	}

	for _, w := range apply {
		br := bridges[w.Name]
		if br == nil {
			ops = append(ops, bridgeAdd{name: w.Name, network: w.Network, mtu: w.MTU})
			br = &BridgeState{Name: w.Name, Network: w.Network, MTU: w.MTU}
		} else if br.Network != w.Network {
			ops = append(ops, aliasSet{name: w.Name, network: w.Network})
		}
		for _, d := range gatewayPorts(w) {
			ops = append(ops, diffVXLAN(vxlans[d.Name], w, d)...)
		}
		if w.Port != "" && !slices.Contains(br.Ports, w.Port) {
			ops = append(ops, masterSet{dev: w.Port, master: w.Name})
		}
		if ls := (linkSet{name: w.Name, up: !br.Up}); ls.up || br.MTU != w.MTU {
			if br.MTU != w.MTU {
				ls.mtu = w.MTU
			}
			ops = append(ops, ls)
		}
		for _, d := range gatewayPorts(w) {
			v := vxlans[d.Name]
			remotes := canonicalAddrs(d.Remotes)
			var have []netip.Addr
			if v != nil {
				have = v.Remotes
			}
			for _, r := range have {
				if !slices.Contains(remotes, r) {
					ops = append(ops, fdbDel{dev: d.Name, dst: r})
				}
			}
			for _, r := range remotes {
				if !slices.Contains(have, r) {
					ops = append(ops, fdbAppend{dev: d.Name, dst: r})
				}
			}
		}
	}
	return ops, errors.Join(errs...)
}

// diffVXLAN returns the ops that create or correct VXLAN device d of bridge
// w (creation, alias, MTU and up, enslaving), given its current state v (nil
// when it does not exist or is to be recreated).
func diffVXLAN(v *VXLANState, w plan.Bridge, d plan.VXLAN) []op {
	var ops []op
	if v == nil {
		ops = append(ops, vxlanAdd{name: d.Name, network: w.Network, vni: w.VNI, local: d.Local, port: d.UDPPort, mtu: w.MTU})
		v = &VXLANState{Name: d.Name, Network: w.Network, MTU: w.MTU}
	} else if v.Network != w.Network {
		ops = append(ops, aliasSet{name: d.Name, network: w.Network})
	}
	if ls := (linkSet{name: d.Name, up: !v.Up}); ls.up || v.MTU != w.MTU {
		if v.MTU != w.MTU {
			ls.mtu = w.MTU
		}
		ops = append(ops, ls)
	}
	if v.Master != w.Name {
		ops = append(ops, masterSet{dev: d.Name, master: w.Name})
	}
	return ops
}

// downBridges returns the ops that delete every bridge and VXLAN device
// fednet owns. Deleting a bridge releases its ports; the ports stay.
func downBridges(cur State) []op {
	var ops []op
	for _, v := range cur.VXLANs {
		ops = append(ops, l2Del{name: v.Name})
	}
	for _, b := range cur.Bridges {
		ops = append(ops, l2Del{name: b.Name})
	}
	return ops
}

// applyL2 changes s as the kernel would for an op of bridged networks; it
// reports false for other ops.
func (s *State) applyL2(o op) bool {
	switch o := o.(type) {
	case bridgeAdd:
		s.Bridges = append(s.Bridges, BridgeState{Name: o.name, Network: o.network, MTU: o.mtu})
	case vxlanAdd:
		s.VXLANs = append(s.VXLANs, VXLANState{Name: o.name, Network: o.network, VNI: o.vni, Local: o.local,
			UDPPort: o.port, MTU: o.mtu, Learning: true})
	case l2Del:
		s.Bridges = slices.DeleteFunc(s.Bridges, func(b BridgeState) bool { return b.Name == o.name })
		s.VXLANs = slices.DeleteFunc(s.VXLANs, func(v VXLANState) bool { return v.Name == o.name })
		for i := range s.VXLANs {
			if s.VXLANs[i].Master == o.name {
				s.VXLANs[i].Master = ""
			}
		}
	case aliasSet:
		if b := s.bridge(o.name); b != nil {
			b.Network = o.network
		}
		if v := s.vxlan(o.name); v != nil {
			v.Network = o.network
		}
	case masterSet:
		if v := s.vxlan(o.dev); v != nil {
			v.Master = o.master
			break
		}
		s.release(o.dev)
		if b := s.bridge(o.master); b != nil {
			b.Ports = append(b.Ports, o.dev)
		}
	case noMaster:
		if v := s.vxlan(o.dev); v != nil {
			v.Master = ""
			break
		}
		s.release(o.dev)
	case fdbAppend:
		v := s.vxlan(o.dev)
		v.Remotes = append(v.Remotes, o.dst)
	case fdbDel:
		v := s.vxlan(o.dev)
		v.Remotes = slices.DeleteFunc(v.Remotes, func(a netip.Addr) bool { return a == o.dst })
	default:
		return false
	}
	return true
}

// setL2Link applies a linkSet to a bridge or VXLAN device; it reports
// whether name is one.
func (s *State) setL2Link(o linkSet) bool {
	mtu, up := (*int)(nil), (*bool)(nil)
	if b := s.bridge(o.name); b != nil {
		mtu, up = &b.MTU, &b.Up
	} else if v := s.vxlan(o.name); v != nil {
		mtu, up = &v.MTU, &v.Up
	} else {
		return false
	}
	if o.mtu > 0 {
		*mtu = o.mtu
	}
	if o.up {
		*up = true
	}
	return true
}

func (s *State) bridge(name string) *BridgeState {
	for i := range s.Bridges {
		if s.Bridges[i].Name == name {
			return &s.Bridges[i]
		}
	}
	return nil
}

func (s *State) vxlan(name string) *VXLANState {
	for i := range s.VXLANs {
		if s.VXLANs[i].Name == name {
			return &s.VXLANs[i]
		}
	}
	return nil
}

// release removes dev from the ports of every bridge.
func (s *State) release(dev string) {
	for i := range s.Bridges {
		s.Bridges[i].Ports = slices.DeleteFunc(s.Bridges[i].Ports, func(p string) bool { return p == dev })
	}
}

func canonicalAddrs(as []netip.Addr) []netip.Addr {
	out := make([]netip.Addr, 0, len(as))
	for _, a := range as {
		out = append(out, a.Unmap())
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

func joinAddrs(as []netip.Addr) string {
	if len(as) == 0 {
		return `""`
	}
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}

// validateBridges reports what in p.Bridges cannot be applied, naming the
// field (bridges[i].vni, ...).
func validateBridges(p plan.Gateway) []error {
	var errs []error
	names := map[string]string{tunnelOf(p).Name: "tunnels[0].name"}
	vnis := map[int]int{}
	for i, b := range p.Bridges {
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
			if !v.Local.IsValid() {
				fail(vf+"local", "is not a valid address")
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
