package offload

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
)

// shape describes a test packet: what headers it has.
type shape struct {
	v6        bool // inner IPv6 (else IPv4)
	udp       bool // UDP (else TCP)
	tunnel    bool // inside VXLAN
	outer6    bool // tunnel: outer IPv6
	outerCsum bool // tunnel: outer UDP checksum
	vlans     int  // tunnel: VLAN tags on the inner Ethernet frame
	tcpOpts   int  // bytes of TCP options, a multiple of 4
	df        bool // IPv4: don't fragment
	tos       uint8
	flags     uint8 // TCP flags
	seq       uint32
	id        uint16
	vni       uint32
	srcPort   uint16
	tsval     uint32 // added to the TCP timestamp
}

func (s shape) String() string {
	name := "ipv4"
	if s.v6 {
		name = "ipv6"
	}
	if s.udp {
		name += "/udp"
	} else {
		name += fmt.Sprintf("/tcp+%dopt", s.tcpOpts)
	}
	if s.tunnel {
		o := "vxlan4"
		if s.outer6 {
			o = "vxlan6"
		}
		if s.outerCsum {
			o += "csum"
		}
		name = fmt.Sprintf("%s+%dvlan/%s", o, s.vlans, name)
	}
	return name
}

var (
	outerSrc4 = netip.MustParseAddr("10.255.0.1")
	outerDst4 = netip.MustParseAddr("10.255.0.2")
	outerSrc6 = netip.MustParseAddr("fd00:255::1")
	outerDst6 = netip.MustParseAddr("fd00:255::2")
	innerSrc4 = netip.MustParseAddr("192.168.50.10")
	innerDst4 = netip.MustParseAddr("192.168.50.20")
	innerSrc6 = netip.MustParseAddr("fd50::10")
	innerDst6 = netip.MustParseAddr("fd50::20")
)

const testVXLANPort = 4789

// headers returns the headers of a packet of shape s carrying payload
// bytes, and the layout the code under test should find, with every
// checksum valid. The outer UDP checksum of a tunnel packet is zero unless
// s.outerCsum.
func (s shape) packet(payload []byte) ([]byte, layout) {
	var b []byte
	var l layout
	if s.tunnel {
		l.tunnel, l.outer4 = true, !s.outer6
		b = ipHeader(b, s.outer6, outerSrc4, outerDst4, outerSrc6, outerDst6, protoUDP, s.tos, 64, s.id+1000, true)
		l.outerL4 = len(b)
		b = binary.BigEndian.AppendUint16(b, 40000+s.srcPort)
		b = binary.BigEndian.AppendUint16(b, testVXLANPort)
		b = append(b, 0, 0, 0, 0) // length, checksum
		b = append(b, 0x08, 0, 0, 0, byte(s.vni>>16), byte(s.vni>>8), byte(s.vni), 0)
		b = append(b, 0x02, 0, 0, 0, 0, 0x20, 0x02, 0, 0, 0, 0, 0x10)
		for range s.vlans {
			b = append(b, 0x81, 0x00, 0x00, 0x64)
		}
		if s.v6 {
			b = binary.BigEndian.AppendUint16(b, etherTypeIPv6)
		} else {
			b = binary.BigEndian.AppendUint16(b, etherTypeIPv4)
		}
	}
	l.l3 = len(b)
	l.ip4 = !s.v6
	proto := uint8(protoTCP)
	if s.udp {
		proto = protoUDP
	}
	l.proto = proto
	b = ipHeader(b, s.v6, innerSrc4, innerDst4, innerSrc6, innerDst6, proto, s.tos, 63, s.id, s.df)
	l.l4 = len(b)
	if s.udp {
		b = binary.BigEndian.AppendUint16(b, 5000+s.srcPort)
		b = binary.BigEndian.AppendUint16(b, 5201)
		b = append(b, 0, 0, 0, 0)
	} else {
		b = binary.BigEndian.AppendUint16(b, 33000+s.srcPort)
		b = binary.BigEndian.AppendUint16(b, 5201)
		b = binary.BigEndian.AppendUint32(b, s.seq)
		b = binary.BigEndian.AppendUint32(b, 0x01020304) // ack
		b = append(b, byte((tcpHeaderLen+s.tcpOpts)/4)<<4, s.flags)
		b = binary.BigEndian.AppendUint16(b, 502) // window
		b = append(b, 0, 0, 0, 0)                 // checksum, urgent
		for j := 0; j < s.tcpOpts; j += 4 {
			if j == 0 && s.tcpOpts >= 12 {
				// NOP NOP timestamps
				b = append(b, 1, 1, 8, 10)
				b = binary.BigEndian.AppendUint32(b, 0x1234+s.tsval)
				b = append(b, 0, 0, 0x56, 0x78)
				j += 8
				continue
			}
			b = append(b, 1, 1, 1, 1)
		}
	}
	l.hdrEnd = len(b)
	b = append(b, payload...)
	fixLengths(b, l)
	return b, l
}

func ipHeader(b []byte, v6 bool, s4, d4, s6, d6 netip.Addr, proto, tos, ttl uint8, id uint16, df bool) []byte {
	if v6 {
		b = append(b, 0x60|tos>>4, tos<<4|0x0a, 0xbc, 0xde, 0, 0, proto, ttl)
		b = append(b, s6.AsSlice()...)
		return append(b, d6.AsSlice()...)
	}
	flags := byte(0)
	if df {
		flags = 0x40
	}
	b = append(b, 0x45, tos, 0, 0, byte(id>>8), byte(id), flags, 0, ttl, proto, 0, 0)
	b = append(b, s4.AsSlice()...)
	return append(b, d4.AsSlice()...)
}

// fixLengths sets every length and checksum of the packet b with layout l.
func fixLengths(b []byte, l layout) {
	if l.tunnel {
		setIPLength(b, 0, l.outer4, len(b))
		if l.outer4 {
			ipv4Checksum(b, 0)
		}
		binary.BigEndian.PutUint16(b[l.outerL4+4:], uint16(len(b)-l.outerL4))
	}
	setIPLength(b, l.l3, l.ip4, len(b))
	if l.ip4 {
		ipv4Checksum(b, l.l3)
	}
	th := b[l.l4:]
	at := tcpChecksumAt
	if l.proto == protoUDP {
		at = udpChecksumAt
		binary.BigEndian.PutUint16(th[4:], uint16(len(th)))
	}
	th[at], th[at+1] = 0, 0
	src, dst := l.srcDst(b)
	c := Checksum(th, pseudoSum(src, dst, l.proto, len(th)))
	if c == 0 && l.proto == protoUDP {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(th[at:], c)
}

func setOuterCsum(b []byte, l layout) {
	uh := b[l.outerL4:]
	uh[6], uh[7] = 0, 0
	src, dst := l.outerSrcDst(b)
	c := Checksum(uh, pseudoSum(src, dst, protoUDP, len(uh)))
	if c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(uh[6:], c)
}

// super returns a super-packet of shape s with payload, as the kernel
// hands it to a TUN reader, and its header.
func (s shape) super(payload []byte, mss int) ([]byte, Header) {
	pkt, l := s.packet(payload)
	h := Header{Flags: FlagNeedsCsum, GSOSize: uint16(mss), CsumStart: uint16(l.l4), HdrLen: uint16(l.hdrEnd)}
	switch {
	case s.udp:
		h.GSOType = GSOUDPL4
		h.CsumOffset = udpChecksumAt
	case s.v6:
		h.GSOType = GSOTCPv6
		h.CsumOffset = tcpChecksumAt
	default:
		h.GSOType = GSOTCPv4
		h.CsumOffset = tcpChecksumAt
	}
	if s.flags&tcpCWR != 0 && !s.udp {
		h.GSOType |= GSOECN
	}
	if s.tunnel {
		h.GSOType |= GSOTunnelIPv4
		if s.outer6 {
			h.GSOType ^= GSOTunnelIPv4 | GSOTunnelIPv6
		}
		h.OuterTransport = uint16(l.outerL4)
		h.InnerNetwork = uint16(l.l3)
		if s.outerCsum {
			h.Flags |= FlagTunnelCsum
		}
	}
	// As the kernel leaves it: the L4 checksum holds the pseudo-header sum
	// of the whole super-packet, the outer UDP checksum zero.
	src, dst := l.srcDst(pkt)
	at := int(h.CsumStart + h.CsumOffset)
	binary.BigEndian.PutUint16(pkt[at:], fold(pseudoSum(src, dst, l.proto, len(pkt)-l.l4)))
	return pkt, h
}

func randomPayload(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// buffers returns n buffers of size bytes with offset bytes of headroom.
func buffers(n, size, offset int) ([][]byte, []int) {
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = make([]byte, offset+size)
	}
	return bufs, make([]int, n)
}

// checkPacket verifies that p, a packet as it would go on the wire, has
// consistent lengths and valid checksums, parsing it independently of the
// code under test. It returns the layout found.
func checkPacket(t testing.TB, p []byte, s shape) layout {
	t.Helper()
	_, l := s.packet(nil) // offsets of the headers do not depend on the payload
	if l.tunnel {
		checkIPHeader(t, p, 0, l.outer4, len(p))
		if got := int(binary.BigEndian.Uint16(p[l.outerL4+4:])); got != len(p)-l.outerL4 {
			t.Errorf("outer UDP length %d, want %d", got, len(p)-l.outerL4)
		}
		if c := p[l.outerL4+6:][:2]; c[0]|c[1] != 0 {
			src, dst := l.outerSrcDst(p)
			if got := fold(sum(p[l.outerL4:], pseudoSum(src, dst, protoUDP, len(p)-l.outerL4))); got != 0xffff {
				t.Errorf("outer UDP checksum invalid (sum %#x)", got)
			}
		} else if s.outerCsum && l.tunnel && !l.outer4 {
			t.Errorf("outer UDP checksum missing (IPv6 needs one)")
		}
	}
	checkIPHeader(t, p, l.l3, l.ip4, len(p))
	src, dst := l.srcDst(p)
	if got := fold(sum(p[l.l4:], pseudoSum(src, dst, l.proto, len(p)-l.l4))); got != 0xffff {
		t.Errorf("%s checksum invalid (sum %#x)", map[uint8]string{protoTCP: "TCP", protoUDP: "UDP"}[l.proto], got)
	}
	if l.proto == protoUDP {
		if got := int(binary.BigEndian.Uint16(p[l.l4+4:])); got != len(p)-l.l4 {
			t.Errorf("UDP length %d, want %d", got, len(p)-l.l4)
		}
	}
	return l
}

func checkIPHeader(t testing.TB, p []byte, off int, v4 bool, end int) {
	t.Helper()
	if v4 {
		ihl := int(p[off]&0x0f) * 4
		if c := Checksum(p[off:off+ihl], 0); c != 0 {
			t.Errorf("IPv4 header checksum at %d invalid", off)
		}
		if got := int(binary.BigEndian.Uint16(p[off+2:])); got != end-off {
			t.Errorf("IPv4 total length at %d is %d, want %d", off, got, end-off)
		}
		return
	}
	if got := int(binary.BigEndian.Uint16(p[off+4:])); got != end-off-ipv6HeaderLen {
		t.Errorf("IPv6 payload length at %d is %d, want %d", off, got, end-off-ipv6HeaderLen)
	}
}

// flatten returns the bytes a write puts on the device: the virtio-net
// header and the packet.
func flatten(w Write) []byte {
	var b []byte
	b = append(b, w.Head...)
	for _, p := range w.Parts {
		b = append(b, p...)
	}
	return b
}

// stripTunnelOptions removes the NOP options Coalescer puts in the outer
// IPv4 header of a merged tunnel packet, and fixes the header and h.
func stripTunnelOptions(t testing.TB, pkt []byte, h *Header) []byte {
	t.Helper()
	if !h.GSOType.Tunnel() || pkt[0] != 0x49 {
		return pkt
	}
	for _, o := range pkt[20:36] {
		if o != ipOptNOP {
			t.Fatalf("outer IPv4 options %x, want NOPs", pkt[20:36])
		}
	}
	out := append(append([]byte{}, pkt[:20]...), pkt[36:]...)
	out[0] = 0x45
	setIPLength(out, 0, true, len(out))
	ipv4Checksum(out, 0)
	h.OuterTransport -= 16
	h.InnerNetwork -= 16
	h.CsumStart -= 16
	h.HdrLen -= 16
	return out
}
