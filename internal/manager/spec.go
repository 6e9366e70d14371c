package manager

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

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
	st, _ := m.snapshot()
	if st.fed == nil {
		return noSpec()
	}
	return writeJSON(w, http.StatusOK, api.SpecResponse{Revision: st.rev.Number, YAML: st.rev.YAML, Created: st.rev.Created, Affected: []string{}})
}

func noSpec() error {
	return fail(http.StatusNotFound, "", "the manager has no spec yet; apply one with: fednet apply -f spec.yaml")
}

// putSpec validates a spec and, unless it equals the current one or this
// is a dry run, stores it as the next revision and recomputes every plan.
// A spec that fails validation (or planning) is answered 422 and changes
// nothing.
func (m *Manager) putSpec(w http.ResponseWriter, r *http.Request) error {
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
	data, err := readBody(w, r)
	if err != nil {
		return err
	}
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
	fed, err := spec.Parse([]byte(doc))
	if err != nil {
		return invalidSpec(err)
	}

	u := m.begin()
	defer m.writeMu.Unlock()
	cur, _ := m.snapshot()
	if cur.fed != nil && cur.rev.YAML == doc {
		return writeJSON(w, http.StatusOK, api.SpecResponse{Revision: cur.rev.Number, YAML: doc, Created: cur.rev.Created, DryRun: dry, Affected: []string{}})
	}
	u.next.fed = fed
	u.next.rev = store.Revision{Number: cur.rev.Number + 1, YAML: doc, Created: m.now()}
	var res result
	if dry {
		res, err = preview(u, cur)
	} else {
		u.change.Spec = &u.next.rev
		res, err = m.commit(r.Context(), u)
	}
	var pe *planError
	if errors.As(err, &pe) {
		return fail(http.StatusUnprocessableEntity, "yaml", "the spec cannot be planned (the current revision stays in force): %v", pe.err)
	}
	if err != nil {
		return err
	}
	if !dry {
		m.cfg.Logf("spec revision %d stored; plans changed for %d gateways: %v", u.next.rev.Number, len(res.affected), res.affected)
	}
	return writeJSON(w, http.StatusOK, api.SpecResponse{
		Revision: u.next.rev.Number,
		YAML:     doc,
		Created:  u.next.rev.Created,
		DryRun:   dry,
		Changed:  true,
		Diff:     planDiff(res, cur.rev.Number, u.next.rev.Number),
		Affected: append([]string{}, res.affected...),
	})
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

// planDiff renders, for every gateway whose plan changes, a unified diff of
// its plan text (plan.Gateway.String) from revision from to revision to.
func planDiff(res result, from, to int) string {
	names := map[string]bool{}
	for _, n := range res.affected {
		names[n] = true
	}
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(names)) {
		a, okA := res.old[name]
		c, okC := res.new[name]
		fromLabel, toLabel := fmt.Sprintf("%s (revision %d)", name, from), fmt.Sprintf("%s (revision %d)", name, to)
		var textA, textC string
		if okA {
			textA = a.String()
		} else {
			fromLabel = name + " (no plan)"
		}
		if okC {
			textC = c.String()
		} else {
			toLabel = name + " (no plan: removed from the federation)"
		}
		d, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
			A: difflib.SplitLines(textA), B: difflib.SplitLines(textC),
			FromFile: fromLabel, ToFile: toLabel, Context: 3,
		})
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
