//go:build linux

package abw

import (
	"encoding/binary"
	"fmt"
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// enableTimestamps asks the kernel to timestamp every datagram on conn as
// it arrives (SO_TIMESTAMPNS), so the delays do not include the time the
// program took to read them.
func enableTimestamps(conn *net.UDPConn) error {
	raw, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
	}); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("enabling receive timestamps: %w", serr)
	}
	return nil
}

// growReadBuffer gives conn a receive buffer of n bytes. Plain SO_RCVBUF
// is capped at net.core.rmem_max (often 208 KiB, about 90 probes); a
// stream at hundreds of Mbit/s that arrives in a burst (userspace
// WireGuard hands packets on in batches) would overflow it, and the lost
// probes would read as a queue. SO_RCVBUFFORCE (root or CAP_NET_ADMIN, as
// the agent runs) passes the cap; otherwise the capped size is kept.
func growReadBuffer(conn *net.UDPConn, n int) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return
	}
	forced := false
	_ = raw.Control(func(fd uintptr) {
		forced = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, n) == nil
	})
	if !forced {
		_ = conn.SetReadBuffer(n)
	}
}

// rxTime returns the kernel's receive timestamp from a datagram's control
// messages, or now if there is none.
func rxTime(oob []byte) time.Time {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err == nil {
		for _, m := range msgs {
			if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SO_TIMESTAMPNS && len(m.Data) >= 16 {
				// struct timespec on 64-bit Linux: two native-endian int64.
				sec := int64(binary.NativeEndian.Uint64(m.Data[0:8]))
				nsec := int64(binary.NativeEndian.Uint64(m.Data[8:16]))
				return time.Unix(sec, nsec)
			}
		}
	}
	return time.Now()
}
