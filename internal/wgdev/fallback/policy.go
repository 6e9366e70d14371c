package fallback

import (
	"net/netip"
	"time"

	"github.com/fednet/fednet/internal/backend"
)

// Defaults of PolicyConfig.
const (
	// DefaultAfter is how long a handshake initiation sent over UDP may go
	// unanswered before the fallback stream is dialed. WireGuard retries an
	// unanswered initiation after 5 s; 3 s lets the stream be up (and the
	// initiation replayed over it) before that retry.
	DefaultAfter = 3 * time.Second
	// DefaultRetryUDP is how often a link on the stream tries UDP again.
	DefaultRetryUDP = 30 * time.Second
	// DefaultRedial is the least time between two dials of one peer.
	DefaultRedial = 5 * time.Second
	// DefaultLinger is how long a stream stays open after its link moved
	// back to UDP: the peer keeps answering over the stream until a packet
	// of ours reaches it over UDP, which WireGuard's keepalive (10 s)
	// ensures within this time.
	DefaultLinger = 15 * time.Second
)

// PolicyConfig tunes the switch between UDP and the stream.
type PolicyConfig struct {
	// After: an initiation unanswered over UDP for this long makes the
	// stream be dialed (default DefaultAfter).
	After time.Duration
	// RetryUDP: a link on the stream sends one batch over UDP this often;
	// an answer over UDP switches it back (default DefaultRetryUDP). The
	// first probes come sooner: After after the switch, then twice the
	// gap each time up to RetryUDP, so a link that fell back while its
	// peer was still starting returns within seconds.
	RetryUDP time.Duration
	// Redial is the least time between two dials of one peer (default
	// DefaultRedial).
	Redial time.Duration
	// Linger is how long a stream stays open, read but no longer written,
	// after its link moved back to UDP (default DefaultLinger).
	Linger time.Duration
}

func (c PolicyConfig) withDefaults() PolicyConfig {
	if c.After <= 0 {
		c.After = DefaultAfter
	}
	if c.RetryUDP <= 0 {
		c.RetryUDP = DefaultRetryUDP
	}
	if c.Redial <= 0 {
		c.Redial = DefaultRedial
	}
	if c.Linger <= 0 {
		c.Linger = DefaultLinger
	}
	return c
}

// Action is what the policy tells the bind to do with a batch of packets
// for a peer.
type Action struct {
	// Via is the transport the batch goes by.
	Via backend.Transport
	// Dial: start dialing the peer's stream now (the policy counts the
	// dial as under way until StreamUp or DialFailed).
	Dial bool
	// Probe: the batch goes over UDP although the link is on the stream,
	// to see whether UDP works again.
	Probe bool
}

// Policy decides, per peer UDP endpoint, whether packets go over UDP or
// over the fallback stream. It is a pure state machine: every method takes
// the time, so tests drive it with a fake clock. The rule:
//
//   - A link starts on UDP. A handshake initiation sent over UDP that no
//     UDP packet from the peer follows within After makes the bind dial
//     the peer's stream (again at most every Redial while UDP stays
//     silent and WireGuard keeps initiating).
//   - Once the stream is up and UDP is still silent, the link moves to the
//     stream (StreamUp returns true; the bind replays the last initiation
//     over it).
//   - On the stream, a batch now and then goes over UDP instead (a
//     probe: lost while UDP is blocked, which WireGuard and the traffic
//     inside recover from): After after the switch, then at twice the
//     previous gap, at most RetryUDP apart. Any UDP packet from the peer moves the link
//     back to UDP; the stream is read for Linger more, while the peer
//     still answers over it, then closed.
//   - A stream that breaks moves the link back to UDP with its silence
//     kept, so the stream is redialed at once.
//
// A Policy is not safe for concurrent use; the bind holds a lock.
type Policy struct {
	cfg   PolicyConfig
	peers map[netip.AddrPort]*peerState
}

type peerState struct {
	via backend.Transport
	// silentSince is when the first initiation went out over UDP after
	// the last UDP packet from the peer; zero when none is unanswered.
	silentSince time.Time
	// lastInit is when the last initiation went out (any transport).
	lastInit  time.Time
	dialing   bool
	lastDial  time.Time
	streamUp  bool
	nextProbe time.Time
	probeGap  time.Duration // the gap before nextProbe
}

// NewPolicy returns a policy with no peers.
func NewPolicy(cfg PolicyConfig) *Policy {
	return &Policy{cfg: cfg.withDefaults(), peers: map[netip.AddrPort]*peerState{}}
}

func (p *Policy) state(dst netip.AddrPort) *peerState {
	s := p.peers[dst]
	if s == nil {
		s = &peerState{via: backend.TransportUDP}
		p.peers[dst] = s
	}
	return s
}

// Via returns the transport of the link to dst now.
func (p *Policy) Via(dst netip.AddrPort) backend.Transport {
	if s := p.peers[dst]; s != nil {
		return s.via
	}
	return backend.TransportUDP
}

// Sent is called before a batch goes to dst; initiation says the batch
// holds a handshake initiation. It returns how to send it.
func (p *Policy) Sent(dst netip.AddrPort, initiation bool, now time.Time) Action {
	s := p.state(dst)
	if initiation {
		s.lastInit = now
	}
	if s.via == backend.TransportTCP443 {
		if !now.Before(s.nextProbe) {
			s.probeGap = min(2*s.probeGap, p.cfg.RetryUDP)
			s.nextProbe = now.Add(s.probeGap)
			return Action{Via: backend.TransportUDP, Probe: true}
		}
		return Action{Via: backend.TransportTCP443}
	}
	if initiation && s.silentSince.IsZero() {
		s.silentSince = now
	}
	return Action{Via: backend.TransportUDP, Dial: p.dial(s, now)}
}

// dial decides whether to dial now, and records the dial.
func (p *Policy) dial(s *peerState, now time.Time) bool {
	if s.silentSince.IsZero() || s.dialing || s.streamUp ||
		now.Sub(s.silentSince) < p.cfg.After ||
		(!s.lastDial.IsZero() && now.Sub(s.lastDial) < p.cfg.Redial) {
		return false
	}
	s.dialing, s.lastDial = true, now
	return true
}

// Due returns when Check should next run for dst (the bind arms a timer),
// or the zero time when nothing is pending: the time an unanswered
// initiation reaches After, or the next allowed redial.
func (p *Policy) Due(dst netip.AddrPort) time.Time {
	s := p.peers[dst]
	if s == nil || s.via != backend.TransportUDP || s.silentSince.IsZero() || s.dialing || s.streamUp {
		return time.Time{}
	}
	due := s.silentSince.Add(p.cfg.After)
	if !s.lastDial.IsZero() {
		if r := s.lastDial.Add(p.cfg.Redial); r.After(due) {
			due = r
		}
	}
	return due
}

// Check is called when Due has come: it says whether to dial now.
func (p *Policy) Check(dst netip.AddrPort, now time.Time) (dial bool) {
	s := p.peers[dst]
	if s == nil || s.via != backend.TransportUDP {
		return false
	}
	return p.dial(s, now)
}

// ReceivedUDP is called for every packet from dst over UDP. It returns
// true when the link was on the stream and moves back to UDP: the bind
// then stops writing to the stream and closes it after Linger.
func (p *Policy) ReceivedUDP(dst netip.AddrPort, now time.Time) (back bool) {
	s := p.peers[dst]
	if s == nil {
		return false
	}
	s.silentSince = time.Time{}
	if s.via != backend.TransportTCP443 {
		return false
	}
	s.via, s.streamUp = backend.TransportUDP, false
	return true
}

// StreamUp is called when a dial of dst's stream succeeded. It returns
// true when the link moves to the stream; false when UDP answered in the
// meantime, and the bind closes the stream.
func (p *Policy) StreamUp(dst netip.AddrPort, now time.Time) (use bool) {
	s := p.state(dst)
	s.dialing = false
	if s.silentSince.IsZero() {
		return false
	}
	s.via, s.streamUp = backend.TransportTCP443, true
	s.probeGap = min(p.cfg.After, p.cfg.RetryUDP)
	s.nextProbe = now.Add(s.probeGap)
	return true
}

// DialFailed is called when a dial of dst's stream failed. When WireGuard
// sent no initiation since the dial began, the silence is forgotten, so
// the bind does not keep dialing a peer WireGuard gave up on; its next
// initiation starts over.
func (p *Policy) DialFailed(dst netip.AddrPort, now time.Time) {
	s := p.state(dst)
	s.dialing = false
	if s.lastInit.Before(s.lastDial) {
		s.silentSince = time.Time{}
	}
}

// StreamDown is called when the stream of dst broke. The link goes back
// to UDP; when it was on the stream, its silence is kept (dated so that
// the stream is redialed as soon as Redial allows).
func (p *Policy) StreamDown(dst netip.AddrPort, now time.Time) {
	s := p.state(dst)
	if s.via == backend.TransportTCP443 || s.streamUp {
		if s.silentSince.IsZero() || now.Sub(s.silentSince) < p.cfg.After {
			s.silentSince = now.Add(-p.cfg.After)
		}
	}
	s.via, s.streamUp = backend.TransportUDP, false
}

// Forget drops the state of dst.
func (p *Policy) Forget(dst netip.AddrPort) { delete(p.peers, dst) }
