package ha

import (
	"maps"
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
