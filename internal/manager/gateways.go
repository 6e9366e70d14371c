package manager

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/manager/store"
	"github.com/fednet/fednet/internal/plandelta"
	"github.com/fednet/fednet/internal/probe"
	"github.com/fednet/fednet/internal/spec"
)

// Plan watch timeouts.
const (
	DefaultWatchTimeout = 30 * time.Second
	MaxWatchTimeout     = 120 * time.Second
)

// getPlan answers a gateway's plan watch: at once when the plan's
// generation is above ?after (or after is absent, or above the manager's
// own generation: the manager's state was reset), else when the plan
// changes, or 204 when ?timeout passes first.
func (m *Manager) getPlan(w http.ResponseWriter, r *http.Request) error {
	wp, err := parseWatch(r, "delta")
	if err != nil {
		return err
	}
	name := r.PathValue("name")
	return m.watch(w, r, wp, func(st *state) (int64, []string, func() error, error) {
		m.attach(name)
		p, ok, err := st.entry(name)
		if err != nil {
			return 0, nil, nil, err
		}
		if !ok {
			return 0, nil, nil, noPlan(st, name)
		}
		return p.Generation, []string{planTopic(name)}, func() error {
			// Deltas carry sums of version plandelta.SumVersion (the
			// store's): an agent that does not say it checks them gets
			// whole plans.
			checks := plandelta.Checks(r.Header.Values(plandelta.SumHeader), plandelta.SumVersion)
			return m.writePlan(w, r, st, p, wp.delta && wp.hasAfter && checks, wp.after)
		}, nil
	})
}

// watchParams are a long poll's query parameters: ?after=GENERATION (none:
// answer at once), ?timeout, and for plans ?delta=true (the caller holds
// the plan of generation after and takes a delta from it).
type watchParams struct {
	after    int64
	hasAfter bool
	timeout  time.Duration
	delta    bool
}

func parseWatch(r *http.Request, extra ...string) (watchParams, error) {
	wp := watchParams{timeout: DefaultWatchTimeout}
	if err := checkQuery(r, append([]string{"after", "timeout"}, extra...)...); err != nil {
		return wp, err
	}
	q := r.URL.Query()
	if q.Has("delta") {
		var err error
		if wp.delta, err = strconv.ParseBool(q.Get("delta")); err != nil {
			return wp, fail(http.StatusBadRequest, "delta", "query parameter delta=%q: want true or false", q.Get("delta"))
		}
	}
	if wp.hasAfter = q.Has("after"); wp.hasAfter {
		var err error
		wp.after, err = strconv.ParseInt(q.Get("after"), 10, 64)
		if err != nil || wp.after < 0 {
			return wp, fail(http.StatusBadRequest, "after", "query parameter after=%q: want a generation, a whole number of 0 or more", q.Get("after"))
		}
	}
	if q.Has("timeout") {
		var err error
		if wp.timeout, err = parseTimeout(q.Get("timeout")); err != nil {
			return wp, err
		}
	}
	return wp, nil
}

// watch answers a long poll: poll looks at a state and returns the
// generation of what the caller watches, the topics (at most two) whose
// change may move it, and how to answer with it (or an error to answer).
// It answers at once without ?after, when the generation is above after,
// or when after is ahead of the state (a manager that lost state);
// otherwise it waits for a change of its topics, the timeout (204), the
// server draining or the client leaving (204). A waiting watch holds one of
// its credential's Limits.WatchesPerCredential slots (429 when none is
// free).
func (m *Manager) watch(w http.ResponseWriter, r *http.Request, wp watchParams, poll func(*state) (int64, []string, func() error, error)) error {
	timer := time.NewTimer(wp.timeout)
	defer timer.Stop()
	drain := drainOf(r.Context())
	var release func()
	defer func() {
		if release != nil {
			release()
		}
	}()
	st := m.snapshot()
	for {
		if wp.hasAfter && wp.after > st.gen {
			// The caller has seen a later generation: from another manager
			// on the store that this one has not followed yet, or from a
			// store since restored from an older backup. Catch up first,
			// so as not to hand out an older plan than the caller has.
			var err error
			if st, err = m.catchUp(r.Context()); err != nil {
				return err
			}
		}
		gen, topics, answer, err := poll(st)
		if err != nil {
			return err
		}
		if !wp.hasAfter || gen > wp.after || wp.after > st.gen {
			return answer()
		}
		if release == nil {
			if release, err = m.watchSlot(r); err != nil {
				return err
			}
		}
		// Take the topics' channels, then look again: a change published
		// in between is either seen now or wakes the channels.
		var wake [2]<-chan struct{}
		for i, t := range topics[:min(2, len(topics))] {
			wake[i] = m.wake.channel(t)
		}
		if now := m.snapshot(); now != st {
			st = now
			continue
		}
		m.watchers.Add(1)
		woken := false
		select {
		case <-wake[0]:
			woken = true
		case <-wake[1]:
			woken = true
		case <-timer.C:
		case <-drain:
		case <-r.Context().Done():
			// Mostly the client is gone and nobody reads this; if not,
			// "no change yet" is the right answer.
		}
		m.watchers.Add(-1)
		if woken {
			m.wakes.Add(1)
		}
		if !woken {
			w.WriteHeader(http.StatusNoContent)
			return nil
		}
		st = m.snapshot()
	}
}

// writePlan answers with an api.PlanResponse for plan version p of state
// st: a delta from the caller's plan when it asked for one (wantDelta) and
// this manager holds the version of generation after it was made from,
// else the whole plan; with the plan's Local only when the request
// announces it takes it (api.HeaderPlanFeatures). The answer is encoded
// once per version and shared by every watch of it, gzipped when the
// caller accepts gzip and it is not tiny.
func (m *Manager) writePlan(w http.ResponseWriter, r *http.Request, st *state, p planEntry, wantDelta bool, after int64) error {
	rotate := st.gateways[p.Gateway].RotateRequested
	v := variantOf(r, p.held.Head)
	lv := st.local
	if v.local() && lv == nil {
		// Not reached (a state with plans has their Local); be safe.
		var err error
		if lv, err = newLocalVersion(p.held.Head.Local); err != nil {
			return err
		}
	}
	var body, gz [][]byte
	if wantDelta && p.prevGen != 0 && p.prevGen == after {
		body, gz = p.answers.delta(p, rotate, v, lv)
	}
	if body != nil {
		m.stats.deltas.Add(1)
	} else {
		m.stats.plans.Add(1)
		var err error
		if body, gz, err = p.answers.full(p, rotate, v, lv); err != nil {
			return err
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Vary", "Accept-Encoding, "+api.HeaderPlanFeatures)
	if gz != nil && acceptsGzip(r) {
		w.Header().Set("Content-Encoding", "gzip")
		body = gz
		m.stats.gzipped.Add(1)
	}
	n := 0
	for _, b := range body {
		n += len(b)
	}
	m.stats.bytes.Add(int64(n))
	w.Header().Set("Content-Length", strconv.Itoa(n))
	w.WriteHeader(http.StatusOK)
	for _, b := range body {
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// parseTimeout reads ?timeout: a Go duration ("30s") or whole seconds.
func parseTimeout(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		n, errN := strconv.Atoi(s)
		if errN != nil {
			return 0, fail(http.StatusBadRequest, "timeout", "query parameter timeout=%q: want a duration like 30s (at most %.0fs)", s, MaxWatchTimeout.Seconds())
		}
		d = time.Duration(n) * time.Second
	}
	if d < 0 || d > MaxWatchTimeout {
		return 0, fail(http.StatusBadRequest, "timeout", "query parameter timeout=%s is out of range; want 0s to %.0fs", s, MaxWatchTimeout.Seconds())
	}
	return d, nil
}

// noPlan says why gateway name has no plan.
func noPlan(st *state, name string) error {
	g, known := st.gateways[name]
	switch {
	case known && g.Removed:
		return failCode(http.StatusForbidden, api.CodeGatewayRemoved, "name", "gateway %s was removed from the federation; it has no plan until it enrolls again with a new join token", name)
	case st.fed == nil:
		return fail(http.StatusNotFound, "name", "gateway %s has no plan: the manager has no spec yet; apply one with: fednet apply -f spec.yaml", name)
	}
	if _, _, ok := st.fed.Gateway(name); !ok {
		if known {
			return fail(http.StatusForbidden, "name", "gateway %s is not in the federation's spec any more (revision %d); it has no plan", name, st.rev.Number)
		}
		return inSpec(st, name, "name")
	}
	return fail(http.StatusInternalServerError, "name", "gateway %s is in the spec but has no plan", name)
}

// putStatus stores a gateway's status report (through the store, so that
// every manager on it sees the report), after checking it against the
// gateway's plan (checkReport): 422 naming the field when it does not fit.
func (m *Manager) putStatus(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	var rep api.StatusReport
	if err := decode(w, r, &rep, false, "links"); err != nil {
		return err
	}
	name := r.PathValue("name")
	now := m.now()
	st := m.snapshot()
	m.attach(name)
	if err := checkReport(&rep, st, name, now); err != nil {
		return err
	}
	js, err := json.Marshal(rep)
	if err != nil {
		return fmt.Errorf("encoding the report: %w", err)
	}
	if err := m.store.PutReport(r.Context(), store.Report{Gateway: name, JSON: js, Received: now}); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// report is a gateway's last status report.
type report struct {
	api.StatusReport
	received time.Time
}

// reports reads every gateway's last report from the store. A report that
// does not decode (written by another fednet?) is left out and logged.
func (m *Manager) reports(ctx context.Context) (map[string]report, error) {
	stored, err := m.store.Reports(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading status reports: %w", err)
	}
	out := make(map[string]report, len(stored))
	for _, sr := range stored {
		var rep api.StatusReport
		if err := json.Unmarshal(sr.JSON, &rep); err != nil {
			m.cfg.Logf("the stored status report of %s does not decode: %v; leaving it out", sr.Gateway, err)
			continue
		}
		out[sr.Gateway] = report{StatusReport: rep, received: sr.Received}
	}
	return out, nil
}

// putKey stores a gateway's new public key (answering a rotation request)
// and recomputes the plans, so that its peers learn the key.
func (m *Manager) putKey(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	var req api.KeyRequest
	if err := decode(w, r, &req, false, "publicKey"); err != nil {
		return err
	}
	if req.PublicKey.IsZero() {
		return fail(http.StatusBadRequest, "publicKey", "field publicKey is required: the gateway's new WireGuard public key (base64)")
	}
	name := r.PathValue("name")
	res, _, err := m.change(r.Context(), func(u *update) error {
		g := u.next.gateways[name]
		switch {
		case g.Removed:
			return removedError(name)
		case req.Rotation < 0 || req.Rotation > g.RotateRequested:
			return fail(http.StatusBadRequest, "rotation", "field rotation %d: want the rotateKey value of the plan this key answers (0 to %d)", req.Rotation, g.RotateRequested)
		}
		if err := keyTaken(u.next, name, req.PublicKey); err != nil {
			return err
		}
		g.PublicKey = req.PublicKey
		g.RotateAnswered = max(g.RotateAnswered, req.Rotation)
		u.setGateway(g)
		return nil
	})
	if err != nil {
		return err
	}
	m.cfg.Logf("gateway %s has a new key (rotation %d); plans changed for %s", name, req.Rotation, short(res.affected))
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// noInput checks that a call on a gateway has no query and no body (or
// an empty object).
func noInput(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	var none struct{}
	return decode(w, r, &none, true, "")
}

// postRotate asks a gateway's agent to roll its key: the rotation counter
// goes up and the gateway's plan watch returns at once with it.
func (m *Manager) postRotate(w http.ResponseWriter, r *http.Request) error {
	if err := noInput(w, r); err != nil {
		return err
	}
	name := r.PathValue("name")
	_, u, err := m.change(r.Context(), func(u *update) error {
		g, known := u.next.gateways[name]
		switch {
		case !known || g.PublicKey.IsZero():
			if err := inSpec(u.next, name, "name"); err != nil {
				return err
			}
			return fail(http.StatusConflict, "name", "gateway %s has not enrolled yet; there is no key to rotate", name)
		case g.Removed:
			return fail(http.StatusConflict, "name", "gateway %s was removed from the federation; there is no key to rotate", name)
		}
		if _, ok := u.next.plans[name]; !ok {
			return noPlan(u.next, name)
		}
		g.RotateRequested++
		u.setGateway(g)
		u.bump[name] = true
		return nil
	})
	if err != nil {
		return err
	}
	m.cfg.Logf("key rotation %d requested for gateway %s", u.next.gateways[name].RotateRequested, name)
	return m.writeGateway(w, r, u.next, name)
}

// activateFresh is how recent a gateway's last status report must be for
// an operator to make it active: agents report every 5 s.
const activateFresh = 20 * time.Second

// postActivate makes a gateway its site's active gateway (fednet gateway
// activate): it becomes the site's preferred gateway, a planner input
// stored with the gateway, and the agents move the role to it (the
// election in internal/ha honours the preference). It refuses, with 409,
// a gateway of a one-gateway site, one that has not enrolled or was
// removed, and one that has not reported for activateFresh (down, or its
// agent is); 404 one the spec does not have.
func (m *Manager) postActivate(w http.ResponseWriter, r *http.Request) error {
	if err := noInput(w, r); err != nil {
		return err
	}
	name := r.PathValue("name")
	reps, err := m.reports(r.Context())
	if err != nil {
		return err
	}
	now := m.cfg.Now()
	_, u, err := m.change(r.Context(), func(u *update) error {
		if err := inSpec(u.next, name, "name"); err != nil {
			return err
		}
		_, site, _ := u.next.fed.Gateway(name)
		if len(site.Gateways) < 2 {
			return fail(http.StatusConflict, "name", "gateway %s is the only gateway of site %s: it is always active; add a second gateway to the site in the spec to have one to move the role to", name, site.Name)
		}
		g, known := u.next.gateways[name]
		switch {
		case !known || g.Enrolled.IsZero():
			return fail(http.StatusConflict, "name", "gateway %s has not enrolled yet; enroll its agent (fednet agent --join TOKEN) before making it active", name)
		case g.Removed:
			return fail(http.StatusConflict, "name", "gateway %s was removed from the federation; it cannot be made active", name)
		}
		rep, ok := reps[name]
		if !ok {
			return fail(http.StatusConflict, "name", "gateway %s has never reported its status: it may be down; start its agent and try again", name)
		}
		if age := now.Sub(rep.received); age > activateFresh {
			return fail(http.StatusConflict, "name", "gateway %s last reported %v ago: it (or its agent) seems down; making it active would move the site to a gateway that may not forward", name, age.Round(time.Second))
		}
		g.Activated = now
		u.setGateway(g)
		return nil
	})
	if err != nil {
		return err
	}
	m.cfg.Logf("gateway %s activated by the operator", name)
	return m.writeGateway(w, r, u.next, name)
}

// deleteGateway removes a gateway: it leaves every plan, its credential is
// refused and its unused join tokens are revoked. Removing it again is no
// error. It comes back only by enrolling with a new token.
func (m *Manager) deleteGateway(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	began := time.Now()
	name := r.PathValue("name")
	already := false
	res, u, err := m.change(r.Context(), func(u *update) error {
		g, known := u.next.gateways[name]
		if !known {
			if err := inSpec(u.next, name, "name"); err != nil {
				return err
			}
		}
		if already = g.Removed; already {
			return nil
		}
		g.Name = name
		g.Removed = true
		u.setGateway(g)
		u.change.RevokeTokensOf = []string{name}
		u.change.DeleteReports = []string{name}
		return nil
	})
	if err != nil {
		return err
	}
	if already {
		return m.writeGateway(w, r, u.next, name)
	}
	m.cfg.Logf("gateway %s removed; plans changed for %s", name, short(res.affected))
	t := time.Now()
	err = m.writeGateway(w, r, u.next, name)
	spans := u.spans
	spans.answer = time.Since(t)
	spans.handler = time.Since(began)
	m.logSpans(u.next.gen, "gateway "+name+" removed", spans)
	return err
}

// writeGateway answers with the read model of gateway name.
func (m *Manager) writeGateway(w http.ResponseWriter, r *http.Request, st *state, name string) error {
	reps, err := m.reports(r.Context())
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, gatewayModel(st, reps, name))
}

// gatewayModel is the read model of gateway name.
func gatewayModel(st *state, reps map[string]report, name string) api.Gateway {
	out := api.Gateway{Name: name}
	if st.fed != nil {
		if sg, site, ok := st.fed.Gateway(name); ok {
			out.Site, out.Endpoint, out.TransitAddress = site.Name, sg.Endpoint, sg.TransitAddress
			if k := sg.PublicKey; k != "" {
				out.PublicKey.UnmarshalText([]byte(k)) // validated by spec.Parse
			}
		}
	}
	if g, ok := st.gateways[name]; ok {
		out.Enrolled = !g.Enrolled.IsZero()
		out.EnrolledAt = g.Enrolled
		out.Removed = g.Removed
		if !g.PublicKey.IsZero() {
			out.PublicKey = g.PublicKey
		}
		if out.Endpoint == "" {
			out.Endpoint = g.Endpoint
		}
		out.ObservedAddress = g.ObservedAddress
		out.RotateKey, out.KeyRotation = g.RotateRequested, g.RotateAnswered
		out.ActivatedAt = g.Activated
	}
	if p, ok := st.plans[name]; ok {
		out.PlanGeneration = p.Generation
	}
	if rep, ok := reps[name]; ok && !out.Removed {
		out.AppliedGeneration, out.AppliedRevision = rep.Generation, rep.Revision
		out.ApplyError, out.LastReport = rep.ApplyError, rep.received
	}
	return out
}

// gatewayModels are the read models of every gateway of the spec, by name.
func gatewayModels(st *state, reps map[string]report) []api.Gateway {
	names := specGateways(st)
	slices.Sort(names)
	out := make([]api.Gateway, 0, len(names))
	for _, n := range names {
		out = append(out, gatewayModel(st, reps, n))
	}
	return out
}

func (m *Manager) getGateways(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	reps, err := m.reports(r.Context())
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, gatewayModels(m.snapshot(), reps))
}

func (m *Manager) getGateway(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	st := m.snapshot()
	name := r.PathValue("name")
	if err := inSpec(st, name, "name"); err != nil {
		return err
	}
	return m.writeGateway(w, r, st, name)
}

func (m *Manager) getSites(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	reps, err := m.reports(r.Context())
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, siteModels(m.snapshot(), reps))
}

// siteModels are the read models of the spec's sites, in spec order, with
// each site's active gateway and last failover as its gateways' reports
// say.
func siteModels(st *state, reps map[string]report) []api.Site {
	out := []api.Site{}
	if st.fed != nil {
		for _, s := range st.fed.Sites {
			site := api.Site{Name: s.Name, Provider: s.Provider, Region: s.Region, Prefixes: s.Prefixes, Gateways: []string{}}
			var views []siteView
			for _, g := range s.Gateways {
				site.Gateways = append(site.Gateways, g.Name)
				if rep, ok := reps[g.Name]; ok && rep.Failover != nil && !st.gateways[g.Name].Removed {
					views = append(views, siteView{g.Name, *rep.Failover})
				}
			}
			site.Active, site.ActiveSince, site.LastFailover = activeOf(views)
			out = append(out, site)
		}
	}
	return out
}

// siteView is what one gateway reports of its site.
type siteView struct {
	gateway string
	api.FailoverStatus
}

// activeOf returns a site's active gateway, since when, and its last
// failover from what its gateways report: the active is the one that
// reports holding the role (the highest epoch, if two do while they do not
// see each other), else what the latest-starting view names; the last
// failover is the latest reported, as the gateway that took the role
// tells it when it reported that change too.
func activeOf(views []siteView) (string, time.Time, *api.Failover) {
	var active string
	var since time.Time
	var epoch uint64
	holder := false
	for _, v := range views {
		self := v.Active == v.gateway
		switch {
		case self && (!holder || v.Epoch > epoch):
			active, since, epoch, holder = v.Active, v.ActiveSince, v.Epoch, true
		case !holder && v.ActiveSince.After(since):
			active, since = v.Active, v.ActiveSince
		}
	}
	var last *api.Failover
	for _, v := range views {
		if f := v.LastFailover; f != nil && (last == nil || f.At.After(last.At)) {
			last = f
		}
	}
	if last != nil {
		// The same change as the gateway that took the role saw it.
		for _, v := range views {
			if f := v.LastFailover; f != nil && f.To == v.gateway && f.From == last.From && f.To == last.To {
				last = f
			}
		}
		// A gateway that took a role nobody held any more (the active
		// stepped down first: it reached no other site) knows no cause
		// but that; the one that stepped down for it knows the cause.
		if last.From == "" {
			for _, v := range views {
				if f := v.LastFailover; f != nil && f.From == v.gateway && f.To == last.To && !f.At.After(last.At) && last.At.Sub(f.At) <= stepDownWindow {
					last = f
				}
			}
		}
		c := *last
		last = &c
	}
	return active, since, last
}

// stepDownWindow is how long before a gateway took its site's role the
// active may have stepped down for it, for the failover to be one change.
const stepDownWindow = 5 * time.Second

func (m *Manager) getNetworks(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, networkModels(m.snapshot()))
}

// networkModels are the read models of the spec's networks, in spec order.
func networkModels(st *state) []api.Network {
	out := []api.Network{}
	if st.fed != nil {
		for _, n := range st.fed.Networks {
			out = append(out, api.Network{Name: n.Name, ID: n.ID, Mode: string(n.Mode), Sites: append([]string{}, n.Sites...)})
		}
	}
	return out
}

// links are the links of the spec's gateways as their last reports say,
// sorted by From then To. Only links to a peer of the gateway's current
// plan are shown: a report from before a plan change may name a peer that
// is gone, and what a gateway can make the manager show (and export as
// metrics) stays bounded by its plan.
func links(st *state, reps map[string]report, now time.Time) []api.Link {
	out := []api.Link{}
	resolveAll(st)
	for _, name := range specGateways(st) {
		rep, ok := reps[name]
		p, planned := st.plans[name]
		if planned {
			p, planned = p.current()
		}
		if !ok || !planned || st.gateways[name].Removed {
			continue
		}
		for _, l := range rep.Links {
			if !peerOf(p.held, l.Peer) {
				continue
			}
			hs := l.LastHandshake
			if hs.IsZero() && l.HandshakeAge > 0 {
				hs = rep.received.Add(-l.HandshakeAge)
			}
			// The link-up rule of docs/probe.md: the tunnel driver's
			// verdict, held for probe.HandshakeWithin on the manager's
			// clock, so the links of a gateway that stopped reporting go
			// down within three minutes. A report of an agent from before
			// tunnel drivers (no backend) has a handshake and no verdict.
			established := l.Established && now.Sub(rep.received) < probe.HandshakeWithin
			if l.Backend == "" {
				established = probe.HandshakeUp(hs, now)
			}
			reason := ""
			if !established {
				reason = l.Reason
			}
			out = append(out, api.Link{
				From: name, To: l.Peer, Via: l.Via, Reason: reason,
				Up:      established && (l.Probe == nil || l.Probe.Up),
				Backend: l.Backend, Transport: l.Transport,
				Endpoint: l.Endpoint, LastHandshake: hs,
				RxBytes: l.RxBytes, TxBytes: l.TxBytes,
				Probe: l.Probe, AvailableBandwidth: l.AvailableBandwidth,
				Egress: egress(st, name, l.TxBytes),
			})
		}
	}
	slices.SortFunc(out, func(a, b api.Link) int { return cmp.Or(cmp.Compare(a.From, b.From), cmp.Compare(a.To, b.To)) })
	return out
}

// egress estimates what gateway from's sent bytes cost at its site's
// price, nil when the spec prices no egress of that site.
func egress(st *state, from string, bytes int64) *api.LinkEgress {
	if st.fed == nil {
		return nil
	}
	_, site, ok := st.fed.Gateway(from)
	if !ok {
		return nil
	}
	price, ok := st.fed.EgressPrice(site.Name)
	if !ok {
		return nil
	}
	return &api.LinkEgress{USDPerGB: price, Bytes: bytes, CostUSD: spec.EgressCost(bytes, price)}
}

func (m *Manager) getLinks(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	reps, err := m.reports(r.Context())
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, links(m.snapshot(), reps, m.now()))
}

func (m *Manager) getOverview(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	reps, err := m.reports(r.Context())
	if err != nil {
		return err
	}
	st := m.snapshot()
	return writeJSON(w, http.StatusOK, api.Overview{Revision: st.rev.Number, Generation: st.gen, Sites: siteModels(st, reps), Gateways: gatewayModels(st, reps), Links: links(st, reps, m.now())})
}

// drainKey is the context key of the channel Serve closes when it starts
// shutting down, so that plan watches end at once.
type drainKey struct{}

func drainOf(ctx context.Context) <-chan struct{} {
	ch, _ := ctx.Value(drainKey{}).(<-chan struct{})
	return ch // nil (blocks forever) outside Serve
}
