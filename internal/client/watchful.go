package client

import (
	"context"
	"fmt"
	"net"
	"time"
)

// How a connection to a manager that vanished without closing it (its
// machine lost, the path cut) is found: after keepAliveIdle of silence
// TCP sends keepAliveCount probes keepAliveInterval apart, and data that
// stays unacknowledged for userTimeout ends the connection (Linux),
// about half a minute either way. The long poll then fails and the
// client turns to the next manager.
const (
	keepAliveIdle     = 20 * time.Second
	keepAliveInterval = 5 * time.Second
	keepAliveCount    = 2
	userTimeout       = 30 * time.Second
)

// watchful returns dial with the connections it opens set to find a peer
// that vanished (keepalives and, on Linux, TCP_USER_TIMEOUT); a
// connection that is not TCP is left as it is.
func watchful(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		tc, ok := c.(*net.TCPConn)
		if !ok {
			return c, nil
		}
		if err := tc.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: keepAliveIdle, Interval: keepAliveInterval, Count: keepAliveCount}); err != nil {
			c.Close()
			return nil, fmt.Errorf("setting TCP keepalives on the connection to %s: %w", addr, err)
		}
		if err := setUserTimeout(tc, userTimeout); err != nil {
			c.Close()
			return nil, fmt.Errorf("setting TCP_USER_TIMEOUT on the connection to %s: %w", addr, err)
		}
		return c, nil
	}
}
