package metrics

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/backend"
	"github.com/fednet/fednet/internal/metrics/metricstest"
	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/probe"
)

func scrape(t *testing.T, h http.Handler) metricstest.Scrape {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", Path, nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET %s: %d\n%s", Path, rec.Code, rec.Body)
	}
	s, err := metricstest.Parse(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var awsToAzure = map[string]string{"gateway": "aws-gw", "site": "aws", "peer": "azure-gw", "peer_site": "azure"}

func TestAgentMetrics(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	a := NewAgent()
	a.now = func() time.Time { return now }
	a.SetPlan(plan.Gateway{Name: "aws-gw", Site: "aws", Peers: []plan.Peer{{Gateway: "azure-gw", Site: "azure"}, {Gateway: "gcp-gw", Site: "gcp"}, {Gateway: "onprem-gw", Site: "onprem"}}})
	a.SetRevision(7)
	links := []api.LinkStatus{
		{Peer: "azure-gw", Backend: backend.WireGuard, Established: true, LastHandshake: now.Add(-30 * time.Second), RxBytes: 1000, TxBytes: 2000,
			Probe: &api.LinkProbe{Up: true, Sent: 60, Lost: 3, Loss: 0.05, RTTP50: time.Millisecond, Jitter: 2 * time.Millisecond}},
		{Peer: "gcp-gw", Backend: backend.WireGuard, Established: true, LastHandshake: now.Add(-30 * time.Second), Probe: &api.LinkProbe{Up: false, Sent: 5, Lost: 5, Loss: 1}},
		// Probes answered, but the tunnel driver says the tunnel is not
		// established: down.
		{Peer: "onprem-gw", Backend: backend.WireGuard, Established: false, LastHandshake: now.Add(-30 * time.Second), Probe: &api.LinkProbe{Up: true, Sent: 5}},
	}
	a.SetLinkSource(func(context.Context) []api.LinkStatus { return links })
	a.ObserveProbe("azure-gw", probe.Sample{RTT: 3 * time.Millisecond})
	a.ObserveProbe("azure-gw", probe.Sample{RTT: 5 * time.Millisecond})
	a.ObserveProbe("azure-gw", probe.Sample{Lost: true})
	a.ApplyFailed()

	s := scrape(t, a.Handler())
	gcp := map[string]string{"gateway": "aws-gw", "peer": "gcp-gw", "peer_site": "gcp"}
	onprem := map[string]string{"gateway": "aws-gw", "peer": "onprem-gw", "peer_site": "onprem"}
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"fednet_link_up", awsToAzure, 1},
		{"fednet_link_up", gcp, 0},
		{"fednet_link_up", onprem, 0},
		{"fednet_link_rtt_seconds", awsToAzure, 2},
		{"fednet_link_probes_total", map[string]string{"peer": "azure-gw", "result": "answered"}, 2},
		{"fednet_link_probes_total", map[string]string{"peer": "azure-gw", "result": "lost"}, 1},
		{"fednet_link_loss_ratio", awsToAzure, 0.05},
		{"fednet_link_loss_ratio", gcp, 1},
		{"fednet_link_jitter_seconds", awsToAzure, 0.002},
		{"fednet_link_rx_bytes_total", awsToAzure, 1000},
		{"fednet_link_tx_bytes_total", awsToAzure, 2000},
		{"fednet_link_handshake_age_seconds", awsToAzure, 30},
		{"fednet_plan_revision", map[string]string{"gateway": "aws-gw", "site": "aws"}, 7},
		{"fednet_apply_errors_total", map[string]string{"gateway": "aws-gw", "site": "aws"}, 1},
	} {
		got, ok := s.Value(tc.name, tc.labels)
		if !ok || got != tc.want {
			t.Errorf("%s%v = %v (present %v), want %v; series: %v", tc.name, tc.labels, got, ok, tc.want, s.Series(tc.name))
		}
	}
	if _, ok := s.Value("fednet_link_jitter_seconds", gcp); ok {
		t.Error("a link whose every probe was lost has a jitter")
	}
	if _, ok := s.Value("fednet_link_available_bandwidth_bytes_per_second", nil); ok {
		t.Error("the available-bandwidth gauge is there before any estimate")
	}
	a.SetAvailableBandwidth("azure-gw", 95e6)
	s = scrape(t, a.Handler())
	if v, ok := s.Value("fednet_link_available_bandwidth_bytes_per_second", awsToAzure); !ok || v != 95e6/8 {
		t.Errorf("available bandwidth = %v, %v; want 95e6", v, ok)
	}
	if s.Type("fednet_link_rtt_seconds") != "histogram" || s.Type("fednet_link_tx_bytes_total") != "counter" || s.Type("fednet_link_up") != "gauge" {
		t.Error("wrong metric types")
	}
	lint(t, a.reg)
}

func TestNilAgentIgnoresCalls(t *testing.T) {
	var a *Agent
	a.SetPlan(plan.Gateway{})
	a.SetRevision(1)
	a.ObserveProbe("x", probe.Sample{})
	a.ApplyFailed()
	a.SetAvailableBandwidth("x", 1)
	a.Failover()
	a.PathChange()
	a.SetLinkSource(nil)
	if _, ok := a.AvailableBandwidth("x"); ok {
		t.Error("a nil Agent has an estimate")
	}
}

func TestManagerMetrics(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	view := View{
		Revision: 3, Now: now,
		Gateways: []api.Gateway{
			{Name: "aws-gw", Site: "aws", Enrolled: true, AppliedRevision: 3, LastReport: now.Add(-2 * time.Second)},
			{Name: "azure-gw", Site: "azure", Enrolled: true, AppliedRevision: 2, ApplyError: "boom", LastReport: now.Add(-4 * time.Second)},
			{Name: "gcp-gw", Site: "gcp"},
		},
		Links: []api.Link{{From: "aws-gw", To: "azure-gw", Up: true, LastHandshake: now.Add(-10 * time.Second), RxBytes: 10, TxBytes: 20,
			AvailableBandwidth: 5e8, Egress: &api.LinkEgress{USDPerGB: 0.09, Bytes: 20, CostUSD: 0.5},
			Probe: &api.LinkProbe{Up: true, Sent: 60, RTTP50: 2 * time.Millisecond, RTTP99: 9 * time.Millisecond}}},
	}
	m := NewManager(func() View { return view })
	s := scrape(t, m.Handler())
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"fednet_spec_revision", nil, 3},
		{"fednet_plan_revision", map[string]string{"gateway": "azure-gw", "site": "azure"}, 2},
		{"fednet_gateway_apply_error", map[string]string{"gateway": "azure-gw"}, 1},
		{"fednet_gateway_apply_error", map[string]string{"gateway": "aws-gw"}, 0},
		{"fednet_gateway_last_report_age_seconds", map[string]string{"gateway": "aws-gw"}, 2},
		{"fednet_link_up", awsToAzure, 1},
		{"fednet_link_tx_bytes_total", awsToAzure, 20},
		{"fednet_link_loss_ratio", awsToAzure, 0},
		{"fednet_link_rtt_p50_seconds", awsToAzure, 0.002},
		{"fednet_link_rtt_p99_seconds", awsToAzure, 0.009},
		{"fednet_link_available_bandwidth_bytes_per_second", awsToAzure, 5e8 / 8},
		{"fednet_link_egress_bytes_total", awsToAzure, 20},
		{"fednet_link_egress_cost_usd", awsToAzure, 0.5},
	} {
		got, ok := s.Value(tc.name, tc.labels)
		if !ok || got != tc.want {
			t.Errorf("%s%v = %v (present %v), want %v; series: %v", tc.name, tc.labels, got, ok, tc.want, s.Series(tc.name))
		}
	}
	if _, ok := s.Value("fednet_plan_revision", map[string]string{"gateway": "gcp-gw"}); ok {
		t.Error("a gateway that never reported has a plan revision")
	}
	lint(t, m.reg)
}

func TestServe(t *testing.T) {
	done, err := Serve(t.Context(), "", nil, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	<-done
	ctx, cancel := context.WithCancel(t.Context())
	a := NewAgent()
	done, err = Serve(ctx, "127.0.0.1:0", a.Handler(), t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	<-done
	if _, err := Serve(t.Context(), "256.0.0.1:1", nil, t.Logf); err == nil {
		t.Error("a bad address was accepted")
	}
}

// lint runs Prometheus's linter (naming conventions, units, help) on reg.
func lint(t *testing.T, reg *prometheus.Registry) {
	t.Helper()
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}
