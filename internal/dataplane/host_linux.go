package dataplane

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"

	"github.com/fednet/fednet/internal/plan"
)

// ApplyHost brings this machine's end of neighbor tunnel t to the plan:
// the VXLAN device t.Device (created, recreated when it differs, its MTU
// and alias set, up) and, when address is valid, address as the device's
// only address. Idempotent: a second call with the same values changes
// nothing. It returns the changes made.
func ApplyHost(ctx context.Context, t plan.HostTunnel, address netip.Prefix) ([]Change, error) {
	cur, err := ReadHost(t.Device)
	if err != nil {
		return nil, err
	}
	ops, err := diffHost(cur, t, address)
	if err != nil {
		return nil, err
	}
	var changes []Change
	for _, o := range ops {
		if err := ctx.Err(); err != nil {
			return changes, err
		}
		c, err := execHost(o)
		if err != nil {
			return changes, err
		}
		changes = append(changes, c)
	}
	return changes, nil
}

// RemoveHost deletes the neighbor tunnel device name if it is fednet's.
// A missing device is no error; a device that is not fednet's is left and
// reported.
func RemoveHost(name string) ([]Change, error) {
	cur, err := ReadHost(name)
	switch {
	case err != nil:
		return nil, err
	case cur.Foreign:
		return nil, fmt.Errorf("interface %s is not fednet's (no alias %s...): fednet does not touch it", name, NeighborAliasPrefix)
	case cur.Device == nil:
		return nil, nil
	}
	c, err := execHost(nbDel{name: name})
	if err != nil {
		return nil, err
	}
	return []Change{c}, nil
}

// ReadHost reads the neighbor tunnel device name.
func ReadHost(name string) (HostState, error) {
	var s HostState
	link, err := netlink.LinkByName(name)
	var notFound netlink.LinkNotFoundError
	switch {
	case errors.As(err, &notFound):
		return s, nil
	case err != nil:
		return s, fmt.Errorf("reading interface %s: %w", name, err)
	}
	a := link.Attrs()
	network, host, owned := parseNeighborAlias(a.Alias)
	v, ok := link.(*netlink.Vxlan)
	if !owned || !ok {
		s.Foreign = true
		return s, nil
	}
	n := &NeighborState{Name: name, Network: network, Host: host, VNI: v.VxlanId, UDPPort: v.Port, MTU: a.MTU,
		Up: a.Flags&net.FlagUp != 0, Learning: v.Learning}
	if ip, ok := netip.AddrFromSlice(v.SrcAddr); ok {
		n.Local = ip.Unmap()
	}
	if ip, ok := netip.AddrFromSlice(v.Group); ok {
		n.Remote = ip.Unmap()
	}
	s.Device = n
	ls := &LinkState{Name: name}
	if err := readAddresses(link, ls); err != nil {
		return s, err
	}
	s.Addresses = ls.Addresses
	sortPrefixes(s.Addresses)
	return s, nil
}

func execHost(o op) (Change, error) {
	c := o.change()
	if ok, err := execNeighbor(o); ok {
		return c, err
	}
	var err error
	switch o := o.(type) {
	case addrAdd:
		err = changeAddr(o.dev, o.prefix, netlink.AddrAdd)
	case addrDel:
		err = changeAddr(o.dev, o.prefix, netlink.AddrDel)
	default:
		err = fmt.Errorf("dataplane: unexpected op %T on a host", o)
	}
	if err != nil {
		err = fmt.Errorf("%s: %w", c, err)
	}
	return c, err
}
