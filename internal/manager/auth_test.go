package manager

import (
	"testing"

	"github.com/fednet/fednet/internal/api"
)

// TestCredentialAnswers is the contract agents rely on: a credential the
// manager does not know is 401 (unauthenticated: the agent keeps its data
// plane and retries); a removed gateway's credential is 403 with code
// gateway_removed (the agent stops), on every gateway endpoint and for a
// watch waiting when the removal happens; a known credential used for
// another gateway is 403 forbidden.
func TestCredentialAnswers(t *testing.T) {
	h := newHarness(t)
	h.putSpec(threeSites(t))
	credA, _ := h.enroll("aws-gw")
	credB, _ := h.enroll("azure-gw")
	endpoints := func(gw string) []req {
		return []req{
			{method: "GET", path: gwPath(api.PathPlan, gw)},
			{method: "PUT", path: gwPath(api.PathStatus, gw), body: api.StatusReport{}},
			{method: "PUT", path: gwPath(api.PathKey, gw), body: api.KeyRequest{PublicKey: randomKey(t)}},
			{method: "GET", path: gwPath(api.PathMeasurements, gw) + "?timeout=0s"},
		}
	}
	check := func(what string, r req, status int, code string) {
		t.Helper()
		if a := h.do(r); a.status != status || a.err.Code != code {
			t.Errorf("%s: %s %s: %d %+v, want %d %s", what, r.method, r.path, a.status, a.err, status, code)
		}
	}
	for _, r := range endpoints("aws-gw") {
		r.token = "not-a-credential-of-this-manager"
		check("unknown credential", r, 401, api.CodeUnauthenticated)
		r.token = credB
		check("another gateway's credential", r, 403, api.CodeForbidden)
	}

	// A watch waiting at the removal gets the removal too.
	p := h.plan("azure-gw")
	done := make(chan answer, 1)
	go func() {
		a, _ := h.try(req{method: "GET", path: gwPath(api.PathPlan, "azure-gw") + "?after=" + itoa(p.Generation) + "&timeout=60s", token: credB})
		done <- a
	}()
	waitParked(t, h.m, 1)
	h.ok(req{method: "DELETE", path: gwPath(api.PathGateway, "azure-gw")}, nil)
	if a := <-done; a.status != 403 || a.err.Code != api.CodeGatewayRemoved {
		t.Errorf("watch waiting at the removal: %d %+v, want 403 gateway_removed", a.status, a.err)
	}
	for _, r := range endpoints("azure-gw") {
		r.token = credB
		check("removed gateway's credential", r, 403, api.CodeGatewayRemoved)
	}
	// The admin reading a removed gateway's plan learns the same.
	check("admin, removed gateway's plan", req{method: "GET", path: gwPath(api.PathPlan, "azure-gw"), token: h.m.AdminToken()}, 403, api.CodeGatewayRemoved)
	// aws-gw is unaffected; re-enrolled, azure-gw's old credential is
	// unknown (401), not removed.
	h.ok(req{method: "GET", path: gwPath(api.PathPlan, "aws-gw"), token: credA}, nil)
	h.enroll("azure-gw")
	check("credential from before re-enrollment", req{method: "GET", path: gwPath(api.PathPlan, "azure-gw"), token: credB}, 401, api.CodeUnauthenticated)
}
