package abw

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/fednet/fednet/internal/rxstamp"
)

// maxKept bounds the streams a Responder remembers; older ones are
// forgotten first. A fleet is a handful of streams, so this covers many
// concurrent senders.
const maxKept = 512

// Responder answers available-bandwidth probes on a UDP socket: it
// timestamps every probe packet as the kernel received it, and answers a
// request with the one-way delays of the streams asked for. It keeps only
// the last maxKept streams, so it needs no cleanup and bounded memory. Safe
// for concurrent use; one Responder may serve several sockets.
type Responder struct {
	mu      sync.Mutex
	streams map[streamKey]*kept // guarded by mu
	order   []streamKey         // insertion order, guarded by mu
}

type streamKey struct {
	from    netip.Addr
	session uint64
	stream  uint32
}

type kept struct {
	count    uint16
	arrivals []arrival
}

// NewResponder returns a responder that remembers nothing yet.
func NewResponder() *Responder {
	return &Responder{streams: map[streamKey]*kept{}}
}

// Listen opens the responder's socket on addr (a gateway's transit
// address) and Port, with kernel receive timestamps.
func Listen(addr netip.Addr) (*net.UDPConn, error) {
	return listen(netip.AddrPortFrom(addr, Port))
}

// responderBuffer is the responder's socket receive buffer: a whole
// stream (MaxStreamLen probes of the largest size) fits with room to spare.
const responderBuffer = 8 << 20

func listen(at netip.AddrPort) (*net.UDPConn, error) {
	conn, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(at))
	if err != nil {
		return nil, fmt.Errorf("available-bandwidth responder on %s: %w", at, err)
	}
	if err := rxstamp.Enable(conn); err != nil {
		conn.Close()
		return nil, err
	}
	growReadBuffer(conn, responderBuffer)
	return conn, nil
}

// Serve answers on conn until ctx ends (then it closes conn) or conn is
// closed; it returns nil in both cases.
func (r *Responder) Serve(ctx context.Context, conn *net.UDPConn) error {
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	buf := make([]byte, 1<<16)
	oob := make([]byte, 256)
	for {
		n, oobn, _, from, err := conn.ReadMsgUDPAddrPort(buf, oob)
		if err != nil {
			if errors.Is(err, net.ErrClosed) || ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("available-bandwidth responder: %w", err)
		}
		at, ok := rxstamp.Time(oob[:oobn])
		if !ok {
			at = time.Now()
		}
		r.handle(conn, buf[:n], from, at)
	}
}

// handle records a probe or answers a request; anything else is ignored.
func (r *Responder) handle(conn *net.UDPConn, b []byte, from netip.AddrPort, at time.Time) {
	typ, err := messageType(b)
	if err != nil {
		return
	}
	switch typ {
	case typeProbe:
		if p, err := decodeProbe(b); err == nil {
			r.record(from.Addr(), p, at)
		}
	case typeRequest:
		if q, err := decodeRequest(b); err == nil {
			for _, rep := range r.reports(from.Addr(), q) {
				_, _ = conn.WriteToUDPAddrPort(encodeReport(rep), from)
			}
		}
	}
}

// record stores a probe's arrival.
func (r *Responder) record(from netip.Addr, p probe, at time.Time) {
	if p.count == 0 || p.count > MaxStreamLen || p.seq >= p.count {
		return
	}
	k := streamKey{from: from.Unmap(), session: p.session, stream: p.stream}
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.streams[k]
	if s == nil {
		if len(r.order) >= maxKept {
			delete(r.streams, r.order[0])
			r.order = slices.Delete(r.order, 0, 1)
		}
		s = &kept{count: p.count}
		r.streams[k] = s
		r.order = append(r.order, k)
	}
	if len(s.arrivals) < int(s.count) {
		s.arrivals = append(s.arrivals, arrival{seq: p.seq, owd: at.UnixNano() - p.sent})
	}
}

// reports returns the reports of the streams q asks for that it holds.
func (r *Responder) reports(from netip.Addr, q request) []report {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []report
	for i := range uint32(min(q.n, 64)) {
		k := streamKey{from: from.Unmap(), session: q.session, stream: q.first + i}
		if s := r.streams[k]; s != nil {
			out = append(out, report{session: q.session, stream: k.stream, count: s.count, arrivals: slices.Clone(s.arrivals)})
		}
	}
	return out
}
