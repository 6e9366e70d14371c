// Package aqm keeps the queues inside a userspace WireGuard device
// (wireguard-go) short under load: CoDel (RFC 8289) on each direction.
//
// wireguard-go queues up to thousands of batches between reading a packet
// from the TUN device and sending it encrypted, and as many between
// receiving and writing to the TUN device. A bulk TCP flow fills them up
// to its window: pings and every other flow then wait behind megabytes,
// tens of milliseconds on a busy machine. CoDel measures how long packets
// stay (sojourn time) and, once that has been above a target for an
// interval, drops a packet at intervals shrinking with the square root of
// the drops until it falls below again; TCP slows down, the queue drains.
//
// A packet's time of entry is written at the end of the buffer it
// travels in, which wireguard-go passes from the TUN read through
// encryption to the UDP send (and from the UDP receive through decryption
// to the TUN write) without copying, past the bytes the packet and its
// encryption use. Where the stamp is missing (keepalives, handshakes, a
// buffer without room) the packet is simply not measured. Only large
// packets (MinSize and up: the bulk flows') are dropped; a drop due when
// a small one leaves goes to the next large one, so pings, ACKs and small
// datagrams are never dropped here.
package aqm

import (
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/tun"
)

// Defaults for Config: RFC 8289's target and interval (an interval about
// the longest round trip of the flows, which on a federation of clouds is
// tens of milliseconds). 2 ms and 20 ms dropped in every bulk transfer of
// the lab (0.5 ms round trips) and, on a busy machine, 5-6 % of a 100
// Mbit/s UDP stream of 1200-byte datagrams that the standalone tunnel
// delivered whole; in full bench runs the two settings could not be told
// apart in TCP throughput or in latency under load (docs/bench.md,
// session 6).
const (
	DefaultTarget   = 5 * time.Millisecond
	DefaultInterval = 100 * time.Millisecond
	DefaultMinSize  = 1000
)

// Config configures an AQM.
type Config struct {
	// Target is the sojourn time CoDel aims to stay below (default
	// DefaultTarget); Interval how long it may stay above before drops
	// start (default DefaultInterval), about a flow's round-trip time.
	Target, Interval time.Duration
	// MinSize is the smallest packet that may be dropped, in bytes
	// (default DefaultMinSize).
	MinSize int
}

// AQM is the queue management of one device: both directions' CoDel
// state. Its wrappers are safe for concurrent use.
type AQM struct {
	cfg  Config
	base time.Time

	txMu sync.Mutex
	tx   codel
	rxMu sync.Mutex
	rx   codel

	txDrops, rxDrops atomic.Uint64
	// Sojourn times measured (under the direction's lock).
	txSojourn, rxSojourn sojournStats
	// routes counts route changes seen (see Bind).
	routes atomic.Uint64
}

// New returns an AQM.
func New(cfg Config) *AQM {
	if cfg.Target <= 0 {
		cfg.Target = DefaultTarget
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.MinSize <= 0 {
		cfg.MinSize = DefaultMinSize
	}
	return &AQM{cfg: cfg, base: time.Now(), tx: newCodel(cfg.Target, cfg.Interval), rx: newCodel(cfg.Target, cfg.Interval)}
}

// Drops returns how many packets were dropped leaving the device (tx, to
// the network) and entering it (rx, to the TUN device).
func (a *AQM) Drops() (tx, rx uint64) { return a.txDrops.Load(), a.rxDrops.Load() }

// sojournStats sums up the sojourn times measured in one direction.
type sojournStats struct {
	n        uint64
	sum, max int64
}

func (s *sojournStats) add(d int64) {
	s.n++
	s.sum += d
	s.max = max(s.max, d)
}

func (s sojournStats) String() string {
	if s.n == 0 {
		return "none measured"
	}
	return fmt.Sprintf("mean %v, max %v over %d packets", time.Duration(s.sum/int64(s.n)).Round(time.Microsecond), time.Duration(s.max).Round(time.Microsecond), s.n)
}

// String says what the queue management did, for logs.
func (a *AQM) String() string {
	a.txMu.Lock()
	tx := a.txSojourn
	a.txMu.Unlock()
	a.rxMu.Lock()
	rx := a.rxSojourn
	a.rxMu.Unlock()
	return fmt.Sprintf("leaving: %d dropped, time in the device %v; arriving: %d dropped, time in the device %v",
		a.txDrops.Load(), tx, a.rxDrops.Load(), rx)
}

// now is the time in nanoseconds since New (monotonic).
func (a *AQM) now() int64 { return int64(time.Since(a.base)) }

// The stamp: 8 bytes of entry time and 8 of the time xor a constant, in
// the last 16 bytes of the buffer's array, written only when the packet
// and what encryption adds (a 16-byte tag, padding to 16 bytes, a 32-byte
// header at most) leave at least stampSlack bytes before it.
const (
	stampLen   = 16
	stampSlack = 128
	stampMagic = 0x6665646e65742071 // "fednet q"
)

// stamp writes t at the end of buf's array if used bytes of it leave room.
func stamp(buf []byte, used int, t int64) {
	c := cap(buf)
	if used+stampSlack+stampLen > c {
		return
	}
	tail := buf[:c][c-stampLen:]
	binary.LittleEndian.PutUint64(tail, uint64(t))
	binary.LittleEndian.PutUint64(tail[8:], uint64(t)^stampMagic)
}

// stampOf reads the stamp of buf, whose used bytes are its length.
func stampOf(buf []byte) (int64, bool) {
	c := cap(buf)
	if len(buf)+stampSlack+stampLen > c {
		return 0, false
	}
	tail := buf[:c][c-stampLen:]
	t := binary.LittleEndian.Uint64(tail)
	if t^stampMagic != binary.LittleEndian.Uint64(tail[8:]) {
		return 0, false
	}
	return int64(t), true
}

// filter runs q over the packets of bufs leaving now and returns those not
// dropped (bufs itself when none is), counting drops.
func (a *AQM) filter(mu *sync.Mutex, q *codel, st *sojournStats, drops *atomic.Uint64, bufs [][]byte, overhead int) [][]byte {
	now := a.now()
	var keep [][]byte
	mu.Lock()
	for i, b := range bufs {
		t, ok := stampOf(b)
		if !ok || t > now {
			if keep != nil {
				keep = append(keep, b)
			}
			continue
		}
		st.add(now - t)
		if q.dequeue(now, now-t, len(b)-overhead >= a.cfg.MinSize) {
			if keep == nil {
				keep = append(make([][]byte, 0, len(bufs)), bufs[:i]...)
			}
			drops.Add(1)
			continue
		}
		if keep != nil {
			keep = append(keep, b)
		}
	}
	mu.Unlock()
	if keep == nil {
		return bufs
	}
	return keep
}

// TUN wraps a TUN device: packets read are stamped, packets written are
// measured and maybe dropped (the receive direction's queue).
func (a *AQM) TUN(dev tun.Device) tun.Device { return &tunDev{Device: dev, a: a} }

type tunDev struct {
	tun.Device
	a *AQM
}

func (d *tunDev) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	n, err := d.Device.Read(bufs, sizes, offset)
	t := d.a.now()
	for i := range n {
		stamp(bufs[i], offset+sizes[i], t)
	}
	return n, err
}

func (d *tunDev) Write(bufs [][]byte, offset int) (int, error) {
	keep := d.a.filter(&d.a.rxMu, &d.a.rx, &d.a.rxSojourn, &d.a.rxDrops, bufs, offset)
	if len(keep) == 0 {
		return 0, nil
	}
	return d.Device.Write(keep, offset)
}

// Bind wraps a bind: packets received are stamped, packets sent are
// measured and maybe dropped (the send direction's queue).
//
// wireguard-go listens for route changes, to forget the source address
// it answers peers from, only on its own bind type; on a wrapped one, the
// wrapper does it instead: RouteChanged (called on every route change)
// makes the next send to each endpoint forget its source address.
func (a *AQM) Bind(b conn.Bind) conn.Bind {
	return &bind{Bind: b, a: a, seen: map[conn.Endpoint]uint64{}}
}

// RouteChanged tells the wrapped binds that a route changed.
func (a *AQM) RouteChanged() { a.routes.Add(1) }

type bind struct {
	conn.Bind
	a *AQM

	mu   sync.Mutex
	seen map[conn.Endpoint]uint64 // the route changes an endpoint's source was last cleared at
}

// encryptionOverhead is what a WireGuard transport message adds to the
// packet: header and tag.
const encryptionOverhead = 32

func (b *bind) Open(port uint16) ([]conn.ReceiveFunc, uint16, error) {
	fns, p, err := b.Bind.Open(port)
	for i, fn := range fns {
		fns[i] = func(packets [][]byte, sizes []int, eps []conn.Endpoint) (int, error) {
			n, err := fn(packets, sizes, eps)
			t := b.a.now()
			for j := range n {
				stamp(packets[j], sizes[j], t)
			}
			return n, err
		}
	}
	return fns, p, err
}

func (b *bind) Send(bufs [][]byte, ep conn.Endpoint) error {
	if r := b.a.routes.Load(); r != 0 {
		b.mu.Lock()
		if b.seen[ep] != r {
			if len(b.seen) > 4096 {
				clear(b.seen) // endpoints come and go with roaming peers
			}
			b.seen[ep] = r
			ep.ClearSrc()
		}
		b.mu.Unlock()
	}
	keep := b.a.filter(&b.a.txMu, &b.a.tx, &b.a.txSojourn, &b.a.txDrops, bufs, encryptionOverhead)
	if len(keep) == 0 {
		return nil
	}
	return b.Bind.Send(keep, ep)
}

// ReportEvery is how often Report logs the drops made since its last line.
const ReportEvery = 10 * time.Second

// Report logs, every interval until stop is closed, how many packets were
// dropped in each direction since its last line, when any were: a stream
// that lost datagrams to the queue management says so in the device's log
// while it runs, not only when the device stops.
func (a *AQM) Report(name string, every time.Duration, logf func(string, ...any), stop <-chan struct{}) {
	reportDrops(name, every, a.Drops, logf, stop)
}

func reportDrops(name string, every time.Duration, drops func() (tx, rx uint64), logf func(string, ...any), stop <-chan struct{}) {
	t := time.NewTicker(every)
	defer t.Stop()
	lastTx, lastRx := drops()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		tx, rx := drops()
		if tx != lastTx || rx != lastRx {
			logf("wgdev %s: queue management dropped %d packets leaving and %d arriving in the last %v (CoDel: they stayed in the device above the target)", name, tx-lastTx, rx-lastRx, every)
		}
		lastTx, lastRx = tx, rx
	}
}
