package demo_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/await"
	"github.com/fednet/fednet/internal/demo"
	"github.com/fednet/fednet/internal/lab"
	"github.com/fednet/fednet/internal/metrics"
	"github.com/fednet/fednet/internal/metrics/metricstest"
)

// scrapeIn scrapes http://addr/metrics from inside node's namespace (the
// endpoints listen on the node's loopback).
func scrapeIn(ctx context.Context, node *lab.Node, addr string) (metricstest.Scrape, error) {
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: node.DialContext}}
	defer c.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+addr+metrics.Path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s in %s: %s", addr, node, resp.Status)
	}
	return metricstest.Parse(resp.Body)
}

// TestMetrics scrapes an agent's and the manager's metrics endpoints at
// their default addresses in a managed lab federation: the names and
// labels are there, and the byte counters and the RTT histogram move with
// a ping flood between two sites' hosts.
func TestMetrics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	l, m := managedLab(t, ctx, "e2emetric", 3)
	aws, azure := l.SiteGateways("aws")[0], l.SiteGateways("azure")[0]
	link := map[string]string{"gateway": aws.Name, "site": "aws", "peer": azure.Name, "peer_site": "azure"}
	agentScrape := func() metricstest.Scrape {
		t.Helper()
		s, err := scrapeIn(ctx, aws, metrics.DefaultAgentListen)
		if err != nil {
			t.Fatalf("scraping the agent of %s: %v", aws, err)
		}
		return s
	}
	managerScrape := func() metricstest.Scrape {
		t.Helper()
		s, err := scrapeIn(ctx, l.Manager, metrics.DefaultManagerListen)
		if err != nil {
			t.Fatalf("scraping the manager: %v", err)
		}
		return s
	}
	value := func(s metricstest.Scrape, name string, labels map[string]string) float64 {
		t.Helper()
		v, ok := s.Value(name, labels)
		if !ok {
			t.Fatalf("%s%v is missing; series: %v", name, labels, s.Series(name))
		}
		return v
	}
	// Wait for a few probes and for the manager to have every link.
	await.Until(t, 30*time.Second, func() (bool, string) {
		s, err := scrapeIn(ctx, l.Manager, metrics.DefaultManagerListen)
		if err != nil {
			return false, err.Error()
		}
		up, rtt := len(s.Series("fednet_link_up")), len(s.Series("fednet_link_rtt_p50_seconds"))
		return up == 6 && rtt == 6, fmt.Sprintf("the manager has %d links up and %d RTTs, want 6 each", up, rtt)
	})
	before := agentScrape()
	for _, name := range []string{"fednet_link_up", "fednet_link_rtt_seconds", "fednet_link_probes_total", "fednet_link_loss_ratio",
		"fednet_link_jitter_seconds", "fednet_link_rx_bytes_total", "fednet_link_tx_bytes_total", "fednet_link_handshake_age_seconds"} {
		value(before, name, link)
	}
	if v := value(before, "fednet_link_up", link); v != 1 {
		t.Errorf("fednet_link_up = %v", v)
	}
	if v := value(before, "fednet_plan_revision", map[string]string{"gateway": aws.Name, "site": "aws"}); v != 1 {
		t.Errorf("fednet_plan_revision = %v, want 1", v)
	}
	value(before, "fednet_apply_errors_total", map[string]string{"gateway": aws.Name})
	if _, ok := before.Value("fednet_link_available_bandwidth_bytes_per_second", nil); ok {
		t.Error("an available-bandwidth estimate before any estimator ran")
	}
	mgrBefore := managerScrape()
	for _, name := range []string{"fednet_link_up", "fednet_link_rtt_p50_seconds", "fednet_link_rtt_p99_seconds", "fednet_link_loss_ratio",
		"fednet_link_rx_bytes_total", "fednet_link_tx_bytes_total", "fednet_link_handshake_age_seconds"} {
		value(mgrBefore, name, link)
	}
	value(mgrBefore, "fednet_spec_revision", nil)
	value(mgrBefore, "fednet_plan_revision", map[string]string{"gateway": azure.Name, "site": "azure"})

	// A ping flood from an aws host to an azure host: 2000 pings of 1000
	// bytes, so at least 2 MB go from aws-gw to azure-gw.
	const count, size = 2000, 1000
	from, to := l.Hosts("aws")[0], l.Hosts("azure")[0]
	out, err := from.Run(ctx, "ping", "-f", "-q", "-c", strconv.Itoa(count), "-s", strconv.Itoa(size), to.LAN.Addr().String())
	if err != nil {
		t.Fatalf("ping flood: %v", err)
	}
	t.Logf("ping flood: %s", out)
	// The flood is over: the byte counters have it; the RTT histogram
	// counts the next probe (one a second).
	var txGrew, rxGrew, rttGrew float64
	await.Until(t, 15*time.Second, func() (bool, string) {
		after := agentScrape()
		txGrew = value(after, "fednet_link_tx_bytes_total", link) - value(before, "fednet_link_tx_bytes_total", link)
		rxGrew = value(after, "fednet_link_rx_bytes_total", link) - value(before, "fednet_link_rx_bytes_total", link)
		rttGrew = value(after, "fednet_link_rtt_seconds", link) - value(before, "fednet_link_rtt_seconds", link)
		return txGrew >= count*size && rxGrew >= count*size && rttGrew >= 1,
			fmt.Sprintf("the agent's counters grew by tx %.0f, rx %.0f bytes (want %d each) and its RTT histogram by %.0f probes (want 1)", txGrew, rxGrew, count*size, rttGrew)
	})
	t.Logf("agent of %s: tx +%.0f bytes, rx +%.0f bytes, RTT histogram +%.0f probes", aws, txGrew, rxGrew, rttGrew)
	// The manager sees it at the agent's next report.
	var mgrGrew float64
	await.Until(t, 15*time.Second, func() (bool, string) {
		s, err := scrapeIn(ctx, l.Manager, metrics.DefaultManagerListen)
		if err != nil {
			return false, err.Error()
		}
		v, ok := s.Value("fednet_link_tx_bytes_total", link)
		mgrGrew = v - value(mgrBefore, "fednet_link_tx_bytes_total", link)
		return ok && mgrGrew >= count*size, fmt.Sprintf("the manager's tx counter grew by %.0f bytes, want %d", mgrGrew, count*size)
	})
	t.Logf("manager: tx of %s -> %s +%.0f bytes", aws, azure, mgrGrew)

	// Egress prices: a spec change that touches no plan; the manager then
	// estimates the cost of what aws sent, and only aws's.
	text, err := demo.GenerateSpecYAML(3)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Apply(ctx, text+"egressPrices:\n  - {provider: aws, usdPerGB: 0.09}\n"); err != nil {
		t.Fatalf("applying egress prices: %v", err)
	}
	s := managerScrape()
	cost := value(s, "fednet_link_egress_cost_usd", link)
	sent := value(s, "fednet_link_egress_bytes_total", link)
	t.Logf("manager: %s -> %s sent %.0f bytes, estimated egress cost $%.6f", aws, azure, sent, cost)
	if want := sent / (1 << 30) * 0.09; cost <= 0 || cost < want*0.99 || cost > want*1.5 {
		t.Errorf("egress cost %v for %v bytes at $0.09/GB, want about %v", cost, sent, want)
	}
	if _, ok := s.Value("fednet_link_egress_cost_usd", map[string]string{"gateway": azure.Name}); ok {
		t.Error("azure's links have a cost though azure has no price")
	}
	out, err = operator(ctx, m, "get", "links")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("fednet get links:\n%s", out)
	if !strings.Contains(out, "EGRESS COST") {
		t.Errorf("fednet get links shows no egress cost:\n%s", out)
	}
	if err := m.AgentsAlive(); err != nil {
		t.Fatal(err)
	}
}

// TestStaticProbes: static-mode agents (plan files, no manager) probe
// every peer too: each gateway's metrics show answered probes, an RTT and
// the link up for every peer, and no probe lost.
func TestStaticProbes(t *testing.T) {
	needRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f, err := demo.GenerateSpec(3)
	if err != nil {
		t.Fatal(err)
	}
	l, d := staticLab(t, ctx, "e2estatp", f, func(l *lab.Lab) []demo.Pair { return demo.CrossSitePairs(l, l.Sites()) })
	gws := l.Gateways()
	for _, gw := range gws {
		took := await.Until(t, 20*time.Second, func() (bool, string) {
			s, err := scrapeIn(ctx, gw, metrics.DefaultAgentListen)
			if err != nil {
				return false, err.Error()
			}
			for _, peer := range gws {
				if peer == gw {
					continue
				}
				lk := map[string]string{"gateway": gw.Name, "peer": peer.Name}
				answered, _ := s.Value("fednet_link_probes_total", map[string]string{"gateway": gw.Name, "peer": peer.Name, "result": "answered"})
				rtts, _ := s.Value("fednet_link_rtt_seconds", lk)
				up, _ := s.Value("fednet_link_up", lk)
				if answered < 3 || rtts < 3 || up != 1 {
					return false, fmt.Sprintf("%s -> %s: %v answered probes, %v RTTs (want 3 each), up %v", gw.Name, peer.Name, answered, rtts, up)
				}
				if lost, ok := s.Value("fednet_link_probes_total", map[string]string{"gateway": gw.Name, "peer": peer.Name, "result": "lost"}); ok && lost > 0 {
					t.Errorf("%s -> %s: %v probes lost", gw.Name, peer.Name, lost)
				}
			}
			return true, ""
		})
		t.Logf("%s: 3 answered probes to every peer %v after convergence", gw.Name, took.Round(time.Millisecond))
	}
	if err := d.AgentsAlive(); err != nil {
		t.Fatal(err)
	}
}
