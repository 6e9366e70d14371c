package fallback

import (
	"bufio"
	"net"
	"net/netip"
	"sync"
	"time"
)

// stream is one TLS connection carrying frames.
type stream struct {
	c    net.Conn
	done chan struct{}
	once sync.Once
	// up is set once an accepted stream's TLS handshake completed;
	// guarded by the bind's mu.
	up bool

	wmu sync.Mutex
	w   *bufio.Writer // guarded by wmu
	buf []byte        // a frame being built; guarded by wmu
}

func newStream(c net.Conn) *stream {
	return &stream{c: c, done: make(chan struct{}), w: bufio.NewWriterSize(c, streamBuffer)}
}

// write sends bufs as frames in one flush; a failed or slow write closes
// the stream.
func (s *stream) write(bufs [][]byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	select {
	case <-s.done:
		return net.ErrClosed
	default:
	}
	s.c.SetWriteDeadline(time.Now().Add(WriteTimeout))
	var err error
	for _, p := range bufs {
		s.buf, err = AppendFrame(s.buf[:0], p)
		if err != nil {
			return err
		}
		if _, err = s.w.Write(s.buf); err != nil {
			break
		}
	}
	if err == nil {
		err = s.w.Flush()
	}
	if err != nil {
		s.close()
	}
	return err
}

func (s *stream) close() {
	s.once.Do(func() {
		close(s.done)
		s.c.Close()
	})
}

// streamEndpoint is a peer that dialed us: what we send it goes back over
// its stream.
type streamEndpoint struct {
	s   *stream
	dst netip.AddrPort
}

func (e *streamEndpoint) ClearSrc()           {}
func (e *streamEndpoint) SrcToString() string { return "" }
func (e *streamEndpoint) DstToString() string { return e.dst.String() }
func (e *streamEndpoint) DstToBytes() []byte {
	b, _ := e.dst.MarshalBinary()
	return b
}
func (e *streamEndpoint) DstIP() netip.Addr { return e.dst.Addr() }
func (e *streamEndpoint) SrcIP() netip.Addr { return netip.Addr{} }

// Packets of up to smallBuf bytes (every WireGuard packet of a tunnel
// whose MTU fits Ethernet) come from a pool.
const smallBuf = 2048

var bufPool = sync.Pool{New: func() any { b := make([]byte, smallBuf); return &b }}

func getBuf(n int) []byte {
	if n > smallBuf {
		return make([]byte, n)
	}
	return (*bufPool.Get().(*[]byte))[:n]
}

func putBuf(b []byte) {
	if cap(b) == smallBuf {
		b = b[:smallBuf]
		bufPool.Put(&b)
	}
}
