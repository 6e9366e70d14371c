package udpbind

import (
	"encoding/binary"
	"syscall"

	"golang.org/x/sys/unix"
)

// What the kernel tests (package udpbind_test, which cannot be this
// package: nstest imports wgdev, which imports it) look at inside a Bind.

// GRO reports whether the bind's IPv4 socket has UDP GRO on.
func GRO(b *Bind) bool { return b.v4.gro }

// GSO reports whether the bind's IPv4 socket sends with UDP GSO.
func GSO(b *Bind) bool { return b.v4.gso.Load() }

// SetGSO turns UDP GSO on the bind's IPv4 socket on or off.
func SetGSO(b *Bind, on bool) { b.v4.gso.Store(on) }

// Next is how many messages the IPv4 socket's next read asks for.
func Next(b *Bind) int { return b.v4.rx.next }

// Stashed is how many datagrams the IPv4 socket keeps for the next call.
func Stashed(b *Bind) int {
	n := 0
	for _, m := range b.v4.rx.stash {
		n += m.segs - m.next
	}
	return n
}

// SegmentCmsg returns the control message that sends a message as UDP GSO
// datagrams of size bytes.
func SegmentCmsg(size int) []byte {
	oob := make([]byte, unix.CmsgSpace(2))
	putCmsg(oob, unix.SOL_UDP, unix.UDP_SEGMENT, func(d []byte) int {
		binary.NativeEndian.PutUint16(d, uint16(size))
		return 2
	})
	return oob
}

// RefuseGSO makes the kernel under the bind's IPv4 socket refuse UDP GSO
// messages with EIO, as Linux does on an IPsec route (and, before it
// segmented in software, on a device without checksum offload): a
// sendmmsg sends the messages before the first GSO one, or fails with EIO
// when that is the first. It returns how many messages it refused.
func RefuseGSO(b *Bind) func() int {
	refused := 0
	b.v4.sys = func(fd uintptr, hdrs []mmsghdr) (int, syscall.Errno) {
		k := 0
		for k < len(hdrs) && hdrs[k].hdr.Iovlen == 1 {
			k++
		}
		if k == 0 {
			refused++
			return 0, syscall.EIO
		}
		return sendmmsg(fd, hdrs[:k])
	}
	return func() int { return refused }
}
