package manager

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/client"
	"github.com/fednet/fednet/internal/plandelta"
)

// TestPlanDeltas: a plan watch with delta=true from the generation the
// caller holds gets a delta (much smaller than the plan) that rebuilds the
// manager's new plan exactly; from any other generation, or without
// delta=true, the whole plan; a caller accepting gzip gets large answers
// gzipped. The client takes deltas by itself and returns whole plans.
func TestPlanDeltas(t *testing.T) {
	h := newHarness(t)
	h.putSpec(manySites(30, 1500))
	cred, _ := h.enroll("gw-00")
	first := h.plan("gw-00")
	h.putSpec(manySites(31, 1500))
	now := h.plan("gw-00")
	if now.Generation <= first.Generation {
		t.Fatalf("the new site did not change gw-00's plan: generation %d then %d", first.Generation, now.Generation)
	}
	path := gwPath(api.PathPlan, "gw-00")

	sums := map[string]string{plandelta.SumHeader: "2, 3, 4"} // as fednet's client (three values, here in one)
	r := h.do(req{method: "GET", path: path + "?after=" + itoa(first.Generation) + "&delta=true", token: cred, header: sums})
	var d api.PlanResponse
	if r.status != 200 || json.Unmarshal(r.body, &d) != nil || d.Delta == nil || d.Base != first.Generation || d.Generation != now.Generation {
		t.Fatalf("watch with delta: %d %.300s", r.status, r.body)
	}
	if d.Delta.SumVersion != plandelta.SumVersion {
		t.Errorf("the delta's sum is of version %d, want %d", d.Delta.SumVersion, plandelta.SumVersion)
	}
	// An agent that does not check sums of version 4 (none, version 2
	// alone or 2 and 3: it predates version 3 or 4) gets the whole plan.
	for _, header := range []map[string]string{nil, {plandelta.SumHeader: "2"}, {plandelta.SumHeader: "2, 3"}} {
		old := h.do(req{method: "GET", path: path + "?after=" + itoa(first.Generation) + "&delta=true", token: cred, header: header})
		if old.status != 200 || bytes.Contains(old.body, []byte(`"delta"`)) || !bytes.Contains(old.body, []byte(`"plan"`)) {
			t.Errorf("a delta for a watch with %s %v: %d %.200s", plandelta.SumHeader, header, old.status, old.body)
		}
	}
	full := h.do(req{method: "GET", path: path + "?after=" + itoa(first.Generation), token: cred})
	if bytes.Contains(full.body, []byte(`"delta"`)) || len(r.body)*5 > len(full.body) {
		t.Errorf("delta answer %d bytes, whole plan %d bytes (delta there: %v)", len(r.body), len(full.body), bytes.Contains(full.body, []byte(`"delta"`)))
	}
	got, err := plandelta.Apply(first.Plan, *d.Delta)
	if err != nil {
		t.Fatal(err)
	}
	if got.String() != now.Plan.String() {
		t.Errorf("the plan rebuilt from the delta differs from the manager's")
	}
	// A generation the manager holds no version of: the whole plan.
	r = h.do(req{method: "GET", path: path + "?after=" + itoa(first.Generation-1) + "&delta=true", token: cred, header: sums})
	if r.status != 200 || bytes.Contains(r.body, []byte(`"delta"`)) || !bytes.Contains(r.body, []byte(`"plan"`)) {
		t.Errorf("delta from an unknown generation: %d %.200s", r.status, r.body)
	}
	// Gzip when accepted.
	r = h.do(req{method: "GET", path: path, token: cred, header: map[string]string{"Accept-Encoding": "gzip"}})
	if r.header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("a plan with Accept-Encoding gzip came as %q", r.header.Get("Content-Encoding"))
	}
	zr, err := gzip.NewReader(bytes.NewReader(r.body))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := io.ReadAll(zr)
	if err != nil || !bytes.Equal(plain, full.body) || len(r.body) >= len(full.body) {
		t.Errorf("gzipped plan: %d bytes for %d, same content %v (%v)", len(r.body), len(full.body), bytes.Equal(plain, full.body), err)
	}

	// The client: a first watch gets the whole plan, the next a delta it
	// applies; both equal the manager's.
	cl, err := client.New(client.Config{URL: h.url, Token: cred, CAFingerprint: h.m.CAFingerprint()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p1, changed, err := cl.WatchPlan(ctx, "gw-00", 0, time.Second)
	if err != nil || !changed || p1.Generation != now.Generation {
		t.Fatalf("first watch: %+v %v %v", p1, changed, err)
	}
	before := h.m.Stats()
	h.putSpec(manySites(32, 1500))
	p2, changed, err := cl.WatchPlan(ctx, "gw-00", p1.Generation, 10*time.Second)
	if err != nil || !changed {
		t.Fatalf("second watch: %v %v", changed, err)
	}
	want := h.plan("gw-00")
	if p2.Generation != want.Generation || p2.Plan.String() != want.Plan.String() || p2.Delta != nil {
		t.Errorf("the client's plan after a delta differs from the manager's (generation %d, want %d)", p2.Generation, want.Generation)
	}
	if after := h.m.Stats(); after.Deltas != before.Deltas+1 {
		t.Errorf("the client's second watch was not answered with a delta: %d deltas before, %d after", before.Deltas, after.Deltas)
	}
}

// TestEnrollWithSpecKeyDoesNotReplan: enrolling a gateway with the key the
// spec already gives it changes no planner input, so no plan is computed
// again and no plan changes; enrolling with another key does both.
func TestEnrollWithSpecKeyDoesNotReplan(t *testing.T) {
	h := newHarness(t)
	key := randomKey(t)
	doc := strings.Replace(manySites(3, 1500), "endpoint: 198.51.100.1:51820", "endpoint: 198.51.100.1:51820\n        publicKey: "+key.String(), 1)
	h.putSpec(doc)
	before, gen := h.m.Stats().Plannings, h.plan("gw-01").Generation
	_, secret := h.token("gw-00")
	h.ok(req{method: "POST", path: api.PathEnroll, token: secret, body: api.EnrollRequest{PublicKey: key}}, nil)
	if got := h.m.Stats().Plannings; got != before {
		t.Errorf("enrolling with the spec's key planned %d times", got-before)
	}
	if g := h.plan("gw-01").Generation; g != gen {
		t.Errorf("gw-01's plan moved from generation %d to %d", gen, g)
	}
	h.enroll("gw-01")
	if got := h.m.Stats().Plannings; got != before+1 {
		t.Errorf("enrolling with a new key planned %d times, want 1", got-before)
	}
}

// TestEnrollWithSpecKeyOnTwoManagers: an enrollment with the key the spec
// gives plans nothing on the manager that takes it, nor on another
// manager following the store, and both keep the same plans (sums): the
// other manager does not plan again a Local with the new key.
func TestEnrollWithSpecKeyOnTwoManagers(t *testing.T) {
	a := newHarness(t)
	b := a.sharing()
	key := randomKey(t)
	doc := strings.Replace(manySites(3, 1500), "endpoint: 198.51.100.1:51820", "endpoint: 198.51.100.1:51820\n        publicKey: "+key.String(), 1)
	a.putSpec(doc)
	eventually(t, 5*time.Second, "the spec's plans on the second manager", func() bool {
		return b.m.snapshot().gen == a.m.snapshot().gen
	})
	before := b.m.Stats().Plannings
	_, secret := a.token("gw-00")
	a.ok(req{method: "POST", path: api.PathEnroll, token: secret, body: api.EnrollRequest{PublicKey: key}}, nil)
	eventually(t, 5*time.Second, "the enrollment on the second manager", func() bool {
		g, ok := b.m.snapshot().gateways["gw-00"]
		return ok && g.PublicKey == key
	})
	if got := b.m.Stats().Plannings; got != before {
		t.Errorf("the second manager planned %d times for an enrollment with the spec's key", got-before)
	}
	sa, sb := a.m.snapshot(), b.m.snapshot()
	for name, p := range sa.plans {
		if q, ok := sb.plans[name]; !ok || q.Sum != p.Sum || q.Generation != p.Generation {
			t.Errorf("gateway %s: the managers hold different plans (generation %d and %d)", name, p.Generation, q.Generation)
		}
	}
}

// TestDeltasAheadOnlyForServed: a change encodes ahead the deltas of the
// gateways whose agents talk to this manager; the plans of the others
// (served by other managers on the store) forget the version before, so
// that a watch from it gets the whole plan, the manager's exactly, while
// a served gateway's gets a delta.
func TestDeltasAheadOnlyForServed(t *testing.T) {
	h := newHarness(t)
	h.putSpec(manySites(30, 1500))
	first := h.plan("gw-00") // its watch attaches gw-00; gw-01 is served nowhere here
	h.putSpec(manySites(31, 1500))
	st := h.m.snapshot()
	served, other := st.plans["gw-00"].answers, st.plans["gw-01"].answers
	served.mu.Lock()
	encoded := served.deltaBody[newest] != nil
	served.mu.Unlock()
	other.mu.Lock()
	dropped := other.deltaDone && other.prev == nil && other.planDelta == nil
	other.mu.Unlock()
	if !encoded || !dropped {
		t.Fatalf("served gateway's delta encoded ahead %v, the other's version before dropped %v", encoded, dropped)
	}
	sums := map[string]string{plandelta.SumHeader: sumVersion}
	for _, gw := range []string{"gw-00", "gw-01"} {
		r := h.do(req{method: "GET", path: gwPath(api.PathPlan, gw) + "?after=" + itoa(first.Generation) + "&delta=true", token: h.m.AdminToken(), header: sums})
		var got api.PlanResponse
		if r.status != 200 || json.Unmarshal(r.body, &got) != nil {
			t.Fatalf("%s: watch from generation %d: %d %.300s", gw, first.Generation, r.status, r.body)
		}
		if (got.Delta != nil) != (gw == "gw-00") {
			t.Errorf("%s: a delta %v; want one for the served gateway alone", gw, got.Delta != nil)
		}
		if got.Delta == nil && got.Plan.String() != st.plans[gw].held.Gateway().String() {
			t.Errorf("%s: the whole plan sent is not the manager's", gw)
		}
	}
}
