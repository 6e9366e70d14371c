package lab

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
)

// ProbeTimeout is how long a Prober waits for the answer to a probe: a
// later answer counts as lost, as iputils ping -W 1 counts it.
const ProbeTimeout = time.Second

// Bounds of a Prober.
const (
	// MinProbeInterval is the shortest interval between two probes of one
	// target.
	MinProbeInterval = time.Millisecond
	// MaxProbeTargets bounds the targets of one Prober.
	MaxProbeTargets = 4096
	// maxProbeRun bounds how long a Prober runs: it stops sending after
	// that, so a forgotten prober ends by itself.
	maxProbeRun = time.Hour
)

// ProbeTarget is one path a Prober watches: ICMP echo requests from node
// From to address To, whose kernel answers them.
type ProbeTarget struct {
	From *Node
	To   netip.Addr
}

// String names the target "from -> to".
func (t ProbeTarget) String() string { return fmt.Sprintf("%s -> %s", t.From, t.To) }

// Probe is one echo request of a ProbeLog.
type Probe struct {
	// Sent is when it was sent, from the prober's start.
	Sent time.Duration
	// Answered is true when its answer came within ProbeTimeout; RTT is
	// then the round-trip time.
	Answered bool
	RTT      time.Duration
}

// ProbeLog is what a Prober saw of one target: every probe it sent, in
// order, one Interval apart as far as the machine kept up.
type ProbeLog struct {
	Target   ProbeTarget
	Interval time.Duration
	Probes   []Probe
}

// Between returns the part of the log sent in [from, to).
func (g ProbeLog) Between(from, to time.Duration) ProbeLog {
	out := ProbeLog{Target: g.Target, Interval: g.Interval}
	for _, p := range g.Probes {
		if p.Sent >= from && p.Sent < to {
			out.Probes = append(out.Probes, p)
		}
	}
	return out
}

// Lost counts the probes without an answer.
func (g ProbeLog) Lost() int {
	n := 0
	for _, p := range g.Probes {
		if !p.Answered {
			n++
		}
	}
	return n
}

// Outage returns the longest gap between two answered probes (by the time
// they were sent) that holds at least one lost probe, 0 when none was
// lost. A run of lost probes at the start of the log counts from one
// interval before the first probe, one at the end until one interval
// after the last: the log does not say when the path worked there.
func (g ProbeLog) Outage() time.Duration {
	var longest time.Duration
	n := len(g.Probes)
	for i := 0; i < n; {
		if g.Probes[i].Answered {
			i++
			continue
		}
		j := i
		for j < n && !g.Probes[j].Answered {
			j++
		}
		before := g.Probes[i].Sent - g.Interval
		if i > 0 {
			before = g.Probes[i-1].Sent
		}
		after := g.Probes[j-1].Sent + g.Interval
		if j < n {
			after = g.Probes[j].Sent
		}
		longest = max(longest, after-before)
		i = j
	}
	return longest
}

// AnsweringFrom returns when the log's final run of answered probes began:
// the time the first of them was sent, but not before t. ok is false when
// the last probe was lost or the log has no probe at or after t.
func (g ProbeLog) AnsweringFrom(t time.Duration) (from time.Duration, ok bool) {
	n := len(g.Probes)
	if n == 0 || !g.Probes[n-1].Answered || g.Probes[n-1].Sent < t {
		return 0, false
	}
	i := n - 1
	for i > 0 && g.Probes[i-1].Answered {
		i--
	}
	return max(g.Probes[i].Sent, t), true
}

// Prober sends ICMP echo requests to its targets, one every Interval per
// target, from raw sockets opened in the targets' From nodes, and logs
// every probe and its answer. Start it with StartProber, end it with
// Stop. Its methods are safe for concurrent use.
type Prober struct {
	interval time.Duration
	start    time.Time
	targets  []ProbeTarget
	conns    map[*Node]*icmp.PacketConn
	byID     map[*Node]map[uint16]int // echo identifier -> target index, per From
	ids      []uint16                 // by target index
	quit     chan struct{}
	sending  sync.WaitGroup
	reading  sync.WaitGroup
	stopOnce sync.Once

	mu     sync.Mutex
	probes [][]Probe // by target index; guarded by mu
	logs   []ProbeLog
}

// StartProber opens one raw ICMP socket in each From node of targets and
// starts probing every target each interval (at least MinProbeInterval)
// until Stop, or at most an hour. It needs root (raw sockets).
func StartProber(targets []ProbeTarget, interval time.Duration) (*Prober, error) {
	if len(targets) == 0 || len(targets) > MaxProbeTargets {
		return nil, fmt.Errorf("prober: %d targets; give 1 to %d", len(targets), MaxProbeTargets)
	}
	if interval < MinProbeInterval {
		return nil, fmt.Errorf("prober: interval %v; use at least %v", interval, MinProbeInterval)
	}
	p := &Prober{
		interval: interval,
		targets:  slices.Clone(targets),
		conns:    map[*Node]*icmp.PacketConn{},
		byID:     map[*Node]map[uint16]int{},
		ids:      make([]uint16, len(targets)),
		quit:     make(chan struct{}),
		probes:   make([][]Probe, len(targets)),
	}
	base := uint16(rand.Uint32())
	for i, t := range targets {
		if t.From == nil || !t.To.Is4() {
			p.closeConns()
			return nil, fmt.Errorf("prober: target %d: want a node and an IPv4 address", i)
		}
		if p.conns[t.From] == nil {
			var c *icmp.PacketConn
			err := t.From.Do(func() error {
				var err error
				c, err = icmp.ListenPacket("ip4:icmp", "0.0.0.0")
				return err
			})
			if err != nil {
				p.closeConns()
				return nil, fmt.Errorf("prober: raw ICMP socket in %s: %w", t.From, err)
			}
			p.conns[t.From] = c
			p.byID[t.From] = map[uint16]int{}
		}
		p.ids[i] = base + uint16(i)
		p.byID[t.From][p.ids[i]] = i
	}
	p.start = time.Now()
	for n, c := range p.conns {
		p.reading.Add(1)
		go p.read(c, p.byID[n])
	}
	p.sending.Add(1)
	go p.send()
	return p, nil
}

// Start returns when the prober started: Probe.Sent counts from it.
func (p *Prober) Start() time.Time { return p.start }

// Interval returns the interval between two probes of a target.
func (p *Prober) Interval() time.Duration { return p.interval }

// Targets returns the prober's targets, in the order of its logs.
func (p *Prober) Targets() []ProbeTarget { return slices.Clone(p.targets) }

func (p *Prober) send() {
	defer p.sending.Done()
	tick := time.NewTicker(p.interval)
	defer tick.Stop()
	end := time.NewTimer(maxProbeRun)
	defer end.Stop()
	var seq uint16
	buf := make([]byte, 0, 64)
	for {
		p.mu.Lock()
		sent := time.Since(p.start)
		for i := range p.targets {
			p.probes[i] = append(p.probes[i], Probe{Sent: sent})
		}
		p.mu.Unlock()
		for i, t := range p.targets {
			m := icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: int(p.ids[i]), Seq: int(seq), Data: []byte("fednet-lab")}}
			b, err := m.Marshal(buf[:0])
			if err == nil {
				// An ICMP error for an earlier probe of the socket (another
				// target's "host unreachable") may fail this send; try once
				// more. A send that fails again is a lost probe: the log has
				// it unanswered.
				to := &net.IPAddr{IP: t.To.AsSlice()}
				if _, err := p.conns[t.From].WriteTo(b, to); err != nil {
					_, _ = p.conns[t.From].WriteTo(b, to)
				}
			}
		}
		seq++
		select {
		case <-p.quit:
			return
		case <-end.C:
			return
		case <-tick.C:
		}
	}
}

// read records the answers arriving on c, a socket of the targets byID.
func (p *Prober) read(c *icmp.PacketConn, byID map[uint16]int) {
	defer p.reading.Done()
	buf := make([]byte, 1500)
	for failed := 0; failed < 1000; {
		n, from, err := c.ReadFrom(buf)
		if errors.Is(err, net.ErrClosed) {
			return // closed by Stop
		}
		if err != nil {
			// A pending ICMP error of the socket (an unreachable target)
			// is reported once by a read; the next read goes on. A socket
			// that only fails is given up.
			failed++
			continue
		}
		failed = 0
		now := time.Since(p.start)
		m, err := icmp.ParseMessage(1, buf[:n])
		if err != nil || m.Type != ipv4.ICMPTypeEchoReply {
			continue
		}
		echo, ok := m.Body.(*icmp.Echo)
		if !ok {
			continue
		}
		i, ok := byID[uint16(echo.ID)]
		if !ok {
			continue
		}
		if ip, ok := from.(*net.IPAddr); !ok || !ip.IP.Equal(p.targets[i].To.AsSlice()) {
			continue
		}
		p.mu.Lock()
		probes := p.probes[i]
		// The sequence number wraps at 65536; count back from the last
		// probe sent.
		last := len(probes) - 1
		k := last - int(uint16(last)-uint16(echo.Seq))
		if k >= 0 && !probes[k].Answered {
			if rtt := now - probes[k].Sent; rtt <= ProbeTimeout {
				probes[k].Answered, probes[k].RTT = true, rtt
			}
		}
		p.mu.Unlock()
	}
}

// Answering reports whether every target answered every probe it was sent
// during the last hold, leaving out the probes of the last 200 ms (their
// answers may be on the way), and that span began after since. It is the
// live check of a recovery; the logs of Stop are the record.
func (p *Prober) Answering(since time.Time, hold time.Duration) bool {
	const inFlight = 200 * time.Millisecond
	now := time.Since(p.start)
	from, to := now-inFlight-hold, now-inFlight
	if from < since.Sub(p.start) {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, probes := range p.probes {
		seen := false
		for k := len(probes) - 1; k >= 0 && probes[k].Sent >= from; k-- {
			if probes[k].Sent >= to {
				continue
			}
			if !probes[k].Answered {
				return false
			}
			seen = true
		}
		if !seen {
			return false
		}
	}
	return true
}

// Stop stops sending, waits ProbeTimeout for the last answers, closes the
// sockets and returns one log per target, in the order of the targets.
// Calling it again returns the same logs.
func (p *Prober) Stop() []ProbeLog {
	p.stopOnce.Do(func() {
		close(p.quit)
		p.sending.Wait()
		time.Sleep(ProbeTimeout) // answers to the last probes may still come
		p.closeConns()
		p.reading.Wait()
		p.mu.Lock()
		defer p.mu.Unlock()
		for i, t := range p.targets {
			p.logs = append(p.logs, ProbeLog{Target: t, Interval: p.interval, Probes: p.probes[i]})
		}
	})
	return p.logs
}

func (p *Prober) closeConns() {
	for _, c := range p.conns {
		c.Close()
	}
}
