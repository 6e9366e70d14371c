package offload

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

func vxlanPort(p uint16) bool { return p == testVXLANPort }

func allOffloads() Config {
	return Config{Offloads: Offloads{TCP: true, UDP: true, Tunnel: true}, HeaderLen: TunnelHeaderLen, TunnelPort: vxlanPort}
}

// resplit turns writes back into packets: a merged write is split again
// (its tunnel options removed first), a single one is its packet.
func resplit(t testing.TB, ws []Write, hdrLen int) [][]byte {
	t.Helper()
	var out [][]byte
	for _, w := range ws {
		b := flatten(w)
		h, err := DecodeHeader(b[:hdrLen])
		if err != nil {
			t.Fatal(err)
		}
		pkt := b[hdrLen:]
		if !w.Merged() {
			if h != (Header{}) {
				t.Fatalf("single write with header %+v", h)
			}
			out = append(out, pkt)
			continue
		}
		pkt = stripTunnelOptions(t, pkt, &h)
		bufs, sizes := buffers(len(w.Packets)+1, 70000, 0)
		n, total, err := Split(pkt, h, 0, bufs, sizes, 0)
		if err != nil {
			t.Fatalf("splitting a merged write (%+v): %v", h, err)
		}
		if n != total || n != len(w.Packets) {
			t.Fatalf("merged write of %d packets splits into %d of %d", len(w.Packets), n, total)
		}
		for i := range n {
			out = append(out, bufs[i][:sizes[i]])
		}
	}
	return out
}

// TestSplitCoalesceRoundTrip: splitting a super-packet and coalescing the
// segments gives back writes that split into the very same segments, in
// order, and mergeable segments end up in one or two writes.
func TestSplitCoalesceRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	c := NewCoalescer(allOffloads())
	for _, s := range shapes() {
		for _, flags := range []uint8{tcpACK, tcpACK | tcpPSH, tcpACK | tcpCWR | tcpPSH, tcpACK | tcpECE | tcpFIN} {
			if s.udp && flags != tcpACK {
				continue
			}
			s := s
			s.flags = flags
			s.seq, s.id = r.Uint32(), uint16(r.Uint32())
			mergeableTunnel := s.tunnel && !s.outer6 && !s.udp
			if s.tunnel && !mergeableTunnel {
				// Merged as plain UDP datagrams, whose checksum USO computes.
				s.outerCsum = true
			}
			for _, size := range []int{700, 20000, 62000} {
				super, h := s.super(randomPayload(r, size), 1300)
				bufs, sizes := buffers(64, 2000, 16)
				n, _, err := Split(super, h, 0, bufs, sizes, 16)
				if err != nil {
					t.Fatal(err)
				}
				segs := make([][]byte, n)
				for i := range segs {
					segs[i] = bufs[i][16 : 16+sizes[i]]
				}
				ws := c.Coalesce(segs)
				back := resplit(t, ws, TunnelHeaderLen)
				if len(back) != len(segs) {
					t.Fatalf("%v flags %#x size %d: %d packets back from %d", s, flags, size, len(back), len(segs))
				}
				for i := range segs {
					if !samePacket(back[i], segs[i]) {
						t.Fatalf("%v flags %#x size %d: packet %d differs after coalescing and splitting:\n got % x\nwant % x",
							s, flags, size, i, back[i][:min(len(back[i]), 120)], segs[i][:min(len(segs[i]), 120)])
					}
				}
				// One write, or two: a CWR segment stays alone, and the
				// tunnel options (or the inner headers of VXLAN packets
				// merged as UDP datagrams) may push the last segments out.
				limit := 1
				if flags&tcpCWR != 0 {
					limit++
				}
				if s.tunnel {
					limit++
				}
				if len(ws) > limit {
					t.Errorf("%v flags %#x size %d: %d segments in %d writes, want at most %d", s, flags, size, len(segs), len(ws), limit)
				}
				for _, w := range ws {
					if len(flatten(w))-TunnelHeaderLen > 65535 {
						t.Errorf("%v: write of %d bytes", s, len(flatten(w))-TunnelHeaderLen)
					}
				}
			}
		}
	}
}

// stream is a helper that makes consecutive segments of one flow.
type stream struct {
	s   shape
	r   *rand.Rand
	seq uint32
	id  uint16
}

func (st *stream) next(n int, flags uint8) []byte {
	s := st.s
	s.seq, s.id, s.flags = st.seq, st.id, flags
	pkt, l := s.packet(randomPayload(st.r, n))
	if s.outerCsum {
		setOuterCsum(pkt, l)
	}
	st.seq += uint32(n)
	st.id++
	return pkt
}

func newStream(s shape, seed uint64) *stream {
	return &stream{s: s, r: rand.New(rand.NewPCG(seed, seed)), seq: uint32(seed) * 1000, id: uint16(seed)}
}

// writesOf returns, for each write, the indexes of the packets it carries.
func writesOf(ws []Write) [][]int {
	var out [][]int
	for _, w := range ws {
		out = append(out, append([]int{}, w.Packets...))
	}
	return out
}

func equalGroups(a, b [][]int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if len(a[i]) != len(b[i]) {
			return false
		}
		for j := range a[i] {
			if a[i][j] != b[i][j] {
				return false
			}
		}
	}
	return true
}

func TestCoalesceDecisions(t *testing.T) {
	tcp := shape{flags: tcpACK, df: true, tcpOpts: 12}
	tun := shape{tunnel: true, vlans: 1, flags: tcpACK, df: true, tcpOpts: 12, vni: 200}
	for _, tc := range []struct {
		name string
		cfg  Config
		pkts func() [][]byte
		want [][]int
	}{
		{"in order", allOffloads(), func() [][]byte {
			a := newStream(tcp, 1)
			return [][]byte{a.next(1000, tcpACK), a.next(1000, tcpACK), a.next(500, tcpACK|tcpPSH)}
		}, [][]int{{0, 1, 2}}},
		{"two flows interleaved", allOffloads(), func() [][]byte {
			a, b := newStream(tcp, 1), newStream(tcp, 2)
			b.s.srcPort = 7
			return [][]byte{a.next(1000, tcpACK), b.next(900, tcpACK), a.next(1000, tcpACK), b.next(900, tcpACK)}
		}, [][]int{{0, 2}, {1, 3}}},
		{"sequence gap", allOffloads(), func() [][]byte {
			a := newStream(tcp, 1)
			p0 := a.next(1000, tcpACK)
			a.seq += 1000
			p2 := a.next(1000, tcpACK)
			return [][]byte{p0, p2}
		}, [][]int{{0}, {1}}},
		{"reordered", allOffloads(), func() [][]byte {
			a := newStream(tcp, 1)
			p0, p1, p2 := a.next(1000, tcpACK), a.next(1000, tcpACK), a.next(1000, tcpACK)
			return [][]byte{p0, p2, p1}
		}, [][]int{{0}, {1}, {2}}},
		{"PSH ends a merge", allOffloads(), func() [][]byte {
			a := newStream(tcp, 1)
			return [][]byte{a.next(1000, tcpACK), a.next(1000, tcpACK|tcpPSH), a.next(1000, tcpACK)}
		}, [][]int{{0, 1}, {2}}},
		{"short segment ends a merge", allOffloads(), func() [][]byte {
			a := newStream(tcp, 1)
			return [][]byte{a.next(1000, tcpACK), a.next(600, tcpACK), a.next(1000, tcpACK)}
		}, [][]int{{0, 1}, {2}}},
		{"larger segment starts anew", allOffloads(), func() [][]byte {
			a := newStream(tcp, 1)
			return [][]byte{a.next(600, tcpACK), a.next(1000, tcpACK)}
		}, [][]int{{0}, {1}}},
		{"SYN, RST, URG, CWR pass alone", allOffloads(), func() [][]byte {
			a := newStream(tcp, 1)
			return [][]byte{a.next(100, tcpACK), a.next(100, tcpACK|tcpCWR), a.next(100, tcpACK|tcpURG), a.next(100, tcpACK|tcpRST), a.next(100, tcpSYN)}
		}, [][]int{{0}, {1}, {2}, {3}, {4}}},
		{"pure ACK in between closes the flow", allOffloads(), func() [][]byte {
			a := newStream(tcp, 1)
			return [][]byte{a.next(1000, tcpACK), a.next(0, tcpACK), a.next(1000, tcpACK)}
		}, [][]int{{0}, {1}, {2}}},
		{"bad checksum passes alone", allOffloads(), func() [][]byte {
			a := newStream(tcp, 1)
			p := [][]byte{a.next(1000, tcpACK), a.next(1000, tcpACK), a.next(1000, tcpACK), a.next(1000, tcpACK)}
			p[1][len(p[1])-1] ^= 0xff
			return p
		}, [][]int{{0}, {1}, {2, 3}}},
		{"bad checksum on the first", allOffloads(), func() [][]byte {
			a := newStream(tcp, 1)
			p := [][]byte{a.next(1000, tcpACK), a.next(1000, tcpACK), a.next(1000, tcpACK)}
			p[0][len(p[0])-1] ^= 0xff
			return p
		}, [][]int{{0}, {1, 2}}},
		{"TCP timestamps differ", allOffloads(), func() [][]byte {
			a := newStream(tcp, 1)
			p0 := a.next(1000, tcpACK)
			a.s.tsval = 1
			return [][]byte{p0, a.next(1000, tcpACK)}
		}, [][]int{{0}, {1}}},
		{"window differs", allOffloads(), func() [][]byte {
			a := newStream(tcp, 1)
			p0, p1 := a.next(1000, tcpACK), a.next(1000, tcpACK)
			p1[34]++ // window
			fixLengths(p1, layout{ip4: true, l4: 20, proto: protoTCP, hdrEnd: 52})
			return [][]byte{p0, p1}
		}, [][]int{{0}, {1}}},
		{"ECN CE mark differs", allOffloads(), func() [][]byte {
			a := newStream(tcp, 1)
			p0 := a.next(1000, tcpACK)
			a.s.tos = 3
			return [][]byte{p0, a.next(1000, tcpACK)}
		}, [][]int{{0}, {1}}},
		{"IPv4 ID gap without DF", allOffloads(), func() [][]byte {
			s := tcp
			s.df = false
			a := newStream(s, 1)
			p0 := a.next(1000, tcpACK)
			a.id += 5
			return [][]byte{p0, a.next(1000, tcpACK)}
		}, [][]int{{0}, {1}}},
		{"IPv4 ID gap with DF", allOffloads(), func() [][]byte {
			a := newStream(tcp, 1)
			p0 := a.next(1000, tcpACK)
			a.id += 5
			return [][]byte{p0, a.next(1000, tcpACK)}
		}, [][]int{{0, 1}}},
		{"65535 bytes at most", allOffloads(), func() [][]byte {
			a := newStream(tcp, 1)
			var p [][]byte
			for range 50 {
				p = append(p, a.next(1400, tcpACK))
			}
			return p
		}, [][]int{seq(0, 46), seq(46, 50)}},
		{"no TSO: nothing merged", Config{HeaderLen: HeaderLen}, func() [][]byte {
			a := newStream(tcp, 1)
			return [][]byte{a.next(1000, tcpACK), a.next(1000, tcpACK)}
		}, [][]int{{0}, {1}}},
		{"VXLAN inner flow", allOffloads(), func() [][]byte {
			a := newStream(tun, 1)
			return [][]byte{a.next(1000, tcpACK), a.next(1000, tcpACK), a.next(1000, tcpACK)}
		}, [][]int{{0, 1, 2}}},
		{"VXLAN with outer checksums", allOffloads(), func() [][]byte {
			s := tun
			s.outerCsum = true
			a := newStream(s, 1)
			return [][]byte{a.next(1000, tcpACK), a.next(1000, tcpACK)}
		}, [][]int{{0, 1}}},
		{"VXLAN bad outer checksum", allOffloads(), func() [][]byte {
			s := tun
			s.outerCsum = true
			a := newStream(s, 1)
			p := [][]byte{a.next(1000, tcpACK), a.next(1000, tcpACK)}
			p[1][27] ^= 0x40 // outer UDP checksum
			return p
		}, [][]int{{0}, {1}}},
		{"VXLAN, two VNIs", allOffloads(), func() [][]byte {
			a, b := newStream(tun, 1), newStream(tun, 1)
			b.s.vni = 300
			return [][]byte{a.next(1000, tcpACK), b.next(1000, tcpACK), a.next(1000, tcpACK), b.next(1000, tcpACK)}
		}, [][]int{{0, 2}, {1, 3}}},
		{"VXLAN to another port is UDP", allOffloads(), func() [][]byte {
			a := newStream(tun, 1)
			p := [][]byte{a.next(1000, tcpACK), a.next(1000, tcpACK)}
			for _, q := range p {
				binary.BigEndian.PutUint16(q[22:], 9999)
				binary.BigEndian.PutUint16(q[26:], 0) // no outer checksum
			}
			return p
		}, [][]int{{0, 1}}},
		{"no tunnel offload: VXLAN as UDP", Config{Offloads: Offloads{TCP: true, UDP: true}, HeaderLen: HeaderLen, TunnelPort: vxlanPort}, func() [][]byte {
			a := newStream(tun, 1)
			return [][]byte{a.next(1000, tcpACK), a.next(1000, tcpACK), a.next(1000, tcpACK)}
		}, [][]int{{0, 1, 2}}},
		{"no tunnel, no USO: VXLAN alone", Config{Offloads: Offloads{TCP: true}, HeaderLen: HeaderLen, TunnelPort: vxlanPort}, func() [][]byte {
			a := newStream(tun, 1)
			return [][]byte{a.next(1000, tcpACK), a.next(1000, tcpACK)}
		}, [][]int{{0}, {1}}},
		{"UDP equal sizes, then a short one", allOffloads(), func() [][]byte {
			a := newStream(shape{udp: true, df: true}, 1)
			return [][]byte{a.next(1200, 0), a.next(1200, 0), a.next(800, 0), a.next(1200, 0)}
		}, [][]int{{0, 1, 2}, {3}}},
		{"not IP", allOffloads(), func() [][]byte {
			a := newStream(tcp, 1)
			return [][]byte{a.next(1000, tcpACK), {0x00, 1, 2, 3}, a.next(1000, tcpACK)}
		}, [][]int{{0, 2}, {1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pkts := tc.pkts()
			orig := make([][]byte, len(pkts))
			for i := range pkts {
				orig[i] = bytes.Clone(pkts[i])
			}
			c := NewCoalescer(tc.cfg)
			ws := c.Coalesce(pkts)
			if got := writesOf(ws); !equalGroups(got, tc.want) {
				t.Errorf("writes carry %v, want %v", got, tc.want)
			}
			for i := range pkts {
				if !bytes.Equal(pkts[i], orig[i]) {
					t.Errorf("packet %d modified", i)
				}
			}
			hl := max(tc.cfg.HeaderLen, HeaderLen)
			back := resplit(t, ws, hl)
			var want [][]byte
			for _, w := range ws {
				for _, i := range w.Packets {
					want = append(want, orig[i])
				}
			}
			for i := range back {
				if !samePacket(back[i], want[i]) {
					t.Errorf("packet %d differs after the round trip:\n got % x\nwant % x", i, back[i][:min(80, len(back[i]))], want[i][:min(80, len(want[i]))])
				}
			}
			for _, w := range ws {
				if w.Merged() {
					for _, s := range c.Singles(w) {
						if len(s.Parts) != 1 || !bytes.Equal(s.Parts[0], pkts[s.Packets[0]]) {
							t.Errorf("Singles: write of packet %v is not the packet", s.Packets)
						}
					}
				}
			}
		})
	}
}

func seq(from, to int) []int {
	var s []int
	for i := from; i < to; i++ {
		s = append(s, i)
	}
	return s
}

// samePacket compares two packets but for IPv4 IDs under DF (which a
// merged packet does not keep) and IPv4 UDP checksums that one of them
// does not have.
func samePacket(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	a, b = bytes.Clone(a), bytes.Clone(b)
	var l layout
	if parseIP(a, 0, len(a), &l) && l.ip4 && a[6]&0x40 != 0 {
		a[4], a[5], b[4], b[5] = 0, 0, 0, 0
		a[10], a[11], b[10], b[11] = 0, 0, 0, 0
	}
	if l.proto == protoUDP && l.ip4 && (b[l.l4+6]|b[l.l4+7] == 0 || a[l.l4+6]|a[l.l4+7] == 0) {
		// IPv4 UDP without checksum on one side: a merged VXLAN packet
		// drops its outer checksum, USO computes one.
		a[l.l4+6], a[l.l4+7], b[l.l4+6], b[l.l4+7] = 0, 0, 0, 0
	}
	return bytes.Equal(a, b)
}

func TestCoalesceReusesBuffers(t *testing.T) {
	c := NewCoalescer(allOffloads())
	a := newStream(shape{tunnel: true, flags: tcpACK, df: true, tcpOpts: 12}, 1)
	batch := func() [][]byte {
		var p [][]byte
		for range 40 {
			p = append(p, a.next(1300, tcpACK))
		}
		return p
	}
	c.Coalesce(batch())
	b := batch()
	allocs := testing.AllocsPerRun(20, func() { c.Coalesce(b) })
	if allocs > 0 {
		t.Errorf("Coalesce allocates %.0f times per batch once warm, want 0", allocs)
	}
}
