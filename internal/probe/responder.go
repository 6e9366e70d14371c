package probe

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// ResponderConfig configures a [Responder].
type ResponderConfig struct {
	// Conn is the socket to serve on. The Responder owns it from New on:
	// Close closes it, and nothing else may read from it.
	Conn net.PacketConn
	// Now stamps receive and reply times; nil means time.Now.
	Now func() time.Time
}

// Responder answers probe requests on one net.PacketConn with replies of
// the same size, echoing session, sequence and send time and adding its own
// receive and reply timestamps. It keeps no state per prober, so any number
// of probers may use one Responder.
type Responder struct {
	conn     net.PacketConn
	now      func() time.Time
	closed   atomic.Bool
	once     sync.Once
	answered atomic.Uint64
	ignored  atomic.Uint64
}

// NewResponder returns a Responder for cfg.Conn. It does not start serving;
// call Serve.
func NewResponder(cfg ResponderConfig) (*Responder, error) {
	if cfg.Conn == nil {
		return nil, errors.New("probe responder: Conn is nil; give it a bound UDP socket")
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	return &Responder{conn: cfg.Conn, now: now}, nil
}

// Serve reads requests and answers them until the connection fails. It
// silently ignores datagrams that are not valid requests and replies that
// cannot be sent. After Close it returns net.ErrClosed (exactly); any other
// read error is returned wrapped. Serve is meant to run in one goroutine.
func (r *Responder) Serve() error {
	buf := make([]byte, 2048)
	out := make([]byte, 0, Size)
	for {
		n, addr, err := r.conn.ReadFrom(buf)
		if err != nil {
			if r.closed.Load() || errors.Is(err, net.ErrClosed) {
				return net.ErrClosed
			}
			return fmt.Errorf("probe responder: reading: %w", err)
		}
		recv := r.now()
		req, err := Decode(buf[:n])
		if err != nil || req.Type != Request {
			r.ignored.Add(1)
			continue
		}
		rep := Packet{
			Type:      Reply,
			Session:   req.Session,
			Seq:       req.Seq,
			SendTime:  req.SendTime,
			RecvTime:  recv.UnixNano(),
			ReplyTime: r.now().UnixNano(),
		}
		out, _ = rep.Encode(out[:0]) // a Reply always encodes
		if _, err := r.conn.WriteTo(out, addr); err != nil {
			continue // the prober counts it as lost
		}
		r.answered.Add(1)
	}
}

// Counts returns how many requests were answered and how many datagrams
// were ignored as not valid requests. Safe for concurrent use.
func (r *Responder) Counts() (answered, ignored uint64) {
	return r.answered.Load(), r.ignored.Load()
}

// Close closes the connection, making Serve return net.ErrClosed. It is
// idempotent; only the first call returns the connection's Close error.
func (r *Responder) Close() error {
	var err error
	r.once.Do(func() {
		r.closed.Store(true)
		err = r.conn.Close()
	})
	return err
}
