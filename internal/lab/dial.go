package lab

import (
	"context"
	"net"
)

// DialContext opens a connection from inside node n's namespace (the
// socket keeps the namespace it was made in), e.g. for an HTTP client that
// reaches a node's loopback or the lab internet, which this machine's own
// namespace cannot.
func (n *Node) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := n.Do(func() error {
		var err error
		c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	return c, err
}
