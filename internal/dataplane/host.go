package dataplane

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/fednet/fednet/internal/plan"
)

// The host's end of a neighbor tunnel (fednet host join): one VXLAN device
// with the network's VNI from the host's LAN address to its gateway's, on
// the host's port, with the network's MTU and, when the operator gives
// one, the host's address on the bridged network. It is owned like the
// gateway's end: alias NeighborAliasPrefix + "<network>/<host>".

// HostState is what a host has of its neighbor tunnel.
type HostState struct {
	// Device is the tunnel's device, nil when absent.
	Device *NeighborState
	// Foreign is true when an interface of the device's name exists that
	// is not fednet's.
	Foreign bool
	// Addresses are the device's addresses (IPv6 link-local left out),
	// sorted.
	Addresses []netip.Prefix
}

// diffHost returns the ops that bring a host in state cur to tunnel t with
// address (invalid: the device's addresses are left alone). A device whose
// VNI, addresses, port or learning differ is recreated.
func diffHost(cur HostState, t plan.HostTunnel, address netip.Prefix) ([]op, error) {
	if err := validateHost(t); err != nil {
		return nil, err
	}
	if cur.Foreign {
		return nil, fmt.Errorf("interface %s exists and is not fednet's (no alias %s...): fednet does not touch it; delete or rename it", t.Device, NeighborAliasPrefix)
	}
	var ops []op
	c, addrs := cur.Device, cur.Addresses
	if c != nil && (c.VNI != t.VNI || c.Local.Unmap() != t.Local.Unmap() || c.Remote.Unmap() != t.Remote.Unmap() ||
		c.UDPPort != t.UDPPort || !c.Learning) {
		ops = append(ops, nbDel{name: t.Device})
		c, addrs = nil, nil
	}
	if c == nil {
		ops = append(ops, nbAdd{name: t.Device, network: t.Network, host: t.Host, vni: t.VNI,
			local: t.Local, remote: t.Remote, port: t.UDPPort, mtu: t.MTU})
		c = &NeighborState{Name: t.Device, Network: t.Network, Host: t.Host, MTU: t.MTU}
	}
	s := nbSet{name: t.Device, up: !c.Up}
	if c.Network != t.Network || c.Host != t.Host {
		s.network, s.host = t.Network, t.Host
	}
	if c.MTU != t.MTU {
		s.mtu = t.MTU
	}
	if s.up || s.network != "" || s.mtu != 0 {
		ops = append(ops, s)
	}
	if address.IsValid() {
		for _, a := range addrs {
			if a != address {
				ops = append(ops, addrDel{dev: t.Device, prefix: a})
			}
		}
		if !slices.Contains(addrs, address) {
			ops = append(ops, addrAdd{dev: t.Device, prefix: address})
		}
	}
	return ops, nil
}

func validateHost(t plan.HostTunnel) error {
	var errs []string
	if err := validInterfaceName(t.Device); err != nil {
		errs = append(errs, "device: "+err.Error())
	}
	if t.VNI < 1 || t.VNI > 1<<24-1 {
		errs = append(errs, fmt.Sprintf("vni %d is out of range 1-16777215", t.VNI))
	}
	if !t.Local.IsValid() || !t.Remote.IsValid() || t.Local.Unmap().Is4() != t.Remote.Unmap().Is4() || t.Local == t.Remote {
		errs = append(errs, fmt.Sprintf("local %s and remote %s must be two addresses of one family", t.Local, t.Remote))
	}
	if t.UDPPort < 1 || t.UDPPort > 65535 {
		errs = append(errs, fmt.Sprintf("udpPort %d is out of range 1-65535", t.UDPPort))
	}
	if t.MTU < 576 || t.MTU > 65535 {
		errs = append(errs, fmt.Sprintf("mtu %d is out of range 576-65535", t.MTU))
	}
	if t.Network == "" || t.Host == "" {
		errs = append(errs, "network and host must be named")
	}
	if len(errs) > 0 {
		return fmt.Errorf("neighbor tunnel of host %q cannot be set up: %v", t.Host, errs)
	}
	return nil
}
