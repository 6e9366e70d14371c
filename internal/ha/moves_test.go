package ha

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/plan"
)

// moves watches a sim's gateways apply their plans (at every tick, the
// sim's agents apply at once and announce what they send where) and
// checks the rule of lossless moves: a gateway sends its site's traffic
// plain to a peer only while the peer's applied plan accepts that site
// from it.
type moves struct {
	s *sim
	// plans are the plans the gateways applied at the last tick.
	plans map[string]plan.Gateway
	// encapsulated counts (gateway, route) decisions to encapsulate;
	// violations the plain sends the far end would drop.
	encapsulated, violations int
}

func watchMoves(s *sim) *moves {
	m := &moves{s: s, plans: map[string]plan.Gateway{}}
	s.afterTick = m.tick
	return m
}

// siteOf is the site whose prefixes hold p.
func (m *moves) siteOf(p netip.Prefix) string {
	for _, site := range m.s.f.Sites {
		for _, sp := range site.Prefixes {
			if sp.Overlaps(p) {
				return site.Name
			}
		}
	}
	return ""
}

func (m *moves) live(g string) bool { return !m.s.dead[g] && !m.s.agentDead[g] }

func (m *moves) tick() {
	s := m.s
	for _, g := range s.names {
		if !m.live(g) {
			continue
		}
		p, err := plan.ForGateway(s.f, s.dec[g].Apply(plan.Inputs{}), g)
		if err != nil {
			s.t.Fatal(err)
		}
		m.plans[g] = p
		s.states[g].SetSends(plan.SendsTo(p, s.f))
	}
	for _, a := range s.names {
		if !m.live(a) {
			continue
		}
		for _, r := range m.plans[a].Routes {
			v := r.Via
			if v == "" || !m.live(v) || !s.path(a, v) {
				continue
			}
			if _, heard := s.states[a].entries[v]; !heard {
				continue // plain, as an agent without the rule (Plain)
			}
			dst := m.siteOf(r.Destination)
			if plain, _ := s.states[a].PlainVia(dst, v, s.dec[a].SelfActive); !plain {
				m.encapsulated++
				continue
			}
			if got := plan.SendsTo(m.plans[v], s.f)[s.site(a)]; got != a {
				m.violations++
				s.t.Errorf("%v: %s sends %s plain to %s, which accepts %s from %q", s.now.Sub(time.Unix(1000, 0)), a, r.Destination, v, s.site(a), got)
			}
			if s.site(v) == dst {
				continue
			}
			// Through the relay v: the gateway v delivers to must take a's
			// site from v.
			end := plan.SendsTo(m.plans[v], s.f)[dst]
			if _, heard := s.states[a].entries[end]; !heard || !m.live(end) || s.site(end) != dst {
				continue // not followed: more than one relay (PlainVia)
			}
			if got := plan.SendsTo(m.plans[end], s.f)[s.site(a)]; got != v {
				m.violations++
				s.t.Errorf("%v: %s sends %s plain through %s to %s, which accepts %s from %q", s.now.Sub(time.Unix(1000, 0)), a, r.Destination, v, end, s.site(a), got)
			}
		}
	}
}

// allPlain checks that no live active (or only) gateway encapsulates
// anything: the steady state.
func (m *moves) allPlain() {
	m.s.t.Helper()
	for _, a := range m.s.names {
		if !m.live(a) || !m.s.dec[a].SelfActive {
			continue
		}
		for _, r := range m.plans[a].Routes {
			if r.Via != "" && !m.s.states[a].Plain(r.Via, true) {
				m.s.t.Errorf("%s encapsulates %s to %s in the steady state", a, r.Destination, r.Via)
			}
		}
	}
}

// The operator moves the role there and back, a link between two sites is
// cut and comes back after its hold-down: at no tick does a gateway send
// plain what the far end would drop, the moves did encapsulate, and once
// settled nothing is encapsulated.
func TestMovesNeverSendPlainWhatIsDropped(t *testing.T) {
	s := newSim(t)
	m := watchMoves(s)
	s.run(DefaultHoldDown + time.Second)
	m.allPlain()
	if m.violations != 0 {
		t.Fatalf("%d plain sends dropped while the federation settled", m.violations)
	}
	before := m.encapsulated
	s.named = "onprem-gw2"
	s.run(time.Second)
	s.wantActive("onprem-gw2")
	m.allPlain()
	s.named = "onprem-gw1"
	s.run(time.Second)
	s.wantActive("onprem-gw1")
	m.allPlain()
	if m.encapsulated == before {
		t.Error("the handovers encapsulated nothing: the test does not exercise the rule")
	}
	// lab <-> aws-eu cut, then repaired: traffic through a third site and
	// back after the hold-down.
	before = m.encapsulated
	for _, g := range []string{"onprem-gw1", "onprem-gw2"} {
		s.cut[plan.Pair(g, "aws-gw")] = true
	}
	s.run(time.Second)
	for _, g := range []string{"onprem-gw1", "onprem-gw2"} {
		s.cut[plan.Pair(g, "aws-gw")] = false
	}
	s.run(DefaultHoldDown + time.Second)
	m.allPlain()
	if m.encapsulated == before {
		t.Error("the way back encapsulated nothing: the test does not exercise the rule")
	}
	// aws-eu <-> azure-we, over which aws-gw relays gcp-ew <-> azure-we:
	// relayed paths move both ways.
	before = m.encapsulated
	s.cut[plan.Pair("aws-gw", "azure-gw")] = true
	s.run(time.Second)
	s.cut[plan.Pair("aws-gw", "azure-gw")] = false
	s.run(DefaultHoldDown + time.Second)
	m.allPlain()
	if m.encapsulated == before {
		t.Error("the relayed way back encapsulated nothing: the test does not exercise the rule")
	}
}

// A remote gateway moves lab's prefixes to the gateway the operator
// activated only once the old active stepped down, as far as it knows.
func TestRemoteWaitsForStepDown(t *testing.T) {
	s := newSim(t)
	s.run(DefaultHoldDown + time.Second)
	flipped := map[string]bool{}
	s.afterTick = func() {
		for _, r := range []string{"aws-gw", "azure-gw", "gcp-gw"} {
			if flipped[r] || s.dec[r].Active["lab"] != "onprem-gw2" {
				continue
			}
			flipped[r] = true
			if e := s.states[r].entries["onprem-gw1"]; e.Active {
				t.Errorf("%s moved lab to onprem-gw2 while onprem-gw1 still claims it, as far as it knows", r)
			}
		}
	}
	s.named = "onprem-gw2"
	s.run(time.Second)
	s.wantActive("onprem-gw2")
	if len(flipped) != 3 {
		t.Errorf("remote gateways that moved lab: %v, want all three", flipped)
	}
}

func TestPlainNeedsTheFarEndsWord(t *testing.T) {
	s := newSim(t)
	now := s.now
	for _, tc := range []struct {
		self, peer string
		sends      map[string]string
		selfActive bool
		want       bool
	}{
		{"gcp-gw", "aws-gw", nil, true, true}, // says nothing: as before
		{"gcp-gw", "aws-gw", map[string]string{"gcp-ew": "gcp-gw"}, true, true},
		{"gcp-gw", "aws-gw", map[string]string{"gcp-ew": "azure-gw"}, true, false},
		{"gcp-gw", "aws-gw", map[string]string{"lab": "onprem-gw1"}, true, false},
		{"onprem-gw2", "aws-gw", map[string]string{"lab": "onprem-gw2"}, true, true},
		{"onprem-gw2", "aws-gw", map[string]string{"lab": "onprem-gw2"}, false, false}, // a standby
		{"onprem-gw2", "aws-gw", map[string]string{"lab": "onprem-gw1"}, true, false},  // not confirmed yet
	} {
		st := s.states[tc.self]
		now = now.Add(time.Millisecond)
		st.Receive(Hello{From: tc.peer, Entries: []Entry{{Gateway: tc.peer, Site: "aws-eu", Seq: now.UnixNano(), Reach: 3, Sends: tc.sends}}}, now)
		if got := st.Plain(tc.peer, tc.selfActive); got != tc.want {
			t.Errorf("%s (active %v) with %s sending %v: Plain = %v, want %v", tc.self, tc.selfActive, tc.peer, tc.sends, got, tc.want)
		}
	}
}

// The active gateway steps down for the operator's choice only once that
// gateway holds the site (it applied its plan as active), or after a
// detection time when it never says so.
func TestActiveStepsDownOnceTheNewOneHolds(t *testing.T) {
	s := newSim(t)
	s.run(DefaultHoldDown + time.Second)
	s.slow = map[string]bool{"onprem-gw2": true} // its apply takes long
	s.named = "onprem-gw2"
	s.run(200 * time.Millisecond)
	if !s.dec["onprem-gw2"].SelfActive {
		t.Fatal("onprem-gw2 did not claim the site")
	}
	if !s.dec["onprem-gw1"].SelfActive {
		t.Error("onprem-gw1 stepped down before onprem-gw2 holds the site")
	}
	for _, r := range []string{"aws-gw", "azure-gw", "gcp-gw"} {
		if got := s.dec[r].Active["lab"]; got != "onprem-gw1" {
			t.Errorf("%s moved lab to %q before onprem-gw1 stepped down", r, got)
		}
	}
	s.slow = nil
	s.run(300 * time.Millisecond)
	s.wantActive("onprem-gw2")

	// Never holding: the old active yields after a detection time.
	s.slow = map[string]bool{"onprem-gw1": true}
	s.named = "onprem-gw1"
	s.run(DefaultHoldDown)
	s.wantActive("onprem-gw1")
}

// TestDrainOver: onprem-gw1, which stepped down, drains its bridges until
// every remote gateway that answers sends the lab site elsewhere, and at
// least DrainMin; a remote gateway that stops answering, or DrainMax, ends
// the wait.
func TestDrainOver(t *testing.T) {
	s := newSim(t)
	s.run(2 * time.Second)
	st := s.states["onprem-gw1"]
	since := s.now
	hello := func(g, site, to string, at time.Time) {
		st.Receive(Hello{From: g, Entries: []Entry{{Gateway: g, Site: site, Seq: at.UnixNano() + 1, Sends: map[string]string{"lab": to}}}}, at)
	}
	at := func(d time.Duration) time.Time { return since.Add(d) }
	answer := func(g string, d time.Duration) { st.Answered(g, false, at(d)) }
	for _, g := range []string{"aws-gw", "azure-gw", "gcp-gw"} {
		answer(g, 0)
	}
	hello("aws-gw", "aws-eu", "onprem-gw1", at(0))
	hello("azure-gw", "azure-we", "onprem-gw1", at(0))
	hello("gcp-gw", "gcp-ew", "onprem-gw2", at(0))
	over, waiting := st.DrainOver(since, at(100*time.Millisecond))
	if over || !slices.Equal(waiting, []string{"aws-gw", "azure-gw"}) {
		t.Errorf("at once: over %v, waiting for %v; want not over, waiting for aws-gw and azure-gw", over, waiting)
	}
	// Both move; the drain still lasts DrainMin.
	hello("aws-gw", "aws-eu", "onprem-gw2", at(200*time.Millisecond))
	hello("azure-gw", "azure-we", "onprem-gw2", at(200*time.Millisecond))
	for _, g := range []string{"aws-gw", "azure-gw"} {
		answer(g, 200*time.Millisecond)
	}
	if over, waiting := st.DrainOver(since, at(250*time.Millisecond)); over || len(waiting) != 0 {
		t.Errorf("once every remote moved, before DrainMin: over %v, waiting for %v; want not over, nobody", over, waiting)
	}
	if over, _ := st.DrainOver(since, at(DrainMin)); !over {
		t.Error("not over at DrainMin with every remote moved")
	}
	// A remote that still sends the site here holds the drain while it
	// answers, not once it is silent, and never past DrainMax.
	hello("azure-gw", "azure-we", "onprem-gw1", at(300*time.Millisecond))
	for d := 300 * time.Millisecond; d <= DrainMin; d += DefaultInterval {
		answer("azure-gw", d)
	}
	if over, waiting := st.DrainOver(since, at(DrainMin)); over || !slices.Equal(waiting, []string{"azure-gw"}) {
		t.Errorf("azure-gw answers and sends lab here: over %v, waiting for %v; want not over, azure-gw", over, waiting)
	}
	if over, _ := st.DrainOver(since, at(DrainMin+2*time.Second)); !over {
		t.Error("not over 2 s after azure-gw fell silent")
	}
	for d := DrainMin; d <= DrainMax; d += DefaultInterval {
		answer("azure-gw", d)
	}
	if over, _ := st.DrainOver(since, at(DrainMax)); !over {
		t.Error("not over at DrainMax")
	}
}
