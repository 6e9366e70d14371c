package ha

import (
	"maps"
	"slices"
	"time"
)

// Lossless moves (docs/resilience.md, "Lossless moves"). WireGuard accepts
// a site's prefixes from one peer only, so while two gateways disagree on
// which peer carries a site, plain packets are dropped. A gateway's transit
// address, though, is always accepted from it: traffic encapsulated with
// that outer source (the data plane's transit device) passes at any
// moment. The rules here say when a gateway may send plain:
//
//   - every gateway announces, per remote site, the gateway it sends that
//     site's prefixes to in the plan it applied (Entry.Sends, SetSends);
//   - a gateway sends its site's traffic plain to a peer only when the
//     peer's announcement names it for its site, and it is its site's
//     active (or only) gateway; otherwise encapsulated (Plain). A standby
//     forwarding what still reaches it, a new active not yet confirmed,
//     either end of a link coming back before the other applied: all
//     encapsulated until the far end says it moved;
//   - a remote gateway moves a site's prefixes to a new active gateway
//     only once the old one has stepped down (its entry says so), stopped
//     answering, or the new claim has stood for a detection time (a split
//     site, where the old one never hears of the new claim): so the old
//     active encapsulates (it stepped down) before any remote stops
//     accepting it plain (remoteActive).

// remoteClaim is the active gateway this gateway plans for a remote site,
// and the best claimant it has seen, since when.
type remoteClaim struct {
	active    string
	claimant  string
	claimSeen time.Time
}

// SetSends records, per remote site, the gateway this gateway sends that
// site's prefixes to in the plan it applied; its hellos carry it from now
// on. The caller passes a map it no longer changes.
func (s *State) SetSends(m map[string]string) { s.sends = maps.Clone(m) }

// Sends returns what SetSends recorded.
func (s *State) Sends() map[string]string { return maps.Clone(s.sends) }

// Plain reports whether this gateway may send its site's traffic to peer
// (a gateway of another site it routes through) unencapsulated: when it
// is its site's active (or only) gateway (selfActive, the decision's
// SelfActive) and the peer's last announcement names it for its site. A
// peer that announced nothing (an agent without this rule, or not heard
// yet) gets plain traffic, as before; a stale announcement still counts
// (a killed agent's data plane keeps the plan it applied).
func (s *State) Plain(peer string, selfActive bool) bool {
	e, ok := s.entries[peer]
	if !ok || e.Sends == nil {
		return true
	}
	if len(s.sites[s.site]) > 1 && !selfActive {
		return false
	}
	return e.Sends[s.site] == s.cfg.Self
}

// PlainVia reports whether this gateway may send its site's traffic for
// site dst plain to hop, the peer its route to dst goes through, and names
// the gateway at dst the traffic ends at. Directly (hop is of site dst),
// as Plain. Through a relay, the relay must take this gateway's site from
// it (Plain), and the gateway the relay delivers dst to must take this
// gateway's site from the relay: while the two ends of a path disagree on
// it (one moved back to their direct link, the other not yet), the relay's
// plain packets would be dropped at the far end. A relay or end that
// announced nothing gets plain traffic, as before; paths of more than one
// relay are not followed.
func (s *State) PlainVia(dst, hop string, selfActive bool) (plain bool, end string) {
	if s.siteOf[hop] == dst {
		return s.Plain(hop, selfActive), hop
	}
	if !s.Plain(hop, selfActive) {
		return false, s.sendsOf(hop, dst)
	}
	end = s.sendsOf(hop, dst)
	e, ok := s.entries[end]
	if end == "" || s.siteOf[end] != dst || !ok || e.Sends == nil {
		return true, end
	}
	return e.Sends[s.site] == hop, end
}

// sendsOf is the gateway g's last announcement sends site to, "" when
// unknown.
func (s *State) sendsOf(g, site string) string { return s.entries[g].Sends[site] }

// Answering reports whether gateway answers its echoes through the tunnel
// now.
func (s *State) Answering(gateway string, now time.Time) bool {
	return s.answering(s.tunnel[gateway], now)
}

// SiteGateway returns the gateway of remote site that this gateway plans
// to carry it: its only gateway, or the active one as last decided (the
// first in spec order before any decision).
func (s *State) SiteGateway(site string) string {
	gws := s.sites[site]
	if len(gws) == 0 {
		return ""
	}
	if rc, ok := s.remote[site]; ok && rc.active != "" {
		return rc.active
	}
	return gws[0]
}

// SiteOf returns the site of gateway, "" for none.
func (s *State) SiteOf(gateway string) string { return s.siteOf[gateway] }

// SetHolds records whether the plan this gateway applied makes it its
// site's active gateway; its hellos carry it (Entry.Holds).
func (s *State) SetHolds(holds bool) { s.holds = holds }

// yieldTo reports whether this active gateway steps down for the better
// claim of other now: once other's entry says it holds the site (it
// applied its plan as active: the virtual address and the bridges moved),
// or other's claim has stood for a detection time. Until then it stays
// active, so the site is never without a gateway that holds it while the
// new one applies.
func (s *State) yieldTo(other string, now time.Time) bool {
	if s.better.gateway != other {
		s.better.gateway, s.better.since = other, now
	}
	if e, ok := s.entries[other]; ok && e.Holds {
		return true
	}
	return now.Sub(s.better.since) >= s.detect()
}

// remoteActive returns the active gateway to plan for remote site, whose
// best live claimant is g: g, unless a gateway planned before still
// claims the site, answers, and g's claim is younger than a detection
// time.
func (s *State) remoteActive(site, g string, now time.Time) string {
	if s.remote == nil {
		s.remote = map[string]remoteClaim{}
	}
	rc := s.remote[site]
	if rc.claimant != g {
		rc.claimant, rc.claimSeen = g, now
	}
	prev := rc.active
	switch {
	case prev == "" || prev == g:
		rc.active = g
	case !s.answering(s.tunnel[prev], now):
		rc.active = g // the old active is gone (or was never heard)
	case !s.entries[prev].Active:
		rc.active = g // it stepped down
	case now.Sub(rc.claimSeen) >= s.detect():
		rc.active = g // it never heard of the new claim: a split site
		s.events = append(s.events, "site "+site+": "+g+" claims it and "+prev+" still does after a detection time; following "+g)
	}
	s.remote[site] = rc
	return rc.active
}

// The bridged handover (docs/resilience.md, "The bridged handover"). A
// gateway that steps down keeps its site's bridges for a while, draining:
// remote gateways send the site's frames to it until they moved the site to
// the new active gateway, and their VXLAN ports, which forget what they
// learned behind it when they move, keep forgetting for longer than
// DrainMax (dataplane's reforget); frames it forwards meanwhile (a host's
// answer the site's switch still sends its way) must not find it gone. So it drains until every remote gateway that
// answers says (Entry.Sends) it sends the site elsewhere, and at least
// DrainMin, at most DrainMax.
const (
	// DrainMin leaves the remote ports time to move and to forget, more
	// than once, what they learned behind this gateway.
	DrainMin = 3500 * time.Millisecond
	// DrainMax ends a drain whatever the remote gateways say (one that
	// never announces, or an older agent).
	DrainMax = 10 * time.Second
)

// DrainOver reports whether this gateway, draining its bridges since it
// stepped down at since, may let them go at now, and names the remote
// gateways that answer and still send its site to it (sorted).
func (s *State) DrainOver(since, now time.Time) (bool, []string) {
	var waiting []string
	for g, e := range s.entries {
		if s.siteOf[g] == "" || s.siteOf[g] == s.site || e.Sends == nil {
			continue
		}
		if e.Sends[s.site] == s.cfg.Self && s.answering(s.tunnel[g], now) {
			waiting = append(waiting, g)
		}
	}
	slices.Sort(waiting)
	d := now.Sub(since)
	return d >= DrainMax || d >= DrainMin && len(waiting) == 0, waiting
}
