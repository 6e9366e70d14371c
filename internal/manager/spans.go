package manager

import (
	"fmt"
	"strings"
	"time"
)

// applySpans is where the time of one change went, from the API call's
// start to its answer: logged once per spec change and gateway removal
// (see logSpans), so that
// the planning a bench reads from the log can be set against the call.
type applySpans struct {
	read     time.Duration // reading the request's body
	parse    time.Duration // spec.Parse of the request's document
	lock     time.Duration // waiting for the write lock (another change running)
	catchUp  time.Duration // reading the store's changes of other managers
	edit     time.Duration // the request's own edit of the state
	resolve  time.Duration // computing lazy plans of the state before
	plan     time.Duration // computing the plans (and their sums)
	commit   time.Duration // the store's transaction (all attempts)
	publish  time.Duration // making the state current, waking the watches
	deltas   time.Duration // encoding the deltas agents are sent (after publish)
	diff     time.Duration // the answer's plan diff
	answer   time.Duration // encoding and writing the answer
	handler  time.Duration // all of the above, from the handler's start
	attempts int           // store commits tried
	plans    int           // plans written to the store
}

// logSpans logs where the time of the change of generation gen (what
// names it) went.
func (m *Manager) logSpans(gen int64, what string, s applySpans) {
	m.cfg.Logf("change of generation %d (%s): %v", gen, what, s)
}

// String renders the spans in milliseconds, in the order they happen.
func (s applySpans) String() string {
	var b strings.Builder
	for _, p := range []struct {
		name string
		d    time.Duration
	}{
		{"read", s.read}, {"parse", s.parse}, {"lock", s.lock}, {"catch-up", s.catchUp}, {"edit", s.edit},
		{"resolve", s.resolve}, {"plan", s.plan}, {"commit", s.commit},
		{"publish", s.publish}, {"deltas", s.deltas}, {"diff", s.diff}, {"answer", s.answer}, {"handler", s.handler},
	} {
		fmt.Fprintf(&b, "%s %.1f ms, ", p.name, float64(p.d.Microseconds())/1000)
	}
	fmt.Fprintf(&b, "%d plans stored in %d commit attempts", s.plans, s.attempts)
	return b.String()
}
