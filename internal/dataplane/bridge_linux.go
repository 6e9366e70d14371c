package dataplane

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/fednet/fednet/internal/plan"
)

// readBridges reads the bridges and VXLAN devices fednet owns (alias
// AliasPrefix...) into s, and as Foreign the interfaces named in want that
// exist but are not fednet's.
func readBridges(s *State, want []plan.Bridge) error {
	links, err := netlink.LinkList()
	if err != nil {
		return fmt.Errorf("listing interfaces: %w", err)
	}
	named := map[string]bool{}
	for _, b := range want {
		named[b.Name] = true
		for _, v := range gatewayPorts(b) {
			named[v.Name] = true
		}
	}
	names := map[int]string{}
	for _, l := range links {
		names[l.Attrs().Index] = l.Attrs().Name
	}
	bridges := map[int]int{}     // bridge index -> position in s.Bridges
	ownedVXLAN := map[int]bool{} // VXLAN indexes
	for _, l := range links {
		a := l.Attrs()
		network, owned := strings.CutPrefix(a.Alias, AliasPrefix)
		switch l := l.(type) {
		case *netlink.Bridge:
			if owned {
				bridges[a.Index] = len(s.Bridges)
				s.Bridges = append(s.Bridges, BridgeState{Name: a.Name, Network: network, MTU: a.MTU, Up: a.Flags&net.FlagUp != 0})
				continue
			}
		case *netlink.Vxlan:
			if owned {
				v := VXLANState{
					Name: a.Name, Network: network, VNI: l.VxlanId, UDPPort: l.Port, MTU: a.MTU,
					Up: a.Flags&net.FlagUp != 0, Learning: l.Learning, Master: names[a.MasterIndex],
				}
				if ip, ok := netip.AddrFromSlice(l.SrcAddr); ok {
					v.Local = ip.Unmap()
				}
				remotes, err := readFloodEntries(a.Index)
				if err != nil {
					return fmt.Errorf("reading the FDB of %s: %w", a.Name, err)
				}
				v.Remotes = remotes
				ownedVXLAN[a.Index] = true
				s.VXLANs = append(s.VXLANs, v)
				continue
			}
		}
		if named[a.Name] {
			s.Foreign = append(s.Foreign, a.Name)
		}
	}
	for _, l := range links {
		a := l.Attrs()
		if i, ok := bridges[a.MasterIndex]; ok && !ownedVXLAN[a.Index] {
			s.Bridges[i].Ports = append(s.Bridges[i].Ports, a.Name)
		}
	}
	return nil
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

// addMarked creates link and sets fednet's alias on it; if the alias cannot
// be set it deletes the link again (the kernel ignores IFLA_IFALIAS in a
// create request).
func addMarked(link netlink.Link, network string) error {
	return addAliased(link, AliasPrefix+network)
}

// execBridge runs an op of bridged networks; ok is false for other ops.
func execBridge(o op) (ok bool, err error) {
	c := o.change()
	switch o := o.(type) {
	case bridgeAdd:
		err = addMarked(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: o.name, MTU: o.mtu}}, o.network)
		if err != nil {
			err = fmt.Errorf("creating bridge %s (%s): %w", o.name, c, err)
		}
	case vxlanAdd:
		err = addMarked(&netlink.Vxlan{
			LinkAttrs: netlink.LinkAttrs{Name: o.name, MTU: o.mtu},
			VxlanId:   o.vni, SrcAddr: o.local.AsSlice(), Port: o.port, Learning: true,
		}, o.network)
		if err != nil {
			err = fmt.Errorf("creating VXLAN device %s (%s): %w", o.name, c, err)
		}
	case l2Del:
		var link netlink.Link
		link, err = netlink.LinkByName(o.name)
		var notFound netlink.LinkNotFoundError
		if errors.As(err, &notFound) {
			return true, nil
		}
		if err == nil {
			err = netlink.LinkDel(link)
		}
		if err != nil {
			err = fmt.Errorf("deleting interface %s: %w", o.name, err)
		}
	case aliasSet:
		var link netlink.Link
		if link, err = netlink.LinkByName(o.name); err == nil {
			err = netlink.LinkSetAlias(link, AliasPrefix+o.network)
		}
		if err != nil {
			err = fmt.Errorf("setting the alias of %s: %w", o.name, err)
		}
	case masterSet:
		var link, master netlink.Link
		if link, err = netlink.LinkByName(o.dev); err == nil {
			if master, err = netlink.LinkByName(o.master); err == nil {
				err = netlink.LinkSetMaster(link, master)
			}
		}
		if err != nil {
			err = fmt.Errorf("enslaving %s to bridge %s: %w", o.dev, o.master, err)
		}
	case noMaster:
		var link netlink.Link
		if link, err = netlink.LinkByName(o.dev); err == nil {
			err = netlink.LinkSetNoMaster(link)
		}
		if err != nil {
			err = fmt.Errorf("releasing %s from its bridge: %w", o.dev, err)
		}
	case fdbAppend:
		var n *netlink.Neigh
		if n, err = floodEntry(o.dev, o.dst); err == nil {
			err = netlink.NeighAppend(n)
		}
		if err != nil {
			err = fmt.Errorf("adding flood entry to %s on %s: %w", o.dst, o.dev, err)
		}
	case fdbDel:
		var n *netlink.Neigh
		if n, err = floodEntry(o.dev, o.dst); err == nil {
			err = netlink.NeighDel(n)
		}
		if errors.Is(err, unix.ENOENT) {
			err = nil // gone already
		}
		if err != nil {
			err = fmt.Errorf("deleting flood entry to %s on %s: %w", o.dst, o.dev, err)
		}
	default:
		return false, nil
	}
	return true, err
}
