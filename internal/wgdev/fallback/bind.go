package fallback

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"

	"golang.zx2c4.com/wireguard/conn"

	"github.com/fednet/fednet/internal/backend"
)

// DefaultPort is the TCP port of the fallback stream.
const DefaultPort = 443

// Limits of the bind.
const (
	// DialTimeout bounds a dial of a peer's stream, TLS handshake
	// included.
	DialTimeout = 5 * time.Second
	// WriteTimeout bounds one write to a stream; a stream that takes
	// longer is closed.
	WriteTimeout = 5 * time.Second
	// MaxStreams bounds the streams a bind accepts at once.
	MaxStreams = 256
	// IdleTimeout closes a stream that carried nothing for this long (a
	// fednet link never idles: its probes cross it every second).
	IdleTimeout = 3 * time.Minute
	// streamBuffer is the size of a stream's read and write buffers.
	streamBuffer = 64 << 10
)

// Config configures a Bind.
type Config struct {
	// UDP is the bind that carries UDP (default conn.NewDefaultBind()).
	// Tests put a filter around it to block UDP.
	UDP conn.Bind
	// ListenPort is the TCP port the bind accepts streams on while open,
	// 0 for none.
	ListenPort uint16
	// DialPort is the TCP port of the peers' streams, 0 for no fallback
	// (the bind is then UDP alone).
	DialPort uint16
	// TLS is the server configuration of accepted streams (default: a
	// self-signed certificate made by New, see SelfSigned). Dialed streams
	// do not verify the peer's certificate: WireGuard's handshake inside
	// authenticates the peer, and TLS only disguises the stream.
	TLS *tls.Config
	// ServerName is the name dialed streams send (SNI); default
	// DefaultServerName.
	ServerName string
	// Policy tunes the switch between UDP and the stream.
	Policy PolicyConfig
	// StatusPath is the file the bind writes its Status to on every
	// change, "" for none.
	StatusPath string
	// Logf receives notices (a link switched, a dial failed); nil discards.
	Logf func(format string, args ...any)
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// DefaultServerName is the name a dialed stream sends when none is set.
const DefaultServerName = "fednet"

// Bind is a conn.Bind over UDP with a TLS stream fallback per peer. It is
// safe for concurrent use.
type Bind struct {
	cfg       Config
	udp       conn.Bind
	serverTLS *tls.Config
	clientTLS *tls.Config
	logf      func(string, ...any)
	now       func() time.Time

	mu       sync.Mutex
	policy   *Policy                        // guarded by mu
	dialed   map[netip.AddrPort]*stream     // up streams this bind dialed, by peer UDP endpoint; guarded by mu
	inits    map[netip.AddrPort][]byte      // last initiation sent to each peer; guarded by mu
	timers   map[netip.AddrPort]*time.Timer // pending policy checks; guarded by mu
	accepted map[*stream]bool               // streams accepted; guarded by mu
	open     *session                       // nil while closed; guarded by mu
	status   Status                         // last written; guarded by mu
}

// session is one Open..Close of the bind.
type session struct {
	closed   chan struct{}
	recv     chan rxPacket
	listener net.Listener
	wg       sync.WaitGroup
}

type rxPacket struct {
	data []byte
	ep   conn.Endpoint
}

// New returns a closed bind; wireguard-go opens it.
func New(cfg Config) (*Bind, error) {
	b := &Bind{
		cfg:      cfg,
		udp:      cfg.UDP,
		logf:     cfg.Logf,
		now:      cfg.Now,
		policy:   NewPolicy(cfg.Policy),
		dialed:   map[netip.AddrPort]*stream{},
		inits:    map[netip.AddrPort][]byte{},
		timers:   map[netip.AddrPort]*time.Timer{},
		accepted: map[*stream]bool{},
	}
	if b.udp == nil {
		b.udp = conn.NewDefaultBind()
	}
	if b.logf == nil {
		b.logf = func(string, ...any) {}
	}
	if b.now == nil {
		b.now = time.Now
	}
	name := cfg.ServerName
	if name == "" {
		name = DefaultServerName
	}
	b.serverTLS = cfg.TLS
	if b.serverTLS == nil && cfg.ListenPort != 0 {
		cert, err := SelfSigned(name)
		if err != nil {
			return nil, err
		}
		b.serverTLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}
	}
	// The certificate is not checked: WireGuard authenticates the peer
	// inside the stream (package doc).
	b.clientTLS = &tls.Config{ServerName: name, InsecureSkipVerify: true, MinVersion: tls.VersionTLS13} //nolint:gosec
	// The status file tells the data plane the device's fallback from the
	// start, before wireguard-go opens the bind.
	b.writeStatusLocked()
	return b, nil
}

var _ conn.Bind = (*Bind)(nil)

// Open implements conn.Bind: it opens the UDP bind on port and, with a
// ListenPort, listens for streams.
func (b *Bind) Open(port uint16) ([]conn.ReceiveFunc, uint16, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.open != nil {
		return nil, 0, conn.ErrBindAlreadyOpen
	}
	fns, actual, err := b.udp.Open(port)
	if err != nil {
		return nil, 0, err
	}
	s := &session{closed: make(chan struct{}), recv: make(chan rxPacket, 1024)}
	if b.cfg.ListenPort != 0 {
		ln, err := net.Listen("tcp", ":"+strconv.Itoa(int(b.cfg.ListenPort)))
		if err != nil {
			b.udp.Close()
			return nil, 0, fmt.Errorf("listening on TCP port %d for the fallback: %w", b.cfg.ListenPort, err)
		}
		s.listener = ln
		s.wg.Add(1)
		go b.accept(s)
	}
	b.open = s
	out := make([]conn.ReceiveFunc, 0, len(fns)+1)
	for _, fn := range fns {
		out = append(out, b.receiveUDP(fn))
	}
	out = append(out, b.receiveStream(s))
	b.writeStatusLocked()
	return out, actual, nil
}

// Close implements conn.Bind: it closes the UDP bind, the listener and
// every stream; the receive functions of the session return net.ErrClosed.
func (b *Bind) Close() error {
	b.mu.Lock()
	s := b.open
	b.open = nil
	var streams []*stream
	for _, st := range b.dialed {
		streams = append(streams, st)
	}
	for st := range b.accepted {
		streams = append(streams, st)
	}
	for dst, t := range b.timers {
		t.Stop()
		delete(b.timers, dst)
	}
	b.mu.Unlock()
	err := b.udp.Close()
	if s == nil {
		return err
	}
	close(s.closed)
	if s.listener != nil {
		s.listener.Close()
	}
	for _, st := range streams {
		st.close()
	}
	s.wg.Wait()
	return err
}

// SetMark implements conn.Bind (UDP only).
func (b *Bind) SetMark(mark uint32) error { return b.udp.SetMark(mark) }

// BatchSize implements conn.Bind.
func (b *Bind) BatchSize() int { return b.udp.BatchSize() }

// ParseEndpoint implements conn.Bind: endpoints in the configuration are
// UDP endpoints.
func (b *Bind) ParseEndpoint(s string) (conn.Endpoint, error) { return b.udp.ParseEndpoint(s) }

// Send implements conn.Bind. A stream endpoint (a peer that dialed us)
// gets the batch over its stream; a UDP endpoint over UDP or over the
// stream we dialed, as the policy says.
func (b *Bind) Send(bufs [][]byte, ep conn.Endpoint) error {
	if se, ok := ep.(*streamEndpoint); ok {
		return se.s.write(bufs)
	}
	if b.cfg.DialPort == 0 {
		return b.udp.Send(bufs, ep)
	}
	dst := addrPort(ep)
	init := initiation(bufs)
	now := b.now()
	b.mu.Lock()
	if init != nil {
		b.inits[dst] = append(b.inits[dst][:0], init...)
	}
	act := b.policy.Sent(dst, init != nil, now)
	st := b.dialed[dst]
	if act.Dial {
		b.dialLocked(dst)
	}
	b.armLocked(dst, now)
	b.mu.Unlock()
	if act.Via == backend.TransportTCP443 && st != nil {
		return st.write(bufs)
	}
	return b.udp.Send(bufs, ep)
}

// message reports whether p looks like a WireGuard message: a type 1-4
// (little-endian, 4 bytes) and at least the 32 bytes of the smallest. A
// frame that does not is no peer of ours (an HTTP client, a scanner): its
// stream is closed.
func message(p []byte) bool {
	if len(p) < 32 {
		return false
	}
	t := binary.LittleEndian.Uint32(p)
	return t >= 1 && t <= 4
}

// initiation returns the handshake initiation among bufs, nil for none.
func initiation(bufs [][]byte) []byte {
	for _, p := range bufs {
		if len(p) >= 4 && binary.LittleEndian.Uint32(p) == 1 { // MessageInitiationType
			return p
		}
	}
	return nil
}

// addrPort returns ep's destination with IPv4 unmapped.
func addrPort(ep conn.Endpoint) netip.AddrPort {
	switch e := ep.(type) {
	case *conn.StdNetEndpoint:
		return netip.AddrPortFrom(e.Addr().Unmap(), e.Port())
	case interface{ DstAddrPort() netip.AddrPort }: // udpbind's, without formatting a string per packet
		ap := e.DstAddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	ap, _ := netip.ParseAddrPort(ep.DstToString())
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// receiveUDP wraps a UDP receive function: every packet tells the policy
// that UDP from its sender works.
func (b *Bind) receiveUDP(fn conn.ReceiveFunc) conn.ReceiveFunc {
	return func(packets [][]byte, sizes []int, eps []conn.Endpoint) (int, error) {
		n, err := fn(packets, sizes, eps)
		if n == 0 || b.cfg.DialPort == 0 {
			return n, err
		}
		now := b.now()
		var back []*stream
		b.mu.Lock()
		var last netip.AddrPort
		for i := 0; i < n; i++ {
			if sizes[i] == 0 {
				continue
			}
			dst := addrPort(eps[i])
			if dst == last {
				continue
			}
			last = dst
			if b.policy.ReceivedUDP(dst, now) {
				if st := b.dialed[dst]; st != nil {
					back = append(back, st)
					delete(b.dialed, dst)
				}
				b.logf("fallback: peer %s answers over UDP again; link back on UDP", dst)
				b.writeStatusLocked()
			}
			b.armLocked(dst, now)
		}
		b.mu.Unlock()
		for _, st := range back {
			time.AfterFunc(b.policy.cfg.Linger, st.close)
		}
		return n, err
	}
}

// receiveStream returns the receive function of every stream of session
// s: it waits for one packet, then takes what else is queued.
func (b *Bind) receiveStream(s *session) conn.ReceiveFunc {
	return func(packets [][]byte, sizes []int, eps []conn.Endpoint) (int, error) {
		var p rxPacket
		select {
		case p = <-s.recv:
		case <-s.closed:
			return 0, net.ErrClosed
		}
		n := 0
		for {
			sizes[n] = copy(packets[n], p.data)
			eps[n] = p.ep
			putBuf(p.data)
			n++
			if n == len(packets) {
				return n, nil
			}
			select {
			case p = <-s.recv:
			default:
				return n, nil
			}
		}
	}
}

// armLocked sets the timer of dst's next policy check.
func (b *Bind) armLocked(dst netip.AddrPort, now time.Time) {
	due := b.policy.Due(dst)
	t := b.timers[dst]
	if due.IsZero() || b.open == nil {
		if t != nil {
			t.Stop()
			delete(b.timers, dst)
		}
		return
	}
	wait := max(due.Sub(now), 0)
	if t != nil {
		t.Reset(wait)
		return
	}
	b.timers[dst] = time.AfterFunc(wait, func() { b.check(dst) })
}

func (b *Bind) check(dst netip.AddrPort) {
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.timers, dst)
	if b.open == nil {
		return
	}
	if b.policy.Check(dst, now) {
		b.dialLocked(dst)
	}
	b.armLocked(dst, now)
}

// dialLocked dials dst's stream in the background.
func (b *Bind) dialLocked(dst netip.AddrPort) {
	s := b.open
	if s == nil {
		b.policy.DialFailed(dst, b.now())
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		addr := netip.AddrPortFrom(dst.Addr(), b.cfg.DialPort).String()
		ctx, cancel := context.WithTimeout(context.Background(), DialTimeout)
		go func() {
			select {
			case <-s.closed:
				cancel()
			case <-ctx.Done():
			}
		}()
		d := tls.Dialer{Config: b.clientTLS}
		c, err := d.DialContext(ctx, "tcp", addr)
		cancel()
		now := b.now()
		b.mu.Lock()
		defer b.mu.Unlock()
		if err != nil {
			b.policy.DialFailed(dst, now)
			b.logf("fallback: UDP to %s is silent and dialing its stream %s failed: %v", dst, addr, err)
			b.armLocked(dst, now)
			return
		}
		if b.open != s || !b.policy.StreamUp(dst, now) {
			c.Close()
			b.armLocked(dst, now)
			return
		}
		st := newStream(c)
		b.dialed[dst] = st
		b.logf("fallback: UDP to %s is silent; link on TLS stream %s", dst, addr)
		b.writeStatusLocked()
		ep := &conn.StdNetEndpoint{AddrPort: dst}
		s.wg.Add(1)
		go b.read(s, st, ep, func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			if b.dialed[dst] == st {
				delete(b.dialed, dst)
				b.policy.StreamDown(dst, b.now())
				b.logf("fallback: stream to %s closed; link back on UDP", addr)
				b.writeStatusLocked()
				b.armLocked(dst, b.now())
			}
		})
		if init := slices.Clone(b.inits[dst]); init != nil {
			go st.write([][]byte{init})
		}
	}()
}

// accept serves the listener of session s.
func (b *Bind) accept(s *session) {
	defer s.wg.Done()
	for {
		c, err := s.listener.Accept()
		if err != nil {
			select {
			case <-s.closed:
			default:
				b.logf("fallback: accepting streams: %v", err)
			}
			return
		}
		b.mu.Lock()
		if b.open != s || len(b.accepted) >= MaxStreams {
			b.mu.Unlock()
			c.Close()
			continue
		}
		st := newStream(tls.Server(c, b.serverTLS))
		b.accepted[st] = true
		b.mu.Unlock()
		remote, _ := netip.ParseAddrPort(c.RemoteAddr().String())
		ep := &streamEndpoint{s: st, dst: netip.AddrPortFrom(remote.Addr().Unmap(), remote.Port())}
		s.wg.Add(1)
		go b.read(s, st, ep, func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			delete(b.accepted, st)
			b.writeStatusLocked()
		})
	}
}

// read moves the packets of st into session s's queue, reported as from
// ep, until st breaks or s closes; then it closes st and calls done.
func (b *Bind) read(s *session, st *stream, ep conn.Endpoint, done func()) {
	defer s.wg.Done()
	defer done()
	defer st.close()
	if tc, ok := st.c.(*tls.Conn); ok {
		tc.SetDeadline(b.now().Add(DialTimeout))
		if err := tc.Handshake(); err != nil {
			return
		}
		tc.SetDeadline(time.Time{})
	}
	if _, ok := ep.(*streamEndpoint); ok {
		b.mu.Lock()
		st.up = true
		b.writeStatusLocked()
		b.mu.Unlock()
	}
	r := bufio.NewReaderSize(st.c, streamBuffer)
	buf := make([]byte, MaxPacket)
	var deadline time.Time
	for {
		// The deadline moves at most every few seconds, not per frame.
		if now := b.now(); deadline.Sub(now) < IdleTimeout-5*time.Second {
			deadline = now.Add(IdleTimeout)
			st.c.SetReadDeadline(deadline)
		}
		n, err := ReadFrame(r, buf)
		if err != nil || !message(buf[:n]) {
			return
		}
		p := getBuf(n)
		copy(p, buf[:n])
		select {
		case s.recv <- rxPacket{data: p, ep: ep}:
		case <-s.closed:
			return
		case <-st.done:
			return
		}
	}
}
