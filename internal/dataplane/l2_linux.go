package dataplane

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// readL2 reads, from the machine's links (with names by index), the
// bridges and VXLAN devices fednet owns: kind bridge or vxlan with a
// fednet alias (AliasPrefix, or the alias of neighbor devices from before
// one L2 model), the ports of those bridges, and each VXLAN device's
// all-zero FDB entries. It reports whether each link is fednet's L2.
func readL2(links []netlink.Link, names map[int]string) (L2State, map[int]bool, error) {
	var s L2State
	owned := map[int]bool{}
	bridges := map[int]int{} // bridge index -> position in s.Bridges
	for _, l := range links {
		a := l.Attrs()
		network, ok := l2Network(a.Alias)
		if !ok {
			continue
		}
		switch l := l.(type) {
		case *netlink.Bridge:
			bridges[a.Index] = len(s.Bridges)
			s.Bridges = append(s.Bridges, BridgeState{Name: a.Name, Network: network, MTU: a.MTU, Up: a.Flags&net.FlagUp != 0})
		case *netlink.Vxlan:
			v := VXLANState{
				Name: a.Name, Network: network, VNI: l.VxlanId, UDPPort: l.Port, MTU: a.MTU,
				Up: a.Flags&net.FlagUp != 0, Learning: l.Learning, Master: names[a.MasterIndex],
			}
			if ip, ok := netip.AddrFromSlice(l.SrcAddr); ok {
				v.Local = ip.Unmap()
			}
			if ip, ok := netip.AddrFromSlice(l.Group); ok && !ip.IsUnspecified() {
				v.DefaultRemote = ip.Unmap()
			}
			remotes, err := readFloodEntries(a.Index)
			if err != nil {
				return s, nil, fmt.Errorf("reading the FDB of %s: %w", a.Name, err)
			}
			v.Remotes = remotes
			if v.Master != "" {
				pi, err := netlink.LinkGetProtinfo(l)
				if err != nil {
					return s, nil, fmt.Errorf("reading the bridge port flags of %s: %w", a.Name, err)
				}
				v.NoLearning = !pi.Learning
			}
			s.VXLANs = append(s.VXLANs, v)
		default:
			continue
		}
		owned[a.Index] = true
	}
	for _, l := range links {
		a := l.Attrs()
		if i, ok := bridges[a.MasterIndex]; ok && !owned[a.Index] {
			s.Bridges[i].Ports = append(s.Bridges[i].Ports, a.Name)
		}
	}
	s.normalize()
	return s, owned, nil
}

// readFloodEntries returns the destinations of the all-zero FDB entries of
// the VXLAN device index: what `bridge fdb append 00:00:00:00:00:00 dev D
// dst X` creates (NTF_SELF, a dst). Learned entries and the bridge's own
// entries have a real MAC address and are left out.
func readFloodEntries(index int) ([]netip.Addr, error) {
	neighs, err := netlink.NeighList(index, unix.AF_BRIDGE)
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, n := range neighs {
		if n.LinkIndex != index || n.Flags&netlink.NTF_SELF == 0 || !isZeroMAC(n.HardwareAddr) {
			continue
		}
		if ip, ok := netip.AddrFromSlice(n.IP); ok {
			out = append(out, ip.Unmap())
		}
	}
	return out, nil
}

func isZeroMAC(hw net.HardwareAddr) bool {
	if len(hw) != 6 {
		return false
	}
	for _, b := range hw {
		if b != 0 {
			return false
		}
	}
	return true
}

// floodEntry is the all-zero FDB entry of dev towards dst, as `bridge fdb
// append` makes it: self, permanent.
func floodEntry(dev string, dst netip.Addr) (*netlink.Neigh, error) {
	link, err := netlink.LinkByName(dev)
	if err != nil {
		return nil, err
	}
	return &netlink.Neigh{
		LinkIndex:    link.Attrs().Index,
		Family:       unix.AF_BRIDGE,
		Flags:        netlink.NTF_SELF,
		State:        netlink.NUD_NOARP | netlink.NUD_PERMANENT,
		HardwareAddr: make(net.HardwareAddr, 6),
		IP:           dst.AsSlice(),
	}, nil
}

// addAliased creates link and sets its alias; if the alias cannot be set it
// deletes the link again (the kernel ignores IFLA_IFALIAS in a create
// request), so no unmarked link is left behind.
func addAliased(link netlink.Link, alias string) error {
	if err := netlink.LinkAdd(link); err != nil {
		return err
	}
	if err := netlink.LinkSetAlias(link, alias); err != nil {
		if delErr := netlink.LinkDel(link); delErr != nil {
			return errors.Join(fmt.Errorf("setting the alias: %w", err), fmt.Errorf("deleting the unmarked link: %w", delErr))
		}
		return fmt.Errorf("setting the alias: %w", err)
	}
	return nil
}

// delLinkIfPresent deletes the interface name; a missing one is no error.
func delLinkIfPresent(name string) error {
	link, err := netlink.LinkByName(name)
	var notFound netlink.LinkNotFoundError
	if errors.As(err, &notFound) {
		return nil
	}
	if err == nil {
		err = netlink.LinkDel(link)
	}
	return err
}

// withLinks runs f with the links named names, looked up in order.
func withLinks(f func(...netlink.Link) error, names ...string) error {
	links := make([]netlink.Link, len(names))
	for i, n := range names {
		l, err := netlink.LinkByName(n)
		if err != nil {
			return err
		}
		links[i] = l
	}
	return f(links...)
}

// The L2 ops' exec: none uses the dataplane (ApplyHost runs them with
// nil).

func (o bridgeAdd) exec(context.Context, *linuxDataplane) (Change, error) {
	err := addAliased(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: o.name, MTU: o.mtu}}, AliasPrefix+o.network)
	return wrapExec(o, "creating bridge "+o.name, err)
}

func (o vxlanAdd) exec(context.Context, *linuxDataplane) (Change, error) {
	err := addAliased(&netlink.Vxlan{
		LinkAttrs: netlink.LinkAttrs{Name: o.name, MTU: o.mtu},
		VxlanId:   o.vni, SrcAddr: o.local.AsSlice(), Port: o.port, Learning: true,
	}, AliasPrefix+o.network)
	return wrapExec(o, "creating VXLAN device "+o.name, err)
}

func (o l2Del) exec(context.Context, *linuxDataplane) (Change, error) {
	return wrapExec(o, "deleting interface "+o.name, delLinkIfPresent(o.name))
}

func (o aliasSet) exec(context.Context, *linuxDataplane) (Change, error) {
	err := withLinks(func(l ...netlink.Link) error { return netlink.LinkSetAlias(l[0], AliasPrefix+o.network) }, o.name)
	return wrapExec(o, "setting the alias of "+o.name, err)
}

func (o masterSet) exec(context.Context, *linuxDataplane) (Change, error) {
	err := withLinks(func(l ...netlink.Link) error { return netlink.LinkSetMaster(l[0], l[1]) }, o.dev, o.master)
	return wrapExec(o, "enslaving "+o.dev+" to bridge "+o.master, err)
}

func (o portLearning) exec(context.Context, *linuxDataplane) (Change, error) {
	err := withLinks(func(l ...netlink.Link) error { return netlink.LinkSetLearning(l[0], o.on) }, o.dev)
	return wrapExec(o, "turning learning "+onOff(o.on)+" on bridge port "+o.dev, err)
}

func (o vxlanRelease) exec(context.Context, *linuxDataplane) (Change, error) {
	err := withLinks(func(l ...netlink.Link) error { return netlink.LinkSetNoMaster(l[0]) }, o.dev)
	return wrapExec(o, "releasing "+o.dev+" from its bridge", err)
}

func (o portSet) exec(context.Context, *linuxDataplane) (Change, error) {
	err := withLinks(func(l ...netlink.Link) error { return netlink.LinkSetMaster(l[0], l[1]) }, o.port, o.bridge)
	return wrapExec(o, "enslaving port "+o.port+" to bridge "+o.bridge, err)
}

func (o noMaster) exec(context.Context, *linuxDataplane) (Change, error) {
	err := withLinks(func(l ...netlink.Link) error { return netlink.LinkSetNoMaster(l[0]) }, o.port)
	return wrapExec(o, "releasing "+o.port+" from its bridge", err)
}

func (o fdbAppend) exec(context.Context, *linuxDataplane) (Change, error) {
	n, err := floodEntry(o.dev, o.dst)
	if err == nil {
		err = netlink.NeighAppend(n)
	}
	return wrapExec(o, fmt.Sprintf("adding flood entry to %s on %s", o.dst, o.dev), err)
}

func (o fdbDel) exec(context.Context, *linuxDataplane) (Change, error) {
	n, err := floodEntry(o.dev, o.dst)
	if err == nil {
		err = netlink.NeighDel(n)
	}
	if errors.Is(err, unix.ENOENT) {
		err = nil // gone already
	}
	if err == nil && !o.keepLearned {
		forgetLearned(n.LinkIndex, o.dst)
		// The old gateway bridges on, draining, for a while (ha.DrainMin
		// to ha.DrainMax after it stepped down): frames it forwards teach
		// the device its site's hosts again, and once it stops, a host
		// learned behind it would stay unreachable until the entry ages
		// out (a host that only answers, or a cycle: requests sent to the
		// old gateway keep the site's switch sending the answers there).
		// Forget again every reforgetEvery for reforgetFor, unless the
		// remote is flooded to again.
		go reforget(n.LinkIndex, o.dst)
	}
	return wrapExec(o, fmt.Sprintf("deleting flood entry to %s on %s", o.dst, o.dev), err)
}

// reforgetEvery and reforgetFor: a VXLAN device forgets what it learned
// behind a remote it no longer floods to every reforgetEvery for
// reforgetFor (longer than a drain's longest, ha.DrainMax).
const (
	reforgetEvery = 100 * time.Millisecond
	reforgetFor   = 11 * time.Second
)

// reforget runs forgetLearned(index, dst) every reforgetEvery for
// reforgetFor, and stops early when dst is a flood remote of the device
// again (the gateway came back: what is learned behind it is right) or
// the device is gone.
func reforget(index int, dst netip.Addr) {
	t := time.NewTicker(reforgetEvery)
	defer t.Stop()
	for range int(reforgetFor / reforgetEvery) {
		<-t.C
		remotes, err := readFloodEntries(index)
		if err != nil || slices.Contains(remotes, dst) {
			return
		}
		forgetLearned(index, dst)
	}
}

// forgetLearned deletes the MAC addresses the VXLAN device index learned
// behind dst, a remote it no longer floods to (a site's active gateway
// moved): frames to those hosts flood to the remaining remotes until they
// are learned again behind the new gateway, instead of going to the old
// one until the entries age out (five minutes). Best effort.
func forgetLearned(index int, dst netip.Addr) {
	neighs, err := netlink.NeighList(index, unix.AF_BRIDGE)
	if err != nil {
		return
	}
	for _, n := range neighs {
		ip, ok := netip.AddrFromSlice(n.IP)
		if n.LinkIndex != index || !ok || ip.Unmap() != dst || isZeroMAC(n.HardwareAddr) {
			continue
		}
		n.Family = unix.AF_BRIDGE
		_ = netlink.NeighDel(&n)
	}
}

// ForgetLearned deletes every MAC address the VXLAN device dev learned
// (its all-zero flood entries stay): frames to those addresses flood until
// they are learned again. The agent calls it shortly after a bridged
// network changed shape (docs/resilience.md, "The way back"): while the
// gateways switch, one that has not switched yet may relay a frame between
// its old and new ports and teach the others a wrong gateway for its
// source. A device that does not exist is no error.
func ForgetLearned(dev string) error {
	return deleteEntries(dev, "forgetting what "+dev+" learned", func(n *netlink.Neigh) bool {
		return n.Flags&netlink.NTF_SELF != 0 && !isZeroMAC(n.HardwareAddr) && n.IP != nil
	})
}

// deleteEntries deletes the bridge-family neighbor entries of dev that
// match says to (match may set the flags the deletion needs), joining
// the errors under what. A device that does not exist is no error.
func deleteEntries(dev, what string, match func(*netlink.Neigh) bool) error {
	link, err := netlink.LinkByName(dev)
	var notFound netlink.LinkNotFoundError
	if errors.As(err, &notFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	index := link.Attrs().Index
	neighs, err := netlink.NeighList(index, unix.AF_BRIDGE)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	var errs []error
	for _, n := range neighs {
		if n.LinkIndex != index || !match(&n) {
			continue
		}
		n.Family = unix.AF_BRIDGE
		if err := netlink.NeighDel(&n); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// SetPortLearning turns the bridge's learning on the bridge port dev on or
// off. The agent turns it off on the ports it makes ahead of a way back
// (docs/resilience.md, "The way back"): a port that learns nothing and
// floods to nobody sends nothing, so a gateway that has not switched yet
// never relays a frame from its old ports out of its new one. A new bridge
// port learns (the kernel's default); Apply does not change it.
func SetPortLearning(dev string, on bool) error {
	err := withLinks(func(l ...netlink.Link) error { return netlink.LinkSetLearning(l[0], on) }, dev)
	if err != nil {
		return fmt.Errorf("setting learning %v on bridge port %s: %w", on, dev, err)
	}
	return nil
}

// wrapExec returns o's change and err, if any, wrapped with what.
func wrapExec(o op, what string, err error) (Change, error) {
	if err != nil {
		return o.change(), fmt.Errorf("%s (%s): %w", what, o.change(), err)
	}
	return o.change(), nil
}
