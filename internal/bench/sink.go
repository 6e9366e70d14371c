package bench

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/fednet/fednet/internal/lab"
)

// SinkPort is the TCP port of the byte sink the traffic overhead
// measurement sends its fixed amount of data to (in a lab node).
const SinkPort = 5202

// sendExact sends n bytes of random data over one TCP connection from
// node from to a sink listening on addr (an address of node to), and
// returns once the sink has read every byte: unlike a timed iperf3 run,
// nothing is left in flight or discarded at the end, so the payload is
// exactly n. Both sockets live in the nodes' namespaces; ctx and two
// minutes bound the transfer.
func sendExact(ctx context.Context, from, to *lab.Node, addr netip.Addr, n int64) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	deadline, _ := ctx.Deadline()
	ap := net.JoinHostPort(addr.String(), strconv.Itoa(SinkPort))
	var ln net.Listener
	if err := to.Do(func() (err error) {
		ln, err = net.Listen("tcp", ap)
		return err
	}); err != nil {
		return 0, fmt.Errorf("byte sink in %s: %w", to, err)
	}
	defer ln.Close()
	type result struct {
		n   int64
		err error
	}
	got := make(chan result, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- result{err: err}
			return
		}
		defer c.Close()
		c.SetDeadline(deadline)
		m, err := io.Copy(io.Discard, c)
		if err == nil {
			_, err = c.Write([]byte{1}) // everything arrived
		}
		got <- result{m, err}
	}()
	var c net.Conn
	if err := from.Do(func() (err error) {
		c, err = (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, "tcp", ap)
		return err
	}); err != nil {
		return 0, fmt.Errorf("connecting to the byte sink %s from %s: %w", ap, from, err)
	}
	defer c.Close()
	c.SetDeadline(deadline)
	buf := make([]byte, 128<<10)
	rand.Read(buf)
	for left := n; left > 0; {
		k := min(left, int64(len(buf)))
		if _, err := c.Write(buf[:k]); err != nil {
			return n - left, fmt.Errorf("sending to %s: %w", ap, err)
		}
		left -= k
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		return n, err
	}
	ack := make([]byte, 1)
	_, ackErr := io.ReadFull(c, ack)
	r := <-got
	if err := errors.Join(r.err, ackErr); err != nil {
		return r.n, fmt.Errorf("byte sink at %s: %w", ap, err)
	}
	if r.n != n {
		return r.n, fmt.Errorf("byte sink at %s read %d bytes of %d", ap, r.n, n)
	}
	return n, nil
}
