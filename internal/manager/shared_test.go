package manager

import (
	"sync"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/api"
)

// TestTwoManagersOneStore: two managers on one store, as several managers
// on one etcd will run. A change committed through one reaches the other's
// plans and wakes a watch parked there; a status report put through one is
// visible through the other; writes through both at once both succeed.
func TestTwoManagersOneStore(t *testing.T) {
	a := newHarness(t)
	b := a.sharing()
	a.putSpec(threeSites(t))
	eventually(t, 5*time.Second, "the spec on the second manager", func() bool {
		r := b.do(req{method: "GET", path: api.PathSpec, token: b.m.AdminToken()})
		return r.status == 200
	})
	// Enrollments through both managers at once: both are stored and each
	// manager ends with both keys in onprem-gw's plan.
	var wg sync.WaitGroup
	creds := map[string]string{}
	var mu sync.Mutex
	for h, gw := range map[*harness]string{a: "aws-gw", b: "azure-gw"} {
		_, secret := h.token(gw)
		wg.Go(func() {
			key := randomKey(t)
			r, err := h.try(req{method: "POST", path: api.PathEnroll, token: secret, body: api.EnrollRequest{PublicKey: key}})
			if err != nil || r.status != 200 {
				t.Errorf("enrolling %s: %v %d %+v", gw, err, r.status, r.err)
				return
			}
			var out api.EnrollResponse
			if err := jsonUnmarshal(r.body, &out); err != nil {
				t.Error(err)
			}
			mu.Lock()
			creds[gw] = out.Credential
			mu.Unlock()
		})
	}
	wg.Wait()
	for _, h := range []*harness{a, b} {
		eventually(t, 5*time.Second, "both keys in onprem-gw's plan", func() bool {
			p := h.plan("onprem-gw").Plan
			k1, ok1 := peerKey(p, "aws-gw")
			k2, ok2 := peerKey(p, "azure-gw")
			return ok1 && ok2 && !k1.IsZero() && !k2.IsZero()
		})
	}
	if pa, pb := a.plan("onprem-gw"), b.plan("onprem-gw"); pa.Generation != pb.Generation || pa.Plan.String() != pb.Plan.String() {
		t.Errorf("the managers serve different plans for onprem-gw: generation %d and %d", pa.Generation, pb.Generation)
	}

	// A watch parked on b wakes when a stores a change of its plan.
	p := b.plan("aws-gw")
	done := make(chan answer, 1)
	go func() {
		r, _ := b.try(req{method: "GET", path: gwPath(api.PathPlan, "aws-gw") + "?after=" + itoa(p.Generation) + "&timeout=60s", token: creds["aws-gw"]})
		done <- r
	}()
	waitParked(t, b.m, 1)
	a.ok(req{method: "POST", path: gwPath(api.PathRotate, "aws-gw")}, nil)
	select {
	case r := <-done:
		var got api.PlanResponse
		if r.status != 200 || jsonUnmarshal(r.body, &got) != nil || got.RotateKey != 1 || got.Generation <= p.Generation {
			t.Errorf("watch on the second manager after a rotation through the first: %d %s", r.status, r.body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a watch on the second manager did not wake on a change through the first")
	}

	// A report through b shows through a.
	pa := a.plan("azure-gw")
	b.ok(req{method: "PUT", path: gwPath(api.PathStatus, "azure-gw"), token: creds["azure-gw"], body: api.StatusReport{
		Generation: pa.Generation, Revision: pa.Revision, Links: []api.LinkStatus{{Peer: "aws-gw", LastHandshake: a.clock.Now(), RxBytes: 42}},
	}}, nil)
	var links []api.Link
	a.ok(req{method: "GET", path: api.PathLinks}, &links)
	if len(links) != 1 || links[0].From != "azure-gw" || links[0].RxBytes != 42 {
		t.Errorf("links on the first manager: %+v, want azure-gw's report through the second", links)
	}
	var gw api.Gateway
	a.ok(req{method: "GET", path: gwPath(api.PathGateway, "azure-gw")}, &gw)
	if gw.AppliedGeneration != pa.Generation || gw.LastReport.IsZero() {
		t.Errorf("azure-gw on the first manager: %+v", gw)
	}

	// b stops following the store, so it falls behind a's change. An agent
	// that got the change from a and watches on b (after = the new
	// generation, above b's) is not handed b's older plan: b catches up
	// and waits, as a would.
	b.m.stop()
	b.m.bg.Wait()
	a.ok(req{method: "POST", path: gwPath(api.PathRotate, "aws-gw")}, nil)
	newer := a.plan("aws-gw")
	if stale := b.m.snapshot().gen; stale >= newer.Generation {
		t.Fatalf("b is not behind: generation %d, a's plan %d", stale, newer.Generation)
	}
	if r := b.do(req{method: "GET", path: gwPath(api.PathPlan, "aws-gw") + "?after=" + itoa(newer.Generation) + "&timeout=200ms", token: creds["aws-gw"]}); r.status != 204 {
		t.Errorf("a watch on b after a's generation: %d %s, want 204 (nothing newer)", r.status, r.body)
	}
	if got := b.m.snapshot().plans["aws-gw"]; got.Generation != newer.Generation {
		t.Errorf("b did not catch up: aws-gw's plan at generation %d, a's %d", got.Generation, newer.Generation)
	}
}
