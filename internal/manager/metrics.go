package manager

import (
	"net/http"

	"github.com/fednet/fednet/internal/metrics"
)

// MetricsHandler serves the federation-wide Prometheus metrics (see
// docs/metrics.md): the gateways and links as the read models show them,
// computed at each scrape. It does not authenticate: serve it on a
// loopback or otherwise protected address (fednet manager
// --metrics-listen).
func (m *Manager) MetricsHandler() http.Handler {
	return metrics.NewManager(func() metrics.View {
		st, _ := m.snapshot()
		return metrics.View{Revision: st.rev.Number, Gateways: m.gatewayModels(st), Links: m.links(st), Now: m.now()}
	}).Handler()
}
