package metrics

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/probe"
)

var metricName = regexp.MustCompile(`fednet_[a-z0-9_]+`)

// TestDocsListEveryMetric: docs/metrics.md names every fednet_ metric the
// two exporters produce (fed so that every optional one is there), and
// nothing else; the sample dashboard is valid JSON and uses only them.
func TestDocsListEveryMetric(t *testing.T) {
	page, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, n := range metricName.FindAllString(string(page), -1) {
		documented[strings.TrimSuffix(n, "_bucket")] = true // a histogram's series
	}
	now := time.Now()
	lp := &api.LinkProbe{Up: true, Sent: 2, RTTP50: time.Millisecond, RTTP99: time.Millisecond}
	a := NewAgent()
	a.SetPlan(plan.Gateway{Name: "g", Site: "s", Peers: []plan.Peer{{Gateway: "p", Site: "q"}}})
	a.SetRevision(1)
	a.SetAvailableBandwidth("p", 1e6)
	a.ObserveProbe("p", probe.Sample{RTT: time.Millisecond})
	a.SetLinkSource(func(context.Context) []api.LinkStatus {
		return []api.LinkStatus{{Peer: "p", Backend: "wireguard", Established: true, LastHandshake: now, Probe: lp}}
	})
	m := NewManager(func() View {
		return View{Revision: 1, Now: now,
			Gateways: []api.Gateway{{Name: "g", Site: "s", Enrolled: true, LastReport: now}},
			Links: []api.Link{{From: "g", To: "p", LastHandshake: now, Probe: lp, AvailableBandwidth: 1e6,
				Egress: &api.LinkEgress{USDPerGB: 0.09}}}}
	})
	produced := map[string]bool{}
	for _, reg := range []*prometheus.Registry{a.reg, m.reg} {
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fams {
			if n := f.GetName(); strings.HasPrefix(n, "fednet_") {
				produced[n] = true
			}
		}
	}
	for n := range produced {
		if !documented[n] {
			t.Errorf("%s is exported but not in docs/metrics.md", n)
		}
	}
	for n := range documented {
		if !produced[n] {
			t.Errorf("docs/metrics.md names %s, which no exporter produces", n)
		}
	}

	dash, err := os.ReadFile("../../docs/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(dash, &v); err != nil {
		t.Fatalf("docs/grafana-dashboard.json: %v", err)
	}
	for _, n := range metricName.FindAllString(string(dash), -1) {
		base := strings.TrimSuffix(n, "_bucket")
		if !produced[base] {
			t.Errorf("docs/grafana-dashboard.json uses %s, which no exporter produces", n)
		}
	}
}
