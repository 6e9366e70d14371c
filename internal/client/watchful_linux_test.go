package client

import (
	"context"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestWatchful checks that a connection watchful opens has its keepalives
// and TCP_USER_TIMEOUT set as the constants say, and that a connection
// that is not TCP is passed on as it is.
func TestWatchful(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dial := watchful((&net.Dialer{Timeout: 5 * time.Second}).DialContext)
	c, err := dial(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []struct {
		name       string
		level, opt int
		want       int
	}{
		{"SO_KEEPALIVE", unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1},
		{"TCP_KEEPIDLE", unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, int(keepAliveIdle / time.Second)},
		{"TCP_KEEPINTVL", unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, int(keepAliveInterval / time.Second)},
		{"TCP_KEEPCNT", unix.IPPROTO_TCP, unix.TCP_KEEPCNT, keepAliveCount},
		{"TCP_USER_TIMEOUT", unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(userTimeout / time.Millisecond)},
	} {
		var got int
		var gerr error
		if err := raw.Control(func(fd uintptr) { got, gerr = unix.GetsockoptInt(int(fd), o.level, o.opt) }); err != nil {
			t.Fatal(err)
		}
		if gerr != nil || got != o.want {
			t.Errorf("%s = %d (%v), want %d", o.name, got, gerr, o.want)
		}
	}

	a, b := net.Pipe()
	defer b.Close()
	piped := watchful(func(context.Context, string, string) (net.Conn, error) { return a, nil })
	if got, err := piped(context.Background(), "tcp", "pipe"); err != nil || got != a {
		t.Errorf("a connection that is not TCP: got %v, %v; want it as dialled", got, err)
	}
	a.Close()
}
