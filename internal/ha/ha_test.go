package ha

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/spec"
)

// sim runs the states of every gateway of examples/ha.yaml on a fake
// clock: echoes every Interval, hellos every two, over a network whose
// faults the test sets.
type sim struct {
	t      *testing.T
	f      *spec.Federation
	now    time.Time
	states map[string]*State
	dec    map[string]Decision
	names  []string
	// Faults: a machine down, an agent killed (its kernel answers, it
	// sends nothing), an uplink cut, a tunnel cut, the LAN split.
	dead, agentDead, uplinkCut map[string]bool
	cut                        map[plan.SitePair]bool // by gateway names
	lanSplit                   bool
	ticks                      int
	// named is lab's gateway the operator activated (the plan's Active).
	named string
	// odd gateways send their hellos on odd ticks, the others on even
	// ones: agents' timers are not aligned.
	odd map[string]bool
	// deaf gateways read no echo answers nor hellos at their next tick
	// (an agent that was starved sent no echoes meanwhile, and runs its
	// tick before its readers).
	deaf map[string]bool
	// events are every gateway's events, "gateway: event".
	events []string
	// afterTick, when set, runs after every tick (the agents' applies).
	afterTick func()
	// slow gateways have not applied their decision yet (they hold
	// nothing new).
	slow map[string]bool
}

func newSim(t *testing.T) *sim {
	data, err := os.ReadFile("../../examples/ha.yaml")
	if err != nil {
		t.Fatal(err)
	}
	f, err := spec.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	s := &sim{t: t, f: f, now: time.Unix(1000, 0), states: map[string]*State{}, dec: map[string]Decision{},
		dead: map[string]bool{}, agentDead: map[string]bool{}, uplinkCut: map[string]bool{}, cut: map[plan.SitePair]bool{}}
	for _, site := range f.Sites {
		for _, g := range site.Gateways {
			s.names = append(s.names, g.Name)
			s.start(g.Name, g.Name == "onprem-gw1")
		}
	}
	slices.Sort(s.names)
	return s
}

// start (re)starts the agent of gateway.
func (s *sim) start(gateway string, holds bool) {
	st, err := New(Config{Self: gateway, Federation: s.f, HoldsVirtual: holds}, s.now)
	if err != nil {
		s.t.Fatal(err)
	}
	s.states[gateway] = st
}

func (s *sim) site(g string) string { return s.states[g].siteOf[g] }

// path says whether a packet gets from a to b (a tunnel between sites, the
// LAN within one).
func (s *sim) path(a, b string) bool {
	if s.dead[a] || s.dead[b] {
		return false
	}
	if s.site(a) == s.site(b) {
		return !s.lanSplit
	}
	return !s.uplinkCut[a] && !s.uplinkCut[b] && !s.cut[plan.Pair(a, b)]
}

// run advances the clock by d.
func (s *sim) run(d time.Duration) {
	end := s.now.Add(d)
	for s.now.Before(end) {
		s.now = s.now.Add(DefaultInterval)
		s.ticks++
		for _, a := range s.names {
			if s.dead[a] || s.agentDead[a] {
				continue
			}
			if s.deaf[a] {
				continue
			}
			for _, b := range s.names {
				if a != b && s.path(a, b) && s.path(b, a) {
					s.states[a].Answered(b, s.site(a) == s.site(b), s.now)
				}
			}
		}
		for _, a := range s.names {
			if s.dead[a] || s.agentDead[a] || s.odd[a] != (s.ticks%2 == 1) {
				continue
			}
			h := s.states[a].Hello(s.now, s.dec[a])
			for _, b := range s.names {
				if a != b && !s.dead[b] && !s.agentDead[b] && !s.deaf[b] && s.path(a, b) {
					s.states[b].Receive(h, s.now)
				}
			}
		}
		for _, a := range s.names {
			if s.dead[a] || s.agentDead[a] {
				continue
			}
			s.dec[a] = s.states[a].Tick(s.now, s.named)
			// The agents apply at once: a gateway active by its decision
			// holds the site.
			if !s.slow[a] {
				s.states[a].SetHolds(s.dec[a].SelfActive)
			}
			delete(s.deaf, a)
			for _, e := range s.states[a].Events() {
				s.t.Logf("%v %s: %s", s.now.Sub(time.Unix(1000, 0)), a, e)
				s.events = append(s.events, a+": "+e)
			}
		}
		if s.afterTick != nil {
			s.afterTick()
		}
	}
}

// activeAt returns who gateway g plans as lab's active gateway.
func (s *sim) activeAt(g string) string {
	in := s.dec[g].Apply(plan.Inputs{})
	p, err := plan.ForGateway(s.f, in, g)
	if err != nil {
		s.t.Fatal(err)
	}
	if g == "onprem-gw1" || g == "onprem-gw2" {
		if p.LAN.Active {
			return g
		}
		return "other"
	}
	for _, peer := range p.Peers {
		for _, a := range peer.AllowedIPs {
			if a.String() == "10.5.0.0/24" {
				return peer.Gateway
			}
		}
	}
	return ""
}

// wantActive checks that every live agent plans want as lab's active
// gateway, and that exactly one lab gateway says it is active.
func (s *sim) wantActive(want string) {
	s.t.Helper()
	for _, g := range s.names {
		if s.dead[g] || s.agentDead[g] {
			continue
		}
		got := s.activeAt(g)
		if (g == "onprem-gw1" || g == "onprem-gw2") && (got == g) != (g == want) {
			s.t.Errorf("%s: active %v, want %s active", g, got == g, want)
		}
		if g != "onprem-gw1" && g != "onprem-gw2" && got != want {
			s.t.Errorf("%s sends lab's prefix to %q, want %s", g, got, want)
		}
	}
}

func TestElectionSettles(t *testing.T) {
	s := newSim(t)
	s.run(2 * time.Second)
	s.wantActive("onprem-gw1")
	if d := s.dec["onprem-gw1"]; !d.SelfActive || d.Epoch != 0 {
		t.Errorf("gw1 decision %+v", d)
	}
}

// A standby that starts without the virtual address stays standby during
// its first moments and after, while the active answers.
func TestStandbyNeverPreempts(t *testing.T) {
	s := newSim(t)
	s.run(2 * time.Second)
	s.start("onprem-gw2", false)
	s.run(100 * time.Millisecond)
	s.wantActive("onprem-gw1")
	s.run(2 * time.Second)
	s.wantActive("onprem-gw1")
}

func TestActiveMachineDown(t *testing.T) {
	s := newSim(t)
	s.run(2 * time.Second)
	s.dead["onprem-gw1"] = true
	s.run(500 * time.Millisecond) // 300 ms detection, a hello or two
	s.wantActive("onprem-gw2")
	if e := s.dec["onprem-gw2"].Epoch; e != 1 {
		t.Errorf("gw2 epoch %d, want 1", e)
	}
	c, ok := s.states["onprem-gw2"].LastRoleChange()
	if !ok || !c.Active || c.Other != "onprem-gw1" || c.Cause != "active gateway onprem-gw1 does not answer on the LAN" || c.At.Before(s.now.Add(-500*time.Millisecond)) {
		t.Errorf("gw2's last role change %+v (%v), want taking over from onprem-gw1, which does not answer on the LAN, in the last 500 ms", c, ok)
	}
	// Repair: gw1 comes back, its agent restarts without the address: it
	// stays standby (no preemption), everyone keeps gw2.
	s.dead["onprem-gw1"] = false
	s.start("onprem-gw1", false)
	s.run(12 * time.Second)
	s.wantActive("onprem-gw2")
}

func TestActiveUplinkCut(t *testing.T) {
	s := newSim(t)
	s.run(2 * time.Second)
	if _, ok := s.states["onprem-gw2"].LastRoleChange(); ok {
		t.Error("a standby that never took over has a role change")
	}
	s.uplinkCut["onprem-gw1"] = true
	s.run(600 * time.Millisecond)
	s.wantActive("onprem-gw2")
	if c, ok := s.states["onprem-gw2"].LastRoleChange(); !ok || !c.Active || c.Other != "onprem-gw1" || c.Cause != "active gateway onprem-gw1 reaches no other site, this one reaches 3" {
		t.Errorf("gw2's last role change %+v (%v), want taking over from onprem-gw1, which reaches no other site", c, ok)
	}
	if c, ok := s.states["onprem-gw1"].LastRoleChange(); !ok || c.Active || c.Other != "onprem-gw2" {
		t.Errorf("gw1's last role change %+v (%v), want stepping down for onprem-gw2", c, ok)
	}
	s.uplinkCut["onprem-gw1"] = false
	s.run(12 * time.Second)
	s.wantActive("onprem-gw2")
}

// An uplink cut silences the active gateway's links one after the other
// (here aws's 50 ms before the rest): the other sites move lab to the
// standby and hold none of lab's links down, not even for a tick: the
// active does not announce the links it holds while its sibling could take
// its place and it reaches less and less. A link of the active
// that alone is cut is announced, two intervals later, and every gateway
// holds it down.
func TestActiveUplinkCutAnnouncesNoLink(t *testing.T) {
	s := newSim(t)
	s.run(2 * time.Second)
	remotes := []string{"aws-gw", "azure-gw", "gcp-gw"}
	held := func() string {
		for _, g := range remotes {
			if len(s.dec[g].LinksDown) > 0 {
				return g + " holds " + s.dec[g].Key()
			}
		}
		return ""
	}
	s.cut[plan.Pair("onprem-gw1", "aws-gw")] = true
	s.run(DefaultInterval)
	s.uplinkCut["onprem-gw1"] = true
	for range 20 {
		s.run(DefaultInterval)
		if h := held(); h != "" {
			t.Fatalf("%v after the cut: %s", s.now.Sub(time.Unix(1002, 0)), h)
		}
	}
	s.wantActive("onprem-gw2")

	// The active gateway (gw2 now) loses its link to aws alone.
	s.cut = map[plan.SitePair]bool{plan.Pair("onprem-gw2", "aws-gw"): true}
	s.uplinkCut["onprem-gw1"] = false
	s.run(600 * time.Millisecond)
	link := plan.Pair("aws-eu", "lab")
	for _, g := range []string{"azure-gw", "gcp-gw", "onprem-gw2"} {
		if !s.dec[g].LinksDown[link] {
			t.Errorf("%s does not hold %v down: %s", g, link, s.dec[g].Key())
		}
	}
}

// A killed agent is not a dead gateway: its kernel still answers, so no one
// moves the site; the restarted agent finds its virtual address and stays
// active.
func TestAgentKilled(t *testing.T) {
	s := newSim(t)
	s.run(2 * time.Second)
	s.agentDead["onprem-gw1"] = true
	s.run(5 * time.Second)
	s.wantActive("onprem-gw1")
	s.agentDead["onprem-gw1"] = false
	s.start("onprem-gw1", true)
	for range 40 {
		s.run(DefaultInterval)
		s.wantActive("onprem-gw1")
	}
}

// The site's gateways lose sight of each other on the LAN but both reach
// the other sites: the standby hears of the active through the tunnels, so
// nothing moves, and no gateway claims the site twice.
func TestLANSplit(t *testing.T) {
	s := newSim(t)
	s.run(2 * time.Second)
	s.lanSplit = true
	for range 40 {
		s.run(DefaultInterval)
		s.wantActive("onprem-gw1")
	}
	s.lanSplit = false
	s.run(3 * time.Second)
	s.wantActive("onprem-gw1")
	if e := s.dec["onprem-gw1"].Epoch; e != 0 {
		t.Errorf("epoch %d after the split, want 0: someone claimed", e)
	}
}

// A split brain (both gateways of the site claim it, e.g. after a
// partition healed): the remote gateways and the site's gateways follow the
// higher epoch at once, and the other gateway steps down.
func TestSplitBrainHigherEpochWins(t *testing.T) {
	s := newSim(t)
	s.run(2 * time.Second)
	s.states["onprem-gw2"].active, s.states["onprem-gw2"].epoch = true, 3
	s.run(300 * time.Millisecond)
	s.wantActive("onprem-gw2")
	if s.states["onprem-gw1"].active {
		t.Error("gw1 did not step down")
	}
}

// Two claims of the same epoch: the lower name wins, everywhere.
func TestClaimTieBreak(t *testing.T) {
	s := newSim(t)
	s.run(2 * time.Second)
	for _, g := range []string{"onprem-gw1", "onprem-gw2"} {
		s.states[g].active, s.states[g].epoch = true, 7
	}
	s.run(time.Second)
	s.wantActive("onprem-gw1")
	if !better(7, "a", 7, "b") || better(7, "b", 7, "a") || !better(8, "b", 7, "a") {
		t.Error("better: the higher epoch, then the lower name")
	}
}

// A cut link is held down by both ends and learned by the others, so every
// gateway plans with it; it comes back after the hold-down, not before.
func TestLinkDownHeldAndFlooded(t *testing.T) {
	s := newSim(t)
	s.run(2 * time.Second)
	s.cut[plan.Pair("aws-gw", "azure-gw")] = true
	s.run(600 * time.Millisecond)
	link := plan.Pair("aws-eu", "azure-we")
	for _, g := range s.names {
		if !s.dec[g].LinksDown[link] {
			t.Errorf("%s does not hold %v down: %s", g, link, s.dec[g].Key())
		}
		if len(s.dec[g].LinksDown) != 1 || len(s.dec[g].Down) != 0 {
			t.Errorf("%s holds more down: %s", g, s.dec[g].Key())
		}
	}
	s.cut[plan.Pair("aws-gw", "azure-gw")] = false
	s.run(5 * time.Second)
	for _, g := range s.names {
		if !s.dec[g].LinksDown[link] {
			t.Errorf("%s let the link up before the hold-down", g)
		}
	}
	s.run(7 * time.Second)
	for _, g := range s.names {
		if len(s.dec[g].LinksDown) != 0 {
			t.Errorf("%s still holds links down after the hold-down: %s", g, s.dec[g].Key())
		}
	}
}

// A flapping link changes the decision twice: down at the first cut, up
// one hold-down after the last repair.
func TestLinkFlapChangesTwice(t *testing.T) {
	s := newSim(t)
	s.run(2 * time.Second)
	changes, last := 0, s.dec["aws-gw"].Key()
	watch := func(d time.Duration) {
		for range int(d / DefaultInterval) {
			s.run(DefaultInterval)
			if k := s.dec["aws-gw"].Key(); k != last {
				changes, last = changes+1, k
			}
		}
	}
	for range 5 {
		s.cut[plan.Pair("aws-gw", "azure-gw")] = true
		watch(2 * time.Second)
		s.cut[plan.Pair("aws-gw", "azure-gw")] = false
		watch(2 * time.Second)
	}
	watch(12 * time.Second)
	if changes != 2 {
		t.Errorf("%d decision changes over 10 link changes, want 2", changes)
	}
}

// A relay's machine goes down: every gateway holds its site's links down
// and the pair it relayed plans the direct link.
func TestRelayDown(t *testing.T) {
	s := newSim(t)
	s.run(2 * time.Second)
	s.dead["aws-gw"] = true
	s.run(600 * time.Millisecond)
	for _, g := range []string{"azure-gw", "gcp-gw"} {
		p, err := plan.ForGateway(s.f, s.dec[g].Apply(plan.Inputs{}), g)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range p.Routes {
			if r.Via == "aws-gw" {
				t.Errorf("%s still routes %s via the dead relay", g, r.Destination)
			}
		}
	}
}

// A relay's site comes back: its links carry traffic as soon as they
// answer, not after the hold-down (there was no other path to hold it on).
func TestIsolatedSiteBackAtOnce(t *testing.T) {
	s := newSim(t)
	s.run(2 * time.Second)
	s.dead["aws-gw"] = true
	s.run(2 * time.Second)
	s.dead["aws-gw"] = false
	s.start("aws-gw", false)
	s.run(time.Second)
	for _, g := range s.names {
		for p := range s.dec[g].LinksDown {
			if p.A == "aws-eu" || p.B == "aws-eu" {
				t.Errorf("%s still holds %v down a second after aws-eu came back", g, p)
			}
		}
	}
}

// A grace after starving judges nothing dead, but lets nothing up either:
// the links to a site that is down as a whole stay held at a gateway that
// was starved meanwhile.
func TestStarvedAgentLetsNothingUp(t *testing.T) {
	s := newSim(t)
	s.deaf = map[string]bool{}
	s.run(2 * time.Second)
	s.dead["aws-gw"] = true
	s.run(2 * time.Second)
	s.agentDead["gcp-gw"] = true
	s.run(700 * time.Millisecond)
	s.agentDead["gcp-gw"] = false
	s.deaf["gcp-gw"] = true
	for range 4 {
		s.run(DefaultInterval)
		if !s.dec["gcp-gw"].LinksDown[plan.Pair("aws-eu", "gcp-ew")] {
			t.Fatalf("gcp-gw let its link to the dead aws-eu up after starving: %s", s.dec["gcp-gw"].Key())
		}
	}
}

// The operator moves the role (fednet gateway activate) to the standby and
// back: every gateway follows, the old active steps down, and the cause
// says it was the operator.
func TestOperatorActivate(t *testing.T) {
	s := newSim(t)
	s.run(DefaultHoldDown + time.Second)
	s.wantActive("onprem-gw1")
	s.named = "onprem-gw2"
	s.run(500 * time.Millisecond)
	s.wantActive("onprem-gw2")
	c, ok := s.states["onprem-gw2"].LastRoleChange()
	if !ok || !c.Active || c.Other != "onprem-gw1" || !strings.Contains(c.Cause, "operator activated") {
		t.Errorf("gw2's last role change %+v (%v), want taking over from onprem-gw1 by the operator", c, ok)
	}
	if c, ok := s.states["onprem-gw1"].LastRoleChange(); !ok || c.Active || c.Other != "onprem-gw2" {
		t.Errorf("gw1's last role change %+v (%v), want stepping down for onprem-gw2", c, ok)
	}
	s.run(2 * time.Second)
	s.wantActive("onprem-gw2")
	s.named = "onprem-gw1"
	s.run(500 * time.Millisecond)
	s.wantActive("onprem-gw1")
}

// The named gateway does not take the role while it reaches fewer sites
// than the active (its uplink is cut), nor in its first HoldDown: one
// that comes back from a failure takes the role back only after it.
func TestOperatorActivateWaits(t *testing.T) {
	s := newSim(t)
	s.run(DefaultHoldDown + time.Second)
	s.uplinkCut["onprem-gw2"] = true
	s.run(time.Second)
	s.named = "onprem-gw2"
	s.run(2 * time.Second)
	s.wantActive("onprem-gw1")
	// Repaired: the remote gateways hold gw2 down for the hold-down, gw2
	// its links; it moves after.
	s.uplinkCut["onprem-gw2"] = false
	s.run(2 * time.Second)
	s.wantActive("onprem-gw1")
	s.run(DefaultHoldDown)
	s.wantActive("onprem-gw2")
	// gw2 fails: gw1 takes over; gw2 comes back and waits the hold-down.
	s.dead["onprem-gw2"] = true
	s.run(time.Second)
	s.wantActive("onprem-gw1")
	s.dead["onprem-gw2"] = false
	s.start("onprem-gw2", false)
	s.run(DefaultHoldDown / 2)
	s.wantActive("onprem-gw1")
	s.run(DefaultHoldDown)
	s.wantActive("onprem-gw2")
}

// The way back: every gateway lets a held link up at the same moment (the
// holders' release carried in their hellos), not a hello apart, so that
// both ends and the relays move traffic back together.
func TestLinkBackTogether(t *testing.T) {
	s := newSim(t)
	s.run(2 * time.Second)
	s.odd = map[string]bool{"aws-gw": true, "onprem-gw1": true}
	s.cut[plan.Pair("aws-gw", "azure-gw")] = true
	s.run(time.Second)
	s.cut[plan.Pair("aws-gw", "azure-gw")] = false
	link := plan.Pair("aws-eu", "azure-we")
	up := map[string]time.Time{}
	for range int((DefaultHoldDown + 2*time.Second) / DefaultInterval) {
		s.run(DefaultInterval)
		for _, g := range s.names {
			if _, seen := up[g]; !seen && !s.dec[g].LinksDown[link] {
				up[g] = s.now
			}
		}
	}
	first := up[s.names[0]]
	for _, g := range s.names {
		if at, ok := up[g]; !ok || !at.Equal(first) {
			t.Errorf("%s lets %v up at %v, %s at %v: want every gateway at the same moment", g, link, at.Sub(time.Unix(1000, 0)), s.names[0], first.Sub(time.Unix(1000, 0)))
		}
	}
	if at, ok := s.states["aws-gw"].NextRelease(first.Add(-time.Second)); ok && at.After(first) {
		t.Errorf("NextRelease a second before the release says %v, after the release at %v", at, first)
	}
}

// An agent starved of CPU (its kernel answers, it runs nothing for 700 ms)
// judges no gateway dead when it runs again: the silence is its own. A
// starved standby does not take over; a starved active gateway's peers
// keep it.
func TestStarvedAgentJudgesNothing(t *testing.T) {
	for _, g := range []string{"onprem-gw2", "aws-gw", "onprem-gw1"} {
		t.Run(g, func(t *testing.T) {
			s := newSim(t)
			s.deaf = map[string]bool{}
			s.run(2 * time.Second)
			before := s.dec[g].Key()
			s.events = nil
			s.agentDead[g] = true
			s.run(700 * time.Millisecond)
			s.agentDead[g] = false
			s.deaf[g] = true
			s.run(time.Second)
			s.wantActive("onprem-gw1")
			for _, e := range s.events {
				if strings.Contains(e, " down: ") || strings.Contains(e, "standby: ") || strings.Contains(e, "active (epoch") {
					t.Errorf("after starving: %s", e)
				}
			}
			if got := s.dec[g].Key(); got != before {
				t.Errorf("%s decides %q after starving, %q before", g, got, before)
			}
			if _, ok := s.states["onprem-gw2"].LastRoleChange(); ok {
				t.Errorf("onprem-gw2 changed its role")
			}
		})
	}
}

// stalls silences gateway's tunnels (a userspace data plane starved of
// CPU: its LAN still answers) for stall, every period, n times.
func (s *sim) stalls(gateway string, stall, period time.Duration, n int) {
	for range n {
		s.uplinkCut[gateway] = true
		s.run(stall)
		s.uplinkCut[gateway] = false
		s.run(period - stall)
	}
}

// noMoves fails the test on any event that moves traffic.
func (s *sim) noMoves(when string) {
	s.t.Helper()
	for _, e := range s.events {
		if strings.Contains(e, " down: ") || strings.Contains(e, "standby: ") || strings.Contains(e, "active (epoch") {
			s.t.Errorf("%s: %s", when, e)
		}
	}
}

// A loaded machine: the active gateway's data plane keeps going silent for
// 200 ms. Its peers and its sibling learn that it is slow, so a 400 ms
// silence (dead at the quiet 300 ms) moves nothing; a real failure is still
// seen, within MaxDetect; and after AdaptWindow of quiet the detection
// time is the quiet one again.
func TestLoadedGatewayGetsTime(t *testing.T) {
	s := newSim(t)
	s.run(2 * time.Second)
	s.stalls("onprem-gw1", 200*time.Millisecond, time.Second, 5)
	s.noMoves("short stalls")
	s.stalls("onprem-gw1", 400*time.Millisecond, time.Second, 3)
	s.noMoves("400 ms stalls after 200 ms ones")
	s.wantActive("onprem-gw1")
	if d := s.states["aws-gw"].detectFor(s.states["aws-gw"].tunnel["onprem-gw1"], s.now); d <= 300*time.Millisecond || d > DefaultMaxDetect {
		t.Errorf("aws-gw's detection time of onprem-gw1 under load %v, want above 300 ms, at most %v", d, DefaultMaxDetect)
	}
	// A real failure under load: seen within MaxDetect and a hello or two.
	s.dead["onprem-gw1"] = true
	s.run(DefaultMaxDetect + 300*time.Millisecond)
	s.wantActive("onprem-gw2")
	s.dead["onprem-gw1"] = false
	s.start("onprem-gw1", false)
	// Quiet for AdaptWindow: the quiet detection time again.
	s.run(AdaptWindow + time.Second)
	if d := s.states["onprem-gw1"].detectFor(s.states["onprem-gw1"].lan["onprem-gw2"], s.now); d != 300*time.Millisecond {
		t.Errorf("detection time after %v of quiet %v, want 300 ms", AdaptWindow, d)
	}
	s.dead["onprem-gw2"] = true
	s.run(500 * time.Millisecond)
	s.wantActive("onprem-gw1")
}

// The same 400 ms stalls on a machine that was quiet before are judged:
// the detection time grows with what a target showed, not by itself.
func TestQuietGatewayStallIsJudged(t *testing.T) {
	s := newSim(t)
	s.run(2 * time.Second)
	s.stalls("onprem-gw1", 400*time.Millisecond, time.Second, 1)
	if !slices.ContainsFunc(s.events, func(e string) bool { return strings.HasPrefix(e, "aws-gw: gateway onprem-gw1 down") }) {
		t.Errorf("aws-gw did not hold onprem-gw1 down after 400 ms of silence on a quiet machine; events %q", s.events)
	}
}

// A remote gateway held down (it was silent while its sibling answered)
// carries its site at once when the sibling fails: the last gateway of a
// site that answers is never held down.
func TestHeldGatewayCarriesItsSiteAlone(t *testing.T) {
	s := newSim(t)
	s.run(2 * time.Second)
	s.stalls("onprem-gw2", 400*time.Millisecond, time.Second, 1)
	if !s.states["aws-gw"].tunnel["onprem-gw2"].heldDown {
		t.Fatal("aws-gw does not hold onprem-gw2 down after its silence")
	}
	s.dead["onprem-gw1"] = true
	s.run(700 * time.Millisecond) // 300 ms detection, a hello or two
	s.wantActive("onprem-gw2")
	// gw2 held its links down while it stood by; taking over, it holds
	// none of those that answer: no path moves.
	for _, g := range s.names {
		if d := s.dec[g]; !s.dead[g] && len(d.LinksDown) > 0 {
			t.Errorf("%s holds links down after the takeover: %v", g, d.Key())
		}
	}
}

// After a failover, the repaired gateway is a standby the remote gateways
// hold down. When the new active's tunnel to one of them goes silent for a
// moment, that remote gateway neither lets the held standby up nor sends
// the site's prefix to it (a standby does not serve the site's hosts).
func TestActiveSilenceDoesNotFreeHeldStandby(t *testing.T) {
	s := newSim(t)
	s.run(2 * time.Second)
	s.dead["onprem-gw1"] = true
	s.run(500 * time.Millisecond)
	s.wantActive("onprem-gw2")
	s.dead["onprem-gw1"] = false
	s.start("onprem-gw1", false)
	s.run(2 * time.Second)
	if !s.states["gcp-gw"].tunnel["onprem-gw1"].heldDown {
		t.Fatal("gcp-gw does not hold the repaired onprem-gw1 down")
	}
	s.cut[plan.Pair("gcp-gw", "onprem-gw2")] = true
	for range 8 {
		s.run(DefaultInterval)
		if got := s.activeAt("gcp-gw"); got == "onprem-gw1" {
			t.Fatalf("gcp-gw sends lab's prefix to the held standby onprem-gw1 while onprem-gw2 is silent")
		}
	}
	// Back: gcp-gw goes through a relay while the active holds their link
	// down (its hold-down), never to onprem-gw1.
	s.cut[plan.Pair("gcp-gw", "onprem-gw2")] = false
	s.run(300 * time.Millisecond)
	for _, g := range []string{"aws-gw", "azure-gw", "gcp-gw"} {
		if got := s.activeAt(g); got == "onprem-gw1" || g != "gcp-gw" && got != "onprem-gw2" {
			t.Errorf("%s sends lab's prefix to %q, want onprem-gw2 (or a relay, from gcp-gw)", g, got)
		}
	}
	if !s.states["gcp-gw"].tunnel["onprem-gw1"].heldDown {
		t.Error("gcp-gw let the held onprem-gw1 up before its hold-down")
	}
}

// Links held at once that cut the federation in two come back as soon as
// they answer, not after the hold-down: here a moment of silence holds
// every link between {aws-eu, gcp-ew} and {azure-we, lab}; no other path
// exists between the halves to hold the traffic on meanwhile.
func TestPartitionBackAtOnce(t *testing.T) {
	s := newSim(t)
	s.run(2 * time.Second)
	cuts := []plan.SitePair{
		plan.Pair("aws-gw", "azure-gw"), plan.Pair("aws-gw", "onprem-gw1"), plan.Pair("aws-gw", "onprem-gw2"),
		plan.Pair("gcp-gw", "azure-gw"), plan.Pair("gcp-gw", "onprem-gw1"), plan.Pair("gcp-gw", "onprem-gw2"),
	}
	for _, c := range cuts {
		s.cut[c] = true
	}
	s.run(time.Second)
	if got := s.activeAt("aws-gw"); got != "" {
		t.Fatalf("aws-gw sends lab's prefix to %q while cut off from it, want nowhere", got)
	}
	for _, c := range cuts {
		s.cut[c] = false
	}
	s.run(time.Second)
	for _, g := range []string{"aws-gw", "gcp-gw"} {
		if got := s.activeAt(g); got == "" {
			t.Errorf("%s has no path to lab a second after the cut ended (links down: %v)", g, s.dec[g].Key())
		}
	}
}

// The active gateway's tunnels all fall silent for a moment (its wgdev
// restarting, a little slower than the detection time): it holds none of
// its links (the cause is at it, not at them), and the remote gateways,
// which held it down meanwhile, send the site to it again as soon as it
// answers, not after the hold-down. Nothing stays moved: no link held, no
// gateway held, the site at one gateway everywhere.
func TestSilentActiveBackAtOnce(t *testing.T) {
	s := newSim(t)
	s.run(2 * time.Second)
	s.uplinkCut["onprem-gw1"] = true
	s.run(350 * time.Millisecond)
	s.uplinkCut["onprem-gw1"] = false
	s.run(500 * time.Millisecond)
	active := "onprem-gw1"
	if s.dec["onprem-gw2"].SelfActive {
		active = "onprem-gw2"
	}
	s.wantActive(active)
	for _, g := range s.names {
		if d := s.dec[g]; len(d.LinksDown) > 0 || len(d.Down) > 0 {
			t.Errorf("%s half a second after the silence: %s; want no link nor gateway held", g, d.Key())
		}
	}
}
