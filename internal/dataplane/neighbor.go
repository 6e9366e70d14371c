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

// Neighbor tunnels (plan.Neighbor): per host of a site whose fabric drops
// unknown MACs, a VXLAN device with the network's VNI from the gateway's
// LAN address to the host's (the device's default remote), on the host's
// own UDP port, enslaved to the network's bridge. Linux allows one VXLAN
// device per (VNI, UDP port) in a namespace, hence a port per host.
//
// Ownership: the device's alias is NeighborAliasPrefix followed by
// "<network>/<host>". It is not AliasPrefix: the bridges' code leaves these
// devices alone (it would otherwise delete them as VXLAN devices of no
// bridge) and this file's code owns them: Apply deletes the ones the plan no
// longer has, Down deletes them all. A device named in the plan that exists
// without the alias is not touched.

// NeighborAliasPrefix marks the neighbor tunnels' VXLAN devices fednet owns.
const NeighborAliasPrefix = "fednet-neighbor:"

// NeighborState is a neighbor tunnel's VXLAN device fednet owns.
type NeighborState struct {
	Name string
	// Network and Host are named in the device's alias.
	Network, Host string
	VNI           int
	Local, Remote netip.Addr
	UDPPort       int
	MTU           int
	Up, Learning  bool
	// Master is the bridge the device is enslaved to, "" for none.
	Master string
}

type (
	// nbAdd creates a learning VXLAN device with a unicast default remote
	// and fednet's neighbor alias.
	nbAdd struct {
		name, network, host string
		vni                 int
		local, remote       netip.Addr
		port, mtu           int
	}
	// nbSet changes what may change in place: alias, MTU, master, up.
	nbSet struct {
		name          string
		network, host string // "" for unchanged alias
		mtu           int    // 0 for unchanged
		master        string // "" for unchanged
		up            bool
	}
	// nbDel deletes a neighbor device.
	nbDel struct{ name string }
)

func neighborAlias(network, host string) string {
	return NeighborAliasPrefix + network + "/" + host
}

// parseNeighborAlias returns the network and host of a neighbor alias.
func parseNeighborAlias(alias string) (network, host string, ok bool) {
	rest, ok := strings.CutPrefix(alias, NeighborAliasPrefix)
	if !ok {
		return "", "", false
	}
	network, host, _ = strings.Cut(rest, "/")
	return network, host, true
}

func (o nbAdd) change() Change {
	return Change(fmt.Sprintf("ip link add %s mtu %d type vxlan id %d local %s remote %s dstport %d && ip link set %s alias %s",
		o.name, o.mtu, o.vni, o.local, o.remote, o.port, o.name, neighborAlias(o.network, o.host)))
}

func (o nbSet) change() Change {
	var parts []string
	if o.network != "" {
		parts = append(parts, "ip link set "+o.name+" alias "+neighborAlias(o.network, o.host))
	}
	set := "ip link set " + o.name
	if o.master != "" {
		set += " master " + o.master
	}
	if o.mtu > 0 {
		set += " mtu " + strconv.Itoa(o.mtu)
	}
	if o.up {
		set += " up"
	}
	if set != "ip link set "+o.name {
		parts = append(parts, set)
	}
	return Change(strings.Join(parts, " && "))
}

func (o nbDel) change() Change { return Change("ip link del " + o.name) }

func (o nbAdd) link() string { return "" }
func (o nbSet) link() string { return o.name }
func (o nbDel) link() string { return "" }

// wantedNeighbor is a neighbor tunnel of the plan with its bridge.
type wantedNeighbor struct {
	neighborPort
	network, bridge string
	vni, mtu        int
}

// diffNeighbors returns the ops that bring fednet's neighbor devices in cur
// to the plan's: deletions first (devices the plan no longer has, and those
// whose VNI, addresses, port or learning differ, which are recreated), then
// per device creation and one nbSet for alias, master, MTU and up. It
// comes after diffBridges' ops, which create the bridges. Devices of a
// bridge whose name another interface holds are left alone (diffBridges
// reports that); a device whose own name another interface holds is
// skipped and reported.
func diffNeighbors(cur State, p plan.Gateway) ([]op, error) {
	foreign := map[string]bool{}
	for _, n := range cur.Foreign {
		foreign[n] = true
	}
	want := map[string]wantedNeighbor{}
	var order []string
	var errs []error
	for _, b := range p.Bridges {
		if foreign[b.Name] {
			continue
		}
		for _, n := range neighborPorts(b) {
			if foreign[n.VXLAN] {
				errs = append(errs, fmt.Errorf("network %s: neighbor %s: interface %s exists and is not fednet's (no alias %s...): fednet does not touch it; delete or rename it", b.Network, n.Host, n.VXLAN, NeighborAliasPrefix))
				continue
			}
			want[n.VXLAN] = wantedNeighbor{neighborPort: n, network: b.Network, bridge: b.Name, vni: b.VNI, mtu: b.MTU}
			order = append(order, n.VXLAN)
		}
	}
	slices.Sort(order)

	var ops []op
	have := map[string]NeighborState{}
	for _, c := range cur.Neighbors {
		w, ok := want[c.Name]
		if !ok || c.VNI != w.vni || c.Local.Unmap() != w.Local.Unmap() || c.Remote.Unmap() != w.Remote.Unmap() ||
			c.UDPPort != w.UDPPort || !c.Learning {
			ops = append(ops, nbDel{name: c.Name})
			continue
		}
		have[c.Name] = c
	}
	for _, name := range order {
		w := want[name]
		c, ok := have[name]
		if !ok {
			ops = append(ops, nbAdd{name: name, network: w.network, host: w.Host, vni: w.vni,
				local: w.Local, remote: w.Remote, port: w.UDPPort, mtu: w.mtu})
			c = NeighborState{Name: name, Network: w.network, Host: w.Host, MTU: w.mtu}
		}
		s := nbSet{name: name, up: !c.Up}
		if c.Network != w.network || c.Host != w.Host {
			s.network, s.host = w.network, w.Host
		}
		if c.MTU != w.mtu {
			s.mtu = w.mtu
		}
		if c.Master != w.bridge {
			s.master = w.bridge
		}
		if s.up || s.network != "" || s.mtu != 0 || s.master != "" {
			ops = append(ops, s)
		}
	}
	return ops, errors.Join(errs...)
}

// downNeighbors returns the ops that delete every neighbor device fednet
// owns.
func downNeighbors(cur State) []op {
	var ops []op
	for _, n := range cur.Neighbors {
		ops = append(ops, nbDel{name: n.Name})
	}
	return ops
}

// applyNeighbor changes s as the kernel would for a neighbor op; it
// reports false for other ops.
func (s *State) applyNeighbor(o op) bool {
	switch o := o.(type) {
	case nbAdd:
		s.Neighbors = append(s.Neighbors, NeighborState{Name: o.name, Network: o.network, Host: o.host, VNI: o.vni,
			Local: o.local, Remote: o.remote, UDPPort: o.port, MTU: o.mtu, Learning: true})
	case nbSet:
		i := slices.IndexFunc(s.Neighbors, func(n NeighborState) bool { return n.Name == o.name })
		n := &s.Neighbors[i]
		if o.network != "" {
			n.Network, n.Host = o.network, o.host
		}
		if o.mtu > 0 {
			n.MTU = o.mtu
		}
		if o.master != "" {
			n.Master = o.master
		}
		if o.up {
			n.Up = true
		}
	case nbDel:
		s.Neighbors = slices.DeleteFunc(s.Neighbors, func(n NeighborState) bool { return n.Name == o.name })
	default:
		return false
	}
	return true
}

// validateNeighbors reports what in p's neighbor tunnels cannot be applied
// beyond what validateBridges checks of every VXLAN port, naming the field.
func validateNeighbors(p plan.Gateway) []error {
	var errs []error
	for i, b := range p.Bridges {
		for j, v := range b.VXLANs {
			if v.Kind != plan.ToHost {
				continue
			}
			field := fmt.Sprintf("bridges[%d].vxlans[%d].", i, j)
			if v.To == "" || strings.ContainsAny(v.To, "/ ") {
				errs = append(errs, fmt.Errorf("network %q: %sto: host name %q is empty or has / or a space", b.Network, field, v.To))
			}
			if len(v.Remotes) != 1 {
				errs = append(errs, fmt.Errorf("network %q: neighbor %q: %sremotes: %d addresses, want the host's one", b.Network, v.To, field, len(v.Remotes)))
			}
		}
	}
	return errs
}

// neighborPort is a neighbor tunnel of a plan: a VXLAN port of kind
// plan.ToHost.
type neighborPort struct {
	Host, VXLAN   string
	Local, Remote netip.Addr
	UDPPort       int
}

// neighborPorts are the neighbor tunnels of b (validateNeighbors has
// checked each has one remote).
func neighborPorts(b plan.Bridge) []neighborPort {
	var out []neighborPort
	for _, v := range hostPorts(b) {
		if len(v.Remotes) == 1 {
			out = append(out, neighborPort{Host: v.To, VXLAN: v.Name, Local: v.Local, Remote: v.Remotes[0], UDPPort: v.UDPPort})
		}
	}
	return out
}
