package manager

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pmezard/go-difflib/difflib"

	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/manager/store"
	"github.com/fednet/fednet/internal/spec"
)

// yamlTypes are the media types PUT /v1/spec takes a raw YAML body in.
var yamlTypes = []string{"application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml"}

func (m *Manager) getSpec(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	st := m.snapshot()
	setETag(w, st.rev.Number)
	if st.fed == nil {
		return noSpec()
	}
	return writeJSON(w, http.StatusOK, api.SpecResponse{Revision: st.rev.Number, BaseRevision: st.rev.Number, YAML: st.rev.YAML, Created: st.rev.Created, Affected: []string{}})
}

// setETag sets the spec's entity tag: its revision number, 0 while there
// is none.
func setETag(w http.ResponseWriter, rev int) {
	w.Header().Set("ETag", strconv.Quote(strconv.Itoa(rev)))
}

// ifMatch reads PUT /v1/spec's If-Match header: the revisions the caller
// based its change on (ok false: no header, no precondition). "*" matches
// any stored spec (any is set).
func ifMatch(r *http.Request) (revs []int, any, ok bool, err error) {
	vals := r.Header.Values("If-Match")
	if len(vals) == 0 {
		return nil, false, false, nil
	}
	for _, v := range vals {
		for _, tag := range strings.Split(v, ",") {
			tag = strings.TrimSpace(tag)
			if tag == "*" {
				any = true
				continue
			}
			n, err := strconv.Atoi(strings.Trim(tag, `"`))
			if err != nil || n < 0 || len(tag) < 3 || tag[0] != '"' || tag[len(tag)-1] != '"' {
				return nil, false, false, fail(http.StatusBadRequest, "If-Match", "If-Match %q: want the ETag of the spec revision your change is based on, like \"3\" (GET /v1/spec and every PUT answer with it; \"0\": no spec yet)", v)
			}
			revs = append(revs, n)
		}
	}
	return revs, any, true, nil
}

// preconditionFailed answers a PUT whose If-Match names a revision that is
// not the current one.
func preconditionFailed(w http.ResponseWriter, based []int, cur int) error {
	setETag(w, cur)
	names := make([]string, len(based))
	for i, n := range based {
		names[i] = strconv.Itoa(n)
	}
	based0 := "the revision named in If-Match"
	if len(names) > 0 {
		based0 = "revision " + strings.Join(names, " or ")
	}
	ae := failCode(http.StatusPreconditionFailed, api.CodePreconditionFailed, "If-Match",
		"the spec changed since %s, which this change was based on: revision %d is current; look at the difference again (fednet diff) and apply again", based0, cur)
	ae.body.Revision = &cur
	return ae
}

func noSpec() error {
	return fail(http.StatusNotFound, "", "the manager has no spec yet; apply one with: fednet apply -f spec.yaml")
}

// putSpec validates a spec and, unless it equals the current one or this
// is a dry run, stores it as the next revision and recomputes every plan.
// A spec that fails validation (or planning) is answered 422 and changes
// nothing. With If-Match (the ETag of the revision the caller's change is
// based on, as GET /v1/spec or a dry run answered it), a spec is stored
// only if that revision is still the current one; otherwise 412 names the
// current revision, so that a concurrent apply never silently reverts
// another. A spec equal to the current one is answered 200 unchanged even
// then: nothing would be reverted. A change (not a dry run) sent with
// Prefer: return=minimal is answered without the plans' diff: `fednet
// apply` shows its dry run's, and rendering the diff of plans of a
// thousand peers took CPU the change's propagation needs.
func (m *Manager) putSpec(w http.ResponseWriter, r *http.Request) error {
	began := time.Now()
	if err := checkQuery(r, "dryRun"); err != nil {
		return err
	}
	dry := false
	if v := r.URL.Query().Get("dryRun"); v != "" {
		var err error
		if dry, err = strconv.ParseBool(v); err != nil {
			return fail(http.StatusBadRequest, "dryRun", "query parameter dryRun=%q: want true or false", v)
		}
	}
	mt, err := checkContentType(r, yamlTypes...)
	if err != nil {
		return err
	}
	readStart := time.Now()
	data, err := readBody(w, r)
	if err != nil {
		return err
	}
	read := time.Since(readStart)
	var doc string
	if mt == "application/json" {
		var req api.SpecRequest
		if err := decodeJSON(data, &req, false, ""); err != nil {
			return err
		}
		doc = req.YAML
	} else {
		doc = string(data)
	}
	if strings.TrimSpace(doc) == "" {
		return fail(http.StatusBadRequest, "yaml", "field yaml is empty; want the spec document (as in examples/three-sites.yaml)")
	}
	based, anyRev, conditional, err := ifMatch(r)
	if err != nil {
		return err
	}
	parseStart := time.Now()
	fed, err := spec.Parse([]byte(doc))
	if err != nil {
		return invalidSpec(err)
	}
	parsed := time.Since(parseStart)

	var base store.Revision // the revision the answer's diff is from
	same := false
	res, u, err := m.change(r.Context(), func(u *update) error {
		cur := u.next
		base = cur.rev
		if same = cur.fed != nil && cur.rev.YAML == doc; same {
			u.dry = true
			return nil
		}
		if conditional && !(anyRev && cur.fed != nil) && !slices.Contains(based, cur.rev.Number) {
			return preconditionFailed(w, based, cur.rev.Number)
		}
		u.next.fed = fed
		u.next.rev = store.Revision{Number: cur.rev.Number + 1, YAML: doc, Created: m.now()}
		if u.dry = dry; !dry {
			u.change.Spec = &u.next.rev
		}
		return nil
	})
	var pe *planError
	if errors.As(err, &pe) {
		return fail(http.StatusUnprocessableEntity, "yaml", "the spec cannot be planned (the current revision stays in force): %v", pe.err)
	}
	if err != nil {
		return err
	}
	if same {
		setETag(w, base.Number)
		return writeJSON(w, http.StatusOK, api.SpecResponse{Revision: base.Number, BaseRevision: base.Number, YAML: doc, Created: base.Created, DryRun: dry, Affected: []string{}})
	}
	if dry {
		setETag(w, base.Number)
	} else {
		setETag(w, u.next.rev.Number)
		m.cfg.Logf("spec revision %d stored; plans changed for %s", u.next.rev.Number, short(res.affected))
	}
	spans := u.spans
	spans.read, spans.parse = read, parsed
	t := time.Now()
	var diff string
	if prefersMinimal(r) && !dry {
		w.Header().Set(api.HeaderPreferenceApplied, api.PreferMinimal)
	} else {
		diff = planDiff(res, base.Number, u.next.rev.Number)
	}
	spans.diff = time.Since(t)
	t = time.Now()
	err = writeJSON(w, http.StatusOK, api.SpecResponse{
		Revision:     u.next.rev.Number,
		BaseRevision: base.Number,
		YAML:         doc,
		Created:      u.next.rev.Created,
		DryRun:       dry,
		Changed:      true,
		Diff:         diff,
		Affected:     append([]string{}, res.affected...),
	})
	spans.answer = time.Since(t)
	spans.handler = time.Since(began)
	if !dry {
		m.logSpans(u.next.gen, fmt.Sprintf("spec revision %d", u.next.rev.Number), spans)
	}
	return err
}

// prefersMinimal reports whether r's Prefer headers (RFC 7240: a
// comma-separated list of preferences, each with optional parameters
// after ";") ask for return=minimal.
func prefersMinimal(r *http.Request) bool {
	for _, v := range r.Header.Values(api.HeaderPrefer) {
		for _, pref := range strings.Split(v, ",") {
			pref, _, _ = strings.Cut(pref, ";")
			name, val, _ := strings.Cut(strings.TrimSpace(pref), "=")
			if strings.EqualFold(strings.TrimSpace(name), "return") && strings.EqualFold(strings.Trim(strings.TrimSpace(val), `"`), "minimal") {
				return true
			}
		}
	}
	return false
}

// invalidSpec turns a spec.Parse error into a 422 listing every problem;
// the message and field are the first problem's.
func invalidSpec(err error) error {
	var se *spec.Error
	if !errors.As(err, &se) || len(se.Problems) == 0 {
		return fail(http.StatusUnprocessableEntity, "yaml", "the spec is not valid: %v", err)
	}
	first := se.Problems[0]
	ae := fail(http.StatusUnprocessableEntity, first.Path, "the spec is not valid (%d problems; the current revision stays in force): %s", len(se.Problems), first)
	if len(se.Problems) == 1 {
		ae.body.Message = fmt.Sprintf("the spec is not valid (the current revision stays in force): %s", first)
	}
	for _, p := range se.Problems {
		ae.body.Problems = append(ae.body.Problems, api.Problem{Line: p.Line, Path: p.Path, Message: p.Message})
	}
	return ae
}

// maxDiffGateways and maxDiffLines bound the plan diffs a spec answer
// renders (the gateways, and the lines of their plans compared): in a
// large federation one change touches every plan, each of thousands of
// lines, and the diff of all of them would cost seconds of CPU and be
// unreadable.
const (
	maxDiffGateways = 20
	maxDiffLines    = 20000
)

// short names the gateways of list for a log line: how many, and the
// first few.
func short(list []string) string {
	const few = 8
	switch {
	case len(list) == 0:
		return "no gateway"
	case len(list) <= few:
		return fmt.Sprintf("%d gateways: %s", len(list), strings.Join(list, ", "))
	}
	return fmt.Sprintf("%d gateways: %s and %d more", len(list), strings.Join(list[:few], ", "), len(list)-few)
}

// planDiff renders, for every gateway whose plan changes (the first
// maxDiffGateways of them), a unified diff of its plan text
// (plan.Gateway.String) from revision from to revision to.
func planDiff(res result, from, to int) string {
	names := map[string]bool{}
	for _, n := range res.affected {
		names[n] = true
	}
	var b strings.Builder
	sorted := slices.Sorted(maps.Keys(names))
	lines := 0
	for i, name := range sorted {
		a, okA := res.old[name]
		c, okC := res.new[name]
		fromLabel, toLabel := fmt.Sprintf("%s (revision %d)", name, from), fmt.Sprintf("%s (revision %d)", name, to)
		var textA, textC string
		if okA {
			textA = a.Gateway().String()
		} else {
			fromLabel = name + " (no plan)"
		}
		if okC {
			textC = c.Gateway().String()
		} else {
			toLabel = name + " (no plan: removed from the federation)"
		}
		la, lc := difflib.SplitLines(textA), difflib.SplitLines(textC)
		if i > 0 && (i >= maxDiffGateways || lines+len(la)+len(lc) > maxDiffLines) {
			fmt.Fprintf(&b, "# ... and the plans of %s change too; see one with: fednet plan -f spec.yaml --gateway NAME\n", short(sorted[i:]))
			break
		}
		lines += len(la) + len(lc)
		d, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{A: la, B: lc, FromFile: fromLabel, ToFile: toLabel, Context: 3})
		if err != nil { // only writing to a strings.Builder: cannot fail
			d = fmt.Sprintf("(diff of %s failed: %v)\n", name, err)
		}
		b.WriteString(d)
	}
	return b.String()
}

func (m *Manager) getRevisions(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	revs, err := m.store.Revisions(r.Context())
	if err != nil {
		return err
	}
	out := make([]api.Revision, 0, len(revs))
	for _, rev := range revs {
		out = append(out, m.revisionModel(rev))
	}
	return writeJSON(w, http.StatusOK, out)
}

// revisionModel counts a revision's sites, gateways and networks; a
// revision never changes, so the counts are parsed once and kept.
func (m *Manager) revisionModel(rev store.Revision) api.Revision {
	m.revMu.Lock()
	a, ok := m.revCache[rev.Number]
	m.revMu.Unlock()
	if ok && a.Created.Equal(rev.Created) {
		return a
	}
	a = api.Revision{Revision: rev.Number, Created: rev.Created}
	if f, err := spec.Parse([]byte(rev.YAML)); err == nil {
		a.Sites, a.Networks = len(f.Sites), len(f.Networks)
		for _, s := range f.Sites {
			a.Gateways += len(s.Gateways)
		}
	}
	m.revMu.Lock()
	m.revCache[rev.Number] = a
	m.revMu.Unlock()
	return a
}

// planError is a failure of plan.Compute: the spec (with the keys the
// manager knows) cannot be planned.
type planError struct{ err error }

func (e *planError) Error() string { return e.err.Error() }
func (e *planError) Unwrap() error { return e.err }
