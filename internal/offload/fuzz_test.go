package offload

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

func FuzzSplit(f *testing.F) {
	r := rand.New(rand.NewPCG(21, 22))
	for _, s := range shapes() {
		s.flags = tcpACK | tcpPSH
		pkt, h := s.super(randomPayload(r, 3000), 1000)
		hb := make([]byte, TunnelHeaderLen)
		h.Encode(hb)
		f.Add(append(hb, pkt...))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < TunnelHeaderLen {
			return
		}
		h, err := DecodeHeader(in[:TunnelHeaderLen])
		if err != nil {
			t.Fatal(err)
		}
		if h.GSOSize < 64 && h.GSOType != GSONone {
			h.GSOSize = 64 // keep the segment count bounded
		}
		pkt := bytes.Clone(in[TunnelHeaderLen:])
		segs, err := Segments(pkt, h)
		if err != nil {
			segs = 1
		}
		bufs, sizes := buffers(segs, min(len(pkt), 256+int(h.GSOSize)), 0)
		n, total, err := Split(pkt, h, 0, bufs, sizes, 0)
		if err != nil {
			return
		}
		if !bytes.Equal(pkt, in[TunnelHeaderLen:]) {
			t.Fatal("Split modified its input")
		}
		if n != total {
			t.Fatalf("%d of %d segments with enough buffers", n, total)
		}
		if h.GSOType == GSONone {
			return
		}
		l, err := gsoLayout(pkt, h)
		if err != nil {
			t.Fatalf("Split succeeded on a packet gsoLayout rejects: %v", err)
		}
		var stream []byte
		for i := range n {
			seg := bufs[i][:sizes[i]]
			src, dst := l.srcDst(seg)
			if got := fold(sum(seg[l.l4:], pseudoSum(src, dst, l.proto, len(seg)-l.l4))); got != 0xffff {
				t.Fatalf("segment %d: transport checksum invalid", i)
			}
			if l.ip4 && Checksum(seg[l.l3:l.l4], 0) != 0 && l.l4-l.l3 <= 60 {
				t.Fatalf("segment %d: IPv4 header checksum invalid", i)
			}
			stream = append(stream, seg[l.hdrEnd:]...)
		}
		if !bytes.Equal(stream, pkt[l.hdrEnd:]) {
			t.Fatal("segments do not carry the payload")
		}
	})
}

// FuzzCoalesce feeds the coalescer batches cut from the input (two bytes of
// length before each packet) and checks that every packet comes out once,
// in a write that splits back into it.
func FuzzCoalesce(f *testing.F) {
	r := rand.New(rand.NewPCG(23, 24))
	for _, s := range shapes() {
		a := newStream(s, r.Uint64()%1000)
		var in []byte
		for range 4 {
			p := a.next(300, tcpACK)
			in = binary.BigEndian.AppendUint16(in, uint16(len(p)))
			in = append(in, p...)
		}
		f.Add(in)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var pkts [][]byte
		for len(in) >= 2 && len(pkts) < 128 {
			n := min(int(binary.BigEndian.Uint16(in)), len(in)-2)
			pkts = append(pkts, in[2:2+n])
			in = in[2+n:]
		}
		orig := make([][]byte, len(pkts))
		for i := range pkts {
			orig[i] = bytes.Clone(pkts[i])
		}
		c := NewCoalescer(allOffloads())
		ws := c.Coalesce(pkts)
		seen := make([]bool, len(pkts))
		for _, w := range ws {
			for _, i := range w.Packets {
				if seen[i] {
					t.Fatalf("packet %d in two writes", i)
				}
				seen[i] = true
			}
		}
		for i, s := range seen {
			if !s {
				t.Fatalf("packet %d in no write", i)
			}
			if !bytes.Equal(pkts[i], orig[i]) {
				t.Fatalf("packet %d modified", i)
			}
		}
		back := resplit(t, ws, TunnelHeaderLen)
		j := 0
		for _, w := range ws {
			for _, i := range w.Packets {
				if !samePacket(back[j], orig[i]) {
					t.Fatalf("packet %d differs after the round trip", i)
				}
				j++
			}
		}
	})
}
