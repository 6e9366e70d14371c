package offload

import (
	"encoding/binary"
	"math/bits"
)

// sum adds b to the ones'-complement running sum acc as big-endian 16-bit
// words (an odd last byte is padded with zero) and returns the new sum,
// folded to 16 bits (so callers may add a few small values to it). Sums of consecutive slices chain only when
// every slice but the last has an even length.
func sum(b []byte, acc uint64) uint64 {
	// Add 64-bit native-endian words with end-around carry; the
	// ones'-complement sum is the same in either byte order up to a final
	// byte swap, done in fold. acc is kept in native order meanwhile.
	// Two independent carry chains (even and odd words) let the CPU add
	// two words at a time: one chain waits on every carry, and the sum is
	// what the data path spends most on after encryption and copies.
	var s0, c0, s1, c1 uint64 = swapNative(acc), 0, 0, 0
	for len(b) >= 64 {
		s0, c0 = bits.Add64(s0, binary.NativeEndian.Uint64(b), c0)
		s1, c1 = bits.Add64(s1, binary.NativeEndian.Uint64(b[8:]), c1)
		s0, c0 = bits.Add64(s0, binary.NativeEndian.Uint64(b[16:]), c0)
		s1, c1 = bits.Add64(s1, binary.NativeEndian.Uint64(b[24:]), c1)
		s0, c0 = bits.Add64(s0, binary.NativeEndian.Uint64(b[32:]), c0)
		s1, c1 = bits.Add64(s1, binary.NativeEndian.Uint64(b[40:]), c1)
		s0, c0 = bits.Add64(s0, binary.NativeEndian.Uint64(b[48:]), c0)
		s1, c1 = bits.Add64(s1, binary.NativeEndian.Uint64(b[56:]), c1)
		b = b[64:]
	}
	// Join the chains: s0 + s1 + c0 + c1 (c0 and c1 are 0 or 1); the
	// carry out goes into the next addition, as in the loops.
	s, c := bits.Add64(s0, s1, c0)
	s, c = bits.Add64(s, c1, c)
	for len(b) >= 8 {
		s, c = bits.Add64(s, binary.NativeEndian.Uint64(b), c)
		b = b[8:]
	}
	s, c = bits.Add64(s, 0, c)
	s += c // cannot carry again: adding 1 to a value that just wrapped
	var tail [8]byte
	copy(tail[:], b)
	s, c = bits.Add64(s, binary.NativeEndian.Uint64(tail[:]), 0)
	s += c
	return swapNative(s)
}

// swapNative folds a running sum to 16 bits and converts it between the
// native byte order sum accumulates in and the big-endian order the rest
// of the package uses: on little-endian machines the two differ by a byte
// swap (RFC 1071, byte order independence). It is its own inverse on
// folded sums.
func swapNative(s uint64) uint64 {
	v := fold(s)
	if littleEndian {
		v = bits.ReverseBytes16(v)
	}
	return uint64(v)
}

var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// fold reduces a running sum to 16 bits.
func fold(s uint64) uint16 {
	s = s>>32 + s&0xffffffff
	s = s>>32 + s&0xffffffff
	s = s>>16 + s&0xffff
	s = s>>16 + s&0xffff
	return uint16(s)
}

// Checksum returns the Internet checksum (RFC 1071) of b with the running
// sum initial: the value to store in a checksum field.
func Checksum(b []byte, initial uint64) uint16 { return ^fold(sum(b, initial)) }

// pseudoSum is the sum of the TCP/UDP pseudo-header of a packet with the
// given addresses (4 or 16 bytes each), protocol and L4 length.
func pseudoSum(src, dst []byte, proto uint8, length int) uint64 {
	s := sum(src, 0)
	s = sum(dst, s)
	return s + uint64(proto) + uint64(length)
}
