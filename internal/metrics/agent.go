package metrics

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/probe"
)

// RTTBuckets are the upper bounds of the RTT histogram, in seconds: 100 µs
// doubling to about 6.6 s, which covers a LAN, a continent and a satellite
// hop at one bucket per factor of two.
var RTTBuckets = prometheus.ExponentialBuckets(0.0001, 2, 17)

// LinkSource returns the links of the gateway as a status report would
// carry them: the tunnel driver's verdict (established), handshake and
// counters, and the probe figures. It is called at every scrape, bounded
// by ctx.
type LinkSource func(ctx context.Context) []api.LinkStatus

// Agent is the metrics exporter of one gateway's agent. The agent feeds it
// (SetPlan, ObserveProbe, ApplyFailed, SetLinkSource) and the scheduled
// bandwidth estimator sets SetAvailableBandwidth; the per-link gauges are
// read from the LinkSource at scrape time. Methods are safe for concurrent
// use; a nil *Agent ignores every call, so the agent needs no checks.
type Agent struct {
	reg         *prometheus.Registry
	rtt         *prometheus.HistogramVec
	probes      *prometheus.CounterVec
	applyErrors *prometheus.CounterVec
	restarts    *prometheus.CounterVec
	failovers   *prometheus.CounterVec
	pathChanges *prometheus.CounterVec

	mu          sync.Mutex
	gateway     string             // guarded by mu
	site        string             // guarded by mu
	peerSite    map[string]string  // peer gateway -> its site; guarded by mu
	revision    int                // guarded by mu
	hasRevision bool               // guarded by mu
	abw         map[string]float64 // by peer; guarded by mu
	links       LinkSource         // guarded by mu
	now         func() time.Time
}

var descRevision = prometheus.NewDesc("fednet_plan_revision",
	"Spec revision of the plan the gateway applied last (managed mode; absent in static mode).", gatewayLabels, nil)

// NewAgent returns an exporter with no links yet.
func NewAgent() *Agent {
	a := &Agent{
		rtt: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fednet_link_rtt_seconds",
			Help:    "Round-trip time of the answered link probes (one a second, through the tunnel).",
			Buckets: RTTBuckets,
		}, linkLabels),
		probes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fednet_link_probes_total",
			Help: "Link probes decided, by result: answered or lost.",
		}, append(append([]string{}, linkLabels...), "result")),
		applyErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fednet_apply_errors_total",
			Help: "Plan applies that failed (each apply, resync included, that returned an error).",
		}, gatewayLabels),
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fednet_dataplane_restarts_total",
			Help: "Tunnel devices that died outside an apply (a userspace WireGuard process), by result: restored (replaced with its configuration by the driver) or lost (made anew by the next apply).",
		}, append(append([]string{}, gatewayLabels...), "result")),
		failovers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fednet_failovers_total",
			Help: "Times this gateway became its site's active gateway (took over), by the election in the agents (docs/resilience.md).",
		}, gatewayLabels),
		pathChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fednet_path_changes_total",
			Help: "Times the agent moved routes to other paths because links or gateways failed or came back, without the manager.",
		}, gatewayLabels),
		peerSite: map[string]string{},
		abw:      map[string]float64{},
		now:      time.Now,
	}
	a.reg = newRegistry(a.rtt, a.probes, a.applyErrors, a.restarts, a.failovers, a.pathChanges, agentCollector{a})
	return a
}

// Handler serves the exposition format.
func (a *Agent) Handler() http.Handler { return handler(a.reg) }

// SetPlan records the gateway's name and site and its peers' sites, which
// label the metrics, from the plan being applied.
func (a *Agent) SetPlan(g plan.Gateway) {
	if a == nil {
		return
	}
	a.mu.Lock()
	a.gateway, a.site = g.Name, g.Site
	a.peerSite = map[string]string{}
	for _, p := range g.Peers {
		a.peerSite[p.Gateway] = p.Site
	}
	a.mu.Unlock()
	a.applyErrors.WithLabelValues(g.Name, g.Site) // exported as 0 from now on
	a.failovers.WithLabelValues(g.Name, g.Site)
	a.pathChanges.WithLabelValues(g.Name, g.Site)
}

// SetRevision records the spec revision of the plan applied (managed mode).
func (a *Agent) SetRevision(rev int) {
	if a == nil {
		return
	}
	a.mu.Lock()
	a.revision, a.hasRevision = rev, true
	a.mu.Unlock()
}

// SetLinkSource sets where the per-link gauges come from.
func (a *Agent) SetLinkSource(src LinkSource) {
	if a == nil {
		return
	}
	a.mu.Lock()
	a.links = src
	a.mu.Unlock()
}

// ObserveProbe counts one decided probe of the link to peer and, when it
// was answered, adds its RTT to the histogram.
func (a *Agent) ObserveProbe(peer string, s probe.Sample) {
	if a == nil {
		return
	}
	l := a.linkLabelValues(peer)
	if s.Lost {
		a.probes.WithLabelValues(append(l, "lost")...).Inc()
		return
	}
	a.probes.WithLabelValues(append(l, "answered")...).Inc()
	a.rtt.WithLabelValues(l...).Observe(s.RTT.Seconds())
}

// ApplyFailed counts a failed apply.
func (a *Agent) ApplyFailed() {
	if a == nil {
		return
	}
	a.mu.Lock()
	gw, site := a.gateway, a.site
	a.mu.Unlock()
	a.applyErrors.WithLabelValues(gw, site).Inc()
}

// DataplaneRestarted counts a tunnel device that died outside an apply:
// restored by its driver, or lost (the next apply makes it anew).
func (a *Agent) DataplaneRestarted(restored bool) {
	if a == nil {
		return
	}
	a.mu.Lock()
	gw, site := a.gateway, a.site
	a.mu.Unlock()
	result := "lost"
	if restored {
		result = "restored"
	}
	a.restarts.WithLabelValues(gw, site, result).Inc()
}

// Failover counts a takeover by this gateway. A nil a counts nothing.
func (a *Agent) Failover() {
	if a != nil {
		a.count(a.failovers)
	}
}

// PathChange counts a change of paths made by the agent. A nil a counts
// nothing.
func (a *Agent) PathChange() {
	if a != nil {
		a.count(a.pathChanges)
	}
}

func (a *Agent) count(c *prometheus.CounterVec) {
	if a == nil {
		return
	}
	a.mu.Lock()
	gw, site := a.gateway, a.site
	a.mu.Unlock()
	c.WithLabelValues(gw, site).Inc()
}

// SetAvailableBandwidth sets the available-bandwidth estimate of the link
// to peer, in bits per second: the hook of the scheduled bandwidth
// estimator. It is exported in bytes per second (Prometheus's base unit)
// and reported to the manager in bits per second. The gauge of a link is
// absent until it is first set; a negative value removes it again.
func (a *Agent) SetAvailableBandwidth(peer string, bitsPerSecond float64) {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if bitsPerSecond < 0 {
		delete(a.abw, peer)
		return
	}
	a.abw[peer] = bitsPerSecond
}

// AvailableBandwidth returns the estimate set for the link to peer.
func (a *Agent) AvailableBandwidth(peer string) (float64, bool) {
	if a == nil {
		return 0, false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	v, ok := a.abw[peer]
	return v, ok
}

func (a *Agent) linkLabelValues(peer string) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return []string{a.gateway, a.site, peer, a.peerSite[peer]}
}

// agentCollector reads the per-link gauges at scrape time.
type agentCollector struct{ a *Agent }

func (c agentCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descLinkUp, descLoss, descJitter, descHandshakeAge, descRx, descTx, descABW, descRevision, descTransport} {
		ch <- d
	}
}

func (c agentCollector) Collect(ch chan<- prometheus.Metric) {
	a := c.a
	a.mu.Lock()
	src, gw, site, rev, hasRev := a.links, a.gateway, a.site, a.revision, a.hasRevision
	a.mu.Unlock()
	if hasRev {
		ch <- prometheus.MustNewConstMetric(descRevision, prometheus.GaugeValue, float64(rev), gw, site)
	}
	if src == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	now := a.now()
	for _, l := range src(ctx) {
		lv := a.linkLabelValues(l.Peer)
		collectLink(ch, lv, linkFigures{
			// The link-up rule of docs/probe.md.
			up:        l.Established && (l.Probe == nil || l.Probe.Up),
			handshake: l.LastHandshake, now: now,
			rx: l.RxBytes, tx: l.TxBytes, probe: l.Probe,
		})
		if v, ok := a.AvailableBandwidth(l.Peer); ok {
			ch <- prometheus.MustNewConstMetric(descABW, prometheus.GaugeValue, v/8, lv...)
		}
		if l.Transport != "" {
			ch <- prometheus.MustNewConstMetric(descTransport, prometheus.GaugeValue, 1, append(lv, string(l.Transport))...)
		}
	}
}

// linkFigures are the per-link values both exporters publish.
type linkFigures struct {
	up             bool
	handshake, now time.Time
	rx, tx         int64
	probe          *api.LinkProbe
}

// collectLink sends the gauges and counters of one link.
func collectLink(ch chan<- prometheus.Metric, lv []string, f linkFigures) {
	ch <- prometheus.MustNewConstMetric(descLinkUp, prometheus.GaugeValue, boolValue(f.up), lv...)
	ch <- prometheus.MustNewConstMetric(descRx, prometheus.CounterValue, float64(f.rx), lv...)
	ch <- prometheus.MustNewConstMetric(descTx, prometheus.CounterValue, float64(f.tx), lv...)
	if !f.handshake.IsZero() {
		ch <- prometheus.MustNewConstMetric(descHandshakeAge, prometheus.GaugeValue, max(f.now.Sub(f.handshake), 0).Seconds(), lv...)
	}
	if p := f.probe; p != nil && p.Sent > 0 {
		ch <- prometheus.MustNewConstMetric(descLoss, prometheus.GaugeValue, p.Loss, lv...)
		if p.Lost < p.Sent {
			ch <- prometheus.MustNewConstMetric(descJitter, prometheus.GaugeValue, p.Jitter.Seconds(), lv...)
		}
	}
}
