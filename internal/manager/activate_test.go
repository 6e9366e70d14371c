package manager

import (
	"strings"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/plan"
)

// haSpec returns examples/ha.yaml: lab has two gateways.
func haSpec(t *testing.T) string { return example(t, "ha.yaml") }

// labPrefixTo returns the peer gateway's plan p sends lab's prefix to.
func labPrefixTo(p plan.Gateway) string {
	for _, peer := range p.Peers {
		for _, a := range peer.AllowedIPs {
			if a.String() == "10.5.0.0/24" {
				return peer.Gateway
			}
		}
	}
	return ""
}

// TestActivate: fednet gateway activate stores the operator's choice as a
// planner input that every plan carries (and the plans follow), survives
// a restart, and refuses what cannot be active with a clear error.
func TestActivate(t *testing.T) {
	h := newHarness(t)
	h.putSpec(haSpec(t))
	credAWS, _ := h.enroll("aws-gw")
	cred1, _ := h.enroll("onprem-gw1")
	report := func(gw, cred string) {
		p := h.plan(gw)
		h.ok(req{method: "PUT", path: gwPath(api.PathStatus, gw), token: cred, body: api.StatusReport{Generation: p.Generation, Revision: p.Revision}}, nil)
	}
	report("onprem-gw1", cred1)
	if got := labPrefixTo(h.plan("aws-gw").Plan); got != "onprem-gw1" {
		t.Fatalf("before any activation aws-gw sends lab's prefix to %q, want onprem-gw1 (the first)", got)
	}
	admin := h.m.AdminToken()
	activate := func(gw string) answer {
		return h.do(req{method: "POST", path: gwPath(api.PathActivate, gw), token: admin})
	}
	local := func(gw string) *plan.Local {
		return planAnswer(t, h.do(req{method: "GET", path: gwPath(api.PathPlan, gw), token: admin, header: withLocalHeader})).Plan.Local
	}
	for _, c := range []struct {
		name, gw string
		status   int
		msg      string
	}{
		{"unknown", "nope-gw", 404, "not in the spec"},
		{"one-gateway site", "aws-gw", 409, "only gateway of site aws-eu"},
		{"not enrolled", "onprem-gw2", 409, "not enrolled"},
	} {
		a := activate(c.gw)
		if a.status != c.status || a.err.Field != "name" || !strings.Contains(a.err.Message, c.msg) {
			t.Errorf("%s: %d %+v, want %d naming field name and saying %q", c.name, a.status, a.err, c.status, c.msg)
		}
	}
	if a := h.do(req{method: "POST", path: gwPath(api.PathActivate, "onprem-gw1"), token: credAWS}); a.status != 403 {
		t.Errorf("activate with a gateway's credential: %d, want 403", a.status)
	}
	cred2, _ := h.enroll("onprem-gw2")
	if a := activate("onprem-gw2"); a.status != 409 || !strings.Contains(a.err.Message, "never reported") {
		t.Errorf("activate before any report: %d %+v, want 409 never reported", a.status, a.err)
	}
	report("onprem-gw2", cred2)
	var gw api.Gateway
	h.ok(req{method: "POST", path: gwPath(api.PathActivate, "onprem-gw2")}, &gw)
	if gw.Name != "onprem-gw2" || gw.Site != "lab" || gw.ActivatedAt.IsZero() {
		t.Errorf("activate answered %+v, want onprem-gw2 of lab with activatedAt", gw)
	}
	for _, name := range []string{"aws-gw", "onprem-gw1", "onprem-gw2"} {
		if l := local(name); l == nil || l.Active["lab"] != "onprem-gw2" {
			t.Errorf("%s's plan carries local %v, want active lab=onprem-gw2", name, l)
		}
	}
	if got := labPrefixTo(h.plan("aws-gw").Plan); got != "onprem-gw2" {
		t.Errorf("after activate aws-gw sends lab's prefix to %q, want onprem-gw2", got)
	}
	if !h.plan("onprem-gw2").Plan.LAN.Active || h.plan("onprem-gw1").Plan.LAN.Active {
		t.Errorf("after activate onprem-gw2's plan is not the active one, or onprem-gw1's still is")
	}
	// It survives a restart of the manager.
	h.restart()
	if l := local("aws-gw"); l == nil || l.Active["lab"] != "onprem-gw2" {
		t.Errorf("after a restart aws-gw's plan carries local %v, want active lab=onprem-gw2", l)
	}
	// A gateway that stopped reporting is refused; the choice stays.
	h.clock.Advance(activateFresh + 10*time.Second)
	if a := activate("onprem-gw1"); a.status != 409 || a.err.Field != "name" || !strings.Contains(a.err.Message, "seems down") {
		t.Errorf("activate a silent gateway: %d %+v, want 409 seems down", a.status, a.err)
	}
	if got := labPrefixTo(h.plan("aws-gw").Plan); got != "onprem-gw2" {
		t.Errorf("after a refused activate aws-gw sends lab's prefix to %q, want onprem-gw2", got)
	}
	// The other way back, once it reports.
	report("onprem-gw1", cred1)
	h.ok(req{method: "POST", path: gwPath(api.PathActivate, "onprem-gw1")}, &gw)
	if got := labPrefixTo(h.plan("aws-gw").Plan); got != "onprem-gw1" {
		t.Errorf("after activating onprem-gw1 aws-gw sends lab's prefix to %q, want onprem-gw1", got)
	}
}
