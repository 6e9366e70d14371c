package manager

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/fednet/fednet/internal/manager/store"
	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/spec"
)

// state is a snapshot of everything the manager serves. A published state
// is never modified: changes build a new one (see update).
type state struct {
	rev      store.Revision   // Number 0 while no spec was ever stored
	fed      *spec.Federation // nil while no spec was ever stored
	gen      int64
	gateways map[string]store.Gateway
	hosts    map[string]store.Host
	plans    map[string]planEntry
}

// planEntry is a stored plan and its decoded form.
type planEntry struct {
	store.Plan
	plan plan.Gateway
}

// clone returns a copy of st whose maps the caller may change.
func (st *state) clone() *state {
	c := *st
	c.gateways = maps.Clone(st.gateways)
	c.hosts = maps.Clone(st.hosts)
	c.plans = maps.Clone(st.plans)
	return &c
}

// snapshot returns the current state.
func (m *Manager) snapshot() *state {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.st
}

// publish makes st current and wakes the watches of topics (all of them
// when all is set). The state is current before anyone is woken, so a
// watch that registers, then reads the state, misses nothing.
func (m *Manager) publish(st *state, topics []string, all bool) {
	m.mu.Lock()
	m.st = st
	m.mu.Unlock()
	if all {
		m.wake.all()
	} else {
		m.wake.wake(topics)
	}
}

// Watch topics: a gateway's plan, a host's record.
func planTopic(gateway string) string { return "plan/" + gateway }
func hostTopic(host string) string    { return "host/" + host }

// load reads the whole stored state, then recomputes every plan and
// commits any difference (a newer planner may plan differently), so that
// the plans served are always those of the current spec and keys.
func (m *Manager) load(ctx context.Context) error {
	ev, err := m.store.Watch(ctx, -1)
	if err != nil {
		return fmt.Errorf("loading state: %w", err)
	}
	empty := &state{gateways: map[string]store.Gateway{}, hosts: map[string]store.Host{}, plans: map[string]planEntry{}}
	st, _, err := applyEvent(empty, ev)
	if err != nil {
		return fmt.Errorf("loading state: %w", err)
	}
	m.st = st
	res, _, err := m.change(ctx, func(*update) error { return nil })
	if err != nil {
		return fmt.Errorf("loading state: %w", err)
	}
	if len(res.affected) > 0 {
		m.cfg.Logf("recomputed plans differ from the stored ones for %v; stored them at generation %d", res.affected, m.snapshot().gen)
	}
	return nil
}

// applyEvent returns cur with the changes of ev applied, and the watch
// topics they concern. A Reset event replaces the whole state.
func applyEvent(cur *state, ev store.Event) (*state, []string, error) {
	next := cur.clone()
	var topics []string
	if ev.Reset {
		for name := range cur.plans {
			topics = append(topics, planTopic(name))
		}
		for name := range cur.hosts {
			topics = append(topics, hostTopic(name))
		}
		next = &state{rev: cur.rev, fed: cur.fed, gateways: map[string]store.Gateway{}, hosts: map[string]store.Host{}, plans: map[string]planEntry{}}
		if ev.Spec == nil {
			next.rev, next.fed = store.Revision{}, nil
		}
	}
	if r := ev.Spec; r != nil && (next.fed == nil || r.Number != next.rev.Number || r.YAML != next.rev.YAML) {
		f, err := spec.Parse([]byte(r.YAML))
		if err != nil {
			return nil, nil, fmt.Errorf("stored spec revision %d does not validate any more (was fednet downgraded?): %w", r.Number, err)
		}
		next.rev, next.fed = *r, f
	}
	for _, g := range ev.Gateways {
		next.gateways[g.Name] = g
	}
	for _, h := range ev.Hosts {
		next.hosts[h.Name] = h
		topics = append(topics, hostTopic(h.Name))
	}
	for _, name := range ev.DeletedHosts {
		delete(next.hosts, name)
		topics = append(topics, hostTopic(name))
	}
	for _, p := range ev.Plans {
		g, err := plan.Decode(p.JSON)
		if err != nil {
			// A plan of an older format (stored before an upgrade) is
			// left out: the next change computes it again and serves it
			// at a new generation (load makes that change at start).
			delete(next.plans, p.Gateway)
			topics = append(topics, planTopic(p.Gateway))
			continue
		}
		next.plans[p.Gateway] = planEntry{Plan: p, plan: g}
		topics = append(topics, planTopic(p.Gateway))
	}
	for _, name := range ev.DeletedPlans {
		delete(next.plans, name)
		topics = append(topics, planTopic(name))
	}
	next.gen = ev.Generation
	return next, topics, nil
}

// follow keeps the snapshot up to date with the store until ctx ends:
// changes committed by another manager on the store are published here
// like this manager's own. It retries (with a pause) when the store fails.
func (m *Manager) follow(ctx context.Context) {
	const pause = time.Second
	for ctx.Err() == nil {
		ev, err := m.store.Watch(ctx, m.snapshot().gen)
		if err == nil {
			m.writeMu.Lock()
			err = m.applyLocked(ev)
			m.writeMu.Unlock()
		}
		switch {
		case ctx.Err() != nil || errors.Is(err, store.ErrClosed):
			return
		case err != nil:
			m.cfg.Logf("following the store: %v; trying again in %v", err, pause)
			select {
			case <-ctx.Done():
			case <-time.After(pause):
			}
		}
	}
}

// applyLocked publishes ev unless the snapshot has it already (this
// manager's own commits). writeMu must be held.
func (m *Manager) applyLocked(ev store.Event) error {
	cur := m.snapshot()
	if !ev.Reset && ev.Generation <= cur.gen {
		return nil
	}
	next, topics, err := applyEvent(cur, ev)
	if err != nil {
		return err
	}
	m.publish(next, topics, ev.Reset)
	return nil
}

// catchUp brings the snapshot up to the store's generation and returns it.
func (m *Manager) catchUp(ctx context.Context) (*state, error) {
	m.writeMu.Lock()
	defer m.writeMu.Unlock()
	if err := m.catchUpLocked(ctx); err != nil {
		return nil, fmt.Errorf("reading the store: %w", err)
	}
	return m.snapshot(), nil
}

// catchUpLocked brings the snapshot up to the store's generation (another
// manager may have committed since it was last followed). writeMu must be
// held.
func (m *Manager) catchUpLocked(ctx context.Context) error {
	cur := m.snapshot()
	gen, err := m.store.Generation(ctx)
	if err != nil || gen <= cur.gen {
		return err
	}
	ev, err := m.store.Watch(ctx, cur.gen)
	if err != nil {
		return err
	}
	return m.applyLocked(ev)
}

// update is one change being prepared: a copy of the state to edit and
// the store writes that go with it.
type update struct {
	next   *state
	change store.Change
	// bump names gateways whose plan must reach the agent again even if
	// its content is unchanged (a key rotation request).
	bump map[string]bool
	// dirty names gateways of next.gateways to write.
	dirty map[string]bool
	// dry makes change only preview (a dry run).
	dry bool
}

// setGateway stores g in the update.
func (u *update) setGateway(g store.Gateway) {
	u.next.gateways[g.Name] = g
	u.dirty[g.Name] = true
}

// result is what a change did to the plans.
type result struct {
	// affected names the gateways whose plan changed (or was dropped),
	// sorted.
	affected []string
	// old and new are the plans before and after, by gateway.
	old, new map[string]plan.Gateway
}

// preview computes every plan of u.next and fills in the store change:
// plans that differ (or are bumped) get generation u.next.gen+1, plans of
// gateways that no longer have one are deleted. It stores nothing.
func preview(u *update, cur *state) (result, error) {
	next := u.next
	res := result{old: map[string]plan.Gateway{}, new: map[string]plan.Gateway{}}
	for name, p := range cur.plans {
		res.old[name] = p.plan
	}
	var computed []plan.Gateway
	if next.fed != nil {
		var err error
		in := inputs(next.gateways, next.hosts)
		if computed, err = plan.Compute(next.fed, in); err != nil {
			return res, &planError{err}
		}
		// Every plan carries the federation and the inputs, so that its
		// agent can plan the failures it detects (docs/resilience.md).
		plan.AttachLocal(computed, next.fed, in)
	}
	gen := cur.gen + 1
	plans := map[string]planEntry{}
	for _, g := range computed {
		res.new[g.Name] = g
		js, err := json.Marshal(g) // compact: a quarter of the time of g.JSON()
		if err != nil {
			return res, fmt.Errorf("encoding the plan of %s: %w", g.Name, err)
		}
		old, ok := cur.plans[g.Name]
		if ok && bytes.Equal(old.JSON, js) && !u.bump[g.Name] {
			plans[g.Name] = old
			continue
		}
		if !ok || !bytes.Equal(old.JSON, js) {
			res.affected = append(res.affected, g.Name)
		}
		p := planEntry{Plan: store.Plan{Gateway: g.Name, Generation: gen, Revision: next.rev.Number, JSON: js}, plan: g}
		plans[g.Name] = p
		u.change.Plans = append(u.change.Plans, p.Plan)
	}
	for name := range cur.plans {
		if _, ok := plans[name]; !ok {
			res.affected = append(res.affected, name)
			u.change.DeletePlans = append(u.change.DeletePlans, name)
		}
	}
	slices.Sort(res.affected)
	slices.Sort(u.change.DeletePlans)
	next.plans = plans
	next.gen = gen
	u.change.Generation = gen
	for _, name := range slices.Sorted(maps.Keys(u.dirty)) {
		u.change.Gateways = append(u.change.Gateways, next.gateways[name])
	}
	return res, nil
}

// inputs are the planner's inputs from the gateways and hosts the manager
// knows.
func inputs(gws map[string]store.Gateway, hosts map[string]store.Host) plan.Inputs {
	in := plan.Inputs{PublicKeys: map[string]plan.Key{}, Removed: map[string]bool{}}
	for name, g := range gws {
		if g.Removed {
			in.Removed[name] = true
		} else if !g.PublicKey.IsZero() {
			in.PublicKeys[name] = g.PublicKey
		}
	}
	for _, h := range slices.Sorted(maps.Keys(hosts)) {
		in.Hosts = append(in.Hosts, planHost(hosts[h]))
	}
	return in
}

// maxAttempts bounds how often change tries a write that lost a race
// with another manager on the store.
const maxAttempts = 3

// change runs edit on an update of the current state and commits it: it
// previews every plan, stores the change atomically and publishes the new
// state (see preview). A change that alters nothing is not stored. When
// u.dry is set by edit, it only previews. When another manager on the store
// committed first (store.ErrConflict), it catches up and runs edit again,
// up to maxAttempts times. It returns what the change did to the plans and
// the update, whose next state the caller may read (not change).
func (m *Manager) change(ctx context.Context, edit func(u *update) error) (result, *update, error) {
	m.writeMu.Lock()
	defer m.writeMu.Unlock()
	for attempt := 1; ; attempt++ {
		if err := m.catchUpLocked(ctx); err != nil {
			return result{}, nil, fmt.Errorf("reading the store: %w", err)
		}
		cur := m.snapshot()
		u := &update{next: cur.clone(), bump: map[string]bool{}, dirty: map[string]bool{}}
		if err := edit(u); err != nil {
			return result{}, u, err
		}
		res, err := preview(u, cur)
		if err != nil || u.dry {
			return res, u, err
		}
		c := u.change
		if len(c.Plans) == 0 && len(c.DeletePlans) == 0 && len(c.Gateways) == 0 && c.Spec == nil && c.UseToken == nil && len(c.RevokeTokensOf) == 0 &&
			len(c.Hosts) == 0 && len(c.DeleteHosts) == 0 {
			return res, u, nil
		}
		err = m.store.Commit(ctx, c)
		if errors.Is(err, store.ErrConflict) && attempt < maxAttempts {
			continue
		}
		if err != nil {
			return res, u, err
		}
		var topics []string
		for _, name := range res.affected {
			topics = append(topics, planTopic(name))
		}
		for _, p := range c.Plans {
			topics = append(topics, planTopic(p.Gateway))
		}
		for _, h := range c.Hosts {
			topics = append(topics, hostTopic(h.Name))
		}
		for _, name := range c.DeleteHosts {
			topics = append(topics, hostTopic(name))
		}
		m.publish(u.next, topics, false)
		return res, u, nil
	}
}
