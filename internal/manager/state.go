package manager

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

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

// snapshot returns the current state and the channel its successor will
// close.
func (m *Manager) snapshot() (*state, <-chan struct{}) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.st, m.changed
}

// publish makes st current and wakes every watcher.
func (m *Manager) publish(st *state) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.st = st
	close(m.changed)
	m.changed = make(chan struct{})
}

// load reads the stored state, then recomputes every plan and commits any
// difference (a newer planner may plan differently), so that the plans
// served are always those of the current spec and keys.
func (m *Manager) load(ctx context.Context) error {
	st := &state{gateways: map[string]store.Gateway{}, hosts: map[string]store.Host{}, plans: map[string]planEntry{}}
	rev, err := m.store.Spec(ctx)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return fmt.Errorf("loading state: %w", err)
	default:
		f, err := spec.Parse([]byte(rev.YAML))
		if err != nil {
			return fmt.Errorf("loading state: stored spec revision %d does not validate any more (was fednet downgraded?): %w", rev.Number, err)
		}
		st.rev, st.fed = rev, f
	}
	if st.gen, err = m.store.Generation(ctx); err != nil {
		return fmt.Errorf("loading state: %w", err)
	}
	gws, err := m.store.Gateways(ctx)
	if err != nil {
		return fmt.Errorf("loading state: %w", err)
	}
	for _, g := range gws {
		st.gateways[g.Name] = g
	}
	hosts, err := m.store.Hosts(ctx)
	if err != nil {
		return fmt.Errorf("loading state: %w", err)
	}
	for _, h := range hosts {
		st.hosts[h.Name] = h
	}
	plans, err := m.store.Plans(ctx)
	if err != nil {
		return fmt.Errorf("loading state: %w", err)
	}
	for _, p := range plans {
		g, err := plan.Decode(p.JSON)
		if err != nil {
			// A plan of an older format (written before an upgrade) is
			// computed again below and served at a new generation.
			m.cfg.Logf("stored plan of %s is not readable (%v); computing it again", p.Gateway, err)
			continue
		}
		st.plans[p.Gateway] = planEntry{Plan: p, plan: g}
	}
	m.st = st
	u := m.begin()
	defer m.writeMu.Unlock()
	res, err := m.commit(ctx, u)
	if err != nil {
		return fmt.Errorf("loading state: %w", err)
	}
	if len(res.affected) > 0 {
		m.cfg.Logf("recomputed plans differ from the stored ones for %v; stored them at generation %d", res.affected, m.st.gen)
	}
	return nil
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
}

// begin locks writeMu and returns an update of the current state; the
// caller must unlock writeMu when done with it.
func (m *Manager) begin() *update {
	m.writeMu.Lock()
	st, _ := m.snapshot()
	return &update{next: st.clone(), bump: map[string]bool{}, dirty: map[string]bool{}}
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
		if computed, err = plan.Compute(next.fed, inputs(next.gateways, next.hosts)); err != nil {
			return res, &planError{err}
		}
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

// commit previews u, stores it atomically and publishes the new state.
// writeMu must be held (see begin). A change that alters nothing (no plan,
// gateway, spec or token) is not stored.
func (m *Manager) commit(ctx context.Context, u *update) (result, error) {
	cur, _ := m.snapshot()
	res, err := preview(u, cur)
	if err != nil {
		return res, err
	}
	c := u.change
	if len(c.Plans) == 0 && len(c.DeletePlans) == 0 && len(c.Gateways) == 0 && c.Spec == nil && c.UseToken == nil && len(c.RevokeTokensOf) == 0 &&
		len(c.Hosts) == 0 && len(c.DeleteHosts) == 0 {
		return res, nil
	}
	if err := m.store.Commit(ctx, c); err != nil {
		return res, err
	}
	m.publish(u.next)
	return res, nil
}
