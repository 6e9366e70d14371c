package manager

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/console"
	"github.com/fednet/fednet/internal/manager/store"
	"github.com/fednet/fednet/internal/plan"
)

// newConsole makes the web console (internal/console) that Handler serves
// under console.Prefix. Its sessions are signed with a key derived from the
// admin token: managers sharing the admin token accept each other's
// sessions, and a new admin token ends them all.
func newConsole(m *Manager) (*console.Console, error) {
	key := sha256.Sum256([]byte("fednet console session key\x00" + m.adminToken))
	c, err := console.New(console.Config{
		Source:     &consoleSource{m: m},
		SessionKey: key[:],
		Logf:       m.cfg.Logf,
		Now:        m.cfg.Now,
		Done:       func(r *http.Request) <-chan struct{} { return drainOf(r.Context()) },
	})
	if err != nil {
		return nil, fmt.Errorf("web console: %w", err)
	}
	return c, nil
}

// consoleSource is the manager's side of the console (console.Source): the
// same read models the API serves, plus the plans.
type consoleSource struct {
	m *Manager

	mu     sync.Mutex
	revsOf int            // the current revision when revs was read
	revs   []api.Revision // read models of every revision
}

// Snapshot implements console.Source.
func (s *consoleSource) Snapshot(ctx context.Context) (console.Snapshot, error) {
	reps, err := s.m.reports(ctx)
	if err != nil {
		return console.Snapshot{}, err
	}
	st := s.m.snapshot()
	revs, err := s.revisions(ctx, st.rev.Number)
	if err != nil {
		return console.Snapshot{}, err
	}
	plans := make(map[string]plan.Gateway, len(st.plans))
	resolveAll(st)
	for name, p := range st.plans {
		if p, ok := p.current(); ok {
			plans[name] = p.held.Gateway()
		}
	}
	now := s.m.now()
	snap := console.Snapshot{
		Revision: st.rev.Number, Generation: st.gen,
		Sites: siteModels(st, reps), Networks: networkModels(st),
		Gateways: gatewayModels(st, reps), Links: links(st, reps, now),
		Revisions: revs, Plans: plans, Now: now,
	}
	if st.fed != nil {
		snap.Federation = st.fed.Name
	}
	return snap, nil
}

// revisions returns the read models of every revision, reading the store
// only when the current revision moved since the last read.
func (s *consoleSource) revisions(ctx context.Context, current int) ([]api.Revision, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.revs != nil && s.revsOf == current {
		return s.revs, nil
	}
	stored, err := s.m.store.Revisions(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading spec revisions: %w", err)
	}
	out := make([]api.Revision, 0, len(stored))
	for _, r := range stored {
		out = append(out, s.m.revisionModel(r))
	}
	s.revs, s.revsOf = out, current
	return out, nil
}

// SpecYAML implements console.Source.
func (s *consoleSource) SpecYAML(ctx context.Context, n int) (string, time.Time, error) {
	revs, err := s.m.store.Revisions(ctx)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("reading spec revisions: %w", err)
	}
	for _, r := range revs {
		if r.Number == n {
			return r.YAML, r.Created, nil
		}
	}
	return "", time.Time{}, console.ErrNoRevision
}

// CheckAdmin implements console.Source: a wrong token counts against the
// address like a failed API authentication.
func (s *consoleSource) CheckAdmin(r *http.Request, token string) error {
	if hashEqual(store.HashSecret(token), s.m.adminHash) {
		return nil
	}
	if s.m.authFail.fail(clientAddr(r)) {
		return console.ErrTooManyFailures
	}
	return console.ErrWrongToken
}
