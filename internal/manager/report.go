package manager

import (
	"fmt"
	"math"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/backend"
	"github.com/fednet/fednet/internal/plan"
)

// Bounds of a status report's fields (docs/manager.md, "Status reports").
const (
	maxApplyError   = 8 << 10 // bytes of applyError
	maxEndpoint     = 64      // bytes of a link's endpoint
	maxProbeWindow  = time.Hour
	maxProbeCount   = 1 << 20     // probes sent in a window
	maxProbeRTT     = time.Minute // RTT percentiles and jitter
	maxBandwidthBps = 1e13        // 10 Tbit/s
	maxClockSkew    = time.Hour   // a handshake this far in the future is refused
	maxCause        = 512         // bytes of a failover's cause
	maxReason       = 512         // bytes of a link's failure reason
	minHandshake    = 946684800   // 2000-01-01, unix seconds: earlier is no handshake of ours
)

// checkReport checks gateway name's report against its current plan in st:
// every number in range, strings bounded, and every link to a peer of the
// plan, once. A report of the plan's generation (or later) naming a peer
// that is not in the plan is refused; a report of an older plan may name
// peers since dropped: those links are left out (the agent has not applied
// the change yet). It answers 422 (api.CodeInvalidReport) naming the field.
func checkReport(rep *api.StatusReport, st *state, name string, now time.Time) error {
	bad := func(field, format string, args ...any) error {
		return failCode(http.StatusUnprocessableEntity, api.CodeInvalidReport, field, "field %s: %s", field, fmt.Sprintf(format, args...))
	}
	switch {
	case rep.Generation < 0:
		return bad("generation", "%d is negative; want the generation of the plan applied", rep.Generation)
	case rep.Revision < 0:
		return bad("revision", "%d is negative; want the revision of the plan applied", rep.Revision)
	case len(rep.ApplyError) > maxApplyError:
		return bad("applyError", "%d bytes; at most %d", len(rep.ApplyError), maxApplyError)
	case !utf8.ValidString(rep.ApplyError):
		return bad("applyError", "not valid UTF-8")
	}
	p, planned, err := st.entry(name)
	if err != nil {
		return err
	}
	strict := planned && rep.Generation >= p.Generation
	seen := map[string]bool{}
	kept := rep.Links[:0:0]
	for i, l := range rep.Links {
		field := func(f string) string { return fmt.Sprintf("links[%d].%s", i, f) }
		switch {
		case l.Peer == "":
			return bad(field("peer"), "required: the peer gateway's name")
		case seen[l.Peer]:
			return bad(field("peer"), "peer %q is reported twice", l.Peer)
		case strict && !peerOf(p.held, l.Peer):
			return bad(field("peer"), "%q is not a peer of gateway %s in its plan (generation %d); report the plan's peers only", l.Peer, name, p.Generation)
		}
		seen[l.Peer] = true
		if err := checkLink(l, now, func(f, format string, args ...any) error { return bad(field(f), format, args...) }); err != nil {
			return err
		}
		if l.Via != "" && !peerOf(p.held, l.Via) {
			if strict {
				return bad(field("via"), "%q is not a peer of gateway %s in its plan (generation %d); name the peer that relays, or leave it out", l.Via, name, p.Generation)
			}
			l.Via = ""
		}
		if planned && peerOf(p.held, l.Peer) {
			kept = append(kept, l)
		}
	}
	rep.Links = kept
	return checkFailover(rep.Failover, st, name, now, bad)
}

// checkFailover checks the failover part of gateway name's report: the
// gateways it names are of name's site, the cause is short text, the
// times are not in the future.
func checkFailover(f *api.FailoverStatus, st *state, name string, now time.Time, bad func(field, format string, args ...any) error) error {
	if f == nil {
		return nil
	}
	var site []string
	if st.fed != nil {
		if _, s, ok := st.fed.Gateway(name); ok {
			for _, g := range s.Gateways {
				site = append(site, g.Name)
			}
		}
	}
	ofSite := func(field, g string, empty bool) error {
		if (empty && g == "") || slices.Contains(site, g) {
			return nil
		}
		return bad(field, "%q is not a gateway of %s's site (%s)", g, name, strings.Join(site, ", "))
	}
	if err := ofSite("failover.active", f.Active, false); err != nil {
		return err
	}
	if f.ActiveSince.After(now.Add(maxClockSkew)) {
		return bad("failover.activeSince", "%s is in the future (the manager's clock says %s)", f.ActiveSince.Format(time.RFC3339), now.Format(time.RFC3339))
	}
	l := f.LastFailover
	if l == nil {
		return nil
	}
	switch {
	case ofSite("failover.lastFailover.from", l.From, true) != nil:
		return ofSite("failover.lastFailover.from", l.From, true)
	case ofSite("failover.lastFailover.to", l.To, true) != nil:
		return ofSite("failover.lastFailover.to", l.To, true)
	case len(l.Cause) > maxCause:
		return bad("failover.lastFailover.cause", "%d bytes; at most %d", len(l.Cause), maxCause)
	case !utf8.ValidString(l.Cause):
		return bad("failover.lastFailover.cause", "not valid UTF-8")
	case l.At.After(now.Add(maxClockSkew)):
		return bad("failover.lastFailover.at", "%s is in the future (the manager's clock says %s)", l.At.Format(time.RFC3339), now.Format(time.RFC3339))
	}
	return nil
}

// checkLink checks one link's figures; bad makes the error for a field of
// the link.
func checkLink(l api.LinkStatus, now time.Time, bad func(field, format string, args ...any) error) error {
	if l.Transport != "" && !l.Transport.Valid() {
		return bad("transport", "%q is not a transport; want %s or %s", l.Transport, backend.TransportUDP, backend.TransportTCP443)
	}
	if l.Endpoint != "" {
		if len(l.Endpoint) > maxEndpoint {
			return bad("endpoint", "%d bytes; at most %d", len(l.Endpoint), maxEndpoint)
		}
		if _, err := netip.ParseAddrPort(l.Endpoint); err != nil {
			return bad("endpoint", "%q is not IP:PORT", l.Endpoint)
		}
	}
	switch {
	case len(l.Reason) > maxReason:
		return bad("reason", "%d bytes; at most %d", len(l.Reason), maxReason)
	case !utf8.ValidString(l.Reason):
		return bad("reason", "not valid UTF-8")
	}
	switch hs := l.LastHandshake; {
	case !hs.IsZero() && hs.Unix() < minHandshake:
		return bad("lastHandshake", "%s is before 2000; leave it out when there was no handshake", hs.Format(time.RFC3339))
	case hs.After(now.Add(maxClockSkew)):
		return bad("lastHandshake", "%s is in the future (the manager's clock says %s)", hs.Format(time.RFC3339), now.Format(time.RFC3339))
	case l.HandshakeAge < 0:
		return bad("handshakeAgeNs", "%d is negative", l.HandshakeAge)
	case l.RxBytes < 0:
		return bad("rxBytes", "%d is negative", l.RxBytes)
	case l.TxBytes < 0:
		return bad("txBytes", "%d is negative", l.TxBytes)
	case !inRange(l.AvailableBandwidth, 0, maxBandwidthBps):
		return bad("availableBandwidthBps", "%g is out of range: want 0 to %g", l.AvailableBandwidth, float64(maxBandwidthBps))
	}
	pr := l.Probe
	if pr == nil {
		return nil
	}
	switch {
	case pr.Window < 0 || pr.Window > maxProbeWindow:
		return bad("probe.windowNs", "%v is out of range: want 0 to %v", pr.Window, maxProbeWindow)
	case pr.Sent < 0 || pr.Sent > maxProbeCount:
		return bad("probe.sent", "%d is out of range: want 0 to %d", pr.Sent, maxProbeCount)
	case pr.Lost < 0 || pr.Lost > pr.Sent:
		return bad("probe.lost", "%d is out of range: want 0 to sent (%d)", pr.Lost, pr.Sent)
	case !inRange(pr.Loss, 0, 1):
		return bad("probe.loss", "%g is out of range: want 0 to 1", pr.Loss)
	case !inRange(pr.RecentLoss, 0, 1):
		return bad("probe.recentLoss", "%g is out of range: want 0 to 1", pr.RecentLoss)
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{{"probe.rttP50Ns", pr.RTTP50}, {"probe.rttP99Ns", pr.RTTP99}, {"probe.jitterNs", pr.Jitter}} {
		if d.v < 0 || d.v > maxProbeRTT {
			return bad(d.field, "%v is out of range: want 0 to %v", d.v, maxProbeRTT)
		}
	}
	return nil
}

// inRange reports whether v is a number in [lo, hi] (NaN is not).
func inRange(v, lo, hi float64) bool { return !math.IsNaN(v) && v >= lo && v <= hi }

// peerOf reports whether peer is a peer of g.
func peerOf(h plan.Held, peer string) bool {
	_, ok := h.Peer(peer)
	return ok
}
