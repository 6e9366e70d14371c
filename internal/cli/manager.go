package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fednet/fednet/internal/manager"
	"github.com/fednet/fednet/internal/manager/store"
	"github.com/fednet/fednet/internal/metrics"
)

// newManagerCmd is `fednet manager` (internal/manager).
func newManagerCmd() *cobra.Command {
	var dataDir, listen, advertise, metricsListen string
	var sans, joinURLs []string
	var storeCfg manager.StoreConfig
	var reinitialize bool
	var limits manager.Limits
	cmd := &cobra.Command{
		Use:   "manager --data-dir DIR [--store URL] [--listen ADDR] [--advertise URL] [--san NAME]...",
		Short: "Run the manager: the API that stores the spec, enrolls gateways and serves their plans",
		Long: `Manager is the federation's control plane. It keeps the spec as numbered
revisions, enrolls gateways with one-time join tokens, computes every gateway's
plan and serves it to that gateway's agent, which watches for changes. The
manager is needed to change the federation, not to run it: while it is down,
every tunnel keeps working on the agents' cached plans.

It serves HTTPS only (TLS 1.3). On first start it creates, in --data-dir:
  fednet.db     the state (SQLite): spec revisions, tokens, gateways, plans,
                status reports (fednet.db.lock keeps a second manager away)
  ca.crt        its own certificate authority; agents and operators pin its
  ca.key        SHA-256 fingerprint (ca.key is mode 0600)
  server.crt    the server certificate, signed by the CA, for the names below;
  server.key    re-issued when the names change
  admin.token   the operator's bearer token (mode 0600)
Back up the whole directory (while the manager is stopped).

A data directory with a CA or an admin token but a missing or empty
fednet.db is refused: starting over with no state would make every agent's
credential unknown. Restore fednet.db from a backup, or give --reinitialize
to start with an empty state (every gateway must then enroll again). A
damaged fednet.db is refused with what is wrong with it.

--store says where the state lives: the SQLite file in --data-dir by default
(sqlite://PATH for another file), or an etcd cluster shared by several
managers (etcd://HOST:PORT,HOST:PORT,...; --etcd-ca, --etcd-cert and
--etcd-key for a cluster that requires TLS). Managers on one etcd serve the
same federation: any of them serves any request, and a change through one
reaches the agents watching another. Each needs the federation's CA in its
--data-dir (copy ca.crt and ca.key from the first; the CA key is never put in
etcd) and lists every manager with --join-url, so that join tokens carry them
all and agents fail over between them (docs/manager.md, "Several managers").

--advertise is the https URL agents and operators reach the manager at; join
tokens carry it and the server certificate names its host. It is required when
--listen has no specific address (the default, ` + manager.DefaultListen + `), and derived from
--listen otherwise. --san adds names or addresses to the certificate for
clients that reach the manager some other way.

It serves the federation-wide Prometheus metrics, from the agents' reports, at
http://--metrics-listen/metrics (default ` + metrics.DefaultManagerListen + `, no authentication;
"" turns it off; docs/metrics.md).

The --max-*, --*-timeout and --auth-* flags bound what clients can make the
manager hold (docs/manager.md, "Limits").

On start it prints the URL, the CA fingerprint and the "fednet login" line an
operator runs. It stops on SIGINT or SIGTERM.`,
		Example: `  fednet manager --data-dir /var/lib/fednet/manager --advertise https://203.0.113.5:7443
  fednet manager --data-dir ./mgr --listen 10.0.0.1:7443
  fednet manager --data-dir ./mgr --advertise manager.example.com --san 10.0.0.1
  fednet manager --data-dir ./m2 --advertise https://10.0.0.2:7443 \
      --store etcd://10.0.0.11:2379,10.0.0.12:2379,10.0.0.13:2379 \
      --join-url https://10.0.0.1:7443 --join-url https://10.0.0.3:7443`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dataDir == "" {
				return errors.New("--data-dir DIR is required: the directory for the manager's database, CA and admin token (created if missing)")
			}
			logger := log.New(os.Stderr, "", log.LstdFlags)
			if os.Getenv("GOGC") == "" {
				// The heap is mostly the plans, which live long; collect
				// half as often as Go's default (docs/manager.md, "Sizing").
				debug.SetGCPercent(200)
			}
			storeCfg.DataDir, storeCfg.Reinitialize = dataDir, reinitialize
			st, err := manager.OpenStoreURL(cmd.Context(), storeCfg)
			if err != nil {
				return err
			}
			defer st.Close()
			if reinitialize {
				logger.Printf("--reinitialize: a missing or empty %s was allowed to start an empty state", filepath.Join(dataDir, store.FileName))
			}
			m, err := manager.New(manager.Config{
				DataDir:   dataDir,
				Store:     st,
				Listen:    listen,
				Advertise: advertise,
				SANs:      sans,
				JoinURLs:  joinURLs,
				Logf:      logger.Printf,
				Limits:    limits,
				// The process is the manager alone: it collects its heap
				// between changes (docs/manager.md, "Sizing").
				CollectWhenQuiet: true,
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
			// One line when a signal stops it: what stays running without it.
			defer onStop(cmd.Context(), func() {
				logger.Printf("manager stopping (%v): the API and the console close; every agent keeps its tunnels and last plan, and reconnects when a manager answers again", context.Cause(cmd.Context()))
			})()
			return m.ListenAndServe(ctx)
		},
	}
	f := cmd.Flags()
	f.StringVar(&dataDir, "data-dir", "", "directory for the database, CA, server certificate and admin token (required)")
	f.StringVar(&storeCfg.URL, "store", "", "where the state lives: sqlite://PATH, or etcd://HOST:PORT[,HOST:PORT...] shared by several managers (default: fednet.db in --data-dir)")
	f.StringVar(&storeCfg.EtcdCA, "etcd-ca", "", "PEM file of the CA of the etcd members' certificates (TLS to etcd)")
	f.StringVar(&storeCfg.EtcdCert, "etcd-cert", "", "PEM client certificate for etcd (with --etcd-key)")
	f.StringVar(&storeCfg.EtcdKey, "etcd-key", "", "PEM key of --etcd-cert")
	f.StringArrayVar(&joinURLs, "join-url", nil, "https URL of another manager of the federation (same store); join tokens carry them all (repeatable)")
	f.StringVar(&listen, "listen", manager.DefaultListen, "HOST:PORT to listen on")
	f.StringVar(&advertise, "advertise", "", "https URL agents reach the manager at (https://HOST:PORT, HOST:PORT or HOST); required when --listen has no host")
	f.StringVar(&metricsListen, "metrics-listen", metrics.DefaultManagerListen, "HOST:PORT of the federation-wide Prometheus metrics endpoint (/metrics, no authentication); \"\" disables it")
	f.StringArrayVar(&sans, "san", nil, "extra DNS name or IP address for the server certificate (repeatable)")
	f.BoolVar(&reinitialize, "reinitialize", false, "start with an empty state when fednet.db is missing or empty in a data directory that has a CA (every gateway must enroll again)")
	f.IntVar(&limits.MaxConnections, "max-connections", manager.DefaultMaxConnections, "most client connections open at once; more wait (each agent holds two: its long poll and its reports)")
	f.DurationVar(&limits.IdleTimeout, "idle-timeout", manager.DefaultIdleTimeout, "close a connection with no request in flight after this long (HTTP/1.1 and HTTP/2)")
	f.DurationVar(&limits.BodyTimeout, "body-timeout", manager.DefaultBodyTimeout, "most time a request body may take to arrive")
	f.IntVar(&limits.WatchesPerCredential, "max-watches-per-credential", manager.DefaultWatchesPerCredential, "most long polls one credential may hold at once; one more gets 429")
	f.Float64Var(&limits.AuthFailuresPerSecond, "auth-failures-per-second", manager.DefaultAuthFailuresPerSecond, "failed authentications allowed per client address and second, past the burst; more get 429")
	f.IntVar(&limits.AuthFailureBurst, "auth-failure-burst", manager.DefaultAuthFailureBurst, "failed authentications a client address may make at once")
	f.DurationVar(&limits.AuthLogInterval, "auth-log-interval", manager.DefaultAuthLogInterval, "log failed authentications as one line per this interval")
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
	if m.AdminToken() == "" {
		fmt.Fprintf(w, "  admin token:              the federation's (from the manager that made it; only its hash is here)\n")
		fmt.Fprintf(w, "log in with:\n  fednet login --manager %s --token TOKEN --ca-fingerprint %s\n", strings.Join(m.JoinURLs(), ","), m.CAFingerprint())
		return
	}
	fmt.Fprintf(w, "  admin token:              %s\n", tokenPath)
	fmt.Fprintf(w, "log in with (on this machine; from another, copy admin.token over first: fednet login --help):\n  fednet login --manager %s --token-file %s --ca-fingerprint %s\n", strings.Join(m.JoinURLs(), ","), managerShellQuote(tokenPath), m.CAFingerprint())
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
