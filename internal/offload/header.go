package offload

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// GSOType is virtio_net_hdr's gso_type: the kind of super-packet, plus
// the ECN and UDP-tunnel bits.
type GSOType uint8

// GSO types and bits (include/uapi/linux/virtio_net.h).
const (
	GSONone   GSOType = 0
	GSOTCPv4  GSOType = 1
	GSOUDP    GSOType = 3 // UFO (IP fragmentation), never negotiated
	GSOTCPv6  GSOType = 4
	GSOUDPL4  GSOType = 5 // USO: UDP datagrams of GSOSize each
	GSOAccECN GSOType = 0x10
	// GSOTunnelIPv4 and GSOTunnelIPv6: the packet is a UDP tunnel packet
	// (VXLAN) with an outer IPv4 or IPv6 header; the base type describes
	// the inner packet.
	GSOTunnelIPv4 GSOType = 0x20
	GSOTunnelIPv6 GSOType = 0x40
	// GSOECN: the TCP super-packet has CWR set (on its first segment).
	GSOECN GSOType = 0x80

	gsoTunnel = GSOTunnelIPv4 | GSOTunnelIPv6
	gsoBits   = GSOECN | GSOAccECN | gsoTunnel
)

// Base returns the type without the ECN and tunnel bits.
func (t GSOType) Base() GSOType { return t &^ gsoBits }

// Tunnel reports whether a tunnel bit is set.
func (t GSOType) Tunnel() bool { return t&gsoTunnel != 0 }

func (t GSOType) String() string {
	var parts []string
	switch t.Base() {
	case GSONone:
		parts = append(parts, "none")
	case GSOTCPv4:
		parts = append(parts, "tcpv4")
	case GSOTCPv6:
		parts = append(parts, "tcpv6")
	case GSOUDP:
		parts = append(parts, "ufo")
	case GSOUDPL4:
		parts = append(parts, "udp_l4")
	default:
		parts = append(parts, fmt.Sprintf("%#x", uint8(t.Base())))
	}
	if t&GSOTunnelIPv4 != 0 {
		parts = append(parts, "tunnel-ipv4")
	}
	if t&GSOTunnelIPv6 != 0 {
		parts = append(parts, "tunnel-ipv6")
	}
	if t&GSOECN != 0 {
		parts = append(parts, "ecn")
	}
	if t&GSOAccECN != 0 {
		parts = append(parts, "accecn")
	}
	return strings.Join(parts, "|")
}

// Header flags (virtio_net_hdr.flags).
const (
	// FlagNeedsCsum: the L4 checksum at CsumStart+CsumOffset holds only
	// the pseudo-header sum (CHECKSUM_PARTIAL); the rest is to be added.
	FlagNeedsCsum uint8 = 1
	// FlagDataValid: the kernel has verified the checksum.
	FlagDataValid uint8 = 2
	// FlagTunnelCsum: a tunnel super-packet's outer UDP checksum is to be
	// computed for every segment.
	FlagTunnelCsum uint8 = 8
)

// Header lengths: what TUNSETVNETHDRSZ is set to.
const (
	// HeaderLen is struct virtio_net_hdr.
	HeaderLen = 10
	// TunnelHeaderLen is struct virtio_net_hdr_v1_hash_tunnel: the v1
	// header (12), the hash report (8) and the two tunnel offsets. The
	// kernel takes and gives UDP-tunnel super-packets only with a header
	// at least this long.
	TunnelHeaderLen = 24

	tunnelOffsetsAt = 20
)

// Header is the virtio-net header in front of each packet read from or
// written to a TUN device with IFF_VNET_HDR. Offsets count from the first
// byte of the packet (its IP header on a TUN device). Fields are encoded
// little-endian (the device is set to TUNSETVNETLE).
type Header struct {
	Flags   uint8
	GSOType GSOType
	// HdrLen is a hint: the length of the headers.
	HdrLen uint16
	// GSOSize is the payload of each segment but maybe the last.
	GSOSize uint16
	// CsumStart is where checksumming starts (the innermost L4 header);
	// CsumOffset is where the checksum is, from CsumStart.
	CsumStart  uint16
	CsumOffset uint16
	// OuterTransport is the offset of a tunnel packet's outer UDP header,
	// InnerNetwork that of its inner IP header; only in the tunnel layout
	// (TunnelHeaderLen).
	OuterTransport uint16
	InnerNetwork   uint16
}

// ErrShortHeader is returned for a header buffer shorter than HeaderLen.
var ErrShortHeader = errors.New("virtio-net header shorter than 10 bytes")

// DecodeHeader reads a header from b, which is the whole header as
// configured on the device: HeaderLen, 12 or TunnelHeaderLen bytes or
// more. The tunnel offsets are read only when b has room for them.
func DecodeHeader(b []byte) (Header, error) {
	if len(b) < HeaderLen {
		return Header{}, ErrShortHeader
	}
	h := Header{
		Flags:      b[0],
		GSOType:    GSOType(b[1]),
		HdrLen:     binary.LittleEndian.Uint16(b[2:]),
		GSOSize:    binary.LittleEndian.Uint16(b[4:]),
		CsumStart:  binary.LittleEndian.Uint16(b[6:]),
		CsumOffset: binary.LittleEndian.Uint16(b[8:]),
	}
	if len(b) >= TunnelHeaderLen {
		h.OuterTransport = binary.LittleEndian.Uint16(b[tunnelOffsetsAt:])
		h.InnerNetwork = binary.LittleEndian.Uint16(b[tunnelOffsetsAt+2:])
	}
	return h, nil
}

// Encode writes h into all of b (HeaderLen bytes or more; bytes it has no
// field for are zeroed). The tunnel offsets are written when b has room.
func (h Header) Encode(b []byte) {
	clear(b)
	b[0] = h.Flags
	b[1] = uint8(h.GSOType)
	binary.LittleEndian.PutUint16(b[2:], h.HdrLen)
	binary.LittleEndian.PutUint16(b[4:], h.GSOSize)
	binary.LittleEndian.PutUint16(b[6:], h.CsumStart)
	binary.LittleEndian.PutUint16(b[8:], h.CsumOffset)
	if len(b) >= TunnelHeaderLen {
		binary.LittleEndian.PutUint16(b[tunnelOffsetsAt:], h.OuterTransport)
		binary.LittleEndian.PutUint16(b[tunnelOffsetsAt+2:], h.InnerNetwork)
	}
}
