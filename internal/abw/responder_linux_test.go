//go:build linux

package abw

import (
	"net/netip"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestResponderBuffer: the responder's socket gets its large receive
// buffer past net.core.rmem_max (which needs root, as the agent runs), so
// a burst of probes out of userspace WireGuard is not dropped at the
// socket and read as a queue.
func TestResponderBuffer(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: SO_RCVBUFFORCE passes net.core.rmem_max only with CAP_NET_ADMIN (CI runs as root)")
	}
	conn, err := listen(netip.MustParseAddrPort("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	raw, err := conn.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var size int
	var serr error
	if err := raw.Control(func(fd uintptr) { size, serr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF) }); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
	// The kernel reports twice what was asked (it counts its overhead).
	if size < responderBuffer {
		t.Errorf("receive buffer %d bytes, want at least %d", size, responderBuffer)
	}
}
