package dataplane

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"

	"github.com/fednet/fednet/internal/plan"
)

// readNeighbors reads the neighbor devices fednet owns (alias
// NeighborAliasPrefix...) into s, adds to s.Foreign the devices named in
// want's neighbors that exist without that alias, and takes the neighbor
// devices out of the bridges' ports (readBridges lists every interface
// enslaved to a bridge of fednet's but its own VXLAN devices).
func readNeighbors(s *State, want []plan.Bridge) error {
	links, err := netlink.LinkList()
	if err != nil {
		return fmt.Errorf("listing interfaces: %w", err)
	}
	named := map[string]bool{}
	for _, b := range want {
		for _, n := range neighborPorts(b) {
			named[n.VXLAN] = true
		}
	}
	names := map[int]string{}
	for _, l := range links {
		names[l.Attrs().Index] = l.Attrs().Name
	}
	for _, l := range links {
		a := l.Attrs()
		network, host, owned := parseNeighborAlias(a.Alias)
		v, isVXLAN := l.(*netlink.Vxlan)
		if !owned || !isVXLAN {
			if named[a.Name] && !slices.Contains(s.Foreign, a.Name) {
				s.Foreign = append(s.Foreign, a.Name)
			}
			continue
		}
		n := NeighborState{
			Name: a.Name, Network: network, Host: host, VNI: v.VxlanId, UDPPort: v.Port, MTU: a.MTU,
			Up: a.Flags&net.FlagUp != 0, Learning: v.Learning, Master: names[a.MasterIndex],
		}
		if ip, ok := netip.AddrFromSlice(v.SrcAddr); ok {
			n.Local = ip.Unmap()
		}
		if ip, ok := netip.AddrFromSlice(v.Group); ok {
			n.Remote = ip.Unmap()
		}
		s.Neighbors = append(s.Neighbors, n)
		for i := range s.Bridges {
			s.Bridges[i].Ports = slices.DeleteFunc(s.Bridges[i].Ports, func(p string) bool { return p == a.Name })
		}
	}
	return nil
}

// execNeighbor runs a neighbor op; ok is false for other ops.
func execNeighbor(o op) (ok bool, err error) {
	c := o.change()
	switch o := o.(type) {
	case nbAdd:
		link := &netlink.Vxlan{
			LinkAttrs: netlink.LinkAttrs{Name: o.name, MTU: o.mtu},
			VxlanId:   o.vni, SrcAddr: o.local.AsSlice(), Group: o.remote.AsSlice(), Port: o.port, Learning: true,
		}
		err = addAliased(link, neighborAlias(o.network, o.host))
	case nbSet:
		err = setNeighbor(o)
	case nbDel:
		err = delLinkIfPresent(o.name)
	default:
		return false, nil
	}
	if err != nil {
		err = fmt.Errorf("%s: %w", c, err)
	}
	return true, err
}

func setNeighbor(o nbSet) error {
	link, err := netlink.LinkByName(o.name)
	if err != nil {
		return err
	}
	if o.network != "" {
		if err := netlink.LinkSetAlias(link, neighborAlias(o.network, o.host)); err != nil {
			return fmt.Errorf("setting the alias: %w", err)
		}
	}
	if o.mtu > 0 {
		if err := netlink.LinkSetMTU(link, o.mtu); err != nil {
			return fmt.Errorf("setting the MTU: %w", err)
		}
	}
	if o.master != "" {
		master, err := netlink.LinkByName(o.master)
		if err != nil {
			return fmt.Errorf("finding bridge %s: %w", o.master, err)
		}
		if err := netlink.LinkSetMaster(link, master); err != nil {
			return fmt.Errorf("enslaving to %s: %w", o.master, err)
		}
	}
	if o.up {
		if err := netlink.LinkSetUp(link); err != nil {
			return fmt.Errorf("bringing it up: %w", err)
		}
	}
	return nil
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
