package dataplane

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/fednet/fednet/internal/plan"
)

// The site's virtual address (plan.LAN.Virtual) is the hosts' next hop. The
// active gateway holds it on its LAN interface (the interface holding its
// own LAN address) besides its own address, and announces it when it takes
// it — IPv4 with a gratuitous ARP, IPv6 with an unsolicited neighbor
// advertisement (RFC 4861 7.2.6, override flag set) — so the hosts'
// neighbor entries follow at once; a gateway that is not active removes
// it. A site with one gateway has Virtual equal to Address: nothing to do.

// announceRepeats are the delays after taking the address at which the
// announcement is sent again, for a host that missed the first.
var announceRepeats = []time.Duration{100 * time.Millisecond, 400 * time.Millisecond}

// syncVirtual holds or releases p's virtual address as p.LAN.Active says.
func syncVirtual(p plan.Gateway) ([]Change, error) {
	lan := p.LAN
	if !lan.Address.IsValid() || !lan.Virtual.IsValid() || lan.Virtual.Addr() == lan.Address.Addr() {
		return nil, nil
	}
	if lan.Virtual.Addr().Is4() != lan.Address.Addr().Is4() {
		return nil, fmt.Errorf("the site's virtual address %s and the gateway's LAN address %s are of different IP versions", lan.Virtual, lan.Address)
	}
	link, held, err := lanLink(lan.Address.Addr(), lan.Virtual.Addr())
	if err != nil || link == nil {
		return nil, err
	}
	dev := link.Attrs().Name
	virtual := lan.Virtual.Addr()
	a := &netlink.Addr{IPNet: &net.IPNet{IP: virtual.AsSlice(), Mask: net.CIDRMask(lan.Virtual.Bits(), virtual.BitLen())}}
	announce, how := gratuitousARP, fmt.Sprintf("arping -U -I %s %s (gratuitous ARP)", dev, virtual)
	if virtual.Is6() {
		// Usable at once: duplicate address detection would hold it
		// back for a second, and the address is meant to move.
		a.Flags = unix.IFA_F_NODAD
		announce, how = unsolicitedNA, fmt.Sprintf("ndsend %s %s (unsolicited neighbor advertisement)", virtual, dev)
	}
	switch {
	case lan.Active && !held:
		if err := netlink.AddrAdd(link, a); err != nil && !errors.Is(err, unix.EEXIST) {
			return nil, fmt.Errorf("adding the site's virtual address %s to %s: %w", lan.Virtual, dev, err)
		}
		changes := []Change{Change(fmt.Sprintf("ip address add %s dev %s (the site's virtual address: this gateway is active)", lan.Virtual, dev))}
		if err := announce(link, virtual); err != nil {
			return changes, fmt.Errorf("announcing the site's virtual address %s on %s: %w", lan.Virtual, dev, err)
		}
		changes = append(changes, Change(how))
		go func() {
			// Only while this gateway still holds the address: a repeat
			// after a release would pull the hosts back to it.
			for _, d := range announceRepeats {
				time.Sleep(d)
				if _, held, err := lanLink(lan.Address.Addr(), virtual); err != nil || !held {
					return
				}
				_ = announce(link, virtual)
			}
		}()
		return changes, nil
	case !lan.Active && held:
		if err := netlink.AddrDel(link, a); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
			return nil, fmt.Errorf("removing the site's virtual address %s from %s: %w", lan.Virtual, dev, err)
		}
		return []Change{Change(fmt.Sprintf("ip address del %s dev %s (the site's virtual address: this gateway is standby)", lan.Virtual, dev))}, nil
	}
	return nil, nil
}

// releaseVirtual removes p's virtual address if this machine holds it.
func releaseVirtual(p plan.Gateway) ([]Change, error) {
	p.LAN.Active = false
	return syncVirtual(p)
}

// lanLink returns the interface holding own, and whether it also holds
// virtual; nil when no interface holds own (the plan's LAN address is not
// on this machine: nothing to hold the virtual address on).
func lanLink(own, virtual netip.Addr) (netlink.Link, bool, error) {
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, false, fmt.Errorf("listing addresses: %w", err)
	}
	index := 0
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.Unmap() == own {
			index = a.LinkIndex
		}
	}
	if index == 0 {
		return nil, false, nil
	}
	held := false
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.Unmap() == virtual && a.LinkIndex == index {
			held = true
		}
	}
	link, err := netlink.LinkByIndex(index)
	if err != nil {
		return nil, false, fmt.Errorf("reading interface %d: %w", index, err)
	}
	return link, held, nil
}

// gratuitousARP broadcasts an ARP request for addr from addr on link, the
// form every host's kernel takes to replace a neighbor entry at once
// (Linux overrides its lock time for it).
func gratuitousARP(link netlink.Link, addr netip.Addr) error {
	mac := link.Attrs().HardwareAddr
	if len(mac) != 6 {
		return fmt.Errorf("interface %s has no Ethernet address", link.Attrs().Name)
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ARP)))
	if err != nil {
		return fmt.Errorf("opening a packet socket: %w", err)
	}
	defer unix.Close(fd)
	frame := make([]byte, 0, 42)
	frame = append(frame, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
	frame = append(frame, mac...)
	frame = binary.BigEndian.AppendUint16(frame, unix.ETH_P_ARP)
	frame = binary.BigEndian.AppendUint16(frame, 1)      // Ethernet
	frame = binary.BigEndian.AppendUint16(frame, 0x0800) // IPv4
	frame = append(frame, 6, 4)
	frame = binary.BigEndian.AppendUint16(frame, 1) // request
	ip := addr.As4()
	frame = append(frame, mac...)
	frame = append(frame, ip[:]...)
	frame = append(frame, 0, 0, 0, 0, 0, 0)
	frame = append(frame, ip[:]...)
	to := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ARP), Ifindex: link.Attrs().Index, Halen: 6}
	copy(to.Addr[:], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	if err := unix.Sendto(fd, frame, 0, to); err != nil {
		return fmt.Errorf("sending: %w", err)
	}
	return nil
}

// allNodes is the IPv6 all-nodes multicast address and its Ethernet
// address (RFC 2464).
var (
	allNodes    = netip.MustParseAddr("ff02::1")
	allNodesMAC = []byte{0x33, 0x33, 0, 0, 0, 1}
)

// unsolicitedNA sends an unsolicited neighbor advertisement for addr from
// addr to all nodes on link, with the override flag, so that every host
// that has a neighbor entry for addr replaces its link-layer address with
// link's (RFC 4861 7.2.6).
func unsolicitedNA(link netlink.Link, addr netip.Addr) error {
	mac := link.Attrs().HardwareAddr
	if len(mac) != 6 {
		return fmt.Errorf("interface %s has no Ethernet address", link.Attrs().Name)
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_IPV6)))
	if err != nil {
		return fmt.Errorf("opening a packet socket: %w", err)
	}
	defer unix.Close(fd)
	target := addr.As16()
	msg := make([]byte, 0, 32)
	msg = append(msg, 136, 0, 0, 0)  // neighbor advertisement, code 0, checksum
	msg = append(msg, 0x20, 0, 0, 0) // flags: override (not router, not solicited)
	msg = append(msg, target[:]...)  // target address
	msg = append(msg, 2, 1)          // option: target link-layer address, 8 bytes
	msg = append(msg, mac...)
	binary.BigEndian.PutUint16(msg[2:], icmpv6Checksum(addr, allNodes, msg))
	dst := allNodes.As16()
	frame := make([]byte, 0, 14+40+len(msg))
	frame = append(frame, allNodesMAC...)
	frame = append(frame, mac...)
	frame = binary.BigEndian.AppendUint16(frame, unix.ETH_P_IPV6)
	frame = append(frame, 0x60, 0, 0, 0) // version 6, no class, no flow
	frame = binary.BigEndian.AppendUint16(frame, uint16(len(msg)))
	frame = append(frame, unix.IPPROTO_ICMPV6, 255) // next header, hop limit 255 (RFC 4861 7.1.2)
	frame = append(frame, target[:]...)
	frame = append(frame, dst[:]...)
	frame = append(frame, msg...)
	to := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_IPV6), Ifindex: link.Attrs().Index, Halen: 6}
	copy(to.Addr[:], allNodesMAC)
	if err := unix.Sendto(fd, frame, 0, to); err != nil {
		return fmt.Errorf("sending: %w", err)
	}
	return nil
}

// icmpv6Checksum is the checksum of ICMPv6 message msg (its checksum field
// zero) from src to dst: over the IPv6 pseudo-header and the message
// (RFC 4443 2.3).
func icmpv6Checksum(src, dst netip.Addr, msg []byte) uint16 {
	var sum uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(b[i])<<8 | uint32(b[i+1])
		}
		if len(b)%2 == 1 {
			sum += uint32(b[len(b)-1]) << 8
		}
	}
	s, d := src.As16(), dst.As16()
	add(s[:])
	add(d[:])
	var pseudo [8]byte
	binary.BigEndian.PutUint32(pseudo[:4], uint32(len(msg)))
	pseudo[7] = unix.IPPROTO_ICMPV6
	add(pseudo[:])
	add(msg)
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// HoldsVirtual reports whether this machine holds lan's virtual address
// (an agent that restarts on the active gateway finds it there). A site
// with one gateway holds nothing extra: false.
func HoldsVirtual(lan plan.LAN) (bool, error) {
	if !lan.Address.IsValid() || !lan.Virtual.IsValid() || lan.Virtual.Addr() == lan.Address.Addr() {
		return false, nil
	}
	_, held, err := lanLink(lan.Address.Addr(), lan.Virtual.Addr())
	return held, err
}
