package udpbind

import (
	"fmt"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"
)

// build groups runs of one size into messages of at most 64 datagrams and
// 65535 bytes; a shorter datagram ends a run. Without GSO each datagram
// is a message.
func TestBuildGroups(t *testing.T) {
	var sizes []int
	for range 70 {
		sizes = append(sizes, 1000)
	}
	sizes = append(sizes, 500, 1400)
	for range 56 {
		sizes = append(sizes, 1200)
	}
	if len(sizes) != batchSize {
		t.Fatalf("%d datagrams, want a whole batch (%d)", len(sizes), batchSize)
	}
	var s sender
	bufs := make([][]byte, len(sizes))
	for i, n := range sizes {
		bufs[i] = make([]byte, n)
	}
	n := s.build(bufs, true, false, unix.SizeofSockaddrInet4, netip.Addr{}, 0)
	var got, first []int
	for i := range n {
		got = append(got, int(s.hdrs[i].hdr.Iovlen))
		first = append(first, s.first[i])
	}
	// 70 × 1000: 64, then 6 with the 500 ending the run; the 1400 with
	// one 1200 (a shorter last datagram); the other 55 × 1200 = 66000
	// bytes: 54 (64800) + 1.
	if want := []int{64, 7, 2, 54, 1}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("messages of %v datagrams, want %v", got, want)
	}
	if want := []int{0, 64, 71, 73, 127}; fmt.Sprint(first) != fmt.Sprint(want) {
		t.Errorf("messages start at datagrams %v, want %v", first, want)
	}
	for i := range bufs {
		if base, l := s.iovs[i].Base, int(s.iovs[i].Len); base != &bufs[i][0] || l != len(bufs[i]) {
			t.Fatalf("I/O vector %d: %p, %d bytes, want %p, %d", i, base, l, &bufs[i][0], len(bufs[i]))
		}
	}
	if n := s.build(bufs, false, false, unix.SizeofSockaddrInet4, netip.Addr{}, 0); n != len(bufs) {
		t.Errorf("without GSO: %d messages, want %d", n, len(bufs))
	}
}
