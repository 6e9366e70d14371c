package offload

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrShortBuffer is returned by Split when an output buffer cannot hold a
// segment.
var ErrShortBuffer = errors.New("output buffer too small for a segment")

// Segments returns how many packets Split makes of pkt read with header h,
// or an error if h does not describe pkt.
func Segments(pkt []byte, h Header) (int, error) {
	if h.GSOType == GSONone {
		return 1, nil
	}
	l, err := gsoLayout(pkt, h)
	if err != nil {
		return 0, err
	}
	return segments(len(pkt)-l.hdrEnd, int(h.GSOSize)), nil
}

func segments(payload, size int) int {
	if payload <= 0 {
		return 1
	}
	return (payload + size - 1) / size
}

// Split cuts the packet pkt, read from a TUN device with header h, into
// wire-sized packets: segments first, first+1, ... of it, as many as out
// has room for, each written to out[i][offset:] with its length in
// sizes[i]. It returns how many it wrote and how many the packet makes in
// all, so a caller with fewer buffers than segments calls again with first
// advanced. A packet that is not a super-packet (GSONone) is one segment,
// its checksum completed if h asks for it.
//
// Every segment gets the headers of pkt with its own lengths, IPv4 IDs
// (incremented per segment, outer and inner), TCP sequence number, TCP
// flags (CWR only on the first segment, FIN and PSH only on the last), and
// checksums: IPv4 header checksums, the TCP or UDP checksum, and for a
// UDP-tunnel packet over IPv6 the outer UDP checksum (computed if h has
// FlagTunnelCsum, else zero). A tunnel packet over IPv4 leaves with no
// outer UDP checksum (zero) even when h asks for one: IPv4 allows it and
// VXLAN's RFC 7348 recommends it, the segment crosses the WireGuard tunnel
// (whose authentication covers every byte) to a gateway that takes the
// outer checksum off when it merges segments anyway, and computing it is
// a second pass over every byte (bridged networks cost twice the
// checksum time of routed ones with it). pkt is not modified.
//
// Split fails, writing nothing, when h does not describe pkt (unknown GSO
// type, offsets outside the packet or not where the headers are).
func Split(pkt []byte, h Header, first int, out [][]byte, sizes []int, offset int) (n, total int, err error) {
	if len(out) == 0 || len(sizes) < len(out) {
		return 0, 0, errors.New("no output buffers")
	}
	if h.GSOType == GSONone {
		if first != 0 {
			return 0, 1, nil
		}
		return splitNone(pkt, h, out[0], sizes, offset)
	}
	l, err := gsoLayout(pkt, h)
	if err != nil {
		return 0, 0, err
	}
	size := int(h.GSOSize)
	payload := len(pkt) - l.hdrEnd
	total = segments(payload, size)
	for i := first; i < total && n < len(out); i++ {
		start := l.hdrEnd + i*size
		end := min(start+size, len(pkt))
		seg := out[n][offset:]
		length := l.hdrEnd + end - start
		if len(seg) < length {
			return n, total, fmt.Errorf("segment %d of %d bytes: %w", i, length, ErrShortBuffer)
		}
		copy(seg, pkt[:l.hdrEnd])
		copy(seg[l.hdrEnd:], pkt[start:end])
		fixSegment(seg[:length], &l, h.Flags&FlagTunnelCsum != 0, i, size, i == total-1)
		sizes[n] = length
		n++
	}
	return n, total, nil
}

// splitNone copies a packet that is not a super-packet, completing its
// checksum if h asks for it.
func splitNone(pkt []byte, h Header, out []byte, sizes []int, offset int) (int, int, error) {
	seg := out[offset:]
	if len(seg) < len(pkt) {
		return 0, 1, fmt.Errorf("packet of %d bytes: %w", len(pkt), ErrShortBuffer)
	}
	if h.Flags&FlagNeedsCsum != 0 {
		at := int(h.CsumStart) + int(h.CsumOffset)
		if int(h.CsumStart) >= len(pkt) || at+2 > len(pkt) {
			return 0, 1, fmt.Errorf("checksum at %d+%d outside a packet of %d bytes", h.CsumStart, h.CsumOffset, len(pkt))
		}
	}
	copy(seg, pkt)
	if h.Flags&FlagNeedsCsum != 0 {
		// The field holds the pseudo-header sum; summing over it completes
		// the checksum.
		at := int(h.CsumStart) + int(h.CsumOffset)
		binary.BigEndian.PutUint16(seg[at:], Checksum(seg[h.CsumStart:len(pkt)], 0))
	}
	sizes[0] = len(pkt)
	return 1, 1, nil
}

// fixSegment turns seg, a copy of the super-packet's headers followed by
// the payload of segment i (of size bytes each), into a valid packet.
func fixSegment(seg []byte, l *layout, outerCsum bool, i, size int, last bool) {
	if l.tunnel {
		setIPLength(seg, 0, l.outer4, len(seg))
		if l.outer4 {
			addID(seg, 0, i)
			ipv4Checksum(seg, 0)
		}
		binary.BigEndian.PutUint16(seg[l.outerL4+4:], uint16(len(seg)-l.outerL4))
		seg[l.outerL4+udpChecksumAt], seg[l.outerL4+udpChecksumAt+1] = 0, 0
	}
	setIPLength(seg, l.l3, l.ip4, len(seg))
	if l.ip4 {
		addID(seg, l.l3, i)
		ipv4Checksum(seg, l.l3)
	}
	th := seg[l.l4:]
	csumAt := tcpChecksumAt
	if l.proto == protoTCP {
		seq := binary.BigEndian.Uint32(th[4:])
		binary.BigEndian.PutUint32(th[4:], seq+uint32(i*size))
		if i > 0 {
			th[tcpFlagsAt] &^= tcpCWR
		}
		if !last {
			th[tcpFlagsAt] &^= tcpFIN | tcpPSH
		}
	} else {
		binary.BigEndian.PutUint16(th[4:], uint16(len(th)))
		csumAt = udpChecksumAt
	}
	src, dst := l.srcDst(seg)
	th[csumAt], th[csumAt+1] = 0, 0
	c := Checksum(th, pseudoSum(src, dst, l.proto, len(th)))
	if c == 0 && l.proto == protoUDP {
		c = 0xffff // zero means "no checksum" in UDP
	}
	binary.BigEndian.PutUint16(th[csumAt:], c)
	if l.tunnel && outerCsum && !l.outer4 {
		osrc, odst := l.outerSrcDst(seg)
		uh := seg[l.outerL4:]
		c := Checksum(uh, pseudoSum(osrc, odst, protoUDP, len(uh)))
		if c == 0 {
			c = 0xffff
		}
		binary.BigEndian.PutUint16(uh[udpChecksumAt:], c)
	}
}

// addID adds i to the ID of the IPv4 header at off.
func addID(pkt []byte, off, i int) {
	id := binary.BigEndian.Uint16(pkt[off+4:])
	binary.BigEndian.PutUint16(pkt[off+4:], id+uint16(i))
}
