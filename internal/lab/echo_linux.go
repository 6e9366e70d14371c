package lab

import (
	"encoding/binary"
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// rxTimestamps asks the kernel to stamp every packet c receives with its
// arrival time (SO_TIMESTAMPNS), for rxTime.
func rxTimestamps(c *net.IPConn) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
	}); err != nil {
		return err
	}
	return serr
}

// rxTime returns the arrival time in a received packet's control
// messages (SCM_TIMESTAMPNS); ok is false when there is none.
func rxTime(oob []byte) (time.Time, bool) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return time.Time{}, false
	}
	for _, m := range msgs {
		if m.Header.Level != unix.SOL_SOCKET || m.Header.Type != unix.SCM_TIMESTAMPNS {
			continue
		}
		// struct timespec: two longs, 8 bytes each on 64-bit machines.
		switch d := m.Data; len(d) {
		case 16:
			return time.Unix(int64(binary.NativeEndian.Uint64(d)), int64(binary.NativeEndian.Uint64(d[8:]))), true
		case 8:
			return time.Unix(int64(int32(binary.NativeEndian.Uint32(d))), int64(int32(binary.NativeEndian.Uint32(d[4:])))), true
		}
	}
	return time.Time{}, false
}
