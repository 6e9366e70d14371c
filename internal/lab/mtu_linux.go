//go:build linux

package lab

import (
	"context"
	"errors"
	"fmt"
	"strconv"
)

// SetBridgedMTU changes the MTU of a bridged network's hosts and of the
// gateway ports and switch ports of its segments, as an operator's DHCP
// (option 26, on lease renewal) or configuration management would when the
// network's planned MTU changes, for example after an underlay MTU change.
// It touches only the network's lab namespaces.
func (l *Lab) SetBridgedMTU(ctx context.Context, network string, mtu int) error {
	if mtu < minMTU || mtu > maxMTU {
		return fmt.Errorf("bridged network %s: MTU %d: use %d to %d", network, mtu, minMTU, maxMTU)
	}
	found := false
	var errs []error
	for _, seg := range l.segments {
		if seg.network != network {
			continue
		}
		found = true
		set := func(n *Node, links ...string) {
			h, err := openNS(n.Namespace)
			if err != nil {
				errs = append(errs, err)
				return
			}
			defer h.close()
			for _, name := range links {
				link, err := h.nl.LinkByName(name)
				if err == nil {
					err = h.nl.LinkSetMTU(link, mtu)
				}
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: MTU %d on %s: %w", n.Namespace, mtu, name, err))
				}
			}
		}
		ports := []string{"gw0"}
		for k, g := range seg.others {
			set(g, seg.port)
			ports = append(ports, "gw"+strconv.Itoa(k+1))
		}
		for _, h := range seg.hosts {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			set(h, HostInterface)
			ports = append(ports, "h"+strconv.Itoa(h.portIndex))
		}
		set(seg.sw, ports...)
		set(seg.gw, seg.port)
		l.mu.Lock()
		seg.mtu = mtu
		l.mu.Unlock()
	}
	if !found {
		return fmt.Errorf("no bridged network %q in lab %s", network, l.Name)
	}
	return errors.Join(errs...)
}
