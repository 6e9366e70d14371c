package dataplane

import (
	"fmt"
	"net/netip"

	"github.com/fednet/fednet/internal/plan"
)

// The host's end of a neighbor tunnel (fednet host join): one VXLAN device
// with the network's VNI from the host's LAN address, on the host's port,
// flooding to its gateway's LAN address (an all-zero FDB entry), with the
// network's MTU and, when the operator gives one, the host's address on
// the bridged network. It is the gateway's VXLAN port of the L2 model
// (l2.go) without a bridge, owned the same way: alias AliasPrefix +
// network.

// HostState is what a host has of its neighbor tunnel.
type HostState struct {
	// Device is the tunnel's device, nil when absent.
	Device *VXLANState
	// Foreign is true when an interface of the device's name exists that
	// is not fednet's.
	Foreign bool
	// Addresses are the device's addresses (IPv6 link-local left out),
	// sorted.
	Addresses []netip.Prefix
}

// diffHost returns the ops that bring a host in state cur to tunnel t with
// address (invalid: the device's addresses are left alone). A device whose
// VNI, local address, port or learning differ, or that has a default
// remote (made before one L2 model), is recreated.
func diffHost(cur HostState, t plan.HostTunnel, address netip.Prefix) ([]op, error) {
	if err := validateHost(t); err != nil {
		return nil, err
	}
	if cur.Foreign {
		return nil, fmt.Errorf("interface %s exists and is not fednet's (no alias %s...): fednet does not touch it; delete or rename it", t.Device, AliasPrefix)
	}
	want := wantedPort{
		bridge: plan.Bridge{Network: t.Network, VNI: t.VNI, MTU: t.MTU},
		port:   plan.VXLAN{Name: t.Device, Kind: plan.ToGateways, Local: t.Local, UDPPort: t.UDPPort, Remotes: []netip.Addr{t.Remote}},
	}
	var ops []op
	c, addrs := cur.Device, cur.Addresses
	if c != nil && !want.fits(*c) {
		ops = append(ops, l2Del{name: t.Device})
		c, addrs = nil, nil
	}
	// The device as a port of no bridge.
	ops = append(ops, diffPort(c, want.bridge, want.port)...)
	var remotes []netip.Addr
	if c != nil {
		remotes = c.Remotes
	}
	ops = append(ops, diffRemotes(t.Device, remotes, want.port.Remotes, false, true)...)
	if address.IsValid() {
		ops = append(ops, diffAddresses(t.Device, addrs, address)...)
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
	if !t.Local.IsValid() || !t.Remote.IsValid() || t.Local.Unmap().Is4() != t.Remote.Unmap().Is4() || t.Local.Unmap() == t.Remote.Unmap() {
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
