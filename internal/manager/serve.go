package manager

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"strings"
	"time"

	"golang.org/x/net/netutil"

	openapi "github.com/fednet/fednet/api"
)

// shutdownGrace bounds how long Serve waits for requests in flight when its
// context ends.
const shutdownGrace = 5 * time.Second

// TLSConfig is the server side TLS configuration: TLS 1.3 only, presenting
// the server certificate with the CA (which clients pin) behind it. The
// certificate is renewed while serving when it comes close to expiry.
//
// The certificate comes from GetCertificate; Certificates stays empty
// (clients that dial an IP address send no server name, and Certificates
// would then win). httptest.Server.StartTLS fills Certificates with its own
// certificate, so serve this configuration with http.Server.ServeTLS, or
// just use Serve.
func (m *Manager) TLSConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return m.certs.current(m.cfg.Logf)
		},
		NextProtos: []string{"h2", "http/1.1"},
	}
}

// Serve serves the API over TLS on ln until ctx ends, then shuts down
// gracefully: plan watches end at once (204), other requests get
// shutdownGrace to finish. It closes ln. It returns nil after a shutdown
// caused by ctx, the error that stopped it otherwise.
//
// It holds at most Limits.MaxConnections connections (more wait in the
// listen queue), closes a connection idle for Limits.IdleTimeout (HTTP/1.1
// and HTTP/2 alike: a connection with a long poll in flight is not idle),
// bounds the TLS handshake and a request's headers by HeaderTimeout and
// its body by Limits.BodyTimeout (see serve).
func (m *Manager) Serve(ctx context.Context, ln net.Listener) error {
	defer startProfile(m.cfg.Logf)()
	drain := make(chan struct{})
	h := m.Handler()
	if m.cfg.Wrap != nil {
		h = m.cfg.Wrap(h)
	}
	srv := &http.Server{
		Handler:           h,
		TLSConfig:         m.TLSConfig(),
		ReadHeaderTimeout: HeaderTimeout,
		// No ReadTimeout: it would be one deadline for the whole request,
		// which a long poll outlasts; bodies get Limits.BodyTimeout each.
		IdleTimeout:    m.limits.IdleTimeout,
		MaxHeaderBytes: 64 << 10,
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams: 100,
			// A peer that went away without closing is found within a
			// minute, so its watches do not hold their slots for long.
			SendPingTimeout: 45 * time.Second,
			PingTimeout:     15 * time.Second,
		},
		ErrorLog: log.New(logWriter(m.cfg.Logf), "", 0),
		BaseContext: func(net.Listener) context.Context {
			return context.WithValue(context.Background(), drainKey{}, (<-chan struct{})(drain))
		},
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.ServeTLS(netutil.LimitListener(ln, m.limits.MaxConnections), "", "") }()
	select {
	case err := <-errc:
		return fmt.Errorf("serving on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	close(drain)
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		// Connections still busy after the grace (or accepted but never
		// through their TLS handshake, which net/http waits 5 s for) are
		// closed: the manager is stopping either way.
		m.cfg.Logf("closing connections still open after %v: %v", shutdownGrace, err)
		srv.Close()
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("shutting down: %w", err)
	}
	return nil
}

// ListenAndServe listens on Config.Listen and serves until ctx ends (see
// Serve).
func (m *Manager) ListenAndServe(ctx context.Context) error {
	ln, err := net.Listen("tcp", m.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listening on %s (--listen): %w", m.cfg.Listen, err)
	}
	return m.Serve(ctx, ln)
}

// logWriter sends the HTTP server's own log lines (TLS handshake errors,
// say) to Logf.
type logWriter func(string, ...any)

func (f logWriter) Write(p []byte) (int, error) {
	f("%s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// getOpenAPI serves the API description (no authentication).
func (m *Manager) getOpenAPI(w http.ResponseWriter, r *http.Request) error {
	w.Header().Set("Content-Type", "application/yaml")
	w.Header().Set("Cache-Control", "no-cache")
	_, err := w.Write(openapi.OpenAPI)
	return err
}
