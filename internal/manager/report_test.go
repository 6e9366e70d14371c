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
