package rxstamp

import (
	"encoding/binary"
	"fmt"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Enable asks the kernel to stamp every packet c receives with its
// arrival time, delivered as a control message that Time reads (c: a
// *net.UDPConn, *net.IPConn, ...). Read with ReadMsgUDP/ReadMsgIP and room
// for OOBSize bytes of control messages.
func Enable(c syscall.Conn) error {
	raw, err := c.SyscallConn()
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

// OOBSize is room enough for the time stamp's control message.
const OOBSize = 64

// Time returns the arrival time in a received packet's control messages
// oob; ok is false when there is none.
func Time(oob []byte) (t time.Time, ok bool) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return time.Time{}, false
	}
	for _, m := range msgs {
		if m.Header.Level != unix.SOL_SOCKET || m.Header.Type != unix.SCM_TIMESTAMPNS {
			continue
		}
		// struct timespec: two native-endian longs.
		switch d := m.Data; len(d) {
		case 16:
			return time.Unix(int64(binary.NativeEndian.Uint64(d)), int64(binary.NativeEndian.Uint64(d[8:]))), true
		case 8:
			return time.Unix(int64(int32(binary.NativeEndian.Uint32(d))), int64(int32(binary.NativeEndian.Uint32(d[4:])))), true
		}
	}
	return time.Time{}, false
}
