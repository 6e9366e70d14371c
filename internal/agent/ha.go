package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"

	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/dataplane"
	"github.com/fednet/fednet/internal/ha"
	"github.com/fednet/fednet/internal/metrics"
	"github.com/fednet/fednet/internal/plan"
)

// HAConfig configures the agent's failover: the election of its site's
// active gateway and the rerouting around failed links and gateways,
// without the manager (docs/resilience.md).
type HAConfig struct {
	// Off turns failover off: the agent applies its plans as they come.
	Off bool
	// Interval between echoes and Multiplier (defaults ha.DefaultInterval
	// and ha.DefaultMultiplier); HoldDown (default ha.DefaultHoldDown).
	Interval   time.Duration
	Multiplier int
	HoldDown   time.Duration
}

// haSource is the Source decorator of failover: it passes on the inner
// source's plans with the failures ha.State decides as inputs, recomputing
// the plan (plan.ForGateway over the plan's Local) whenever the decision
// changes. A plan without Local passes unchanged.
type haSource struct {
	inner   Source
	cfg     HAConfig
	logf    func(string, ...any)
	metrics *metrics.Agent
	routes  string // the routes of the plan last delivered; guarded by seq
	// quiet leaves the sockets closed (unit tests: no packet leaves).
	quiet bool

	seq sync.Mutex // serializes deciding and delivering

	mu      sync.Mutex // guards the fields below
	deliver Deliver
	last    *Update // the inner source's latest plan
	state   *ha.State
	dec     ha.Decision
	decided bool
	inForce string // the key of the decision in force, "" for none
	targets map[netip.Addr]haTarget
	kick    chan struct{}
	// active is the gateway the decision holds active at the own site,
	// since when.
	active      string
	activeSince time.Time
	// applied is the plan the loop last applied without error; announce
	// asks the monitor for a hello at once (what this gateway sends
	// where changed).
	applied, pending *plan.Gateway
	announce         chan struct{}
	// moving are the prefixes sent straight to their site's gateway
	// during a way back's lead (WayBackLead).
	moving map[netip.Prefix]netip.Addr
	// holds: the applied plan makes this gateway its site's active one;
	// appliedDown the links the decision held down when it was applied.
	holds       bool
	appliedDown map[plan.SitePair]bool
	// tx is the transit device's state (transit.go).
	tx transitState
	// drain is the bridges this gateway keeps draining after it stepped
	// down, nil for none (bridged.go).
	drain *drainState
	// bridged makes the way back's changes of bridged ports (nil: the
	// kernel's; bridged.go).
	bridged bridgedOps
	// after runs f after d in the background (nil: time.AfterFunc; tests
	// run it at once).
	after func(d time.Duration, f func())
}

type haTarget struct {
	gateway string
	lan     bool
}

func newHASource(inner Source, cfg HAConfig, m *metrics.Agent, logf func(string, ...any)) Source {
	if cfg.Off {
		return inner
	}
	if logf == nil {
		logf = func(string, ...any) {}
	}
	return &haSource{inner: inner, cfg: cfg, logf: logf, metrics: m, kick: make(chan struct{}, 1), announce: make(chan struct{}, 1)}
}

// Run implements Source.
func (h *haSource) Run(ctx context.Context, deliver Deliver) error {
	h.mu.Lock()
	h.deliver = deliver
	h.mu.Unlock()
	// A way back cut short by this agent's end (killed during its lead)
	// may have left the bridged shapes' separation behind: none is in
	// force when an agent starts.
	if ops := h.l2(); ops != nil {
		if err := ops.SeparateShapes(nil); err != nil {
			h.logf("failover: %v", err)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Add(2)
	go func() {
		defer wg.Done()
		if !h.quiet {
			h.monitor(ctx)
		}
	}()
	go func() {
		defer wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case <-h.kick:
				h.redeliver()
			}
		}
	}()
	return h.inner.Run(ctx, h.fromInner)
}

// fromInner is the inner source's Deliver.
func (h *haSource) fromInner(u Update) Result {
	h.seq.Lock()
	defer h.seq.Unlock()
	if u.Err != nil || u.Plan == nil {
		return h.deliver(u)
	}
	h.mu.Lock()
	kept := u
	kept.Dataplane = nil
	h.last = &kept
	h.mu.Unlock()
	p, why := h.decide()
	out := u
	out.Plan = &p
	if why != "" {
		out.Why = u.Why + " (" + why + ")"
	}
	h.noteRoutes(p, out.Why)
	return h.deliverMoving(out)
}

// noteRoutes logs and counts a path change when p's routes differ from
// those of the plan delivered before (not at the first plan).
func (h *haSource) noteRoutes(p plan.Gateway, why string) {
	var b strings.Builder
	for _, r := range p.Routes {
		fmt.Fprintf(&b, "%s via %s, ", r.Destination, r.Via)
	}
	routes := strings.TrimSuffix(b.String(), ", ")
	if h.routes != "" && routes != h.routes {
		h.logf("failover: path change (%s): routes %s", why, routes)
		h.metrics.PathChange()
	}
	h.routes = routes
}

// redeliver puts the plan of the current decision in force.
func (h *haSource) redeliver() {
	h.seq.Lock()
	defer h.seq.Unlock()
	h.mu.Lock()
	last := h.last
	h.mu.Unlock()
	if last == nil {
		return
	}
	p, why := h.decide()
	u := *last
	u.Plan = &p
	u.Why = "failover: " + why
	if why == "" {
		u.Why = "failover: back to the plan as planned"
	}
	h.noteRoutes(p, u.Why)
	h.deliverMoving(u)
}

// decide returns the plan to put in force for the latest inner plan and
// the decision, and why it differs ("" when it does not).
func (h *haSource) decide() (plan.Gateway, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	inner := *h.last.Plan
	if inner.Local == nil || inner.Local.Federation == nil {
		return inner, ""
	}
	if h.state == nil {
		holds, err := dataplane.HoldsVirtual(inner.LAN)
		if err != nil {
			h.logf("failover: reading the virtual address: %v", err)
		}
		st, err := ha.New(ha.Config{Self: inner.Name, Federation: inner.Local.Federation, Interval: h.cfg.Interval,
			Multiplier: h.cfg.Multiplier, HoldDown: h.cfg.HoldDown, HoldsVirtual: holds}, time.Now())
		if err != nil {
			h.logf("failover: %v; applying plans as they come", err)
			return inner, ""
		}
		h.state = st
	}
	h.targets = haTargets(inner)
	if !h.decided {
		now := time.Now()
		h.dec = h.state.Tick(now, inner.Local.Active[inner.Site])
		h.decided = true
		h.noteActiveLocked(now)
	}
	h.inForce = h.dec.Key()
	if h.inForce == "" {
		return inner, ""
	}
	p, err := plan.ForGateway(inner.Local.Federation, h.dec.Apply(inner.Local.Inputs()), inner.Name)
	if err != nil {
		h.logf("failover: planning with %s: %v; keeping the plan as planned", h.inForce, err)
		return inner, ""
	}
	p.Local = inner.Local
	if plan.Equal(p, inner) {
		return inner, ""
	}
	return p, h.inForce
}

// noteActiveLocked notes which gateway h.dec holds active at the own
// site, and since when it does. h.mu must be held.
func (h *haSource) noteActiveLocked(now time.Time) {
	active := h.dec.Active[h.state.Site()]
	if h.dec.SelfActive {
		active = h.last.Plan.Name
	}
	if active != h.active {
		h.active, h.activeSince = active, now
	}
}

// Status returns what the failover holds of the own site, for the status
// report; nil before the first decision (or for plans without Local).
func (h *haSource) Status() *api.FailoverStatus {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.state == nil || h.active == "" {
		return nil
	}
	self := h.last.Plan.Name
	st := &api.FailoverStatus{Active: h.active, ActiveSince: h.activeSince.UTC()}
	if h.active == self {
		st.Epoch = h.dec.Epoch
	}
	if c, ok := h.state.LastRoleChange(); ok {
		f := &api.Failover{At: c.At.UTC(), From: self, To: c.Other, Cause: c.Cause}
		if c.Active {
			f.From, f.To = c.Other, self
		}
		st.LastFailover = f
	}
	return st
}

// haTargets are the addresses to echo: every peer's transit address
// (through the tunnel) and the LAN address of the site's other gateways.
func haTargets(g plan.Gateway) map[netip.Addr]haTarget {
	out := map[netip.Addr]haTarget{}
	for _, p := range g.Peers {
		if a, ok := peerTransit(g, p); ok && dataplane.Ready(p) {
			out[a] = haTarget{gateway: p.Gateway}
		}
	}
	for _, s := range g.Local.Federation.Sites {
		if s.Name != g.Site {
			continue
		}
		for _, o := range s.Gateways {
			if o.Name != g.Name && o.LANAddress.IsValid() {
				out[o.LANAddress] = haTarget{gateway: o.Name, lan: true}
			}
		}
	}
	return out
}

// monitor sends the echoes and hellos and runs the state's ticks.
func (h *haSource) monitor(ctx context.Context) {
	ic, err := icmp.ListenPacket("ip4:icmp", "0.0.0.0")
	if err != nil {
		h.logf("failover off: opening the echo socket: %v", err)
		return
	}
	defer ic.Close()
	uc, err := net.ListenUDP("udp4", &net.UDPAddr{Port: ha.Port})
	if err != nil {
		h.logf("failover off: opening the hello socket on port %d: %v", ha.Port, err)
		return
	}
	defer uc.Close()
	go func() { <-ctx.Done(); ic.Close(); uc.Close() }()
	id := os.Getpid() & 0xffff
	go h.readEchoes(ic, id)
	go h.readHellos(uc)
	interval := h.cfg.Interval
	if interval <= 0 {
		interval = ha.DefaultInterval
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	// release ticks at the moment a held link is let up (State.NextRelease),
	// so that every gateway moves traffic back then, not up to an interval
	// later.
	release := time.NewTimer(time.Hour)
	defer release.Stop()
	seq := 0
	for {
		echo, announce := false, false
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			echo = true
		case <-release.C:
		case <-h.announce:
			announce = true
		}
		h.mu.Lock()
		st, targets := h.state, h.targets
		h.mu.Unlock()
		if st == nil {
			continue
		}
		if echo {
			seq++
			msg := icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: id, Seq: seq & 0xffff, Data: []byte("fednet-ha")}}
			wire, _ := msg.Marshal(nil)
			for a := range targets {
				_, _ = ic.WriteTo(wire, &net.IPAddr{IP: a.AsSlice()})
			}
		}
		h.mu.Lock()
		var named string
		if h.last != nil && h.last.Plan.Local != nil {
			named = h.last.Plan.Local.Active[h.last.Plan.Site]
		}
		now := time.Now()
		dec := h.state.Tick(now, named)
		events := h.state.Events()
		h.dec, h.decided = dec, true
		h.noteActiveLocked(now)
		changed := dec.Key() != h.inForce
		// Hellos every two intervals, and at once when the decision
		// changed: a claim or a step-down reaches the others a hello
		// sooner, which shortens a handover.
		var hello []byte
		if echo && seq%2 == 0 || changed || announce {
			hello, _ = json.Marshal(h.state.Hello(now, dec))
		}
		if at, ok := h.state.NextRelease(now); ok && at.Sub(now) < interval {
			release.Reset(at.Sub(now))
		}
		drained := h.endDrainLocked(now)
		changed = changed || drained
		h.mu.Unlock()
		if drained {
			h.logf("failover: the remote gateways moved the site: the bridges this gateway drained go (at %s)", now.Format("15:04:05.000"))
		}
		// Encapsulate what the far ends do not accept plain (any more),
		// before the hello that says this gateway stepped down: a remote
		// gateway moves the site away from it only on that word.
		h.syncTransit()
		for _, e := range events {
			h.logf("failover: %s (at %s)", e, now.Format("15:04:05.000"))
			if strings.HasPrefix(e, "active (epoch") {
				h.metrics.Failover()
			}
		}
		if hello != nil {
			for a := range targets {
				_, _ = uc.WriteToUDP(hello, &net.UDPAddr{IP: a.AsSlice(), Port: ha.Port})
			}
		}
		if changed {
			select {
			case h.kick <- struct{}{}:
			default:
			}
		}
	}
}

// readEchoes files echo replies until the socket closes.
func (h *haSource) readEchoes(c *icmp.PacketConn, id int) {
	buf := make([]byte, 1500)
	for {
		n, from, err := c.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		m, err := icmp.ParseMessage(1, buf[:n])
		if err != nil || m.Type != ipv4.ICMPTypeEchoReply {
			continue
		}
		if e, ok := m.Body.(*icmp.Echo); !ok || e.ID != id {
			continue
		}
		ip, ok := from.(*net.IPAddr)
		if !ok {
			continue
		}
		a, _ := netip.AddrFromSlice(ip.IP)
		now := time.Now()
		h.mu.Lock()
		if t, ok := h.targets[a.Unmap()]; ok && h.state != nil {
			h.state.Answered(t.gateway, t.lan, now)
		}
		h.mu.Unlock()
	}
}

// readHellos takes hellos until the socket closes.
func (h *haSource) readHellos(c *net.UDPConn) {
	buf := make([]byte, 64<<10)
	for {
		n, from, err := c.ReadFromUDP(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		h.mu.Lock()
		_, known := h.targets[from.AddrPort().Addr().Unmap()]
		h.mu.Unlock()
		if !known {
			continue // only the peers and the site's gateways speak
		}
		var hello ha.Hello
		if json.Unmarshal(buf[:n], &hello) != nil {
			continue
		}
		now := time.Now()
		h.mu.Lock()
		if h.state != nil {
			h.state.Receive(hello, now)
		}
		h.mu.Unlock()
	}
}
