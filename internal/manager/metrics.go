package manager

import (
	"context"
	"net/http"
	"time"

	"github.com/fednet/fednet/internal/metrics"
)

// MetricsHandler serves the federation-wide Prometheus metrics (see
// docs/metrics.md): the gateways and links as the read models show them,
// computed at each scrape. A gateway's links are those to the peers of its
// current plan, so the series a gateway can create are bounded by the spec. It does not authenticate: serve it on a
// loopback or otherwise protected address (fednet manager
// --metrics-listen).
func (m *Manager) MetricsHandler() http.Handler {
	return metrics.NewManager(func() metrics.View {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		reps, err := m.reports(ctx)
		if err != nil {
			m.cfg.Logf("metrics: %v; serving them without the reports", err)
		}
		st := m.snapshot()
		return metrics.View{Revision: st.rev.Number, Gateways: gatewayModels(st, reps), Links: links(st, reps, m.now()), Now: m.now()}
	}).Handler()
}
