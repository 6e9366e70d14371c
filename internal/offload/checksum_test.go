package offload

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// refSum is RFC 1071's sum, word by word: the big-endian 16-bit words of b
// (an odd last byte padded with zero) added to acc with end-around carry.
func refSum(b []byte, acc uint64) uint16 {
	s := acc
	for len(b) >= 2 {
		s += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint64(b[0]) << 8
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return uint16(s)
}

// TestSumRFC1071 checks the word-parallel sum against the word-by-word
// one at every length up to 600 bytes (the unrolled loop, the 8-byte loop
// and the tail, each alone and together), with data that makes every
// carry chain wrap, and an RFC 1071 example.
func TestSumRFC1071(t *testing.T) {
	if got := fold(sum([]byte{0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7}, 0)); got != 0xddf2 {
		t.Fatalf("RFC 1071 example: sum %#04x, want 0xddf2", got)
	}
	r := rand.New(rand.NewPCG(3, 4))
	buf := make([]byte, 600)
	for _, fill := range []string{"random", "ones", "zeros"} {
		for i := range buf {
			switch fill {
			case "random":
				buf[i] = byte(r.Uint32())
			case "ones":
				buf[i] = 0xff
			default:
				buf[i] = 0
			}
		}
		for n := 0; n <= len(buf); n++ {
			for _, acc := range []uint64{0, 1, 0xfffe, 0xffff} {
				if got, want := fold(sum(buf[:n], acc)), refSum(buf[:n], acc); got != want {
					t.Fatalf("%s data, %d bytes, initial %#x: sum %#04x, want %#04x", fill, n, acc, got, want)
				}
			}
		}
	}
	// Chaining: the sum of an even-length prefix carries into the rest.
	for n := 0; n <= len(buf); n += 2 {
		if got, want := fold(sum(buf[n:], sum(buf[:n], 0))), refSum(buf, 0); got != want {
			t.Fatalf("chained at %d: %#04x, want %#04x", n, got, want)
		}
	}
}

func BenchmarkSum(b *testing.B) {
	buf := make([]byte, 65536)
	r := rand.New(rand.NewPCG(5, 6))
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		sum(buf, 0)
	}
}
