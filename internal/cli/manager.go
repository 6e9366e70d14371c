package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fednet/fednet/internal/manager"
	"github.com/fednet/fednet/internal/metrics"
)

// newManagerCmd is `fednet manager` (internal/manager).
func newManagerCmd() *cobra.Command {
	var dataDir, listen, advertise, metricsListen string
	var sans []string
	cmd := &cobra.Command{
		Use:   "manager --data-dir DIR [--listen ADDR] [--advertise URL] [--san NAME]...",
		Short: "Run the manager: the API that stores the spec, enrolls gateways and serves their plans",
		Long: `Manager is the federation's control plane. It keeps the spec as numbered
revisions, enrolls gateways with one-time join tokens, computes every gateway's
plan and serves it to that gateway's agent, which watches for changes. The
manager is needed to change the federation, not to run it: while it is down,
every tunnel keeps working on the agents' cached plans.

It serves HTTPS only (TLS 1.3). On first start it creates, in --data-dir:
  fednet.db     the state (SQLite): spec revisions, tokens, gateways, plans
  ca.crt        its own certificate authority; agents and operators pin its
  ca.key        SHA-256 fingerprint (ca.key is mode 0600)
  server.crt    the server certificate, signed by the CA, for the names below;
  server.key    re-issued when the names change
  admin.token   the operator's bearer token (mode 0600)
Back up the whole directory (while the manager is stopped).

--advertise is the https URL agents and operators reach the manager at; join
tokens carry it and the server certificate names its host. It is required when
--listen has no specific address (the default, ` + manager.DefaultListen + `), and derived from
--listen otherwise. --san adds names or addresses to the certificate for
clients that reach the manager some other way.

It serves the federation-wide Prometheus metrics, from the agents' reports, at
http://--metrics-listen/metrics (default ` + metrics.DefaultManagerListen + `, no authentication;
"" turns it off; docs/metrics.md).

On start it prints the URL, the CA fingerprint and the "fednet login" line an
operator runs. It stops on SIGINT or SIGTERM.`,
		Example: `  fednet manager --data-dir /var/lib/fednet-manager --advertise https://203.0.113.5:7443
  fednet manager --data-dir ./mgr --listen 10.0.0.1:7443
  fednet manager --data-dir ./mgr --advertise manager.example.com --san 10.0.0.1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dataDir == "" {
				return errors.New("--data-dir DIR is required: the directory for the manager's database, CA and admin token (created if missing)")
			}
			logger := log.New(os.Stderr, "", log.LstdFlags)
			m, err := manager.New(manager.Config{
				DataDir:   dataDir,
				Listen:    listen,
				Advertise: advertise,
				SANs:      sans,
				Logf:      logger.Printf,
			})
			if err != nil {
				return err
			}
			defer m.Close()
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			done, err := metrics.Serve(ctx, metricsListen, m.MetricsHandler(), logger.Printf)
			if err != nil {
				return err
			}
			defer func() { cancel(); <-done }()
			printManagerStart(cmd.OutOrStdout(), m)
			return m.ListenAndServe(ctx)
		},
	}
	f := cmd.Flags()
	f.StringVar(&dataDir, "data-dir", "", "directory for the database, CA, server certificate and admin token (required)")
	f.StringVar(&listen, "listen", manager.DefaultListen, "HOST:PORT to listen on")
	f.StringVar(&advertise, "advertise", "", "https URL agents reach the manager at (https://HOST:PORT, HOST:PORT or HOST); required when --listen has no host")
	f.StringVar(&metricsListen, "metrics-listen", metrics.DefaultManagerListen, "HOST:PORT of the federation-wide Prometheus metrics endpoint (/metrics, no authentication); \"\" disables it")
	f.StringArrayVar(&sans, "san", nil, "extra DNS name or IP address for the server certificate (repeatable)")
	return cmd
}

// printManagerStart tells the operator how to reach the manager.
func printManagerStart(w io.Writer, m *manager.Manager) {
	tokenPath := m.AdminTokenPath()
	if abs, err := filepath.Abs(tokenPath); err == nil {
		tokenPath = abs
	}
	fmt.Fprintf(w, "fednet manager at %s\n", m.URL())
	fmt.Fprintf(w, "  CA fingerprint (SHA-256): %s\n", m.CAFingerprint())
	fmt.Fprintf(w, "  admin token:              %s\n", tokenPath)
	fmt.Fprintf(w, "log in with:\n  fednet login --manager %s --token \"$(cat %s)\" --ca-fingerprint %s\n", m.URL(), managerShellQuote(tokenPath), m.CAFingerprint())
}

// managerShellQuote quotes s for a POSIX shell when it needs it.
func managerShellQuote(s string) string {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '/' || r == '.' || r == '-' || r == '_' || r == ':') {
			return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
		}
	}
	return s
}
