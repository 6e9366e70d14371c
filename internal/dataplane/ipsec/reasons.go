package ipsec

import (
	"regexp"
	"strings"
	"sync"
)

// reasons keeps, per peer, why its link last failed, from charon's log
// lines (vici "log" events) of fednet's connections; an established IKE_SA
// clears it. Safe for concurrent use.
type reasons struct {
	mu   sync.Mutex
	last map[string]string
}

func newReasons() *reasons { return &reasons{last: map[string]string{}} }

// get returns the last reason recorded for peer, "" for none.
func (r *reasons) get(peer string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last[peer]
}

// record files msg, a log line of connection conn, and returns the new
// reason when it changed ("" otherwise).
func (r *reasons) record(conn, msg string) (peer, reason string, changed bool) {
	peer, ok := strings.CutPrefix(conn, ConnPrefix)
	if !ok || peer == "" {
		return "", "", false
	}
	reason, known := Classify(msg)
	if !known {
		return peer, "", false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last[peer] == reason {
		return peer, reason, false
	}
	if reason == "" {
		delete(r.last, peer)
	} else {
		r.last[peer] = reason
	}
	return peer, reason, true
}

var retransmits = regexp.MustCompile(`giving up after (\d+) retransmits`)

// Classify turns one of charon's log messages into the reason a link is
// down, for status and the log: "" with known true for a message that
// says the link came up, known false for a message that says neither.
func Classify(msg string) (reason string, known bool) {
	switch {
	case strings.Contains(msg, "established between"):
		return "", true
	case strings.Contains(msg, "AUTHENTICATION_FAILED"), strings.Contains(msg, "MAC mismatched"),
		strings.Contains(msg, "authentication of") && strings.Contains(msg, "failed"):
		return "authentication failed: the pre-shared keys (or identities) of the two sides differ", true
	case strings.Contains(msg, "NO_PROPOSAL_CHOSEN"), strings.Contains(msg, "no acceptable proposal"),
		strings.Contains(msg, "proposals unacceptable"):
		return "proposal mismatch: the two sides share no IKE or ESP proposal, or the peer has no connection for this gateway (yet); compare overlay.ipsec.ike/esp or the profile's proposals with the peer's", true
	case strings.Contains(msg, "TS_UNACCEPTABLE"):
		return "traffic selectors refused: the peer does not route the prefixes this side offers (compare the sites' prefixes on both sides)", true
	}
	if m := retransmits.FindStringSubmatch(msg); m != nil {
		return "peer unreachable: no answer to IKE after " + m[1] + " retransmits (is UDP 500/4500 open on the path and the peer's gateway running?)", true
	}
	return "", false
}
