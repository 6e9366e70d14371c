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
