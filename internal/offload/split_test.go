package offload

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"testing"
)

// shapes are the packet shapes every property test runs on.
func shapes() []shape {
	var out []shape
	for _, v6 := range []bool{false, true} {
		for _, udp := range []bool{false, true} {
			base := shape{v6: v6, udp: udp, df: true, flags: tcpACK}
			if !udp {
				for _, opts := range []int{0, 12, 40} {
					s := base
					s.tcpOpts = opts
					out = append(out, s)
				}
			} else {
				out = append(out, base)
			}
			for _, outer6 := range []bool{false, true} {
				for _, vlans := range []int{0, 1, 2} {
					s := base
					s.tunnel, s.outer6, s.vlans, s.vni = true, outer6, vlans, 200
					if !udp {
						s.tcpOpts = 12
					}
					out = append(out, s)
					s.outerCsum = true
					out = append(out, s)
				}
			}
		}
	}
	return out
}

func TestSplitSegments(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, s := range shapes() {
		for _, tc := range []struct{ payload, mss int }{
			{1, 1300}, {1300, 1300}, {1301, 1300}, {2600, 1300}, {60000, 1318}, {5000, 536},
		} {
			s := s
			s.seq, s.id = r.Uint32(), uint16(r.Uint32())
			s.flags = tcpACK | tcpPSH | tcpFIN | tcpCWR
			s.df = tc.mss == 536 // IDs checked either way
			payload := randomPayload(r, tc.payload)
			super, h := s.super(payload, tc.mss)
			orig := bytes.Clone(super)
			bufs, sizes := buffers(64, 2000, 16)
			n, total, err := Split(super, h, 0, bufs, sizes, 16)
			if err != nil {
				t.Fatalf("%v payload %d mss %d: %v", s, tc.payload, tc.mss, err)
			}
			if !bytes.Equal(super, orig) {
				t.Errorf("%v: Split modified its input", s)
			}
			want := (tc.payload + tc.mss - 1) / tc.mss
			if n != want || total != want {
				t.Fatalf("%v payload %d mss %d: %d/%d segments, want %d", s, tc.payload, tc.mss, n, total, want)
			}
			var stream []byte
			for i := range n {
				seg := bufs[i][16 : 16+sizes[i]]
				l := checkPacket(t, seg, s)
				stream = append(stream, seg[l.hdrEnd:]...)
				if got, wantLen := len(seg)-l.hdrEnd, min(tc.mss, tc.payload-i*tc.mss); got != wantLen {
					t.Errorf("%v: segment %d carries %d bytes, want %d", s, i, got, wantLen)
				}
				if l.ip4 {
					if got := binary.BigEndian.Uint16(seg[l.l3+4:]); got != s.id+uint16(i) {
						t.Errorf("%v: segment %d IPv4 ID %d, want %d", s, i, got, s.id+uint16(i))
					}
				}
				if l.tunnel && l.outer4 {
					if got := binary.BigEndian.Uint16(seg[4:]); got != s.id+1000+uint16(i) {
						t.Errorf("%v: segment %d outer IPv4 ID %d, want %d", s, i, got, s.id+1000+uint16(i))
					}
					// No outer checksum over IPv4, even when the kernel
					// asks for one: it would be a second pass over every
					// byte (see Split).
					if c := seg[l.outerL4+udpChecksumAt:][:2]; c[0]|c[1] != 0 {
						t.Errorf("%v: segment %d has an outer UDP checksum over IPv4 (%#x)", s, i, binary.BigEndian.Uint16(c))
					}
				}
				if !bytes.Equal(seg[:l.l3], super[:l.l3]) && !l.tunnel {
					t.Errorf("%v: headers before the IP header changed", s)
				}
				if l.tunnel && !bytes.Equal(seg[l.outerL4+udpHeaderLen:l.l3], super[l.outerL4+udpHeaderLen:l.l3]) {
					t.Errorf("%v: segment %d tunnel header or inner Ethernet header changed", s, i)
				}
				if s.udp {
					continue
				}
				if got := binary.BigEndian.Uint32(seg[l.l4+4:]); got != s.seq+uint32(i*tc.mss) {
					t.Errorf("%v: segment %d seq %d, want %d", s, i, got, s.seq+uint32(i*tc.mss))
				}
				flags := seg[l.l4+tcpFlagsAt]
				wantFlags := uint8(tcpACK)
				if i == 0 {
					wantFlags |= tcpCWR
				}
				if i == n-1 {
					wantFlags |= tcpPSH | tcpFIN
				}
				if flags != wantFlags {
					t.Errorf("%v: segment %d of %d TCP flags %#x, want %#x", s, i, n, flags, wantFlags)
				}
			}
			if !bytes.Equal(stream, payload) {
				t.Errorf("%v payload %d mss %d: segments do not carry the payload in order", s, tc.payload, tc.mss)
			}
		}
	}
}

func TestSplitInBatches(t *testing.T) {
	s := shape{tunnel: true, tcpOpts: 12, flags: tcpACK | tcpPSH, df: true}
	r := rand.New(rand.NewPCG(3, 4))
	super, h := s.super(randomPayload(r, 50000), 1000)
	all, allSizes := buffers(50, 1200, 0)
	if n, _, err := Split(super, h, 0, all, allSizes, 0); err != nil || n != 50 {
		t.Fatalf("Split = %d, %v", n, err)
	}
	bufs, sizes := buffers(7, 1200, 0)
	got := 0
	for first := 0; first < 50; first += 7 {
		n, total, err := Split(super, h, first, bufs, sizes, 0)
		if err != nil || total != 50 || n != min(7, 50-first) {
			t.Fatalf("Split from %d = %d of %d, %v", first, n, total, err)
		}
		for i := range n {
			if !bytes.Equal(bufs[i][:sizes[i]], all[first+i][:allSizes[first+i]]) {
				t.Fatalf("segment %d differs when split in batches", first+i)
			}
		}
		got += n
	}
	if got != 50 {
		t.Errorf("%d segments in batches, want 50", got)
	}
}

func TestSplitNoneCompletesChecksum(t *testing.T) {
	for _, s := range []shape{{flags: tcpACK}, {v6: true, udp: true}, {tunnel: true, flags: tcpACK, tcpOpts: 12}} {
		r := rand.New(rand.NewPCG(5, 6))
		pkt, l := s.packet(randomPayload(r, 333))
		want := bytes.Clone(pkt)
		// CHECKSUM_PARTIAL: the field holds the pseudo-header sum only.
		at := l.l4 + tcpChecksumAt
		if s.udp {
			at = l.l4 + udpChecksumAt
		}
		src, dst := l.srcDst(pkt)
		binary.BigEndian.PutUint16(pkt[at:], fold(pseudoSum(src, dst, l.proto, len(pkt)-l.l4)))
		h := Header{Flags: FlagNeedsCsum, CsumStart: uint16(l.l4), CsumOffset: uint16(at - l.l4)}
		bufs, sizes := buffers(1, 2000, 16)
		if n, total, err := Split(pkt, h, 0, bufs, sizes, 16); err != nil || n != 1 || total != 1 {
			t.Fatalf("%v: Split = %d, %d, %v", s, n, total, err)
		}
		if got := bufs[0][16 : 16+sizes[0]]; !bytes.Equal(got, want) {
			t.Errorf("%v: completed packet differs from one with its checksum computed", s)
		}
	}
}

func TestSplitRejects(t *testing.T) {
	s := shape{flags: tcpACK, df: true}
	super, h := s.super(make([]byte, 3000), 1000)
	tun := shape{tunnel: true, flags: tcpACK, df: true}
	tsuper, th := tun.super(make([]byte, 3000), 1000)
	for _, tc := range []struct {
		name string
		pkt  []byte
		h    func(Header) Header
	}{
		{"UFO", super, func(h Header) Header { h.GSOType = GSOUDP; return h }},
		{"zero GSO size", super, func(h Header) Header { h.GSOSize = 0; return h }},
		{"IPv6 type on IPv4", super, func(h Header) Header { h.GSOType = GSOTCPv6; return h }},
		{"checksum start past the end", super, func(h Header) Header { h.CsumStart = 5000; return h }},
		{"checksum start inside the IP header", super, func(h Header) Header { h.CsumStart = 10; return h }},
		{"UDP type on TCP", super, func(h Header) Header { h.GSOType = GSOUDPL4; return h }},
		{"both tunnel bits", tsuper, func(h Header) Header { h.GSOType |= GSOTunnelIPv6; return h }},
		{"outer transport wrong", tsuper, func(h Header) Header { h.OuterTransport = 24; return h }},
		{"inner network inside the outer UDP header", tsuper, func(h Header) Header { h.InnerNetwork = 24; return h }},
		{"inner network past the end", tsuper, func(h Header) Header { h.InnerNetwork = 9000; return h }},
		{"tunnel bit, plain packet", super, func(h Header) Header { h.GSOType |= GSOTunnelIPv4; return h }},
		{"AccECN", super, func(h Header) Header { h.GSOType |= GSOAccECN; return h }},
	} {
		hh := th
		if &tc.pkt[0] == &super[0] {
			hh = h
		}
		bufs, sizes := buffers(8, 2000, 0)
		if n, _, err := Split(tc.pkt, tc.h(hh), 0, bufs, sizes, 0); err == nil {
			t.Errorf("%s: Split = %d segments, want an error", tc.name, n)
		}
	}
	bufs, sizes := buffers(8, 500, 0)
	if _, _, err := Split(super, h, 0, bufs, sizes, 0); !errors.Is(err, ErrShortBuffer) {
		t.Errorf("small buffers: Split = %v, want ErrShortBuffer", err)
	}
}

func TestHeaderEncoding(t *testing.T) {
	h := Header{Flags: FlagNeedsCsum | FlagTunnelCsum, GSOType: GSOTCPv6 | GSOTunnelIPv4 | GSOECN, HdrLen: 0x1234,
		GSOSize: 1318, CsumStart: 70, CsumOffset: 16, OuterTransport: 20, InnerNetwork: 50}
	b := make([]byte, TunnelHeaderLen)
	for i := range b {
		b[i] = 0xee
	}
	h.Encode(b)
	want := []byte{9, 0xa4, 0x34, 0x12, 0x26, 0x05, 70, 0, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 20, 0, 50, 0}
	if !bytes.Equal(b, want) {
		t.Errorf("Encode = % x\nwant       % x", b, want)
	}
	got, err := DecodeHeader(b)
	if err != nil || got != h {
		t.Errorf("DecodeHeader = %+v, %v; want %+v", got, err, h)
	}
	short, err := DecodeHeader(b[:HeaderLen])
	h.OuterTransport, h.InnerNetwork = 0, 0
	if err != nil || short != h {
		t.Errorf("DecodeHeader(10 bytes) = %+v, %v; want %+v", short, err, h)
	}
	if _, err := DecodeHeader(b[:9]); err == nil {
		t.Error("DecodeHeader(9 bytes) = nil error")
	}
	if s := h.GSOType.String(); s != "tcpv6|tunnel-ipv4|ecn" {
		t.Errorf("String = %q", s)
	}
}

func TestChecksum(t *testing.T) {
	// A reference: 16-bit words one at a time.
	ref := func(b []byte, initial uint32) uint16 {
		s := initial
		for i := 0; i < len(b); i += 2 {
			w := uint32(b[i]) << 8
			if i+1 < len(b) {
				w |= uint32(b[i+1])
			}
			s += w
			s = s&0xffff + s>>16
		}
		return ^uint16(s)
	}
	r := rand.New(rand.NewPCG(7, 8))
	for n := range 300 {
		b := randomPayload(r, n)
		if n%7 == 0 {
			for i := range b {
				b[i] = 0xff
			}
		}
		init := r.Uint32() & 0xffff
		if got, want := Checksum(b, uint64(init)), ref(b, init); got != want {
			t.Fatalf("Checksum(%d bytes, %#x) = %#x, want %#x", n, init, got, want)
		}
		// Chained over an even split.
		h := n / 2 &^ 1
		if got, want := Checksum(b[h:], sum(b[:h], uint64(init))), ref(b, init); got != want {
			t.Fatalf("chained Checksum(%d bytes) = %#x, want %#x", n, got, want)
		}
	}
	// RFC 1071's example.
	if got := ^Checksum([]byte{0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7}, 0); got != 0xddf2 {
		t.Errorf("RFC 1071 example: sum %#x, want 0xddf2", got)
	}
}
