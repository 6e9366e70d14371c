package manager

import (
	"strings"
	"sync"
	"testing"

	"github.com/fednet/fednet/internal/api"
)

// TestConcurrentAppliesOneWins: two operators diff their specs against
// revision 1, then both apply with If-Match "1" at once. One is stored as
// revision 2; the other gets 412 naming revision 2 and stores nothing, so
// it cannot revert the first. (Before If-Match was honoured both were
// stored and the later silently reverted the earlier.)
func TestConcurrentAppliesOneWins(t *testing.T) {
	h := newHarness(t)
	doc := threeSites(t)
	h.putSpec(doc)
	specs := []string{
		strings.Replace(doc, "underlayMTU: 1500", "underlayMTU: 1400", 1),
		strings.Replace(doc, "underlayMTU: 1500", "underlayMTU: 1420", 1),
	}
	var bases []int
	for _, s := range specs {
		var dry api.SpecResponse
		a := h.ok(req{method: "PUT", path: api.PathSpec + "?dryRun=true", body: api.SpecRequest{YAML: s}}, &dry)
		if dry.BaseRevision != 1 || dry.Revision != 2 || a.header.Get("ETag") != `"1"` {
			t.Fatalf("dry run: base %d revision %d ETag %s; want base 1, revision 2, ETag \"1\"", dry.BaseRevision, dry.Revision, a.header.Get("ETag"))
		}
		bases = append(bases, dry.BaseRevision)
	}
	answers := make([]answer, len(specs))
	var wg sync.WaitGroup
	for i, s := range specs {
		wg.Go(func() {
			a, err := h.try(req{method: "PUT", path: api.PathSpec, token: h.m.AdminToken(), body: api.SpecRequest{YAML: s},
				header: map[string]string{"If-Match": `"` + itoa(int64(bases[i])) + `"`}})
			if err != nil {
				t.Error(err)
			}
			answers[i] = a
		})
	}
	wg.Wait()
	won := -1
	for i, a := range answers {
		switch a.status {
		case 200:
			if won >= 0 {
				t.Fatalf("both applies were stored")
			}
			won = i
		case 412:
			if a.err.Code != api.CodePreconditionFailed || a.err.Revision == nil || *a.err.Revision != 2 || a.header.Get("ETag") != `"2"` ||
				!strings.Contains(a.err.Message, "revision 2 is current") || a.err.Field != "If-Match" {
				t.Errorf("the losing apply: %d %+v (revision %v) ETag %s", a.status, a.err, a.err.Revision, a.header.Get("ETag"))
			}
		default:
			t.Errorf("apply %d: %d %+v", i, a.status, a.err)
		}
	}
	if won < 0 {
		t.Fatal("neither apply was stored")
	}
	var cur api.SpecResponse
	a := h.ok(req{method: "GET", path: api.PathSpec}, &cur)
	if cur.Revision != 2 || cur.YAML != specs[won] || a.header.Get("ETag") != `"2"` {
		t.Errorf("current spec: revision %d (ETag %s), the winner's: %v", cur.Revision, a.header.Get("ETag"), cur.YAML == specs[won])
	}
	var revs []api.Revision
	h.ok(req{method: "GET", path: api.PathRevisions}, &revs)
	if len(revs) != 2 {
		t.Errorf("%d revisions, want 2: the loser stored nothing", len(revs))
	}
}

// TestIfMatchForms: "0" applies the first spec only; * needs a spec; a
// spec equal to the current one is no change whatever If-Match says; a dry
// run honours If-Match too; a malformed If-Match is 400.
func TestIfMatchForms(t *testing.T) {
	h := newHarness(t)
	doc := threeSites(t)
	put := func(d, ifMatch, query string) answer {
		t.Helper()
		return h.do(req{method: "PUT", path: api.PathSpec + query, token: h.m.AdminToken(), body: api.SpecRequest{YAML: d}, header: map[string]string{"If-Match": ifMatch}})
	}
	if a := put(doc, "*", ""); a.status != 412 || *a.err.Revision != 0 {
		t.Errorf("If-Match * without a spec: %d %+v", a.status, a.err)
	}
	if a := h.do(req{method: "GET", path: api.PathSpec, token: h.m.AdminToken()}); a.status != 404 || a.header.Get("ETag") != `"0"` {
		t.Errorf("GET without a spec: %d, ETag %q", a.status, a.header.Get("ETag"))
	}
	if a := put(doc, `"0"`, ""); a.status != 200 || a.header.Get("ETag") != `"1"` {
		t.Errorf(`If-Match "0" on an empty manager: %d %+v ETag %s`, a.status, a.err, a.header.Get("ETag"))
	}
	changed := strings.Replace(doc, "underlayMTU: 1500", "underlayMTU: 1400", 1)
	for _, tc := range []struct {
		name, ifMatch, query string
		status               int
	}{
		{"stale first", `"0"`, "", 412},
		{"stale dry run", `"0"`, "?dryRun=true", 412},
		{"weak", `W/"1"`, "", 400},
		{"unquoted", `1`, "", 400},
		{"garbage", `"one"`, "", 400},
		{"list with the current", `"7", "1"`, "?dryRun=true", 200},
		{"any", `*`, "?dryRun=true", 200},
	} {
		if a := put(changed, tc.ifMatch, tc.query); a.status != tc.status {
			t.Errorf("%s (If-Match %s): %d %+v, want %d", tc.name, tc.ifMatch, a.status, a.err, tc.status)
		} else if tc.status == 400 && a.err.Field != "If-Match" {
			t.Errorf("%s: field %q, want If-Match", tc.name, a.err.Field)
		}
	}
	// The same document again is no change, even on a stale base.
	var same api.SpecResponse
	a := put(doc, `"0"`, "")
	if a.status != 200 {
		t.Fatalf("the current spec again on a stale base: %d %+v", a.status, a.err)
	}
	if err := jsonUnmarshal(a.body, &same); err != nil || same.Changed || same.Revision != 1 {
		t.Errorf("the current spec again: %+v, %v", same, err)
	}
	if a := put(changed, `"1"`, ""); a.status != 200 || a.header.Get("ETag") != `"2"` {
		t.Errorf("a fresh base: %d %+v", a.status, a.err)
	}
}
