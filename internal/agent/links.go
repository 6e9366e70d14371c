package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/dataplane"
	"github.com/fednet/fednet/internal/metrics"
	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/probe"
)

// ProbeWindow is the span of the probe figures in status reports.
const ProbeWindow = time.Minute

// recentKeep is how many of a link's latest samples are kept for the
// link-up rule (it needs probe.DownAfterLost; a few more absorb samples
// decided out of order).
const recentKeep = 8

// LinkEvents receives what the link monitor sees; every method is called
// from a prober's goroutine and must not block for long. A nil field of
// the monitor's config means "not interested".
type LinkEvents struct {
	// Sample is called with each decided probe of the link to peer.
	Sample func(peer string, s probe.Sample)
	// Changed is called when a link's probe verdict (probe.ProbesUp)
	// changes, so a status report can follow at once.
	Changed func(peer string, up bool)
}

// links probes every peer of the current plan through the tunnel: it runs
// a probe.Responder on the gateway's transit address (port probe.Port) and
// one probe.Prober per peer aimed at the peer's transit address, and keeps
// each link's 24-hour probe.History. Update follows plan changes; Close
// stops it all. Methods are safe for concurrent use.
type links struct {
	ctx    context.Context // parent of the probers' contexts
	logf   func(string, ...any)
	events LinkEvents
	// interval and timeout of the probers (0: probe package defaults).
	interval, timeout time.Duration

	mu        sync.Mutex
	local     netip.Addr // transit address the responder is bound to; guarded by mu
	responder *probe.Responder
	lastErr   string                    // last responder error logged; guarded by mu
	byPeer    map[string]*link          // guarded by mu
	histories map[string]*probe.History // kept across prober restarts; guarded by mu
	closed    bool
}

// link is the prober of one peer.
type link struct {
	peer          string
	local, remote netip.Addr
	history       *probe.History
	cancel        context.CancelFunc
	done          chan struct{}

	mu       sync.Mutex
	recent   []probe.Sample // the latest recentKeep decided samples; guarded by mu
	up       bool           // probe verdict last announced; guarded by mu
	answered bool           // a probe of this prober was answered; guarded by mu
	firstSeq uint32         // sequence number of the first answered probe; guarded by mu
}

func newLinks(ctx context.Context, logf func(string, ...any), events LinkEvents) *links {
	return &links{ctx: ctx, logf: logf, events: events, byPeer: map[string]*link{}, histories: map[string]*probe.History{}}
}

// peerTransit returns the transit address of a peer: its allowed /32 that
// lies in the gateway's transit prefix.
func peerTransit(g plan.Gateway, p plan.Peer) (netip.Addr, bool) {
	transit := g.Firewall.Transit
	for _, a := range p.AllowedIPs {
		if a.IsSingleIP() && transit.Contains(a.Addr()) {
			return a.Addr(), true
		}
	}
	return netip.Addr{}, false
}

// Update makes the probes follow g: the responder on g's transit address
// and a prober for every peer with a key. It is idempotent; probers of
// unchanged links keep running. Sockets that cannot be opened yet (the
// transit address not configured, e.g. after a failed apply) are logged
// and tried again at the next Update.
func (ls *links) Update(g plan.Gateway) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.closed {
		return
	}
	local := g.TransitAddress()
	ls.updateResponderLocked(local)
	want := map[string]netip.Addr{}
	for _, p := range g.Peers {
		if !dataplane.Ready(p) {
			continue // no tunnel yet
		}
		if a, ok := peerTransit(g, p); ok {
			want[p.Gateway] = a
		}
	}
	for peer, l := range ls.byPeer {
		if a, ok := want[peer]; !ok || a != l.remote || l.local != local {
			l.stop()
			delete(ls.byPeer, peer)
		}
	}
	for peer := range ls.histories {
		if _, ok := want[peer]; !ok {
			delete(ls.histories, peer)
		}
	}
	for peer, remote := range want {
		if _, ok := ls.byPeer[peer]; ok || !local.IsValid() {
			continue
		}
		l, err := ls.startLocked(peer, local, remote)
		if err != nil {
			ls.logf("probing link to %s: %v", peer, err)
			continue
		}
		ls.byPeer[peer] = l
	}
}

// updateResponderLocked runs the responder on local:probe.Port.
func (ls *links) updateResponderLocked(local netip.Addr) {
	if ls.responder != nil && ls.local == local {
		return
	}
	if ls.responder != nil {
		ls.responder.Close()
		ls.responder = nil
	}
	ls.local = local
	if !local.IsValid() {
		return
	}
	conn, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(local, probe.Port)))
	if err != nil {
		if msg := err.Error(); msg != ls.lastErr {
			ls.lastErr = msg
			ls.logf("link probe responder on %s: %v; retrying at the next apply", netip.AddrPortFrom(local, probe.Port), err)
		}
		return
	}
	r, err := probe.NewResponder(probe.ResponderConfig{Conn: conn})
	if err != nil {
		conn.Close()
		ls.logf("link probe responder: %v", err)
		return
	}
	ls.lastErr = ""
	ls.responder = r
	go func() {
		if err := r.Serve(); !errors.Is(err, net.ErrClosed) {
			ls.logf("link probe responder stopped: %v", err)
		}
	}()
}

// startLocked starts the prober of one link.
func (ls *links) startLocked(peer string, local, remote netip.Addr) (*link, error) {
	conn, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(local, 0)))
	if err != nil {
		return nil, fmt.Errorf("opening a socket on %s: %w", local, err)
	}
	h := ls.histories[peer]
	if h == nil {
		h = probe.NewHistory()
		ls.histories[peer] = h
	}
	l := &link{peer: peer, local: local, remote: remote, history: h, done: make(chan struct{}), up: true}
	retry := probe.DefaultRetry
	if ls.interval > 0 && ls.interval/4 < retry {
		retry = ls.interval / 4
	}
	p, err := probe.New(probe.Config{
		Conn:     conn,
		Target:   net.UDPAddrFromAddrPort(netip.AddrPortFrom(remote, probe.Port)),
		Interval: ls.interval,
		Timeout:  ls.timeout,
		Keep:     recentKeep,
		Retry:    retry,
		OnSample: func(s probe.Sample) { ls.sample(l, s) },
	})
	if err != nil {
		conn.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(ls.ctx)
	l.cancel = cancel
	go func() {
		defer close(l.done)
		defer conn.Close()
		if err := p.Run(ctx); err != nil && ctx.Err() == nil {
			ls.logf("probing link to %s (%s) stopped: %v", peer, remote, err)
		}
	}()
	return l, nil
}

// sample files one decided probe and announces a changed verdict. Probes
// sent before the prober's first answered one are not filed in the
// history nor passed on: they measure the tunnel and the peer's agent
// coming up, not the path (and those lost are decided a timeout later,
// possibly after the first answer). They still count for the verdict, so
// a link that never answers is down.
func (ls *links) sample(l *link, s probe.Sample) {
	l.mu.Lock()
	if !l.answered && !s.Lost {
		l.answered, l.firstSeq = true, s.Seq
	}
	// Fast retries decide the verdict sooner but stay out of the loss
	// rates: an outage would otherwise weigh four times its share.
	file := l.answered && s.Seq >= l.firstSeq && !s.Retry
	l.mu.Unlock()
	if file {
		l.history.Add(s)
		if ls.events.Sample != nil {
			ls.events.Sample(l.peer, s)
		}
	}
	l.mu.Lock()
	l.recent = append(l.recent, s)
	if len(l.recent) > recentKeep {
		l.recent = slices.Delete(l.recent, 0, len(l.recent)-recentKeep)
	}
	up := probe.ProbesUp(l.recent)
	changed := up != l.up
	l.up = up
	l.mu.Unlock()
	if changed {
		if up {
			ls.logf("link to %s: probes answered again", l.peer)
		} else {
			ls.logf("link to %s: the last %d probes were lost; link down", l.peer, probe.DownAfterLost)
		}
		if ls.events.Changed != nil {
			ls.events.Changed(l.peer, up)
		}
	}
}

func (l *link) stop() {
	l.cancel()
	<-l.done
}

// Probe returns the figures of the link to peer over the ProbeWindow
// before now, or nil when that link is not probed.
func (ls *links) Probe(peer string, now time.Time) *api.LinkProbe {
	ls.mu.Lock()
	l := ls.byPeer[peer]
	ls.mu.Unlock()
	if l == nil {
		return nil
	}
	st := l.history.Window(now, ProbeWindow)
	l.mu.Lock()
	recent := probe.Recent(l.recent, probe.DownAfterLost)
	l.mu.Unlock()
	lp := &api.LinkProbe{
		Up:     probe.ProbesUp(recent),
		Window: ProbeWindow,
		Sent:   st.Sent, Lost: st.Lost, Loss: st.Loss,
		RTTP50: st.RTTP50, RTTP99: st.RTTP99, Jitter: st.Jitter,
	}
	if len(recent) > 0 {
		lost := 0
		for _, s := range recent {
			if s.Lost {
				lost++
			}
		}
		lp.RecentLoss = float64(lost) / float64(len(recent))
	}
	return lp
}

// History returns the 24-hour history of the link to peer, nil when the
// link is not probed.
func (ls *links) History(peer string) *probe.History {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if l := ls.byPeer[peer]; l != nil {
		return l.history
	}
	return nil
}

// Close stops the probers and the responder. Update does nothing after.
func (ls *links) Close() {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.closed = true
	for peer, l := range ls.byPeer {
		l.stop()
		delete(ls.byPeer, peer)
	}
	if ls.responder != nil {
		ls.responder.Close()
		ls.responder = nil
	}
}

// ProbeConfig configures an agent's link probes.
type ProbeConfig struct {
	// Interval between probes of a link and the timeout after which a
	// probe is lost; zero means the probe package defaults (1 s and 1 s).
	Interval, Timeout time.Duration
	// Events, when set, receives every sample and verdict change (the
	// metrics use it).
	Events LinkEvents
}

// start returns the link monitor of an agent run; changed (may be nil) is
// called after every verdict change, besides Events.Changed.
func (c ProbeConfig) start(ctx context.Context, logf func(string, ...any), changed func()) *links {
	ev := c.Events
	if changed != nil {
		inner := ev.Changed
		ev.Changed = func(peer string, up bool) {
			if inner != nil {
				inner(peer, up)
			}
			changed()
		}
	}
	ls := newLinks(ctx, logf, ev)
	ls.interval, ls.timeout = c.Interval, c.Timeout
	return ls
}

// withMetrics returns c with m fed every sample (besides c.Events.Sample).
func (c ProbeConfig) withMetrics(m *metrics.Agent) ProbeConfig {
	if m == nil {
		return c
	}
	inner := c.Events.Sample
	c.Events.Sample = func(peer string, s probe.Sample) {
		m.ObserveProbe(peer, s)
		if inner != nil {
			inner(peer, s)
		}
	}
	return c
}

// linkStatuses returns the links of plan g as a status report carries
// them: the data plane's view of each link (established, handshake,
// counters; when st is set), the probe figures (when ls is set) and the
// available-bandwidth estimate (when m has one). Peers whose link the data
// plane does not set up yet are left out.
func linkStatuses(ctx context.Context, g plan.Gateway, st dataplane.Dataplane, ls *links, m *metrics.Agent, logf func(string, ...any)) []api.LinkStatus {
	var states []dataplane.LinkState
	if st != nil {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		var err error
		states, err = st.Status(sctx, g)
		cancel()
		if err != nil {
			logf("reading the links' state: %v", err)
		}
	} else {
		for _, p := range g.Peers {
			if dataplane.Ready(p) {
				states = append(states, dataplane.LinkState{Peer: p.Gateway, Backend: p.Backend, Endpoint: p.Endpoint})
			}
		}
	}
	peers := map[string]plan.Peer{}
	for _, p := range g.Peers {
		peers[p.Gateway] = p
	}
	now := time.Now()
	out := []api.LinkStatus{}
	for _, s := range states {
		l := api.LinkStatus{
			Peer: s.Peer, Backend: s.Backend, Transport: s.Transport, Established: s.Established,
			PublicKey: peers[s.Peer].WireGuard.PublicKey, Endpoint: s.Endpoint,
			LastHandshake: s.LastHandshake, RxBytes: s.RxBytes, TxBytes: s.TxBytes, Reason: s.Reason,
		}
		if !s.LastHandshake.IsZero() {
			l.HandshakeAge = max(now.Sub(s.LastHandshake), 0)
		}
		if ls != nil {
			l.Probe = ls.Probe(s.Peer, now)
		}
		if bps, ok := m.AvailableBandwidth(s.Peer); ok {
			l.AvailableBandwidth = bps
		}
		out = append(out, l)
	}
	return out
}
