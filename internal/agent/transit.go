package agent

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fednet/fednet/internal/dataplane"
	"github.com/fednet/fednet/internal/plan"
)

// Lossless moves, the agent's part (docs/resilience.md, "Lossless moves";
// the rules are ha's: State.Plain, State.SetSends). The failover source
// keeps the transit device (dataplane.SyncTransit) routing every prefix
// this gateway may not send plain — its peer has not said it accepts this
// gateway's site from it — encapsulated to that peer's transit address.
// Around each apply it encapsulates for the plan in force and the coming
// one together, so the moment the apply changes routes and allowed IPs
// loses nothing, and it announces what the applied plan sends where at
// once (a hello), so the far ends go plain again as soon as both sides
// moved.

// transitState is the transit device as the agent last set it.
type transitState struct {
	mu sync.Mutex // serializes changes of the device
	// in is the encapsulation in the kernel; set says in is known.
	in  map[netip.Prefix]netip.Addr
	set bool
	// failed is the last error, logged once.
	failed string
}

// deliverMoving delivers u through the loop with the transit device
// covering the move: before the apply it encapsulates for both the plan in
// force and u's; after a successful apply it announces what u's plan sends
// where and encapsulates for u's plan alone.
func (h *haSource) deliverMoving(u Update) Result {
	if u.Plan == nil {
		return h.deliver(u)
	}
	h.mu.Lock()
	// A gateway that steps down keeps its bridges, draining, until the
	// remote gateways moved the site (bridged.go).
	if h.applied != nil && h.applied.LAN.Active && !u.Plan.LAN.Active && len(h.applied.Bridges) > 0 && h.drain == nil {
		h.drain = &drainState{bridges: h.applied.Bridges, since: time.Now()}
	}
	if u.Plan.LAN.Active {
		h.drain = nil
	}
	if h.drain != nil {
		p := withDraining(*u.Plan, h.drain.bridges)
		u.Plan = &p
	}
	h.pending = u.Plan
	if h.applied != nil {
		h.moving = h.movingLocked(*h.applied, *u.Plan)
	}
	moving := len(h.moving)
	// A link let up again (its hold-down ended): every gateway acts at the
	// same agreed moment and waits the lead, so that all of them apply
	// together and each end sends straight (encapsulated) before any
	// applies. A failover does not wait.
	released := ""
	for p := range h.appliedDown {
		if !h.dec.LinksDown[p] && h.applied != nil && !plan.Equal(*h.applied, *u.Plan) {
			released = p.A + "<->" + p.B
		}
	}
	down := maps.Clone(h.dec.LinksDown)
	var lead *plan.Gateway
	var wb wayBack
	if released != "" {
		wb = newWayBack(*h.applied, *u.Plan)
		if !plan.Equal(wb.lead, *h.applied) {
			lead = &wb.lead
		}
	}
	h.mu.Unlock()
	h.syncTransit()
	if released != "" {
		h.logf("failover: link %s back: %d prefixes sent straight to their site's gateway for %v, then the plan applies (at %s)", released, moving, WayBackLead, time.Now().Format("15:04:05.000"))
		if lead != nil {
			// The coming plan's new bridge ports, made now: the full mesh's
			// flooding at once, kept apart from the relay tree's; others
			// flooding to nobody; the bridge learning behind none of them,
			// nor behind the tree's ports, until the switch (bridged.go).
			if len(wb.shapes) > 0 {
				h.separate(wb.shapes, wb.old)
			}
			lu := u
			lu.Plan, lu.Why, lu.Dataplane = lead, u.Why+" (way back: the coming plan's bridge ports made ahead)", nil
			if res := h.deliver(lu); res.Err != nil {
				h.logf("failover: making the coming plan's bridge ports ahead: %v", res.Err)
			}
		}
		time.Sleep(WayBackLead)
		if lead != nil {
			// The bridges switch first, alone, at the same moment at
			// every gateway: the rest of the apply (the firewall, the
			// tunnel's peers) takes tens of milliseconds that would
			// otherwise come between one gateway's switch and another's.
			su := u
			su.Plan, su.Why, su.Dataplane = withBridgesOf(*lead, *u.Plan), u.Why+" (way back: the bridges switch first)", nil
			if res := h.deliver(su); res.Err != nil {
				h.logf("failover: switching the bridges first: %v", res.Err)
			}
		}
	}
	res := h.deliver(u)
	if len(wb.shapes) > 0 {
		// The tree's ports are gone: nothing left to keep apart.
		h.separate(nil, nil)
	}
	h.mu.Lock()
	h.pending, h.moving = nil, nil
	var reshapedPorts []string
	if res.Err == nil {
		h.appliedDown = down
		if h.applied != nil {
			reshapedPorts = reshaped(*h.applied, *u.Plan)
		}
	}
	announce := false
	if res.Err == nil {
		h.applied = u.Plan
		if h.state != nil && u.Plan.Local != nil && u.Plan.Local.Federation != nil {
			sends := plan.SendsTo(*u.Plan, u.Plan.Local.Federation)
			announce = !maps.Equal(sends, h.state.Sends()) || u.Plan.LAN.Active != h.holds
			h.state.SetSends(sends)
			// Holding the site (the virtual address, the bridges) lets
			// the old active step down.
			h.holds = u.Plan.LAN.Active
			h.state.SetHolds(h.holds)
		}
	}
	h.mu.Unlock()
	h.forgetAfterReshape(reshapedPorts)
	if announce {
		h.logf("failover: applied (active %v); this gateway now sends %s (at %s)", u.Plan.LAN.Active, describeSends(u.Plan), time.Now().Format("15:04:05.000"))
		select {
		case h.announce <- struct{}{}:
		default:
		}
	}
	h.syncTransit()
	return res
}

// syncTransit makes the transit device encapsulate what the plan in force
// and the one being applied (if any) may not send plain.
func (h *haSource) syncTransit() {
	if h.quiet {
		return
	}
	h.tx.mu.Lock()
	defer h.tx.mu.Unlock()
	h.mu.Lock()
	var base *plan.Gateway
	encap := map[netip.Prefix]netip.Addr{}
	for _, p := range []*plan.Gateway{h.applied, h.pending} {
		if p == nil {
			continue
		}
		base = p
		maps.Copy(encap, h.encapFor(*p))
	}
	maps.Copy(encap, h.moving)
	h.mu.Unlock()
	if base == nil || len(base.Tunnels) == 0 || !base.TransitAddress().IsValid() {
		return
	}
	if h.tx.set && maps.Equal(encap, h.tx.in) {
		return
	}
	_, err := dataplane.SyncTransit(dataplane.TransitConfig{Local: base.TransitAddress(), MTU: base.Tunnels[0].MTU, Encap: encap})
	if err != nil {
		if msg := err.Error(); msg != h.tx.failed {
			h.logf("failover: the transit device: %v (moves may lose packets)", err)
			h.tx.failed = msg
		}
		h.tx.set = false
		return
	}
	h.tx.failed = ""
	if !h.tx.set || !maps.Equal(encapPeers(encap), encapPeers(h.tx.in)) {
		h.logf("failover: %s (at %s)", describeEncap(encap), time.Now().Format("15:04:05.000"))
	}
	h.tx.in, h.tx.set = encap, true
}

// encapFor returns the prefixes of p's routes this gateway may not send
// plain, each with the transit address of the peer it goes to. h.mu must
// be held.
func (h *haSource) encapFor(p plan.Gateway) map[netip.Prefix]netip.Addr {
	out := map[netip.Prefix]netip.Addr{}
	if h.state == nil {
		return out
	}
	transit := peerTransits(p)
	now := time.Now()
	for _, r := range p.Routes {
		a, ok := transit[r.Via]
		if !ok || r.Destination.Contains(a) || r.Destination.Contains(p.TransitAddress()) {
			continue
		}
		plain, end := h.state.PlainVia(siteOfPrefix(p, r.Destination), r.Via, h.dec.SelfActive)
		if plain {
			continue
		}
		// Straight to the gateway the traffic ends at when its tunnel
		// answers (it takes this gateway's transit address whatever it
		// maps), else to the next hop.
		if e, ok := transit[end]; ok && end != r.Via && h.state.Answering(end, now) && !r.Destination.Contains(e) {
			a = e
		}
		out[r.Destination] = a
	}
	return out
}

// WayBackLead is how long every gateway waits, when a link it held down
// is let up (the way back to a repaired link), before it applies the new
// plan, sending meanwhile the prefixes whose path changes through a relay
// straight to their site's gateway, encapsulated. Every gateway starts
// at the same agreed moment (the link's release); the lead must cover the
// spread of their starts and applies (tens of milliseconds on a loaded
// machine), so that no end applies before the other sends encapsulated,
// and all apply together (the bridged ports too). A failover does not
// wait: it moves paths away from what does not answer.
const WayBackLead = 250 * time.Millisecond

// movingLocked returns the routes of next whose next hop differs from
// applied's through a relay (either side's next hop is not of the
// destination's site), each with the transit address of the gateway of
// the destination's site they go to (the direct next hop, or the site's
// gateway) when that gateway answers. h.mu must be held.
func (h *haSource) movingLocked(applied, next plan.Gateway) map[netip.Prefix]netip.Addr {
	out := map[netip.Prefix]netip.Addr{}
	if h.state == nil {
		return out
	}
	old := map[netip.Prefix]string{}
	for _, r := range applied.Routes {
		old[r.Destination] = r.Via
	}
	transit := peerTransits(next)
	now := time.Now()
	for _, r := range next.Routes {
		was, ok := old[r.Destination]
		if !ok || was == r.Via {
			continue
		}
		site := siteOfPrefix(next, r.Destination)
		var end string
		switch {
		case h.state.SiteOf(r.Via) == site && h.state.SiteOf(was) == site:
			continue // a handover between a site's gateways: no relay
		case h.state.SiteOf(r.Via) == site:
			end = r.Via
		case h.state.SiteOf(was) == site:
			end = was
		default:
			// From one relay to another: straight to the site's gateway.
			end = h.state.SiteGateway(site)
		}
		if a, ok := transit[end]; ok && h.state.Answering(end, now) && !r.Destination.Contains(a) {
			out[r.Destination] = a
		}
	}
	return out
}

// peerTransits returns the transit address of each peer of g, by name.
func peerTransits(g plan.Gateway) map[string]netip.Addr {
	out := map[string]netip.Addr{}
	for _, peer := range g.Peers {
		if a, ok := peerTransit(g, peer); ok {
			out[peer.Gateway] = a
		}
	}
	return out
}

// siteOfPrefix returns the site whose prefixes hold p in g's federation,
// "" for none.
func siteOfPrefix(g plan.Gateway, p netip.Prefix) string {
	if g.Local == nil || g.Local.Federation == nil {
		return ""
	}
	for _, s := range g.Local.Federation.Sites {
		for _, sp := range s.Prefixes {
			if sp.Overlaps(p) {
				return s.Name
			}
		}
	}
	return ""
}

// encapPeers is the set of peers of an encapsulation, for the log.
func encapPeers(m map[netip.Prefix]netip.Addr) map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	for _, a := range m {
		out[a] = true
	}
	return out
}

// describeEncap says what the transit device carries, for the log.
func describeEncap(m map[netip.Prefix]netip.Addr) string {
	if len(m) == 0 {
		return "sending everything plain (every peer accepts this gateway's site from it)"
	}
	by := map[netip.Addr][]string{}
	for p, a := range m {
		by[a] = append(by[a], p.String())
	}
	var parts []string
	for _, a := range slices.SortedFunc(maps.Keys(by), func(x, y netip.Addr) int { return x.Compare(y) }) {
		slices.Sort(by[a])
		parts = append(parts, fmt.Sprintf("%s to %s", strings.Join(by[a], " "), a))
	}
	return "encapsulating (" + dataplane.TransitDevice + ") " + strings.Join(parts, ", ") + " until the far end accepts this gateway's site"
}

// describeSends says where p sends each remote site, for the log.
func describeSends(p *plan.Gateway) string {
	m := plan.SendsTo(*p, p.Local.Federation)
	var parts []string
	for _, site := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, site+" to "+m[site])
	}
	return strings.Join(parts, ", ")
}
