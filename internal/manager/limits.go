package manager

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fednet/fednet/internal/manager/store"
)

// Limits bound what clients can make the manager hold. A zero field takes
// its default (the Default* constants); docs/manager.md lists each with
// its fednet manager flag.
type Limits struct {
	// MaxConnections caps the open client connections (--max-connections);
	// further connections wait in the listen queue until one closes.
	MaxConnections int
	// IdleTimeout closes a connection with no request in flight, HTTP/1.1
	// and HTTP/2 alike (--idle-timeout).
	IdleTimeout time.Duration
	// BodyTimeout bounds reading a request's body, from the end of its
	// headers (--body-timeout). Headers themselves get HeaderTimeout.
	BodyTimeout time.Duration
	// WatchesPerCredential caps the long polls (plan, tunnel and
	// measurement watches) one credential may hold at once
	// (--max-watches-per-credential); one more is answered 429.
	WatchesPerCredential int
	// AuthFailuresPerSecond and AuthFailureBurst rate-limit failed
	// authentications per client address (--auth-failures-per-second,
	// --auth-failure-burst): past the burst, a failing request is answered
	// 429 instead of 401 until the address's budget refills. Requests
	// with a valid credential are never limited.
	AuthFailuresPerSecond float64
	AuthFailureBurst      int
	// AuthLogInterval is how often the failed authentications of the last
	// interval are logged, as one line (--auth-log-interval).
	AuthLogInterval time.Duration
}

// Limit defaults.
const (
	DefaultMaxConnections        = 16384
	DefaultIdleTimeout           = 10 * time.Second
	DefaultBodyTimeout           = 30 * time.Second
	DefaultWatchesPerCredential  = 8
	DefaultAuthFailuresPerSecond = 5
	DefaultAuthFailureBurst      = 20
	DefaultAuthLogInterval       = time.Minute
	// HeaderTimeout bounds a connection's TLS handshake and reading a
	// request's headers.
	HeaderTimeout = 10 * time.Second
)

// withDefaults fills in zero fields and rejects negative ones.
func (l Limits) withDefaults() (Limits, error) {
	switch {
	case l.MaxConnections < 0:
		return l, fmt.Errorf("--max-connections %d: want 1 or more", l.MaxConnections)
	case l.IdleTimeout < 0:
		return l, fmt.Errorf("--idle-timeout %v: want a positive duration", l.IdleTimeout)
	case l.BodyTimeout < 0:
		return l, fmt.Errorf("--body-timeout %v: want a positive duration", l.BodyTimeout)
	case l.WatchesPerCredential < 0:
		return l, fmt.Errorf("--max-watches-per-credential %d: want 1 or more", l.WatchesPerCredential)
	case l.AuthFailuresPerSecond < 0:
		return l, fmt.Errorf("--auth-failures-per-second %v: want more than 0", l.AuthFailuresPerSecond)
	case l.AuthFailureBurst < 0:
		return l, fmt.Errorf("--auth-failure-burst %d: want 1 or more", l.AuthFailureBurst)
	case l.AuthLogInterval < 0:
		return l, fmt.Errorf("--auth-log-interval %v: want a positive duration", l.AuthLogInterval)
	}
	l.MaxConnections = cmp.Or(l.MaxConnections, DefaultMaxConnections)
	l.IdleTimeout = cmp.Or(l.IdleTimeout, DefaultIdleTimeout)
	l.BodyTimeout = cmp.Or(l.BodyTimeout, DefaultBodyTimeout)
	l.WatchesPerCredential = cmp.Or(l.WatchesPerCredential, DefaultWatchesPerCredential)
	l.AuthFailuresPerSecond = cmp.Or(l.AuthFailuresPerSecond, DefaultAuthFailuresPerSecond)
	l.AuthFailureBurst = cmp.Or(l.AuthFailureBurst, DefaultAuthFailureBurst)
	l.AuthLogInterval = cmp.Or(l.AuthLogInterval, DefaultAuthLogInterval)
	return l, nil
}

// waker wakes the watches of topics (a gateway's plan, a host). A watch
// takes a topic's channel, then reads the state; a change publishes the
// state, then closes the channels of the topics it changed. The zero
// value is ready; safe for concurrent use.
type waker struct {
	mu     sync.Mutex
	topics map[string]chan struct{}
}

// channel returns a channel closed at the next wake of topic.
func (w *waker) channel(topic string) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.topics == nil {
		w.topics = map[string]chan struct{}{}
	}
	c, ok := w.topics[topic]
	if !ok {
		c = make(chan struct{})
		w.topics[topic] = c
	}
	return c
}

// wake wakes the watches of topics.
func (w *waker) wake(topics []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, t := range topics {
		if c, ok := w.topics[t]; ok {
			close(c)
			delete(w.topics, t)
		}
	}
}

// all wakes every watch.
func (w *waker) all() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.topics {
		close(c)
	}
	w.topics = nil
}

// watchSlots counts the watches each credential holds. The zero value is
// ready; safe for concurrent use.
type watchSlots struct {
	mu   sync.Mutex
	held map[store.Hash]int
}

// take takes one of the max slots of credential h; release gives it back.
// ok is false when all are taken.
func (s *watchSlots) take(h store.Hash, max int) (release func(), ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held[h] >= max {
		return nil, false
	}
	if s.held == nil {
		s.held = map[store.Hash]int{}
	}
	s.held[h]++
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.held[h]--; s.held[h] <= 0 {
			delete(s.held, h)
		}
	}, true
}

// watchSlot takes a watch slot for the request's credential, or answers
// 429 when it holds Limits.WatchesPerCredential watches already. Call it
// after authentication.
func (m *Manager) watchSlot(r *http.Request) (release func(), err error) {
	tok, err := bearer(r)
	if err != nil {
		return nil, err
	}
	release, ok := m.slots.take(store.HashSecret(tok), m.limits.WatchesPerCredential)
	if !ok {
		return nil, fail(http.StatusTooManyRequests, "Authorization",
			"this credential holds %d watches already, the most the manager allows (--max-watches-per-credential); end one first", m.limits.WatchesPerCredential)
	}
	return release, nil
}

// authLimiter rate-limits failed authentications per client address (a
// token bucket each) and logs them as one line per interval. Safe for
// concurrent use.
type authLimiter struct {
	rate     float64
	burst    float64
	interval time.Duration
	now      func() time.Time
	logf     func(string, ...any)

	mu      sync.Mutex
	buckets map[string]*bucket
	// Since the last log line:
	failed  map[string]int // failures by address
	limited int            // of them answered 429
}

// maxBuckets bounds the addresses tracked; beyond it, full buckets are
// forgotten first, then all.
const maxBuckets = 10000

type bucket struct {
	tokens float64
	at     time.Time
}

func newAuthLimiter(l Limits, now func() time.Time, logf func(string, ...any)) *authLimiter {
	return &authLimiter{rate: l.AuthFailuresPerSecond, burst: float64(l.AuthFailureBurst), interval: l.AuthLogInterval,
		now: now, logf: logf, buckets: map[string]*bucket{}, failed: map[string]int{}}
}

// fail records a failed authentication from addr; it reports whether the
// address is over its budget (answer 429 instead of 401).
func (a *authLimiter) fail(addr string) (limited bool) {
	now := a.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.failed[addr]++
	b, ok := a.buckets[addr]
	if !ok {
		if len(a.buckets) >= maxBuckets {
			a.forgetLocked(now)
		}
		b = &bucket{tokens: a.burst, at: now}
		a.buckets[addr] = b
	}
	b.tokens = min(a.burst, b.tokens+now.Sub(b.at).Seconds()*a.rate)
	b.at = now
	if b.tokens < 1 {
		a.limited++
		return true
	}
	b.tokens--
	return false
}

// forgetLocked drops the buckets that have refilled, or all of them if
// none has.
func (a *authLimiter) forgetLocked(now time.Time) {
	for addr, b := range a.buckets {
		if b.tokens+now.Sub(b.at).Seconds()*a.rate >= a.burst {
			delete(a.buckets, addr)
		}
	}
	if len(a.buckets) >= maxBuckets {
		clear(a.buckets)
	}
}

// flush logs the failures since the last flush, as one line, if any.
func (a *authLimiter) flush() {
	a.mu.Lock()
	failed, limited := a.failed, a.limited
	a.failed, a.limited = map[string]int{}, 0
	a.mu.Unlock()
	if len(failed) == 0 {
		return
	}
	total := 0
	for _, n := range failed {
		total += n
	}
	addrs := slices.SortedFunc(maps.Keys(failed), func(x, y string) int { return cmp.Or(cmp.Compare(failed[y], failed[x]), cmp.Compare(x, y)) })
	var top []string
	for _, addr := range addrs[:min(3, len(addrs))] {
		top = append(top, fmt.Sprintf("%s (%d)", addr, failed[addr]))
	}
	a.logf("refused %d requests with a missing or unknown credential in the last %v, from %d addresses (most: %s); %d of them rate-limited (429)",
		total, a.interval, len(addrs), strings.Join(top, ", "), limited)
}

// run flushes every interval until ctx ends, then once more.
func (a *authLimiter) run(ctx context.Context) {
	t := time.NewTicker(a.interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			a.flush()
		case <-ctx.Done():
			a.flush()
			return
		}
	}
}

// clientAddr is the request's source address without the port.
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
