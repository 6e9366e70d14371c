package manager

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fednet/fednet/internal/manager/store"
	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/plandelta"
	"github.com/fednet/fednet/internal/spec"
)

// With several managers on one store, each follows the changes the others
// make (follow) and must serve any agent the plan whose sum the store
// holds. Planning all of them on every manager multiplies the work by the
// number of managers; so a manager following another's change plans
// only the gateways whose agents it serves (attached: a plan watch or a
// status report here within attachedFor), and leaves the others' plans
// lazy: the stored record (generation, sum) with what computing the plan
// needs, computed when asked for (an agent moving here gets its plan
// whole, whose sum it checks as always). The manager that makes a change
// plans every gateway, as the sums it stores are every plan's.

// attachedFor is how long after its last plan watch or report a gateway
// counts as served here: longer than a watch (MaxWatchTimeout) and a
// report interval together.
const attachedFor = 3 * time.Minute

// attach records that gateway name's agent talks to this manager now.
func (m *Manager) attach(name string) {
	if _, known := m.snapshot().plans[name]; !known {
		return // no gateway of the federation: nothing to plan for it
	}
	now := m.now().UnixNano()
	if v, ok := m.attached.Load(name); ok {
		v.(*atomic.Int64).Store(now)
		return
	}
	var t atomic.Int64
	t.Store(now)
	if v, loaded := m.attached.LoadOrStore(name, &t); loaded {
		v.(*atomic.Int64).Store(now)
	}
}

// servedNow returns whether a gateway's agent talked to this manager
// within attachedFor, as of now: the set is read once (an agent
// attaching meanwhile does not change the answer, which a planning asks
// more than once).
func (m *Manager) servedNow() func(name string) bool {
	now := m.now()
	served := map[string]bool{}
	m.attached.Range(func(k, v any) bool {
		if now.Sub(time.Unix(0, v.(*atomic.Int64).Load())) < attachedFor {
			served[k.(string)] = true
		}
		return true
	})
	return func(name string) bool { return served[name] }
}

// planSource is what the lazy plans of one state are computed from: its
// federation, the planner's inputs and the Local its plans carry.
type planSource struct {
	fed   *spec.Federation
	in    plan.Inputs
	local *localVersion
}

// newPlanSource returns the source of st's lazy plans.
func newPlanSource(st *state) *planSource {
	src := &planSource{fed: st.fed, local: st.local}
	if st.fed != nil {
		src.in = inputs(st.fed, st.gateways, st.hosts)
	}
	return src
}

// lazyPlan is a plan not computed yet: that of gateway name planned from
// src, computed once by whoever asks first.
type lazyPlan struct {
	src  *planSource
	name string

	once   sync.Once
	held   plan.Held
	digest plandelta.Digest
	err    error
	// computed is set once plan, digest and err are.
	computed atomic.Bool
}

// lazyEntry returns the entry of stored record p whose plan is computed
// from src when asked for.
func lazyEntry(p store.Plan, src *planSource) planEntry {
	return planEntry{Plan: p, lazy: &lazyPlan{src: src, name: p.Gateway}, answers: &answers{}}
}

// compute plans l (once).
func (l *lazyPlan) compute() {
	computeLazy(l.src, []*lazyPlan{l})
}

// computeLazy computes the plans of ls, all from src, in one planning
// (those computed already are skipped).
func computeLazy(src *planSource, ls []*lazyPlan) {
	todo := map[string]*lazyPlan{}
	for _, l := range ls {
		if !l.computed.Load() {
			todo[l.name] = l
		}
	}
	if len(todo) == 0 {
		return
	}
	var gs []plan.Gateway
	err := fmt.Errorf("no spec")
	if src.fed != nil && src.local != nil {
		gs, err = plan.ComputeOnly(src.fed, src.in, func(n string) bool { return todo[n] != nil })
	}
	byName := map[string]plan.Gateway{}
	for _, g := range gs {
		byName[g.Name] = g
	}
	for name, l := range todo {
		l.once.Do(func() {
			defer l.computed.Store(true)
			g, ok := byName[name]
			switch {
			case err != nil:
				l.err = fmt.Errorf("planning %s: %w", name, err)
			case !ok:
				l.err = fmt.Errorf("planning %s: the spec and inputs give it no plan", name)
			default:
				g.Local = src.local.local
				l.held, l.digest = plan.Hold(g), plandelta.NewDigestWithLocal(g, src.local.digest)
			}
		})
	}
}

// resolveAll computes the lazy plans of st not computed yet, those of one
// source in one planning.
func resolveAll(st *state) {
	groups := map[*planSource][]*lazyPlan{}
	for _, e := range st.plans {
		if l := e.lazy; l != nil && !l.computed.Load() {
			groups[l.src] = append(groups[l.src], l)
		}
	}
	for src, ls := range groups {
		computeLazy(src, ls)
	}
}

// resolved returns e with its plan and digest, computing them when e is
// lazy (then its Sum is the computed plan's, as for the plans a manager
// computes on a change: the same as the stored one unless managers of
// different versions share the store).
func (e planEntry) resolved() (planEntry, error) {
	if e.lazy == nil {
		return e, nil
	}
	e.lazy.compute()
	if e.lazy.err != nil {
		return e, e.lazy.err
	}
	e.held, e.digest, e.Sum = e.lazy.held, e.lazy.digest, e.lazy.digest.Sum
	return e, nil
}

// current returns e with its plan and digest, and true, unless e is lazy
// and not computed yet (then false: nothing is computed).
func (e planEntry) current() (planEntry, bool) {
	if e.lazy == nil {
		return e, true
	}
	if !e.lazy.computed.Load() || e.lazy.err != nil {
		return e, false
	}
	r, err := e.resolved()
	return r, err == nil
}

// entry returns gateway name's plan entry with its plan (computed now when
// lazy); false when it has none.
func (st *state) entry(name string) (planEntry, bool, error) {
	p, ok := st.plans[name]
	if !ok {
		return p, false, nil
	}
	p, err := p.resolved()
	if err != nil {
		return p, true, fmt.Errorf("the plan of %s: %w", name, err)
	}
	return p, true, nil
}
