package manager

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fednet/fednet/internal/manager/store"
	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/plandelta"
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
	// local is the Local every plan of plans carries (equal in content
	// where not the same value: a plan's sum covers its Local), encoded
	// once; nil when there are no plans.
	local *localVersion
}

// planEntry is a gateway's plan: its stored record (generation, revision,
// sum), the plan itself (computed by this manager from the state), and the
// version before, which deltas are made from.
type planEntry struct {
	store.Plan
	// held is the plan, its lists in chunks that the versions share.
	held plan.Held
	// digest is the plan's digest (its Sum is Plan.Sum), from which the
	// next version's is made in the size of the change.
	digest plandelta.Digest
	// prevGen is the generation of the version before, which this
	// manager held (0: none, as after a start); answers holds the delta
	// from it (and that version until the delta is made: see
	// encodeDeltas).
	prevGen int64
	// answers caches what is sent for this version; shared by the copies
	// of the entry in later states.
	answers *answers
	// lazy, when set, is the plan not computed yet (plan and digest are
	// not set; see lazy.go and resolved).
	lazy *lazyPlan
}

// encodeDeltas encodes, for the plans named that follow a version this
// manager held, the delta from that version (on every CPU), which lets go
// of the version before: a thousand of them would double the memory the
// plans take, for nothing. It does not change st, and is called once st
// is published: the watches that come first make their own delta (each
// answer's is made once, by whoever asks first), so that no agent waits
// for the thousand deltas to be encoded before the change is committed.
func encodeDeltas(st *state, names []string) {
	var todo []planEntry
	for _, n := range names {
		if e, ok := st.plans[n]; ok && e.prevGen != 0 {
			todo = append(todo, e)
		}
	}
	parallel(len(todo), func(i int) {
		e := todo[i]
		// Encoded ahead in the variant agents of this version take.
		e.answers.delta(e, st.gateways[e.Gateway].RotateRequested, newest, st.local)
	})
	if st.local != nil {
		st.local.forgetBases()
	}
}

// newEntry returns the entry of plan c stored as p (p.Sum is c's),
// following old (the entry before, if any); c.delta, when set, is the
// delta from old's plan.
func newEntry(p store.Plan, c computed, old planEntry, hadOld bool) planEntry {
	e := planEntry{Plan: p, held: c.held, digest: c.digest, answers: &answers{}}
	if hadOld {
		// A lazy plan never computed has no version to make deltas from.
		old, hadOld = old.current()
	}
	if hadOld && old.Generation < p.Generation {
		prev := old.held
		e.prevGen = old.Generation
		e.answers.prev, e.answers.prevAnswers, e.answers.made = &prev, old.answers, c.delta
	}
	return e
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
	st, _, _, err := applyEvent(empty, ev, m.cfg.Logf, nil)
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
// topics they concern. A Reset event replaces the whole state. Plans are
// not in the store: when the event changes the spec, a gateway, a host or a
// plan, the plans are computed again from the new state (computedPlans),
// unless nothing the planner reads changed, and the event's plan records
// say which of them changed at which generation (their sums are checked
// against what this manager computed).
//
// With want set, only the plans of the gateways it names are computed (as
// a manager following another's change does, see lazy.go); the others
// the event names become lazy.
//
// how says how the plans were computed (see computePlans), "" when they
// were not.
func applyEvent(cur *state, ev store.Event, logf func(string, ...any), want func(gateway string) bool) (next *state, topics []string, how string, err error) {
	next = cur.clone()
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
			return nil, nil, "", fmt.Errorf("stored spec revision %d does not validate any more (was fednet downgraded?): %w", r.Number, err)
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
	for _, name := range ev.DeletedPlans {
		delete(next.plans, name)
		topics = append(topics, planTopic(name))
	}
	next.gen = ev.Generation
	if !planned(ev) {
		return next, topics, "", nil
	}
	var plans map[string]computed
	samePlanner := !ev.Reset && cur.fed != nil && samePlannerInputs(cur, next)
	if samePlanner {
		// Nothing the planner reads changed (an enrollment with the key
		// the spec gives, a rotation request): the plans stay, as on the
		// manager that made the change (preview), Local included.
		plans = make(map[string]computed, len(cur.plans))
		for name, p := range cur.plans {
			if p, ok := p.current(); ok {
				plans[name] = computed{held: p.held, digest: p.digest}
			}
		}
	} else {
		if plans, how, err = computePlans(cur, next, want); err != nil {
			return nil, nil, "", fmt.Errorf("planning the stored state: %w", err)
		}
	}
	var differ []string
	var src *planSource // of the lazy plans made here
	for _, p := range ev.Plans {
		c, ok := plans[p.Gateway]
		if !ok && (want != nil && !want(p.Gateway) || samePlanner) {
			// Not planned here (yet): computed when asked for.
			if src == nil {
				src = newPlanSource(next)
			}
			next.plans[p.Gateway] = lazyEntry(p, src)
			topics = append(topics, planTopic(p.Gateway))
			continue
		}
		if !ok {
			differ = append(differ, p.Gateway)
			continue
		}
		if p.Sum != c.digest.Sum {
			differ = append(differ, p.Gateway)
		}
		old, had := cur.plans[p.Gateway]
		if ev.Reset && had && old.Generation == p.Generation && old.Sum == c.digest.Sum {
			next.plans[p.Gateway] = old // unchanged: keep its version before
			continue
		}
		p.Sum = c.digest.Sum
		next.plans[p.Gateway] = newEntry(p, c, old, had)
		topics = append(topics, planTopic(p.Gateway))
	}
	// Plans the event does not name keep their generation; their content
	// is what this manager computes now (the same, unless managers of
	// different versions share the store).
	for name, e := range next.plans {
		if c, ok := plans[name]; ok && e.Sum != c.digest.Sum {
			differ = append(differ, name)
			e.held, e.Sum, e.digest, e.answers, e.lazy = c.held, c.digest.Sum, c.digest, &answers{}, nil
			next.plans[name] = e
		}
	}
	if len(differ) > 0 && logf != nil {
		slices.Sort(differ)
		logf("warning: the plans of %d gateways (%v) computed here differ from those the manager that stored generation %d computed; is another fednet version on the store?",
			len(differ), differ[:min(len(differ), 5)], ev.Generation)
	}
	return next, topics, how, nil
}

// planned reports whether applying ev computes the plans again.
func planned(ev store.Event) bool {
	return ev.Reset || ev.Spec != nil || len(ev.Gateways)+len(ev.Hosts)+len(ev.DeletedHosts)+len(ev.Plans) > 0
}

// computed is a plan computePlans made, with its digest, and the delta
// from the plan before when plan.Update edited it.
type computed struct {
	held   plan.Held
	digest plandelta.Digest
	delta  *plandelta.Delta
}

// computePlans computes every plan of st with its digest, from the plans
// of prev (the state before, whose plans are those of its spec and
// inputs) where plan.Update can: then the digest and the delta from prev's
// plan are made from Update's edit, in the size of the change. It sets
// st.local to the Local the plans carry. how says how many plans were
// edited and how many computed whole, and why (for the log).
func computePlans(prev, st *state, want func(gateway string) bool) (out map[string]computed, how string, err error) {
	out = map[string]computed{}
	if st.fed == nil {
		return out, "no spec", nil
	}
	in := inputs(st.fed, st.gateways, st.hosts)
	var plans []plan.Held
	var edits []*plan.Edit
	why := "no plans before"
	var prevPlans map[string]planEntry // prev's plans at hand (lazy ones computed)
	if prev != nil && prev.fed != nil {
		prevPlans = make(map[string]planEntry, len(prev.plans))
		before := make([]plan.Held, 0, len(prev.plans))
		for name, e := range prev.plans {
			if e, ok := e.current(); ok {
				prevPlans[name] = e
				before = append(before, e.held)
			}
		}
		plans, edits, why, err = plan.UpdateHeld(prev.fed, inputs(prev.fed, prev.gateways, prev.hosts), before, st.fed, in, want)
	} else {
		var whole []plan.Gateway
		whole, err = plan.ComputeOnly(st.fed, in, want)
		for _, g := range whole {
			plans = append(plans, plan.Hold(g))
		}
		edits = make([]*plan.Edit, len(plans))
	}
	if err != nil {
		return nil, "", err
	}
	// Every plan carries the federation and the inputs, so that its agent
	// can plan the failures it detects (docs/resilience.md).
	if len(plans) > 0 {
		l := plan.NewLocal(st.fed, in)
		for i := range plans {
			plans[i].Head.Local = l
		}
	}
	st.local = nil
	switch {
	case len(plans) > 0:
		if st.local, err = newLocalVersion(plans[0].Head.Local); err != nil {
			return nil, "", err
		}
	case want != nil:
		// No plan made here, but lazy ones may be: they carry this.
		if st.local, err = newLocalVersion(plan.NewLocal(st.fed, in)); err != nil {
			return nil, "", err
		}
	}
	made := make([]computed, len(plans))
	parallel(len(plans), func(i int) {
		h := plans[i]
		made[i].held = h
		// The sums (of version 3) hash the head in its binary form: its
		// JSON is encoded when an answer needs it, after the change is
		// published (answers.headJSON), not here, before.
		old, ok := prevPlans[h.Head.Name]
		if edits[i] == nil || !ok {
			made[i].digest = plandelta.NewDigestHeld(h, st.local.digest, nil)
			return
		}
		d := plandelta.FromEdit(old.held.Head, h.Head, *edits[i], [32]byte{})
		made[i].digest = old.digest.EditedHeld(old.held, h, d, st.local.digest, nil)
		made[i].delta = &d // its Local and sum are added when it is sent
	})
	edited := 0
	for _, c := range made {
		out[c.held.Head.Name] = c
		if c.delta != nil {
			edited++
		}
	}
	how = fmt.Sprintf("%d edited, %d whole", edited, len(made)-edited)
	if why != "" {
		how += " (" + why + ")"
	}
	return out, how, nil
}

// parallel runs f(0) ... f(n-1) on every CPU.
func parallel(n int, f func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), max(1, n/8)) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				f(i)
			}
		})
	}
	wg.Wait()
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
	start := time.Now()
	// Another manager's change: plan the gateways served here (lazy.go).
	var want func(string) bool
	if !ev.Reset {
		want = m.servedNow()
	}
	next, topics, how, err := applyEvent(cur, ev, m.cfg.Logf, want)
	if err != nil {
		return err
	}
	if how != "" {
		m.planned(time.Since(start), len(next.plans), next.gen, how)
	}
	m.publish(next, topics, ev.Reset)
	changed := make([]string, len(ev.Plans))
	for i, p := range ev.Plans {
		changed[i] = p.Gateway
	}
	encodeDeltas(next, changed)
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
	// spans times the parts of the change (see applySpans).
	spans applySpans
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
	old, new map[string]plan.Held
	// how says how the plans were computed (computePlans), "" when they
	// were not (the planner's inputs did not change).
	how string
}

// preview computes every plan of u.next and fills in the store change:
// plans that differ (or are bumped) get generation u.next.gen+1, plans of
// gateways that no longer have one are deleted. It stores nothing.
func preview(u *update, cur *state) (result, error) {
	next := u.next
	res := result{old: map[string]plan.Held{}, new: map[string]plan.Held{}}
	// The sums stored are every plan's: this manager plans every gateway,
	// from every plan before.
	t := time.Now()
	resolveAll(cur)
	u.spans.resolve = time.Since(t)
	t = time.Now()
	for name, p := range cur.plans {
		if p, ok := p.current(); ok {
			res.old[name] = p.held
		}
	}
	var made map[string]computed
	if samePlannerInputs(cur, next) {
		// Nothing the planner reads changed (an enrollment with the key
		// the spec already gives, a rotation request): the plans stay.
		made = map[string]computed{}
		for name, p := range cur.plans {
			if p, ok := p.current(); ok {
				made[name] = computed{held: p.held, digest: p.digest}
			}
		}
	} else {
		var err error
		if made, res.how, err = computePlans(cur, next, nil); err != nil {
			return res, &planError{err}
		}
	}
	u.spans.plan = time.Since(t)
	gen := cur.gen + 1
	plans := map[string]planEntry{}
	for _, name := range slices.Sorted(maps.Keys(made)) {
		c := made[name]
		res.new[name] = c.held
		old, ok := cur.plans[name]
		if ok && old.Sum == c.digest.Sum && !u.bump[name] {
			plans[name] = old
			continue
		}
		if !ok || old.Sum != c.digest.Sum {
			res.affected = append(res.affected, name)
		}
		if old.Sum == c.digest.Sum {
			c.delta = nil // a rotation request: the delta is made when asked
		}
		p := newEntry(store.Plan{Gateway: name, Generation: gen, Revision: next.rev.Number, Sum: c.digest.Sum}, c, old, ok)
		plans[name] = p
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

// samePlannerInputs reports whether a and b give the planner the same
// spec and inputs (see inputs), so that they have the same plans.
func samePlannerInputs(a, b *state) bool {
	if a.fed != b.fed || a.rev.Number != b.rev.Number || len(a.hosts) != len(b.hosts) {
		return false
	}
	for name, h := range a.hosts {
		if o, ok := b.hosts[name]; !ok || planHost(o) != planHost(h) {
			return false
		}
	}
	// What the planner reads of a gateway: removed, its key (the
	// enrolled one, else the spec's) and when it was activated.
	input := func(st *state, name string) (bool, plan.Key) {
		g, ok := st.gateways[name]
		if ok && g.Removed {
			return true, plan.Key{}
		}
		if ok && !g.PublicKey.IsZero() {
			return false, g.PublicKey
		}
		if sg, _, found := st.fed.Gateway(name); found && sg.PublicKey != "" {
			k, _ := plan.ParseKey(sg.PublicKey) // validated by spec.Parse
			return false, k
		}
		return false, plan.Key{}
	}
	names := map[string]bool{}
	for name := range a.gateways {
		names[name] = true
	}
	for name := range b.gateways {
		names[name] = true
	}
	for name := range names {
		ga, oka := a.gateways[name]
		gb, okb := b.gateways[name]
		if oka == okb && ga.Removed == gb.Removed && ga.PublicKey == gb.PublicKey && ga.Activated.Equal(gb.Activated) {
			continue
		}
		if a.fed == nil {
			return false
		}
		ra, ka := input(a, name)
		rb, kb := input(b, name)
		if ra != rb || ka != kb || !ga.Activated.Equal(gb.Activated) {
			return false
		}
	}
	return true
}

// inputs are the planner's inputs from the gateways and hosts the manager
// knows: keys, removed gateways, hosts, and by site the gateway an
// operator activated last (fednet gateway activate).
func inputs(fed *spec.Federation, gws map[string]store.Gateway, hosts map[string]store.Host) plan.Inputs {
	in := plan.Inputs{PublicKeys: map[string]plan.Key{}, Removed: map[string]bool{}}
	for name, g := range gws {
		if g.Removed {
			in.Removed[name] = true
		} else if !g.PublicKey.IsZero() {
			in.PublicKeys[name] = g.PublicKey
		}
	}
	if pref := preferred(fed, gws); len(pref) > 0 {
		in.Active = pref
	}
	for _, h := range slices.Sorted(maps.Keys(hosts)) {
		in.Hosts = append(in.Hosts, planHost(hosts[h]))
	}
	return in
}

// preferred returns, by site with several gateways, the gateway of fed an
// operator activated last, among those not removed.
func preferred(fed *spec.Federation, gws map[string]store.Gateway) map[string]string {
	out := map[string]string{}
	if fed == nil {
		return out
	}
	for _, site := range fed.Sites {
		if len(site.Gateways) < 2 {
			continue
		}
		var at time.Time
		for _, sg := range site.Gateways {
			if g, ok := gws[sg.Name]; ok && !g.Removed && g.Activated.After(at) {
				out[site.Name], at = sg.Name, g.Activated
			}
		}
	}
	return out
}

// maxAttempts bounds how often change tries a write that lost a race
// with another manager on the store; between attempts it waits a random
// time up to attempt·conflictPause, so that racing managers spread out.
const (
	maxAttempts   = 10
	conflictPause = 5 * time.Millisecond
)

// change runs edit on an update of the current state and commits it: it
// previews every plan, stores the change atomically and publishes the new
// state (see preview). A change that alters nothing is not stored. When
// u.dry is set by edit, it only previews. When another manager on the store
// committed first (store.ErrConflict), it catches up and runs edit again,
// up to maxAttempts times. It returns what the change did to the plans and
// the update, whose next state the caller may read (not change).
func (m *Manager) change(ctx context.Context, edit func(u *update) error) (result, *update, error) {
	locked := time.Now()
	m.writeMu.Lock()
	defer m.writeMu.Unlock()
	var spans applySpans
	spans.lock = time.Since(locked)
	for attempt := 1; ; attempt++ {
		t := time.Now()
		if err := m.catchUpLocked(ctx); err != nil {
			return result{}, nil, fmt.Errorf("reading the store: %w", err)
		}
		spans.catchUp += time.Since(t)
		cur := m.snapshot()
		u := &update{next: cur.clone(), bump: map[string]bool{}, dirty: map[string]bool{}}
		t = time.Now()
		if err := edit(u); err != nil {
			return result{}, u, err
		}
		spans.edit += time.Since(t)
		start := time.Now()
		res, err := preview(u, cur)
		spans.resolve, spans.plan = u.spans.resolve, u.spans.plan
		u.spans = spans
		if err != nil || u.dry {
			return res, u, err
		}
		took := time.Since(start)
		c := u.change
		if len(c.Plans) == 0 && len(c.DeletePlans) == 0 && len(c.Gateways) == 0 && c.Spec == nil && c.UseToken == nil && len(c.RevokeTokensOf) == 0 &&
			len(c.Hosts) == 0 && len(c.DeleteHosts) == 0 {
			return res, u, nil
		}
		t = time.Now()
		err = m.store.Commit(ctx, c)
		spans.commit += time.Since(t)
		spans.attempts = attempt
		u.spans = spans
		if errors.Is(err, store.ErrConflict) && attempt < maxAttempts {
			select {
			case <-ctx.Done():
				return res, u, ctx.Err()
			case <-time.After(rand.N(time.Duration(attempt) * conflictPause)):
			}
			continue
		}
		if errors.Is(err, store.ErrConflict) {
			return res, u, fail(http.StatusServiceUnavailable, "", "other managers of the federation kept changing the state while this change was made (%d tries); try again", maxAttempts)
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
		t = time.Now()
		m.publish(u.next, topics, false)
		u.spans.publish = time.Since(t)
		u.spans.plans = len(c.Plans)
		t = time.Now()
		// The deltas of the agents served here are encoded ahead; with
		// other managers on the store, the plans of the agents they serve
		// forget the version before (an agent that moves here takes its
		// plan whole, as from a manager that follows: lazy.go), rather
		// than have this manager encode two thirds of the deltas for
		// nobody while the others plan their agents' change.
		served := m.servedNow()
		var names []string
		for _, p := range c.Plans {
			if served(p.Gateway) {
				names = append(names, p.Gateway)
			} else if e, ok := u.next.plans[p.Gateway]; ok {
				e.answers.dropBase()
			}
		}
		encodeDeltas(u.next, names)
		u.spans.deltas = time.Since(t)
		if res.how != "" {
			m.planned(took, len(res.new), u.next.gen, res.how)
		}
		return res, u, nil
	}
}
