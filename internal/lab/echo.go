package lab

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/fednet/fednet/internal/rxstamp"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// echoDataLen is the payload of an echo request, as iputils ping sends
// by default: an IPv4 echo request is 84 bytes.
const echoDataLen = 56

// Echo pings like Ping, from this process instead of iputils ping: count
// ICMP echo requests (at most 65536), interval apart, from a raw socket
// opened in node from's namespace to address to, each reply timed by the
// kernel's receive time stamp (SO_TIMESTAMPNS) where it gives one. A reply
// later than ProbeTimeout after its request counts as lost, as with ping
// -W 1.
//
// It exists because iputils ping busy-waits: with an interval at or below
// its clock tick (10 ms) it spins on sched_yield whenever no reply is
// outstanding, which on a loaded two-CPU lab took a fifth of a CPU from
// the very path it measured (and on fednet's path cut a bulk transfer's
// rate by a quarter: docs/bench.md, session 10). Echo sleeps between
// requests. It needs root (raw sockets). Lost requests are not an error
// (see Loss); an error means none could be sent. ctx bounds the run,
// which never lasts longer than count*interval plus ProbeTimeout.
func Echo(ctx context.Context, from *Node, to netip.Addr, count int, interval time.Duration) (PingResult, error) {
	if count < 1 || count > 1<<16 {
		return PingResult{}, fmt.Errorf("echo: count %d: send 1 to %d requests (16-bit sequence numbers)", count, 1<<16)
	}
	if interval <= 0 {
		interval = time.Second
	}
	to = to.Unmap()
	network, laddr := "ip4:icmp", net.IPv4zero
	if to.Is6() {
		network, laddr = "ip6:ipv6-icmp", net.IPv6unspecified
	}
	var c *net.IPConn
	if err := from.Do(func() error {
		var err error
		c, err = net.ListenIP(network, &net.IPAddr{IP: laddr})
		return err
	}); err != nil {
		return PingResult{}, fmt.Errorf("echo %s from %s: raw ICMP socket: %w", to, from, err)
	}
	stamped := rxstamp.Enable(c) == nil
	e := &echo{to: to, id: uint16(randUint64()), cookie: randUint64(), sent: make([]time.Time, 0, count), got: make([]bool, count)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.read(c, stamped)
	}()
	sendErr := e.send(ctx, c, count, interval)
	// The last replies: until every request has one, ProbeTimeout passes
	// or ctx ends.
	wait := time.NewTimer(ProbeTimeout)
	select {
	case <-e.allIn():
	case <-wait.C:
	case <-ctx.Done():
	}
	wait.Stop()
	c.Close()
	<-done
	r := e.result()
	if e.noneSent() {
		return r, fmt.Errorf("echo %s from %s: %w", to, from, sendErr)
	}
	return r, nil
}

// echo is one run of Echo.
type echo struct {
	to     netip.Addr
	id     uint16
	cookie uint64
	data   []byte // a request's data: the cookie, zeros to echoDataLen (built by request)

	// Guarded by mu:
	mu      sync.Mutex
	sent    []time.Time     // when each request was sent (or tried)
	failed  int             // requests whose send failed
	got     []bool          // answered, by sequence number
	rtts    []time.Duration // round trips, in the order the replies came
	waiting chan struct{}   // closed when every request sent has a reply
	total   int             // requests to send
}

// noneSent reports whether no request left: none was tried, or every
// send failed.
func (e *echo) noneSent() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.sent) == e.failed
}

// send sends count requests interval apart (fewer if ctx ends) and
// returns the last send error.
func (e *echo) send(ctx context.Context, c *net.IPConn, count int, interval time.Duration) error {
	e.mu.Lock()
	e.total = count
	e.mu.Unlock()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var lastErr error
	to := &net.IPAddr{IP: e.to.AsSlice()}
	buf := make([]byte, 0, 8+echoDataLen)
	for seq := range count {
		if seq > 0 {
			select {
			case <-ctx.Done():
				e.stopAt(seq)
				return ctx.Err()
			case <-tick.C:
			}
		}
		b, err := e.request(buf[:0], seq)
		if err != nil {
			return err
		}
		e.mu.Lock()
		e.sent = append(e.sent, time.Now())
		e.mu.Unlock()
		if _, err := c.WriteTo(b, to); err != nil {
			// An ICMP error the socket got for an earlier request may fail
			// this send; try once more, then count the request lost.
			if _, err = c.WriteTo(b, to); err != nil {
				lastErr = err
				e.mu.Lock()
				e.failed++
				e.mu.Unlock()
			}
		}
	}
	return lastErr
}

// stopAt ends the run after n requests.
func (e *echo) stopAt(n int) {
	e.mu.Lock()
	e.total = n
	e.mu.Unlock()
}

// request builds echo request seq: ID, sequence number, the run's cookie
// and padding.
func (e *echo) request(buf []byte, seq int) ([]byte, error) {
	if e.data == nil {
		e.data = binary.BigEndian.AppendUint64(make([]byte, 0, echoDataLen), e.cookie)
		e.data = e.data[:echoDataLen]
	}
	var typ icmp.Type = ipv4.ICMPTypeEcho
	if e.to.Is6() {
		typ = ipv6.ICMPTypeEchoRequest
	}
	m := icmp.Message{Type: typ, Body: &icmp.Echo{ID: int(e.id), Seq: seq, Data: e.data}}
	// The kernel fills in an ICMPv6 checksum; Marshal computes ICMP's.
	return m.Marshal(buf)
}

// read records the replies arriving on c until it is closed.
func (e *echo) read(c *net.IPConn, stamped bool) {
	buf := make([]byte, 1500)
	oob := make([]byte, rxstamp.OOBSize)
	for failed := 0; failed < 1000; {
		n, oobn, _, from, err := c.ReadMsgIP(buf, oob)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			// A pending ICMP error of the socket is reported once by a
			// read; the next read goes on. A socket that only fails is
			// given up.
			failed++
			continue
		}
		failed = 0
		now := time.Now()
		if stamped {
			if t, ok := rxstamp.Time(oob[:oobn]); ok {
				now = t
			}
		}
		if from == nil || !from.IP.Equal(e.to.AsSlice()) {
			continue
		}
		seq, ok := e.reply(buf[:n])
		if !ok {
			continue
		}
		e.answer(seq, now)
	}
}

// reply parses packet p (an ICMP message, behind its IPv4 header on an
// IPv4 raw socket) and returns the sequence number of this run's echo
// reply it is; ok is false for anything else.
func (e *echo) reply(p []byte) (seq int, ok bool) {
	proto, want := 1, icmp.Type(ipv4.ICMPTypeEchoReply)
	if e.to.Is6() {
		proto, want = 58, ipv6.ICMPTypeEchoReply
	} else if len(p) > 0 && p[0]>>4 == 4 {
		ihl := int(p[0]&0x0f) * 4
		if ihl < 20 || len(p) < ihl {
			return 0, false
		}
		p = p[ihl:]
	}
	m, err := icmp.ParseMessage(proto, p)
	if err != nil || m.Type != want {
		return 0, false
	}
	echo, ok := m.Body.(*icmp.Echo)
	if !ok || echo.ID != int(e.id) || len(echo.Data) < 8 || binary.BigEndian.Uint64(echo.Data) != e.cookie {
		return 0, false
	}
	return echo.Seq, true
}

// answer records the reply to request seq, received at t: its round trip
// unless it is a duplicate, one to a request not sent, or late.
func (e *echo) answer(seq int, t time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if seq < 0 || seq >= len(e.sent) || e.got[seq] {
		return
	}
	rtt := t.Sub(e.sent[seq])
	if rtt < 0 {
		rtt = time.Since(e.sent[seq]) // the wall clock stepped: time it now
	}
	if rtt > ProbeTimeout {
		return
	}
	e.got[seq] = true
	e.rtts = append(e.rtts, rtt)
	if e.waiting != nil && len(e.rtts) == e.total-e.failed {
		close(e.waiting)
		e.waiting = nil
	}
}

// allIn returns a channel closed once every request sent has its reply.
func (e *echo) allIn() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	ch := make(chan struct{})
	if len(e.rtts) == e.total-e.failed {
		close(ch)
		return ch
	}
	e.waiting = ch
	return ch
}

// result sums the run up like ping's last lines: sent counts the requests
// that left (or were tried), received the replies in time.
func (e *echo) result() PingResult {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := PingResult{Sent: len(e.sent), Received: len(e.rtts), RTTs: append([]time.Duration(nil), e.rtts...)}
	if len(r.RTTs) == 0 {
		return r
	}
	var sum, sq float64
	r.Min = r.RTTs[0]
	for _, d := range r.RTTs {
		r.Min, r.Max = min(r.Min, d), max(r.Max, d)
		sum += float64(d)
		sq += float64(d) * float64(d)
	}
	mean := sum / float64(len(r.RTTs))
	r.Avg = time.Duration(mean)
	r.Mdev = time.Duration(math.Sqrt(max(sq/float64(len(r.RTTs))-mean*mean, 0)))
	return r
}

// randUint64 returns a random number (for the echo identifier and the
// run's cookie).
func randUint64() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.BigEndian.Uint64(b[:])
}
