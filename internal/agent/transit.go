package agent

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"

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
	h.pending = u.Plan
	h.mu.Unlock()
	h.syncTransit()
	res := h.deliver(u)
	h.mu.Lock()
	h.pending = nil
	announce := false
	if res.Err == nil {
		h.applied = u.Plan
		if h.state != nil && u.Plan.Local != nil && u.Plan.Local.Federation != nil {
			sends := plan.SendsTo(*u.Plan, u.Plan.Local.Federation)
			announce = !maps.Equal(sends, h.state.Sends())
			h.state.SetSends(sends)
		}
	}
	h.mu.Unlock()
	if announce {
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
		h.logf("failover: %s", describeEncap(encap))
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
	transit := map[string]netip.Addr{}
	for _, peer := range p.Peers {
		if a, ok := peerTransit(p, peer); ok {
			transit[peer.Gateway] = a
		}
	}
	for _, r := range p.Routes {
		a, ok := transit[r.Via]
		if !ok || r.Destination.Contains(a) || r.Destination.Contains(p.TransitAddress()) {
			continue
		}
		if !h.state.Plain(r.Via, h.dec.SelfActive) {
			out[r.Destination] = a
		}
	}
	return out
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
