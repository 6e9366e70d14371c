package manager

import (
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/api"
)

// TestReportValidation: a report that does not fit the gateway's plan, or
// whose figures are out of range, is refused with 422 invalid_report
// naming the field, and the last good report stays.
func TestReportValidation(t *testing.T) {
	h := newHarness(t)
	h.putSpec(threeSites(t))
	cred, _ := h.enroll("aws-gw")
	p := h.plan("aws-gw")
	now := h.clock.Now()
	good := api.LinkStatus{Peer: "azure-gw", Endpoint: "203.0.113.20:51820", LastHandshake: now.Add(-5 * time.Second), RxBytes: 10, TxBytes: 20,
		Probe: &api.LinkProbe{Up: true, Window: time.Minute, Sent: 60, Lost: 1, Loss: 1.0 / 60, RTTP50: time.Millisecond, RTTP99: 2 * time.Millisecond}}
	put := func(rep api.StatusReport) answer {
		return h.do(req{method: "PUT", path: gwPath(api.PathStatus, "aws-gw"), token: cred, body: rep})
	}
	if a := put(api.StatusReport{Generation: p.Generation, Revision: p.Revision, Links: []api.LinkStatus{good}}); a.status != 204 {
		t.Fatalf("a good report: %d %+v", a.status, a.err)
	}
	link := func(change func(*api.LinkStatus)) api.LinkStatus {
		l := good
		pr := *good.Probe
		l.Probe = &pr
		change(&l)
		return l
	}
	many := make([]api.LinkStatus, 2000)
	for i := range many {
		many[i] = api.LinkStatus{Peer: fmt.Sprintf("gw-%05d", i)}
	}
	tests := []struct {
		name  string
		links []api.LinkStatus
		rep   func(*api.StatusReport)
		field string
	}{
		{"unknown peer", []api.LinkStatus{link(func(l *api.LinkStatus) { l.Peer = "evil-gw" })}, nil, "links[0].peer"},
		{"itself", []api.LinkStatus{link(func(l *api.LinkStatus) { l.Peer = "aws-gw" })}, nil, "links[0].peer"},
		{"twice", []api.LinkStatus{good, good}, nil, "links[1].peer"},
		{"2,000 unknown peers", many, nil, "links[0].peer"},
		{"negative rx", []api.LinkStatus{link(func(l *api.LinkStatus) { l.RxBytes = -1 })}, nil, "links[0].rxBytes"},
		{"negative tx", []api.LinkStatus{link(func(l *api.LinkStatus) { l.TxBytes = -5 })}, nil, "links[0].txBytes"},
		{"unknown transport", []api.LinkStatus{link(func(l *api.LinkStatus) { l.Transport = "carrier-pigeon" })}, nil, "links[0].transport"},
		{"loss above 1", []api.LinkStatus{link(func(l *api.LinkStatus) { l.Probe.Loss = 1e300 })}, nil, "links[0].probe.loss"},
		{"negative recent loss", []api.LinkStatus{link(func(l *api.LinkStatus) { l.Probe.RecentLoss = -0.5 })}, nil, "links[0].probe.recentLoss"},
		{"lost above sent", []api.LinkStatus{link(func(l *api.LinkStatus) { l.Probe.Lost = 61 })}, nil, "links[0].probe.lost"},
		{"negative rtt", []api.LinkStatus{link(func(l *api.LinkStatus) { l.Probe.RTTP99 = -time.Second })}, nil, "links[0].probe.rttP99Ns"},
		{"hour-long rtt", []api.LinkStatus{link(func(l *api.LinkStatus) { l.Probe.RTTP50 = time.Hour })}, nil, "links[0].probe.rttP50Ns"},
		{"endpoint with escapes", []api.LinkStatus{link(func(l *api.LinkStatus) { l.Endpoint = "\x1b[2J\nazure-gw -> aws-gw up" })}, nil, "links[0].endpoint"},
		{"future handshake", []api.LinkStatus{link(func(l *api.LinkStatus) { l.LastHandshake = now.Add(48 * time.Hour) })}, nil, "links[0].lastHandshake"},
		{"negative handshake age", []api.LinkStatus{link(func(l *api.LinkStatus) { l.HandshakeAge = -time.Second })}, nil, "links[0].handshakeAgeNs"},
		{"infinite bandwidth", []api.LinkStatus{link(func(l *api.LinkStatus) { l.AvailableBandwidth = 1e300 })}, nil, "links[0].availableBandwidthBps"},
		{"huge apply error", nil, func(r *api.StatusReport) { r.ApplyError = strings.Repeat("x", 9<<10) }, "applyError"},
		{"negative generation", nil, func(r *api.StatusReport) { r.Generation = -1 }, "generation"},
		{"huge reason", []api.LinkStatus{link(func(l *api.LinkStatus) { l.Reason = strings.Repeat("x", 600) })}, nil, "links[0].reason"},
		{"relayed by a stranger", []api.LinkStatus{link(func(l *api.LinkStatus) { l.Via = "evil-gw" })}, nil, "links[0].via"},
		{"active of another site", nil, func(r *api.StatusReport) { r.Failover = &api.FailoverStatus{Active: "azure-gw"} }, "failover.active"},
		{"failover to another site", nil, func(r *api.StatusReport) {
			r.Failover = &api.FailoverStatus{Active: "aws-gw", LastFailover: &api.Failover{To: "azure-gw"}}
		}, "failover.lastFailover.to"},
		{"huge cause", nil, func(r *api.StatusReport) {
			r.Failover = &api.FailoverStatus{Active: "aws-gw", LastFailover: &api.Failover{To: "aws-gw", Cause: strings.Repeat("x", 600)}}
		}, "failover.lastFailover.cause"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := api.StatusReport{Generation: p.Generation, Revision: p.Revision, Links: tt.links}
			if tt.rep != nil {
				tt.rep(&rep)
			}
			a := put(rep)
			if a.status != 422 || a.err.Code != api.CodeInvalidReport || a.err.Field != tt.field || !strings.Contains(a.err.Message, tt.field) {
				t.Errorf("%d %+v; want 422 invalid_report naming %s", a.status, a.err, tt.field)
			}
		})
	}
	var links []api.Link
	h.ok(req{method: "GET", path: api.PathLinks}, &links)
	if len(links) != 1 || links[0].To != "azure-gw" || links[0].RxBytes != 10 {
		t.Errorf("links after refused reports: %+v, want the good report's", links)
	}
	// A report of an older plan may name a peer since dropped: that link
	// is left out, the rest is taken.
	if a := put(api.StatusReport{Generation: p.Generation - 1, Revision: p.Revision, Links: []api.LinkStatus{link(func(l *api.LinkStatus) { l.Peer = "gone-gw" }), good}}); a.status != 204 {
		t.Errorf("a report of an older plan naming a dropped peer: %d %+v", a.status, a.err)
	}
	h.ok(req{method: "GET", path: api.PathLinks}, &links)
	if len(links) != 1 || links[0].To != "azure-gw" {
		t.Errorf("links after an older report: %+v", links)
	}
}

// TestMetricsBoundedByPlan: the series the manager exports for a gateway's
// links are those of its plan's peers only; a report from before a peer
// was dropped does not keep (or add) series for it.
func TestMetricsBoundedByPlan(t *testing.T) {
	h := newHarness(t)
	doc := threeSites(t)
	h.putSpec(doc)
	cred, _ := h.enroll("aws-gw")
	p := h.plan("aws-gw")
	now := h.clock.Now()
	rep := api.StatusReport{Generation: p.Generation, Revision: p.Revision, Links: []api.LinkStatus{
		{Peer: "azure-gw", LastHandshake: now}, {Peer: "onprem-gw", LastHandshake: now},
	}}
	h.ok(req{method: "PUT", path: gwPath(api.PathStatus, "aws-gw"), token: cred, body: rep}, nil)
	scrape := func() string {
		rec := httptest.NewRecorder()
		h.m.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		b, _ := io.ReadAll(rec.Body)
		return string(b)
	}
	if m := scrape(); !strings.Contains(m, `peer="onprem-gw"`) || !strings.Contains(m, `peer="azure-gw"`) {
		t.Fatalf("metrics lack the reported links:\n%s", m)
	}
	// onprem-gw is removed: aws-gw's last report still names it, the
	// metrics do not.
	h.ok(req{method: "DELETE", path: gwPath(api.PathGateway, "onprem-gw")}, nil)
	if m := scrape(); strings.Contains(m, `peer="onprem-gw"`) || !strings.Contains(m, `peer="azure-gw"`) {
		t.Errorf("metrics after onprem-gw left aws-gw's plan:\n%s", m)
	}
}

// TestFailoverReportShown: what the gateways of a two-gateway site report
// of its active gateway and last failover is what get sites and the
// overview show (the gateway holding the role, the cause as the gateway
// that took over tells it); a relayed link shows the gateway it goes
// through.
func TestFailoverReportShown(t *testing.T) {
	h := newHarness(t)
	h.putSpec(haSpec(t))
	now := h.clock.Now().UTC().Truncate(time.Second)
	took := api.Failover{At: now.Add(-time.Minute), From: "onprem-gw1", To: "onprem-gw2", Cause: "active gateway onprem-gw1 does not answer on the LAN"}
	steppedDown := api.Failover{At: now.Add(-time.Minute + time.Second), From: "onprem-gw1", To: "onprem-gw2", Cause: "onprem-gw2 claims the site with epoch 2 (mine 1)"}
	reports := map[string]api.StatusReport{
		"onprem-gw2": {Failover: &api.FailoverStatus{Active: "onprem-gw2", Epoch: 2, ActiveSince: took.At, LastFailover: &took},
			Links: []api.LinkStatus{{Peer: "gcp-gw"}, {Peer: "aws-gw", Via: "gcp-gw"}}},
		"onprem-gw1": {Failover: &api.FailoverStatus{Active: "onprem-gw2", ActiveSince: steppedDown.At, LastFailover: &steppedDown}},
		"aws-gw":     {Failover: &api.FailoverStatus{Active: "aws-gw", ActiveSince: now.Add(-time.Hour)}},
	}
	for gw, rep := range reports {
		cred, _ := h.enroll(gw)
		p := h.plan(gw)
		rep.Generation, rep.Revision = p.Generation, p.Revision
		h.ok(req{method: "PUT", path: gwPath(api.PathStatus, gw), token: cred, body: rep}, nil)
	}
	var sites []api.Site
	h.ok(req{method: "GET", path: api.PathSites}, &sites)
	var o api.Overview
	h.ok(req{method: "GET", path: api.PathFederation}, &o)
	for _, got := range [][]api.Site{sites, o.Sites} {
		byName := map[string]api.Site{}
		for _, s := range got {
			byName[s.Name] = s
		}
		lab := byName["lab"]
		if lab.Active != "onprem-gw2" || !lab.ActiveSince.Equal(took.At) || lab.LastFailover == nil || *lab.LastFailover != took {
			t.Errorf("site lab: active %q since %v, last failover %+v; want onprem-gw2 since %v, %+v", lab.Active, lab.ActiveSince, lab.LastFailover, took.At, took)
		}
		if aws := byName["aws-eu"]; aws.Active != "aws-gw" || aws.LastFailover != nil {
			t.Errorf("site aws-eu: active %q, last failover %+v", aws.Active, aws.LastFailover)
		}
		if gcp := byName["gcp-ew"]; gcp.Active != "" || !gcp.ActiveSince.IsZero() {
			t.Errorf("site gcp-ew, which reported nothing: active %q since %v", gcp.Active, gcp.ActiveSince)
		}
	}
	var links []api.Link
	h.ok(req{method: "GET", path: api.PathLinks}, &links)
	vias := map[string]string{}
	for _, l := range links {
		if l.From == "onprem-gw2" {
			vias[l.To] = l.Via
		}
	}
	if vias["aws-gw"] != "gcp-gw" || vias["gcp-gw"] != "" || len(vias) != 2 {
		t.Errorf("onprem-gw2's links' paths: %v; want aws-gw via gcp-gw, gcp-gw direct", vias)
	}
	// The active stepped down first (it reaches no other site), the other
	// took the role nobody held: the failover is the step-down's, cause
	// included.
	down := api.Failover{At: now.Add(-30 * time.Second), From: "onprem-gw2", To: "onprem-gw1", Cause: "this gateway reaches no other site, onprem-gw1 reaches 3"}
	took2 := api.Failover{At: down.At.Add(30 * time.Millisecond), To: "onprem-gw1", Cause: "no other gateway of the site claims it"}
	for gw, f := range map[string]api.FailoverStatus{
		"onprem-gw1": {Active: "onprem-gw1", Epoch: 3, ActiveSince: took2.At, LastFailover: &took2},
		"onprem-gw2": {Active: "onprem-gw1", ActiveSince: down.At, LastFailover: &down},
	} {
		cred, _ := h.enroll(gw)
		p := h.plan(gw)
		h.ok(req{method: "PUT", path: gwPath(api.PathStatus, gw), token: cred, body: api.StatusReport{Generation: p.Generation, Revision: p.Revision, Failover: &f}}, nil)
	}
	h.ok(req{method: "GET", path: api.PathSites}, &sites)
	for _, s := range sites {
		if s.Name == "lab" && (s.Active != "onprem-gw1" || s.LastFailover == nil || *s.LastFailover != down) {
			t.Errorf("site lab after a step-down: active %q, last failover %+v; want onprem-gw1, %+v", s.Active, s.LastFailover, down)
		}
	}
}

// TestLinkReasonShown: the reason a gateway's tunnel driver gives for a
// link that is not established shows in GET /v1/links on that gateway's
// direction of the link only, and is cleared once the link is
// established.
func TestLinkReasonShown(t *testing.T) {
	h := newHarness(t)
	h.putSpec(threeSites(t))
	cred, _ := h.enroll("aws-gw")
	p := h.plan("aws-gw")
	const why = "authentication failed: the pre-shared keys (or identities) of the two sides differ"
	put := func(l api.LinkStatus) {
		rep := api.StatusReport{Generation: p.Generation, Revision: p.Revision, Links: []api.LinkStatus{l, {Peer: "onprem-gw", Backend: "ipsec"}}}
		h.ok(req{method: "PUT", path: gwPath(api.PathStatus, "aws-gw"), token: cred, body: rep}, nil)
	}
	reasons := func() map[string]api.Link {
		var links []api.Link
		h.ok(req{method: "GET", path: api.PathLinks}, &links)
		out := map[string]api.Link{}
		for _, l := range links {
			out[l.From+">"+l.To] = l
		}
		return out
	}
	put(api.LinkStatus{Peer: "azure-gw", Backend: "ipsec", Reason: why})
	got := reasons()
	if l := got["aws-gw>azure-gw"]; l.Up || l.Reason != why {
		t.Errorf("aws-gw -> azure-gw failing: up %v, reason %q; want down, %q", l.Up, l.Reason, why)
	}
	if l := got["aws-gw>onprem-gw"]; l.Reason != "" {
		t.Errorf("aws-gw -> onprem-gw, reported without a reason: reason %q", l.Reason)
	}
	put(api.LinkStatus{Peer: "azure-gw", Backend: "ipsec", Established: true, Reason: why})
	if l := reasons()["aws-gw>azure-gw"]; !l.Up || l.Reason != "" {
		t.Errorf("aws-gw -> azure-gw established (a stale reason in the report): up %v, reason %q; want up, no reason", l.Up, l.Reason)
	}
}
