package metrics

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fednet/fednet/internal/api"
)

// View is the federation as the manager's read models show it.
type View struct {
	Revision int
	Gateways []api.Gateway
	Links    []api.Link
	Now      time.Time
}

// Manager is the federation-wide exporter of the manager: every metric is
// computed at scrape time from the View its source returns (the agents'
// last reports). It has no histograms: the agents' reports carry the RTT
// percentiles of the last minute, exported as gauges.
type Manager struct {
	reg *prometheus.Registry
}

var (
	descSpecRevision = prometheus.NewDesc("fednet_spec_revision",
		"Current spec revision of the federation.", nil, nil)
	descGatewayRevision = prometheus.NewDesc("fednet_plan_revision",
		"Spec revision of the plan the gateway applied last, as it reported.", gatewayLabels, nil)
	descApplyError = prometheus.NewDesc("fednet_gateway_apply_error",
		"1 when the gateway's last report says its last apply failed, else 0.", gatewayLabels, nil)
	descReportAge = prometheus.NewDesc("fednet_gateway_last_report_age_seconds",
		"Seconds since the gateway's last status report.", gatewayLabels, nil)
	descEgressBytes = prometheus.NewDesc("fednet_link_egress_bytes_total",
		"Bytes the gateway sent on the link (WireGuard's transmit counter): traffic leaving its site.", linkLabels, nil)
	descEgressCost = prometheus.NewDesc("fednet_link_egress_cost_usd",
		"Estimated cost in US dollars of the bytes sent on the link, at the sending site's price from the spec's egressPrices; absent for unpriced sites.", linkLabels, nil)
	descRTTP50 = prometheus.NewDesc("fednet_link_rtt_p50_seconds",
		"Median RTT of the link probes over the last minute (nearest rank), as the gateway reported.", linkLabels, nil)
	descRTTP99 = prometheus.NewDesc("fednet_link_rtt_p99_seconds",
		"99th percentile RTT of the link probes over the last minute (nearest rank), as the gateway reported.", linkLabels, nil)
)

// NewManager returns the exporter of the View source returns.
func NewManager(source func() View) *Manager {
	return &Manager{reg: newRegistry(managerCollector{source})}
}

// Handler serves the exposition format.
func (m *Manager) Handler() http.Handler { return handler(m.reg) }

type managerCollector struct{ source func() View }

func (c managerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSpecRevision, descGatewayRevision, descApplyError, descReportAge,
		descLinkUp, descLoss, descJitter, descHandshakeAge, descRx, descTx, descABW, descRTTP50, descRTTP99, descEgressBytes, descEgressCost} {
		ch <- d
	}
}

func (c managerCollector) Collect(ch chan<- prometheus.Metric) {
	v := c.source()
	if v.Revision == 0 {
		return
	}
	ch <- prometheus.MustNewConstMetric(descSpecRevision, prometheus.GaugeValue, float64(v.Revision))
	site := map[string]string{}
	for _, g := range v.Gateways {
		site[g.Name] = g.Site
		if !g.Enrolled || g.Removed || g.LastReport.IsZero() {
			continue
		}
		gl := []string{g.Name, g.Site}
		ch <- prometheus.MustNewConstMetric(descGatewayRevision, prometheus.GaugeValue, float64(g.AppliedRevision), gl...)
		ch <- prometheus.MustNewConstMetric(descApplyError, prometheus.GaugeValue, boolValue(g.ApplyError != ""), gl...)
		ch <- prometheus.MustNewConstMetric(descReportAge, prometheus.GaugeValue, max(v.Now.Sub(g.LastReport), 0).Seconds(), gl...)
	}
	for _, l := range v.Links {
		lv := []string{l.From, site[l.From], l.To, site[l.To]}
		collectLink(ch, lv, linkFigures{up: l.Up, handshake: l.LastHandshake, now: v.Now, rx: l.RxBytes, tx: l.TxBytes, probe: l.Probe})
		ch <- prometheus.MustNewConstMetric(descEgressBytes, prometheus.CounterValue, float64(l.TxBytes), lv...)
		if e := l.Egress; e != nil {
			ch <- prometheus.MustNewConstMetric(descEgressCost, prometheus.GaugeValue, e.CostUSD, lv...)
		}
		if l.AvailableBandwidth > 0 {
			ch <- prometheus.MustNewConstMetric(descABW, prometheus.GaugeValue, l.AvailableBandwidth/8, lv...)
		}
		if p := l.Probe; p != nil && p.Lost < p.Sent {
			ch <- prometheus.MustNewConstMetric(descRTTP50, prometheus.GaugeValue, p.RTTP50.Seconds(), lv...)
			ch <- prometheus.MustNewConstMetric(descRTTP99, prometheus.GaugeValue, p.RTTP99.Seconds(), lv...)
		}
	}
}
