package dataplane

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"

	"github.com/fednet/fednet/internal/dataplane/tunnel"
	"github.com/fednet/fednet/internal/plan"
)

// ApplyHost brings this machine's end of neighbor tunnel t to the plan:
// the VXLAN device t.Device (created, recreated when it differs, its MTU,
// alias and flood entry to the gateway set, up) and, when address is
// valid, address as the device's only address. Idempotent: a second call
// with the same values changes nothing. It returns the changes made.
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
		c, err := o.(linuxOp).exec(ctx, nil)
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
		return nil, fmt.Errorf("interface %s is not fednet's (no alias %s...): fednet does not touch it", name, AliasPrefix)
	case cur.Device == nil:
		return nil, nil
	}
	c, err := l2Del{name: name}.exec(context.Background(), nil)
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
	l2, owned, err := readL2([]netlink.Link{link}, map[int]string{})
	if err != nil {
		return s, err
	}
	if !owned[link.Attrs().Index] || len(l2.VXLANs) != 1 {
		s.Foreign = true
		return s, nil
	}
	s.Device = &l2.VXLANs[0]
	iface := tunnel.Interface{Name: name}
	if err := readAddresses(link, &iface); err != nil {
		return s, err
	}
	s.Addresses = iface.Addresses
	return s, nil
}
