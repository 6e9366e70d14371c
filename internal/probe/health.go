package probe

import (
	"slices"
	"time"
)

// Port is the UDP port a gateway's Responder listens on, on its transit
// address (reserved for link probes; WireGuard is 51820).
const Port = 51821

// The link-up rule. A link is down when either holds:
//
//   - its last DownAfterLost probes (by sequence number) were all lost,
//     or all of them when fewer have been decided yet; or
//   - its tunnel driver does not report the tunnel established (the
//     driver's own verdict, dataplane.LinkState.Established; for
//     WireGuard, no handshake within the last three minutes).
//
// With one probe a second, a 1 s timeout and fast retry (Config.Retry: once
// the newest probe is overdue, probes go out every 250 ms until one is
// answered), a cut is seen 1.5 to 2.5 seconds after it happens (the first
// lost probe leaves within a second, the third 0.5 s after it and is
// decided a timeout later), and one answered probe brings the link back
// up. Probes alone never declare a link up whose tunnel is not
// established: WireGuard rekeys every two minutes while traffic flows (the
// probes are traffic), so a handshake older than three minutes means the
// tunnel itself is broken.
const DownAfterLost = 3

// HandshakeWithin is WireGuard's established rule as agents from before
// tunnel drivers left it to the manager: their reports carry a handshake
// but no verdict, and the manager judges those links up when the
// handshake is younger than this (HandshakeUp). The WireGuard driver's own
// rule is the same (wireguard.EstablishedWithin). It is also how long the
// manager trusts a verdict of "established" in a report: a gateway that
// stopped reporting has its links go down within that time.
const HandshakeWithin = 3 * time.Minute

// ProbesUp applies the probe half of the link-up rule to the decided
// samples of one prober, in any order: false when the DownAfterLost most
// recent (by sequence number) were all lost. With no samples yet it is
// true: the probes have no verdict, so the tunnel driver's decides alone.
func ProbesUp(samples []Sample) bool {
	recent := Recent(samples, DownAfterLost)
	if len(recent) == 0 {
		return true
	}
	for _, s := range recent {
		if !s.Lost {
			return true
		}
	}
	return false
}

// HandshakeUp is the established half of the link-up rule for reports
// without a driver's verdict: a handshake within HandshakeWithin before
// now. The zero time means never.
func HandshakeUp(last, now time.Time) bool {
	return !last.IsZero() && now.Sub(last) < HandshakeWithin
}

// Recent returns the n samples with the highest sequence numbers, oldest
// first. It does not modify samples.
func Recent(samples []Sample, n int) []Sample {
	s := slices.Clone(samples)
	slices.SortFunc(s, func(a, b Sample) int {
		switch {
		case a.Seq < b.Seq:
			return -1
		case a.Seq > b.Seq:
			return 1
		}
		return 0
	})
	if len(s) > n {
		s = s[len(s)-n:]
	}
	return s
}
