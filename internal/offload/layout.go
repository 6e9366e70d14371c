package offload

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Protocol numbers and header sizes.
const (
	protoTCP = 6
	protoUDP = 17

	ipv4HeaderLen  = 20
	ipv6HeaderLen  = 40
	udpHeaderLen   = 8
	tcpHeaderLen   = 20
	vxlanHeaderLen = 8
	ethHeaderLen   = 14
	vlanTagLen     = 4

	etherTypeIPv4  = 0x0800
	etherTypeIPv6  = 0x86dd
	etherTypeVLAN  = 0x8100
	etherTypeQinQ  = 0x88a8
	maxVLANTags    = 2
	maxIPv4Total   = 0xffff
	tcpFlagsAt     = 13
	tcpChecksumAt  = 16
	udpChecksumAt  = 6
	ipv4ChecksumAt = 10
)

// TCP flags.
const (
	tcpFIN = 0x01
	tcpSYN = 0x02
	tcpRST = 0x04
	tcpPSH = 0x08
	tcpACK = 0x10
	tcpURG = 0x20
	tcpECE = 0x40
	tcpCWR = 0x80
)

// layout says where the headers of one packet are. Offsets count from the
// packet's first byte. Without a tunnel the outer fields are unused and
// l3 is 0.
type layout struct {
	tunnel bool
	// outer4: the outer IP header is IPv4 (else IPv6); outerL4 is the
	// outer UDP header.
	outer4  bool
	outerL4 int
	// l3 is the (inner) IP header, ip4 its version; l4 the (inner)
	// transport header of protocol proto, ending at hdrEnd.
	l3     int
	ip4    bool
	l4     int
	proto  uint8
	hdrEnd int
}

// srcDst returns the (inner) IP source and destination addresses.
func (l *layout) srcDst(pkt []byte) (src, dst []byte) {
	if l.ip4 {
		return pkt[l.l3+12 : l.l3+16], pkt[l.l3+16 : l.l3+20]
	}
	return pkt[l.l3+8 : l.l3+24], pkt[l.l3+24 : l.l3+40]
}

// outerSrcDst returns a tunnel packet's outer addresses.
func (l *layout) outerSrcDst(pkt []byte) (src, dst []byte) {
	if l.outer4 {
		return pkt[12:16], pkt[16:20]
	}
	return pkt[8:24], pkt[24:40]
}

// l4HeaderLen returns the length of the transport header at off, or an
// error if it does not fit in pkt.
func l4HeaderLen(pkt []byte, off int, proto uint8) (int, error) {
	switch proto {
	case protoTCP:
		if off+tcpHeaderLen > len(pkt) {
			return 0, errors.New("TCP header past the end of the packet")
		}
		n := int(pkt[off+12]>>4) * 4
		if n < tcpHeaderLen || off+n > len(pkt) {
			return 0, fmt.Errorf("TCP header length %d invalid", n)
		}
		return n, nil
	case protoUDP:
		if off+udpHeaderLen > len(pkt) {
			return 0, errors.New("UDP header past the end of the packet")
		}
		return udpHeaderLen, nil
	}
	return 0, fmt.Errorf("transport protocol %d is neither TCP nor UDP", proto)
}

// gsoLayout works out the layout of a super-packet from its header,
// checking every offset against the packet and the headers themselves.
func gsoLayout(pkt []byte, h Header) (layout, error) {
	var l layout
	base := h.GSOType.Base()
	switch base {
	case GSOTCPv4, GSOTCPv6:
		l.proto = protoTCP
	case GSOUDPL4:
		l.proto = protoUDP
	default:
		return l, fmt.Errorf("GSO type %v not supported", h.GSOType)
	}
	if h.GSOType&GSOAccECN != 0 {
		return l, fmt.Errorf("GSO type %v not supported", h.GSOType)
	}
	if h.GSOSize == 0 {
		return l, errors.New("GSO size 0")
	}
	if len(pkt) == 0 {
		return l, errors.New("empty packet")
	}
	if t := h.GSOType & gsoTunnel; t != 0 {
		if t == gsoTunnel {
			return l, errors.New("GSO type says both IPv4 and IPv6 outer headers")
		}
		l.tunnel = true
		l.outer4 = t == GSOTunnelIPv4
		l.outerL4 = int(h.OuterTransport)
		if err := checkIP(pkt, 0, l.outer4, l.outerL4, protoUDP); err != nil {
			return l, fmt.Errorf("outer header: %w", err)
		}
		l.l3 = int(h.InnerNetwork)
		if l.l3 < l.outerL4+udpHeaderLen || l.l3 >= len(pkt) {
			return l, fmt.Errorf("inner network offset %d invalid (outer UDP at %d, packet %d bytes)", l.l3, l.outerL4, len(pkt))
		}
	}
	if l.l3 >= len(pkt) {
		return l, errors.New("no IP header")
	}
	switch pkt[l.l3] >> 4 {
	case 4:
		l.ip4 = true
	case 6:
	default:
		return l, fmt.Errorf("IP version %d", pkt[l.l3]>>4)
	}
	if base == GSOTCPv4 && !l.ip4 || base == GSOTCPv6 && l.ip4 {
		return l, fmt.Errorf("GSO type %v on an IPv%d packet", h.GSOType, pkt[l.l3]>>4)
	}
	// The transport header: where the checksum starts if the kernel says
	// so, else right after a plain IP header.
	if h.Flags&FlagNeedsCsum != 0 {
		l.l4 = int(h.CsumStart)
	} else if l.ip4 {
		l.l4 = l.l3 + int(pkt[l.l3]&0x0f)*4
	} else {
		l.l4 = l.l3 + ipv6HeaderLen
	}
	if err := checkIP(pkt, l.l3, l.ip4, l.l4, l.proto); err != nil {
		return l, err
	}
	n, err := l4HeaderLen(pkt, l.l4, l.proto)
	if err != nil {
		return l, err
	}
	l.hdrEnd = l.l4 + n
	return l, nil
}

// checkIP checks that the IP header at off has the version v4 says, ends
// at l4 (IPv6: at or before, extension headers being opaque) and, for
// IPv4, carries protocol proto.
func checkIP(pkt []byte, off int, v4 bool, l4 int, proto uint8) error {
	if off >= len(pkt) {
		return errors.New("IP header past the end of the packet")
	}
	if v4 {
		if pkt[off]>>4 != 4 {
			return fmt.Errorf("IP version %d, want 4", pkt[off]>>4)
		}
		ihl := int(pkt[off]&0x0f) * 4
		if ihl < ipv4HeaderLen || off+ihl != l4 {
			return fmt.Errorf("IPv4 header length %d does not end at the transport offset %d", ihl, l4-off)
		}
		if l4 > len(pkt) {
			return errors.New("IPv4 header past the end of the packet")
		}
		if pkt[off+9] != proto {
			return fmt.Errorf("IPv4 protocol %d, want %d", pkt[off+9], proto)
		}
		return nil
	}
	if pkt[off]>>4 != 6 {
		return fmt.Errorf("IP version %d, want 6", pkt[off]>>4)
	}
	if l4 < off+ipv6HeaderLen || l4 > len(pkt) {
		return fmt.Errorf("transport offset %d inside or past the IPv6 header", l4-off)
	}
	if l4 == off+ipv6HeaderLen && pkt[off+6] != proto {
		return fmt.Errorf("IPv6 next header %d, want %d", pkt[off+6], proto)
	}
	return nil
}

// ipv4Checksum recomputes the checksum of the IPv4 header at off.
func ipv4Checksum(pkt []byte, off int) {
	ihl := int(pkt[off]&0x0f) * 4
	pkt[off+ipv4ChecksumAt], pkt[off+ipv4ChecksumAt+1] = 0, 0
	binary.BigEndian.PutUint16(pkt[off+ipv4ChecksumAt:], Checksum(pkt[off:off+ihl], 0))
}

// setIPLength sets the length field of the IP header at off for a packet
// whose IP header starts at off and ends at end.
func setIPLength(pkt []byte, off int, v4 bool, end int) {
	if v4 {
		binary.BigEndian.PutUint16(pkt[off+2:], uint16(end-off))
	} else {
		binary.BigEndian.PutUint16(pkt[off+4:], uint16(end-off-ipv6HeaderLen))
	}
}
