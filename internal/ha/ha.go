// Package ha decides, on one gateway and without the manager, which
// failures its plan must take as inputs: which gateway is active at each
// site with several gateways (an election in the agents), which gateways
// are down and which inter-site links are down. It is pure: the agent feeds
// it echo replies (liveness, answered by the kernels of the other
// gateways, so a killed agent is not a dead gateway) and the hellos other
// agents flood over the tunnels and the site's LAN (what this gateway
// cannot observe), with the time; State returns the decision, as inputs
// for plan.ForGateway (docs/resilience.md).
//
// The rules:
//
//   - liveness: a target (a peer gateway through the tunnel, a gateway of
//     the own site on the LAN) is alive while it answered an echo within
//     its detection time; one that never answered is not judged. The
//     detection time adapts to the target, like BFD's: Interval ×
//     Multiplier on a quiet machine, twice the longest silence the target
//     (or this agent's own ticks) showed in the last AdaptWindow when that
//     is longer, never more than MaxDetect. So a loaded machine, whose
//     userspace data plane answers late, is given time, while a failure on
//     a quiet one is seen in Interval × Multiplier;
//   - election (a site with two or more gateways): the active gateway is
//     the live claimant with the highest epoch, then the lowest name. A
//     standby takes over (claiming the highest epoch it knows plus one)
//     when the current active does not answer on the LAN, or reaches no
//     other site while the standby does. The active steps down when it
//     learns of a better claim, or reaches no other site while a gateway
//     of its site does. No preemption: a recovered gateway stays standby,
//     unless it is the gateway the operator activated (the plan's
//     Active): that one takes the role from a live active once it has
//     run for HoldDown, reaches as many sites and holds none of its
//     links down;
//   - links: the active (or only) gateway of a site declares the link to
//     another site down when none of that site's gateways that answered
//     before answers now; a remote gateway that does not answer while
//     another of its site does is down (its site's next gateway carries
//     the site), but the site's claimant only while another carries the
//     site (never the last one that answers) and only while it is silent.
//     The others stay down until they have answered for HoldDown (no
//     flapping), unless no other path joins the link's sites (a site that
//     was down as a whole, a federation cut in two). The active gateway
//     holds none of its links that fell silent together with all the
//     others (the cause is at it: a restarting wgdev, its uplink) until
//     others answered for a detection time. Link state is flooded in
//     hellos, so every gateway plans with the same failures, including
//     those on paths it only relays;
//     a held link that answers again carries the moment its holder lets
//     it up, and every gateway lets it up at the latest of those moments
//     (NextRelease says when to tick), so both ends move back together.
//     An active gateway whose sibling could take its place announces a
//     held link only after two intervals and while it reaches another
//     site (announces): an uplink cut silences its links one by one.
//     The moments are the holders' clocks: gateways' clocks must agree
//     (NTP) to well under the hold-down.
package ha

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/spec"
)

// Defaults of Config.
const (
	DefaultInterval   = 50 * time.Millisecond
	DefaultMultiplier = 6
	DefaultHoldDown   = 10 * time.Second
	DefaultMaxDetect  = time.Second
	// AdaptWindow is how long a long silence lengthens its target's
	// detection time after it was last seen.
	AdaptWindow = 30 * time.Second
	// Port is the UDP port of hellos, on transit and LAN addresses.
	Port = 51823
)

// Config configures a State.
type Config struct {
	// Self is this gateway; Federation the spec it plans from.
	Self       string
	Federation *spec.Federation
	// Interval between echoes, Multiplier the echoes missed before a
	// target is dead (defaults 50 ms and 6: a failure is seen in 300 ms).
	Interval   time.Duration
	Multiplier int
	// HoldDown is how long a link or gateway must answer again before it
	// carries traffic again (default 10 s).
	HoldDown time.Duration
	// MaxDetect bounds the adaptive detection time (default 1 s; never
	// below Interval × Multiplier).
	MaxDetect time.Duration
	// HoldsVirtual is true when this machine holds its site's virtual
	// address at start: an agent that restarts on the active gateway
	// stays active (its data plane never stopped).
	HoldsVirtual bool
}

// Entry is one gateway's state as it announces it; hellos flood entries.
type Entry struct {
	Gateway string `json:"g"`
	Site    string `json:"s"`
	// Seq is the origin's clock (ns) when it made the entry: later wins.
	Seq int64 `json:"q"`
	// Active and Epoch are the gateway's claim of its site.
	Active bool   `json:"a,omitempty"`
	Epoch  uint64 `json:"e,omitempty"`
	// Reach is how many other sites the gateway reaches, -1 while it
	// does not know yet (it just started).
	Reach int `json:"r"`
	// LinksDown are the links of its site it holds down (as its site's
	// active gateway).
	LinksDown []plan.SitePair `json:"d,omitempty"`
	// Release, one per LinksDown when set, is when (the origin's clock,
	// Unix ns) the origin lets that link up: the end of its hold-down once
	// the link answers again, 0 while it does not. Every gateway lets the
	// link up at the latest release of its holders, at that moment, so
	// that traffic moves back at both ends together.
	Release []int64 `json:"u,omitempty"`
	// Sends names, per remote site, the gateway this gateway sends that
	// site's prefixes to in the plan it applied: the peer its WireGuard
	// accepts them from. A gateway sends its site's traffic plain to a
	// peer only while the peer's Sends names it (see Plain).
	Sends map[string]string `json:"m,omitempty"`
	// Holds says the gateway's applied plan makes it its site's active
	// gateway (it holds the virtual address): an active gateway steps
	// down for a better claim only once the claimant holds (see yieldTo).
	Holds bool `json:"h,omitempty"`
}

// Hello is what an agent sends its peers and its site's gateways.
type Hello struct {
	From    string  `json:"from"`
	Entries []Entry `json:"entries"`
}

// Decision is what the plan must take as inputs.
type Decision struct {
	// Active by site: the elected gateway of every site with a live claim.
	Active map[string]string
	// Down are remote gateways this gateway holds down.
	Down map[string]bool
	// LinksDown are the links held down, observed or learned.
	LinksDown map[plan.SitePair]bool
	// SelfActive says this gateway is its site's active gateway.
	SelfActive bool
	// Epoch is this gateway's claim's epoch.
	Epoch uint64
}

// Key is a stable text of d, to see whether it changed.
func (d Decision) Key() string {
	var b strings.Builder
	for _, s := range slices.Sorted(maps.Keys(d.Active)) {
		fmt.Fprintf(&b, "active %s=%s;", s, d.Active[s])
	}
	for _, g := range slices.Sorted(maps.Keys(d.Down)) {
		fmt.Fprintf(&b, "down %s;", g)
	}
	for _, p := range sortedPairs(d.LinksDown) {
		fmt.Fprintf(&b, "link %s-%s;", p.A, p.B)
	}
	return b.String()
}

// Apply returns in with d's failures added.
func (d Decision) Apply(in plan.Inputs) plan.Inputs {
	for s, g := range d.Active {
		in = in.WithActive(s, g)
	}
	for g := range d.Down {
		in = in.WithGatewayDown(g)
	}
	for p := range d.LinksDown {
		in = in.WithLinkDown(p.A, p.B)
	}
	return in
}

// target is one gateway this gateway echoes.
type target struct {
	answered bool
	last     time.Time // last answer
	upSince  time.Time // answering continuously since (zero while dead)
	heldDown bool      // judged dead and not yet held up for HoldDown
	downAt   time.Time // when it was last judged dead
	isolated bool      // a link held while no other path joined its sites
	// local: a link of this gateway's that fell silent with all the
	// others (the cause at this gateway); judged again only once others
	// answered for a detection time (see Tick).
	local      bool
	downReason string
	// slow is the longest silence between two answers seen lately, at
	// slowAt: the detection time adapts to it (see detectFor).
	slow   time.Duration
	slowAt time.Time
}

// noteGap records a silence of gap ending at at, when it is longer than
// two intervals: it lengthens the target's detection time for
// AdaptWindow, and a silence at least half as long keeps it lengthened.
func (t *target) noteGap(gap, interval time.Duration, at time.Time) {
	if gap <= 2*interval {
		return
	}
	switch {
	case gap >= t.slow || at.Sub(t.slowAt) > AdaptWindow:
		t.slow, t.slowAt = gap, at
	case gap >= t.slow/2:
		t.slowAt = at
	}
}

// recentSlow returns t's recent longest silence at now (zero once it is older
// than AdaptWindow).
func (t *target) recentSlow(now time.Time) time.Duration {
	if t == nil || now.Sub(t.slowAt) > AdaptWindow {
		return 0
	}
	return t.slow
}

// State is one gateway's view. Not safe for concurrent use.
type State struct {
	cfg    Config
	site   string
	sites  map[string][]string // gateway names by site, spec order
	siteOf map[string]string
	start  time.Time
	// tunnel and lan targets by gateway name.
	tunnel, lan map[string]*target
	entries     map[string]Entry     // by origin, the newest seen
	fresh       map[string]time.Time // when each origin's entry last got newer
	active      bool
	epoch       uint64
	links       map[plan.SitePair]*target // own links' state (by remote site)
	events      []string
	change      *RoleChange // the last change of this gateway's role
	// lastTick is when Tick last ran; graceUntil ends a pause in the
	// judging after this agent was starved (see Tick).
	lastTick, graceUntil time.Time
	// reachSince is when this gateway last began reaching another site
	// after reaching none (zero while it reaches none).
	reachSince time.Time
	// ticks records the lateness of this agent's own ticks (a busy CPU
	// delays the data plane as much): it lengthens every detection time.
	ticks target
	// sends is this gateway's Entry.Sends (SetSends); remote the remote
	// sites' active gateways as last decided (see remoteActive).
	sends  map[string]string
	remote map[string]remoteClaim
	// holds is this gateway's Entry.Holds (SetHolds); better the best
	// claim over this active gateway's, since when (yieldTo).
	holds  bool
	better struct {
		gateway string
		since   time.Time
	}
}

// RoleChange is a change of this gateway's role that the election made.
type RoleChange struct {
	At time.Time
	// Active: this gateway took the site over; else it stepped down.
	Active bool
	// Other is the gateway that was active before (Active) or that is
	// active now (stepped down); empty when none was.
	Other string
	// Cause is why, in the election's words.
	Cause string
}

// LastRoleChange returns the last change of this gateway's role, if any.
func (s *State) LastRoleChange() (RoleChange, bool) {
	if s.change == nil {
		return RoleChange{}, false
	}
	return *s.change, true
}

// changed records a change of this gateway's role and logs it as event.
func (s *State) changed(c RoleChange, event string) {
	s.change = &c
	s.events = append(s.events, event)
}

// New returns the state of cfg.Self at now.
func New(cfg Config, now time.Time) (*State, error) {
	if cfg.Federation == nil {
		return nil, fmt.Errorf("ha: Config.Federation is required")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Multiplier <= 0 {
		cfg.Multiplier = DefaultMultiplier
	}
	if cfg.HoldDown <= 0 {
		cfg.HoldDown = DefaultHoldDown
	}
	if cfg.MaxDetect <= 0 {
		cfg.MaxDetect = DefaultMaxDetect
	}
	if base := cfg.Interval * time.Duration(cfg.Multiplier); cfg.MaxDetect < base {
		cfg.MaxDetect = base
	}
	s := &State{cfg: cfg, sites: map[string][]string{}, siteOf: map[string]string{}, start: now,
		tunnel: map[string]*target{}, lan: map[string]*target{}, entries: map[string]Entry{}, fresh: map[string]time.Time{},
		links: map[plan.SitePair]*target{}}
	for _, site := range cfg.Federation.Sites {
		for _, g := range site.Gateways {
			s.sites[site.Name] = append(s.sites[site.Name], g.Name)
			s.siteOf[g.Name] = site.Name
		}
	}
	site, ok := s.siteOf[cfg.Self]
	if !ok {
		return nil, fmt.Errorf("ha: gateway %q is not in federation %q", cfg.Self, cfg.Federation.Name)
	}
	s.site = site
	s.active = cfg.HoldsVirtual && len(s.sites[site]) > 1
	return s, nil
}

// Site is this gateway's site.
func (s *State) Site() string { return s.site }

// Siblings are the other gateways of this gateway's site, spec order.
func (s *State) Siblings() []string {
	var out []string
	for _, g := range s.sites[s.site] {
		if g != s.cfg.Self {
			out = append(out, g)
		}
	}
	return out
}

// detect is how long a target may stay silent on a quiet machine.
func (s *State) detect() time.Duration { return s.cfg.Interval * time.Duration(s.cfg.Multiplier) }

// detectFor is how long t may stay silent at now: detect, or twice the
// longest silence t or this agent's ticks showed within AdaptWindow when
// that is longer, at most MaxDetect.
func (s *State) detectFor(t *target, now time.Time) time.Duration {
	d := 2 * max(t.recentSlow(now), s.ticks.recentSlow(now))
	return min(max(d, s.detect()), s.cfg.MaxDetect)
}

// starting is true during the first moments, while the state does not
// know enough to elect.
func (s *State) starting(now time.Time) bool { return now.Sub(s.start) < 3*s.detect() }

// Answered records an echo reply from gateway over the tunnel (lan false)
// or the LAN.
func (s *State) Answered(gateway string, lan bool, at time.Time) {
	m := s.tunnel
	if lan {
		m = s.lan
	}
	t := m[gateway]
	if t == nil {
		t = &target{}
		m[gateway] = t
	}
	if t.answered {
		if gap := at.Sub(t.last); gap <= s.cfg.MaxDetect {
			t.noteGap(gap, s.cfg.Interval, at)
		}
	}
	if !t.answered || at.Sub(t.last) > s.detectFor(t, at) {
		t.upSince = at
	}
	t.answered, t.last = true, at
}

// alive says whether t answered within the detection time; a target that
// never answered is alive (not judged), and so is every target during a
// grace after this agent was starved.
func (s *State) alive(t *target, now time.Time) bool {
	return t == nil || !t.answered || s.silentFor(t, now) <= s.detectFor(t, now)
}

// answering is alive with at least one answer.
func (s *State) answering(t *target, now time.Time) bool {
	return t != nil && t.answered && s.silentFor(t, now) <= s.detectFor(t, now)
}

// silentFor is how long t has been silent as far as it can be judged:
// zero during a grace.
func (s *State) silentFor(t *target, now time.Time) time.Duration {
	if now.Before(s.graceUntil) {
		return 0
	}
	return now.Sub(t.last)
}

// starved notes a tick that comes late: this agent did not run (a busy
// CPU), so it sent no echoes and read no answers meanwhile, and the
// silence it would see is its own. It then judges no target dead for a
// detection time, while echoes and answers flow again.
func (s *State) starved(now time.Time) {
	if !s.lastTick.IsZero() {
		if gap := now.Sub(s.lastTick); gap <= s.cfg.MaxDetect {
			s.ticks.noteGap(gap, s.cfg.Interval, now)
		}
	}
	if !s.lastTick.IsZero() && now.Sub(s.lastTick) > s.detect()/2 {
		s.graceUntil = now.Add(s.detect())
		s.events = append(s.events, fmt.Sprintf("this agent did not run for %v (a busy CPU?): judging no gateway dead for %v", now.Sub(s.lastTick).Round(time.Millisecond), s.detect()))
	}
	s.lastTick = now
}

// Receive takes a hello.
func (s *State) Receive(h Hello, at time.Time) {
	for _, e := range h.Entries {
		if e.Gateway == s.cfg.Self || s.siteOf[e.Gateway] != e.Site {
			continue
		}
		if old, ok := s.entries[e.Gateway]; ok && old.Seq >= e.Seq {
			continue
		}
		s.entries[e.Gateway] = e
		s.fresh[e.Gateway] = at
	}
}

// freshEntry returns the entry of gateway when it is fresh.
func (s *State) freshEntry(gateway string, now time.Time) (Entry, bool) {
	e, ok := s.entries[gateway]
	if !ok || now.Sub(s.fresh[gateway]) > 2*s.detect()+time.Second/2 {
		return Entry{}, false
	}
	return e, true
}

// heard reports whether gateway's entry got newer within window.
func (s *State) heard(gateway string, now time.Time, window time.Duration) bool {
	at, ok := s.fresh[gateway]
	return ok && now.Sub(at) <= window
}

// reach counts the other sites this gateway reaches through the tunnels.
func (s *State) reach(now time.Time) int {
	n := 0
	for site, gws := range s.sites {
		if site == s.site {
			continue
		}
		for _, g := range gws {
			if s.answering(s.tunnel[g], now) {
				n++
				break
			}
		}
	}
	return n
}

// better reports whether claim (ea, a) beats (eb, b).
func better(ea uint64, a string, eb uint64, b string) bool {
	if ea != eb {
		return ea > eb
	}
	return a < b
}

// claimant returns the best live claim of site other than this gateway's
// own: the last entry of a gateway claiming active, while that gateway
// answers.
func (s *State) claimant(site string, now time.Time) (string, uint64, bool) {
	var best string
	var epoch uint64
	found := false
	for _, g := range s.sites[site] {
		if g == s.cfg.Self {
			continue
		}
		// A claim stands, fresh or not, until a better one or until its
		// gateway stops answering: a killed agent does not end it.
		e, ok := s.entries[g]
		if !ok || !e.Active {
			continue
		}
		// At the own site, a gateway the LAN does not show may still
		// claim it through the tunnels (a split LAN): its claim is fresh.
		_, fresh := s.freshEntry(g, now)
		if site == s.site && !s.alive(s.lan[g], now) && !fresh {
			continue
		}
		if site != s.site && !s.alive(s.tunnel[g], now) {
			continue
		}
		if !found || better(e.Epoch, g, epoch, best) {
			best, epoch, found = g, e.Epoch, true
		}
	}
	return best, epoch, found
}

// bestClaim returns the gateway of site whose last entry makes the best
// claim, live or not ("" when none claims).
func (s *State) bestClaim(site string) string {
	var best string
	var epoch uint64
	for _, g := range s.sites[site] {
		if e, ok := s.entries[g]; ok && e.Active && (best == "" || better(e.Epoch, g, epoch, best)) {
			best, epoch = g, e.Epoch
		}
	}
	return best
}

// maxEpoch is the highest epoch known at this gateway's site.
func (s *State) maxEpoch() uint64 {
	m := s.epoch
	for _, g := range s.sites[s.site] {
		if e, ok := s.entries[g]; ok && e.Epoch > m {
			m = e.Epoch
		}
	}
	return m
}

// defaultActive is the gateway the plan makes active at this gateway's
// site when nobody claims (the first in spec order, or the one the
// operator named).
func (s *State) defaultActive(named string) string {
	if named != "" && s.siteOf[named] == s.site {
		return named
	}
	return s.sites[s.site][0]
}

// Tick runs the election and the link rules at now and returns the
// decision; named is the active gateway the plan names for this site ("" for
// the default). Events (for the log) accumulate until Events.
func (s *State) Tick(now time.Time, named string) Decision {
	d := Decision{Active: map[string]string{}, Down: map[string]bool{}, LinksDown: map[plan.SitePair]bool{}}
	s.starved(now)
	myReach := s.reach(now)
	switch {
	case myReach == 0:
		s.reachSince = time.Time{}
	case s.reachSince.IsZero():
		s.reachSince = now
	}
	remoteSites := len(s.sites) - 1
	if len(s.sites[s.site]) > 1 && !s.starting(now) {
		s.elect(now, named, myReach, remoteSites)
	}
	d.SelfActive = s.active || len(s.sites[s.site]) == 1
	d.Epoch = s.epoch
	// The own site's active gateway.
	if len(s.sites[s.site]) > 1 {
		if s.active {
			d.Active[s.site] = s.cfg.Self
		} else if g, _, ok := s.claimant(s.site, now); ok {
			d.Active[s.site] = g
		} else if s.starting(now) || s.defaultActive(named) == s.cfg.Self {
			// Not active (yet): never take the site's hosts before the
			// election says so.
			for _, g := range s.sites[s.site] {
				if g != s.cfg.Self {
					d.Active[s.site] = g
					break
				}
			}
		}
	}
	// Remote sites: the live claimant; gateways that stopped answering.
	for site, gws := range s.sites {
		if site == s.site {
			continue
		}
		if g, _, ok := s.claimant(site, now); ok && len(gws) > 1 {
			d.Active[site] = s.remoteActive(site, g, now)
		}
		anyAlive := false
		for _, g := range gws {
			if s.answering(s.tunnel[g], now) {
				anyAlive = true
			}
		}
		// A gateway is held down while another of its site answers. The
		// site's claimant (the gateway whose claim is best, answering or
		// not) is held only while another of its site carries the site
		// (answers, not held down itself): a claimant that was held after
		// a moment of silence as a standby carries its site at once when
		// its sibling fails, and holding it would leave the site with
		// none. And only while it is silent, with no hold-down: the
		// claimant holds the site (its hosts' next hop, its bridges); a
		// standby forwards what reaches it but bridges nothing, so a
		// claimant that answers again (a restarted wgdev) carries its
		// site again at once.
		best := s.bestClaim(site)
		othersCarry := func(g string) bool {
			for _, o := range gws {
				if t := s.tunnel[o]; o != g && s.answering(t, now) && !t.heldDown {
					return true
				}
			}
			return false
		}
		for _, g := range gws {
			t := s.tunnel[g]
			if t == nil || !t.answered {
				continue
			}
			judge := anyAlive && len(gws) > 1
			if g == best {
				judge = othersCarry(g) && !s.answering(t, now)
			}
			if s.hold(t, now, judge, "gateway "+g) {
				d.Down[g] = true
				if d.Active[site] == g {
					delete(d.Active, site)
				}
			}
		}
		// The link, judged by the site's active (or only) gateway.
		p := plan.Pair(s.site, site)
		lt := s.links[p]
		if lt == nil {
			lt = &target{}
			s.links[p] = lt
		}
		// The link answers when any of the site's gateways does; it is
		// given the time of its slowest gateway.
		for _, g := range gws {
			if t := s.tunnel[g]; t != nil && t.answered {
				lt.answered = true
				if t.last.After(lt.last) {
					lt.last = t.last
				}
				if slow := t.recentSlow(now); slow > lt.recentSlow(now) {
					lt.slow, lt.slowAt = slow, t.slowAt
				}
			}
		}
		if anyAlive && lt.upSince.IsZero() {
			lt.upSince = now
		}
		// The active gateway holds none of its links that fell silent
		// together with all the others: the cause is at this gateway (its
		// wgdev restarting, its uplink), not at the links, whose other
		// ends judge them; held here, they would keep its own traffic on
		// relays, and be announced, for the hold-down once the tunnels
		// answer. Such a link is judged again once other links answered
		// for a detection time. (A standby holds them: an operator's move
		// waits until none is held.)
		dead := s.silentFor(lt, now) > s.detectFor(lt, now)
		switch {
		case dead && myReach == 0 && (!lt.heldDown || now.Sub(lt.downAt) <= 2*s.cfg.Interval):
			lt.local = true
		case dead && lt.local && myReach > 0 && now.Sub(s.reachSince) > s.detectFor(lt, now):
			lt.local = false
		}
		held := s.hold(lt, now, !d.SelfActive || !lt.local, "link "+p.A+"<->"+p.B)
		if held && d.SelfActive {
			d.LinksDown[p] = true
		}
		if !dead && !held {
			lt.local = false
		}
	}
	// Learned links: from every fresh entry of an active gateway.
	for g, e := range s.entries {
		if _, ok := s.freshEntry(g, now); !ok || !e.Active && len(s.sites[e.Site]) > 1 {
			continue
		}
		for i, p := range e.LinksDown {
			if len(e.Release) == len(e.LinksDown) && e.Release[i] != 0 && !now.Before(time.Unix(0, e.Release[i])) {
				continue // its holder lets it up now
			}
			d.LinksDown[p] = true
		}
	}
	// The hold-down keeps traffic on another path; a link whose two sites
	// have no other (a site that was down as a whole, e.g. a relay's
	// machine; or links held at once that cut the federation in two, as a
	// moment of silence of one gateway's tunnels can) comes back as soon
	// as it answers.
	for p, t := range s.links {
		if !t.heldDown {
			t.isolated = false
			continue
		}
		// Remembered while the link is held: the first gateway to let its
		// link up breaks the isolation the others would see.
		t.isolated = t.isolated || !s.connected(p.A, p.B, d.LinksDown)
		// Back only on an answer: a grace after starving is none.
		if now.Sub(t.last) > s.detectFor(t, now) {
			continue
		}
		if t.isolated {
			t.isolated = false
			t.heldDown = false
			delete(d.LinksDown, p)
			s.events = append(s.events, fmt.Sprintf("link %s<->%s up again: no other path to hold traffic on", p.A, p.B))
		}
	}
	return d
}

// heldLinks returns the own site's links this gateway holds down.
func (s *State) heldLinks() map[plan.SitePair]bool {
	out := map[plan.SitePair]bool{}
	for p, t := range s.links {
		if t.heldDown {
			out[p] = true
		}
	}
	return out
}

// connected reports whether sites a and b reach each other over enabled
// links that are not down.
func (s *State) connected(a, b string, down map[plan.SitePair]bool) bool {
	seen := map[string]bool{a: true}
	queue := []string{a}
	for len(queue) > 0 {
		site := queue[0]
		queue = queue[1:]
		if site == b {
			return true
		}
		for other := range s.sites {
			if !seen[other] && s.cfg.Federation.LinkEnabled(site, other) && !down[plan.Pair(site, other)] {
				seen[other] = true
				queue = append(queue, other)
			}
		}
	}
	return false
}

// releaseAt is when a held target that answers again is let up (zero
// while it does not answer).
func (s *State) releaseAt(t *target, now time.Time) time.Time {
	if !t.heldDown || t.upSince.IsZero() || s.silentFor(t, now) > s.detectFor(t, now) {
		return time.Time{}
	}
	return t.upSince.Add(s.cfg.HoldDown)
}

// NextRelease returns the earliest moment after now at which a held link
// is let up (its own or one learned), so that the caller ticks then.
func (s *State) NextRelease(now time.Time) (time.Time, bool) {
	var next time.Time
	consider := func(at time.Time) {
		if at.After(now) && (next.IsZero() || at.Before(next)) {
			next = at
		}
	}
	for _, t := range s.links {
		consider(s.releaseAt(t, now))
	}
	for g, e := range s.entries {
		if _, ok := s.freshEntry(g, now); !ok || len(e.Release) != len(e.LinksDown) {
			continue
		}
		for _, u := range e.Release {
			if u != 0 {
				consider(time.Unix(0, u))
			}
		}
	}
	return next, !next.IsZero()
}

// hold applies the hold-down to a judged target: it returns true while t
// is dead or has not answered for HoldDown since it came back. cond false
// means the target is not to be judged now (and not held).
func (s *State) hold(t *target, now time.Time, cond bool, what string) bool {
	if !t.answered {
		return false
	}
	dead := s.silentFor(t, now) > s.detectFor(t, now)
	if dead {
		t.upSince = time.Time{}
	}
	if !cond {
		if t.heldDown {
			t.heldDown = false
			s.events = append(s.events, what+" no longer held down")
		}
		return false
	}
	switch {
	case dead && !t.heldDown:
		t.heldDown, t.downAt = true, now
		s.events = append(s.events, fmt.Sprintf("%s down: no answer for %v (detection time %v)", what, now.Sub(t.last).Round(time.Millisecond), s.detectFor(t, now).Round(time.Millisecond)))
	case !dead && t.heldDown && !t.upSince.IsZero() && now.Sub(t.upSince) >= s.cfg.HoldDown:
		t.heldDown = false
		s.events = append(s.events, fmt.Sprintf("%s up again: answering for %v (hold-down)", what, s.cfg.HoldDown))
	}
	return t.heldDown
}

// elect runs the own site's election.
func (s *State) elect(now time.Time, named string, myReach, remoteSites int) {
	other, otherEpoch, claimed := s.claimant(s.site, now)
	reachOK := myReach > 0 || remoteSites == 0
	if s.active {
		if claimed && better(otherEpoch, other, s.epoch, s.cfg.Self) && s.yieldTo(other, now) {
			s.active = false
			why := fmt.Sprintf("%s claims the site with epoch %d (mine %d)", other, otherEpoch, s.epoch)
			s.changed(RoleChange{At: now, Other: other, Cause: why}, "standby: "+why)
			return
		}
		if !reachOK {
			for _, g := range s.Siblings() {
				if e, ok := s.freshEntry(g, now); ok && e.Reach > 0 && s.answering(s.lan[g], now) {
					s.active = false
					why := fmt.Sprintf("this gateway reaches no other site, %s reaches %d", g, e.Reach)
					s.changed(RoleChange{At: now, Other: g, Cause: why}, "standby: "+why)
					return
				}
			}
		}
		return
	}
	cur := other
	if !claimed {
		cur = s.defaultActive(named)
	}
	var why string
	switch {
	case claimed && named == s.cfg.Self && s.operatorMove(now, other, myReach):
		why = fmt.Sprintf("the operator activated this gateway (fednet gateway activate); %s was active", other)
	case cur == s.cfg.Self:
		if !reachOK {
			return
		}
		why = "no other gateway of the site claims it"
	case !s.alive(s.lan[cur], now) && !s.heard(cur, now, s.detect()):
		// Silent on the LAN and no news of it through the tunnels either
		// (a split LAN alone moves nothing: it still serves the site).
		why = fmt.Sprintf("active gateway %s does not answer on the LAN", cur)
	case !s.alive(s.lan[cur], now):
		return
	default:
		e, ok := s.freshEntry(cur, now)
		if !(ok && e.Reach == 0 && myReach > 0) {
			return
		}
		why = fmt.Sprintf("active gateway %s reaches no other site, this one reaches %d", cur, myReach)
	}
	if !reachOK {
		return
	}
	s.active = true
	s.epoch = s.maxEpoch() + 1
	before := cur
	if cur == s.cfg.Self {
		before = ""
	}
	s.changed(RoleChange{At: now, Active: true, Other: before, Cause: why}, fmt.Sprintf("active (epoch %d): %s", s.epoch, why))
	// A standby's held links were never in force; taking over, it holds
	// down only those that do not answer now (a standby whose data plane
	// was slow a moment ago must not move the paths of the whole site).
	for _, p := range sortedPairs(s.heldLinks()) {
		if t := s.links[p]; s.answering(t, now) {
			t.heldDown = false
			s.events = append(s.events, fmt.Sprintf("link %s<->%s not held down: it answers as this gateway takes over", p.A, p.B))
		}
	}
}

// operatorMove reports whether this gateway, the one the operator named,
// takes the role from the live claimant other: once it has run for the
// hold-down (a named gateway that comes back from a failure takes the role
// back only after it has been up that long) and reaches at least as many
// sites as other says it does, none of its links held down (the remote
// gateways hold it down as long).
func (s *State) operatorMove(now time.Time, other string, myReach int) bool {
	if now.Sub(s.start) < s.cfg.HoldDown || !s.answering(s.lan[other], now) {
		return false
	}
	for _, t := range s.links {
		if t.heldDown {
			return false
		}
	}
	e, ok := s.freshEntry(other, now)
	return ok && myReach >= e.Reach
}

// Hello returns the hello to send at now: this gateway's entry and the
// fresh entries it knows.
func (s *State) Hello(now time.Time, d Decision) Hello {
	reach := s.reach(now)
	if s.starting(now) {
		reach = -1
	}
	own := Entry{Gateway: s.cfg.Self, Site: s.site, Seq: now.UnixNano(), Active: d.SelfActive, Epoch: s.epoch, Reach: reach, Sends: s.sends, Holds: s.holds}
	if d.SelfActive {
		for p, t := range s.links {
			if s.announces(t, now) {
				own.LinksDown = append(own.LinksDown, p)
			}
		}
		slices.SortFunc(own.LinksDown, func(a, b plan.SitePair) int { return cmp.Or(cmp.Compare(a.A, b.A), cmp.Compare(a.B, b.B)) })
		for _, p := range own.LinksDown {
			var u int64
			if at := s.releaseAt(s.links[p], now); !at.IsZero() {
				u = at.UnixNano()
			}
			own.Release = append(own.Release, u)
		}
	}
	h := Hello{From: s.cfg.Self, Entries: []Entry{own}}
	for _, g := range slices.Sorted(maps.Keys(s.entries)) {
		if e, ok := s.freshEntry(g, now); ok {
			h.Entries = append(h.Entries, e)
		}
	}
	return h
}

// announces reports whether this gateway, its site's active gateway,
// announces its held link t in its hellos at now. Where a sibling answers
// on the LAN, a held link is announced once it has been held for two echo
// intervals while this gateway still reaches another site. An uplink cut
// silences the links one after the other, within an interval, and a link
// announced down meanwhile would move the other sites' paths for nothing:
// the sibling takes the site a moment later. A gateway
// that reaches none is being replaced (the election), and what it holds
// down says that its own uplink is cut, not that the links are. Its own
// plan still takes them (it reaches nothing anyway).
func (s *State) announces(t *target, now time.Time) bool {
	if !t.heldDown {
		return false
	}
	replaceable := false
	for _, g := range s.Siblings() {
		if s.answering(s.lan[g], now) {
			replaceable = true
		}
	}
	return !replaceable || s.reach(now) > 0 && now.Sub(t.downAt) >= 2*s.cfg.Interval
}

// Events returns and clears what happened since the last call, for the
// log.
func (s *State) Events() []string {
	ev := s.events
	s.events = nil
	return ev
}

func sortedPairs(m map[plan.SitePair]bool) []plan.SitePair {
	out := slices.Collect(maps.Keys(m))
	slices.SortFunc(out, func(a, b plan.SitePair) int { return cmp.Or(cmp.Compare(a.A, b.A), cmp.Compare(a.B, b.B)) })
	return out
}
