// Package metrics exposes fednet's state to Prometheus: the link figures
// of one gateway on its agent ([Agent]) and the federation-wide view on
// the manager ([Manager]). Every metric is listed in docs/metrics.md. Each
// exporter has its own registry (no global state), served at /metrics by
// [Serve].
package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Default listen addresses (--metrics-listen): loopback only, so a
// gateway's figures are not published on its public address by default.
const (
	DefaultAgentListen   = "127.0.0.1:9586"
	DefaultManagerListen = "127.0.0.1:9587"
	// Path is where Serve answers.
	Path = "/metrics"
)

// linkLabels label every per-link metric: the reporting gateway and its
// site, and the peer gateway at the other end and its site.
var linkLabels = []string{"gateway", "site", "peer", "peer_site"}

// gatewayLabels label per-gateway metrics.
var gatewayLabels = []string{"gateway", "site"}

// Descriptions shared by the agent and the manager.
var (
	descLinkUp = prometheus.NewDesc("fednet_link_up",
		"1 when the link is up: a WireGuard handshake within 3 minutes and not the last 3 probes lost (docs/probe.md), else 0.", linkLabels, nil)
	descLoss = prometheus.NewDesc("fednet_link_loss_ratio",
		"Share of the link probes lost over the last minute (0 to 1).", linkLabels, nil)
	descJitter = prometheus.NewDesc("fednet_link_jitter_seconds",
		"RFC 3550 interarrival jitter of the link probes (latest estimate).", linkLabels, nil)
	descHandshakeAge = prometheus.NewDesc("fednet_link_handshake_age_seconds",
		"Seconds since the last WireGuard handshake with the peer; absent when there was none.", linkLabels, nil)
	descRx = prometheus.NewDesc("fednet_link_rx_bytes_total",
		"Bytes WireGuard received from the peer (encrypted, as the device counts them) since the peer was configured.", linkLabels, nil)
	descTx = prometheus.NewDesc("fednet_link_tx_bytes_total",
		"Bytes WireGuard sent to the peer (encrypted, as the device counts them) since the peer was configured.", linkLabels, nil)
	descTransport = prometheus.NewDesc("fednet_link_transport",
		"1 for the transport the link's packets travel by now (label transport: udp, or tcp443 when UDP is blocked and the link fell back to TLS over TCP; docs/interop.md); absent when the agent does not report it.",
		append(append([]string{}, linkLabels...), "transport"), nil)
	descABW = prometheus.NewDesc("fednet_link_available_bandwidth_bytes_per_second",
		"Latest available-bandwidth estimate of the link in bytes per second (bits/8; midpoint of the estimated range); absent until the estimator has run.", linkLabels, nil)
)

// newRegistry returns a registry with the Go runtime and process
// collectors and cs.
func newRegistry(cs ...prometheus.Collector) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(cs...)
	return reg
}

func handler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// Serve serves h at Path on addr until ctx ends. An empty addr disables
// it (Serve returns at once with nil). The listener is opened before Serve
// returns, so a bad or taken address is reported as an error at once;
// serving then goes on in the background. The returned channel is closed
// when the server has stopped.
func Serve(ctx context.Context, addr string, h http.Handler, logf func(string, ...any)) (<-chan struct{}, error) {
	done := make(chan struct{})
	if addr == "" {
		close(done)
		return done, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		close(done)
		return done, fmt.Errorf("--metrics-listen %s: %w (give another HOST:PORT, or \"\" to disable the metrics endpoint)", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle(Path, h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logf("metrics endpoint %s stopped: %v", addr, err)
		}
	}()
	logf("metrics at http://%s%s", ln.Addr(), Path)
	return done, nil
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
