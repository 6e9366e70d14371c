//go:build linux

package abw

import (
	"net"

	"golang.org/x/sys/unix"
)

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
