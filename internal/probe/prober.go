package probe

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"
)

// Defaults of [Config].
const (
	DefaultInterval = time.Second
	DefaultTimeout  = time.Second
	DefaultKeep     = 3600
)

// Config configures a [Prober]. Only Conn and Target are required.
type Config struct {
	// Conn is the socket probes are sent from and replies read on. The
	// Prober does not close it, but while Run runs it is the only reader
	// and it sets the read deadline.
	Conn   net.PacketConn
	Target net.Addr // the Responder's address
	// Interval between requests; default DefaultInterval (1 s).
	Interval time.Duration
	// Timeout after a request's send within which its reply must arrive;
	// a reply at or after it counts as lost. Default DefaultTimeout (1 s):
	// with one probe a second, a probe is decided before the next but one
	// is sent, and a path is seen down within two intervals.
	Timeout time.Duration
	// Count stops Run after this many probes, once each is decided; zero
	// means probe until the context ends.
	Count int
	// Session identifies this prober's probes; zero picks a random one.
	Session uint64
	// Keep is how many of the latest samples Samples and Stats return;
	// default DefaultKeep.
	Keep int
	// OnSample, if set, is called with each sample as it is decided, from
	// Run's goroutine (e.g. to feed a History). It must not block for long.
	OnSample func(Sample)
	// Retry, when positive, makes an outage show sooner: once the newest
	// probe has gone unanswered for Overdue, further probes go out every
	// Retry until one is answered, then the Interval resumes. Their
	// samples carry Sample.Retry. Zero leaves it off; continuous
	// monitoring (Count zero) sets it with [DefaultRetry].
	Retry time.Duration
	// Overdue is how long the newest probe may go unanswered before Retry
	// starts; default twice the last RTT, within [MinOverdue, Timeout/2].
	Overdue time.Duration
}

// Fast retry defaults (see Config.Retry): with one probe a second and a
// 1 s timeout, the third lost probe is decided 1.5 to 2.5 s after a cut
// instead of 3 to 4 s.
const (
	DefaultRetry = 250 * time.Millisecond
	MinOverdue   = 250 * time.Millisecond
)

// Prober sends probe requests to one target and turns the replies into
// samples. Its methods are safe for concurrent use; Run must not be called
// twice at the same time.
type Prober struct {
	cfg Config

	mu      sync.Mutex
	samples []Sample // ring of the latest cfg.Keep; guarded by mu
	next    int      // next write index in samples; guarded by mu
	full    bool     // guarded by mu
}

// New checks cfg, fills in defaults and returns a Prober.
func New(cfg Config) (*Prober, error) {
	if cfg.Conn == nil {
		return nil, errors.New("probe: Conn is nil; give it a UDP socket")
	}
	if cfg.Target == nil {
		return nil, errors.New("probe: Target is nil; give it the responder's address")
	}
	if cfg.Interval < 0 || cfg.Timeout < 0 || cfg.Count < 0 || cfg.Keep < 0 {
		return nil, errors.New("probe: Interval, Timeout, Count and Keep must not be negative")
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Keep == 0 {
		cfg.Keep = DefaultKeep
	}
	if cfg.Session == 0 {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, fmt.Errorf("probe: choosing a session id: %w", err)
		}
		cfg.Session = binary.BigEndian.Uint64(b[:]) | 1
	}
	return &Prober{cfg: cfg, samples: make([]Sample, cfg.Keep)}, nil
}

// Session returns the session id the Prober puts in its requests.
func (p *Prober) Session() uint64 { return p.cfg.Session }

// Run probes until ctx ends, Count probes are decided, or Conn fails. It
// returns nil after Count probes, ctx.Err() when the context ends, and a
// wrapped error (net.ErrClosed if Conn was closed) when reading or sending
// on Conn fails for good. Send errors other than a closed Conn only make
// that probe lost. Probes still undecided when Run returns are dropped.
func (p *Prober) Run(ctx context.Context) error {
	type arrival struct {
		pkt Packet
		at  time.Time
	}
	arrivals := make(chan arrival, 64)
	readErr := make(chan error, 1)
	if err := p.cfg.Conn.SetReadDeadline(time.Time{}); err != nil {
		return fmt.Errorf("probe: clearing read deadline: %w", err)
	}
	var stopping sync.WaitGroup
	stop := make(chan struct{})
	stopping.Go(func() {
		buf := make([]byte, 2048)
		for {
			n, _, err := p.cfg.Conn.ReadFrom(buf)
			at := time.Now()
			select {
			case <-stop:
				return
			default:
			}
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					readErr <- err
					return
				}
				continue // e.g. ICMP errors on a connected socket; loss shows it
			}
			pkt, err := Decode(buf[:n])
			if err != nil {
				continue
			}
			select {
			case arrivals <- arrival{pkt, at}:
			case <-stop:
				return
			}
		}
	})
	defer func() {
		close(stop)
		_ = p.cfg.Conn.SetReadDeadline(time.Now())
		stopping.Wait()
		_ = p.cfg.Conn.SetReadDeadline(time.Time{})
	}()

	tr := newTracker(p.cfg.Session, p.cfg.Timeout)
	send := time.NewTimer(0)
	defer send.Stop()
	expiry := time.NewTimer(time.Hour)
	defer expiry.Stop()
	// overdue fires when the newest probe has gone unanswered too long.
	overdue := time.NewTimer(time.Hour)
	overdue.Stop()
	defer overdue.Stop()
	sendC := send.C
	var seq uint32
	var lastRTT time.Duration
	retrying := false // probes go out every Retry until one is answered
	buf := make([]byte, 0, Size)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-readErr:
			return fmt.Errorf("probe: reading replies: %w", err)
		case <-sendC:
			now := time.Now()
			req := Packet{Type: Request, Session: p.cfg.Session, Seq: seq, SendTime: now.UnixNano()}
			buf, _ = req.Encode(buf[:0]) // a Request without responder stamps always encodes
			tr.sent(req, now, retrying)
			if _, err := p.cfg.Conn.WriteTo(buf, p.cfg.Target); errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("probe: sending to %s: %w", p.cfg.Target, err)
			}
			seq++
			switch {
			case p.cfg.Count > 0 && int(seq) >= p.cfg.Count:
				sendC = nil
			case retrying:
				send.Reset(p.cfg.Retry)
			default:
				send.Reset(p.cfg.Interval)
				if p.cfg.Retry > 0 {
					overdue.Reset(p.overdueAfter(lastRTT))
				}
			}
		case <-overdue.C:
			// The newest probe is still unanswered: probe again now and
			// every Retry until an answer comes.
			if sendC != nil && !tr.idle() {
				retrying = true
				send.Reset(0)
			}
		case a := <-arrivals:
			if s, ok := tr.reply(a.pkt, a.at); ok {
				p.record(s)
				if !s.Lost {
					lastRTT = s.RTT
					if retrying {
						retrying = false
						overdue.Stop()
						send.Reset(p.cfg.Interval)
					} else if s.Seq == seq-1 {
						overdue.Stop() // the newest probe is answered
					}
				}
			}
		case now := <-expiry.C:
			for _, s := range tr.expire(now) {
				p.record(s)
			}
		}
		if d, ok := tr.nextDeadline(); ok {
			expiry.Reset(time.Until(d))
		}
		if sendC == nil && tr.idle() {
			return nil
		}
	}
}

func (p *Prober) record(s Sample) {
	p.mu.Lock()
	p.samples[p.next] = s
	p.next = (p.next + 1) % len(p.samples)
	if p.next == 0 {
		p.full = true
	}
	p.mu.Unlock()
	if p.cfg.OnSample != nil {
		p.cfg.OnSample(s)
	}
}

// Samples returns the latest decided samples (at most Keep), in the order
// they were decided.
func (p *Prober) Samples() []Sample {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.full {
		return slices.Clone(p.samples[:p.next])
	}
	return append(slices.Clone(p.samples[p.next:]), p.samples[:p.next]...)
}

// Stats summarises the samples Samples returns.
func (p *Prober) Stats() Stats { return Summarize(p.Samples()) }

// overdueAfter is Config.Overdue, or its default from the last RTT.
func (p *Prober) overdueAfter(lastRTT time.Duration) time.Duration {
	if p.cfg.Overdue > 0 {
		return p.cfg.Overdue
	}
	return min(max(2*lastRTT, MinOverdue), max(p.cfg.Timeout/2, MinOverdue))
}

// tracker matches replies to outstanding requests. It is pure: all times
// come from the caller.
type tracker struct {
	session uint64
	timeout time.Duration
	pending map[uint32]pending
	jitter  Jitter
}

type pending struct {
	at    time.Time // local send time (monotonic when from time.Now)
	wire  int64     // SendTime put on the wire
	retry bool      // sent early by fast retry
}

func newTracker(session uint64, timeout time.Duration) *tracker {
	return &tracker{session: session, timeout: timeout, pending: map[uint32]pending{}}
}

// sent records an outstanding request sent at the local time at.
func (t *tracker) sent(req Packet, at time.Time, retry bool) {
	t.pending[req.Seq] = pending{at: at, wire: req.SendTime, retry: retry}
}

// reply decides the probe rep answers, received at the local time at. It
// returns false for packets that answer nothing outstanding: requests,
// other sessions, unknown or already decided sequence numbers, or a send
// time that is not the one sent. A reply at or after the timeout yields a
// lost sample.
func (t *tracker) reply(rep Packet, at time.Time) (Sample, bool) {
	if rep.Type != Reply || rep.Session != t.session {
		return Sample{}, false
	}
	pd, ok := t.pending[rep.Seq]
	if !ok || pd.wire != rep.SendTime {
		return Sample{}, false
	}
	delete(t.pending, rep.Seq)
	s := Sample{Seq: rep.Seq, Sent: pd.at, Retry: pd.retry}
	raw := at.Sub(pd.at)
	if raw >= t.timeout {
		s.Lost = true
		return s, true
	}
	s.RTT = raw
	if hold := time.Duration(rep.ReplyTime - rep.RecvTime); hold >= 0 && hold < raw {
		s.RTT = raw - hold
	}
	// Forward transit: responder's receive time minus our send time. The
	// clock offset between the two machines cancels in the jitter's D.
	t.jitter.Add(time.Duration(rep.RecvTime - rep.SendTime))
	s.Jitter = t.jitter.Value()
	return s, true
}

// expire decides as lost every outstanding probe whose timeout has passed
// at now, in sequence order.
func (t *tracker) expire(now time.Time) []Sample {
	var out []Sample
	for seq, pd := range t.pending {
		if now.Sub(pd.at) >= t.timeout {
			out = append(out, Sample{Seq: seq, Sent: pd.at, Lost: true, Retry: pd.retry})
			delete(t.pending, seq)
		}
	}
	slices.SortFunc(out, func(a, b Sample) int { return int(int64(a.Seq) - int64(b.Seq)) })
	return out
}

// nextDeadline returns when the earliest outstanding probe times out.
func (t *tracker) nextDeadline() (time.Time, bool) {
	var d time.Time
	for _, pd := range t.pending {
		if dl := pd.at.Add(t.timeout); d.IsZero() || dl.Before(d) {
			d = dl
		}
	}
	return d, !d.IsZero()
}

func (t *tracker) idle() bool { return len(t.pending) == 0 }
