// Package manager is fednet's control plane: an HTTPS JSON API (described
// by api/openapi.yaml, types in internal/api) over a store
// (internal/manager/store). It keeps the spec as numbered revisions, enrolls
// gateways with one-time join tokens, computes every gateway's plan with
// plan.Compute whenever the spec, a key or the set of removed gateways
// changes, and serves each gateway its own plan by long poll. The manager
// is needed to change a federation, not to run it: agents keep applying
// their cached plans while it is down.
//
// State model: a global generation counter increases with every change;
// each gateway's plan carries the generation at which it last changed, so
// a change wakes exactly the agents whose plan it touches. Plans and
// generations are stored, so a restarted manager serves the same plans at
// the same generations.
//
// The manager serves from an in-memory snapshot of the store's state. It
// follows the store (store.Store.Watch): a change committed by another
// manager on the same store reaches this manager's snapshot, and wakes its
// plan watches, like one of its own. Status reports go through the store
// too, so every manager on a store sees every gateway's last report.
package manager

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"log"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/console"
	"github.com/fednet/fednet/internal/manager/store"
)

// DefaultListen is the address the manager listens on when Config.Listen
// is empty: every address, port 7443.
const DefaultListen = ":7443"

// Config configures a Manager.
type Config struct {
	// DataDir holds the CA, the server certificate and the admin token
	// (and, for fednet manager, the SQLite database: see OpenStore);
	// created (mode 0700) if missing. Required.
	DataDir string
	// Store holds the manager's state. Required; the caller opens it
	// (OpenStore for the SQLite database in DataDir) and closes it after
	// Close. Several managers may share one store.
	Store store.Store
	// Listen is the HOST:PORT ListenAndServe listens on; DefaultListen
	// when empty.
	Listen string
	// Advertise is the https URL agents and operators reach the manager
	// at; join tokens carry it and the server certificate names its host.
	// "host" and "host:port" are accepted (https and Listen's port are
	// assumed). Required when Listen has no specific host (":7443",
	// "0.0.0.0:7443", "[::]:7443") or port 0; otherwise derived from
	// Listen.
	Advertise string
	// SANs are extra DNS names or IP addresses for the server certificate,
	// for agents that reach the manager by another name than Advertise's.
	SANs []string
	// JoinURLs are the https URLs of every manager of the federation
	// (several managers on one store), in the order agents should try
	// them; join tokens carry them. Empty: this manager's URL alone. This
	// manager's own URL is added first when missing.
	JoinURLs []string
	// Logf logs; log.Printf when nil.
	Logf func(format string, args ...any)
	// Now is the clock (token expiry, enrollment and revision times,
	// certificate validity, link liveness); time.Now when nil.
	Now func() time.Time
	// Limits bound what clients may hold (connections, watches, failed
	// authentications, timeouts); zero fields take the defaults.
	Limits Limits
	// Wrap, when set, wraps the API handler that Serve serves (behind TLS
	// and the limits), e.g. to log or to inject faults in tests.
	Wrap func(http.Handler) http.Handler
	// CollectWhenQuiet has the manager collect the process's heap once it
	// has been quiet for a moment after publishing a change or answering
	// plans, when the heap grew more than half way to the collector's
	// goal (quietgc.go), so that collections fall between changes rather
	// than in them. For a process that is the manager alone: fednet
	// manager sets it.
	CollectWhenQuiet bool
}

// Manager serves the API. Create it with New; its methods are safe for
// concurrent use. Close it when done.
type Manager struct {
	cfg        Config
	limits     Limits
	url        string
	joinURLs   []string
	store      store.Store
	certs      *certs
	adminToken string
	adminHash  store.Hash

	// writeMu serializes changes to the snapshot: read the state,
	// compute, commit, publish; and following the store. Never held while
	// waiting for clients.
	writeMu sync.Mutex

	mu sync.RWMutex // guards st
	st *state       // immutable; replaced whole by publish

	wake     waker        // wakes the watches of what a publish changed
	watchers atomic.Int64 // plan and tunnel watches waiting for a change
	wakes    atomic.Int64 // waiting watches woken by a change (tests count them)
	slots    watchSlots   // concurrent watches by credential
	authFail *authLimiter // failed authentications by address

	revMu    sync.Mutex
	revCache map[int]api.Revision // read models of stored revisions

	relay relay // measurement requests on their way to agents

	stats stats // what plan watches were answered with; how long planning took
	// attached holds, by gateway, when its agent last watched its plan or
	// reported here (unix nanoseconds in an *atomic.Int64; lazy.go).
	attached sync.Map
	console  *console.Console // the web console, served under console.Prefix

	stop context.CancelFunc // ends the background goroutines
	bg   sync.WaitGroup     // the background goroutines
	once sync.Once          // Close
}

// New opens (or creates) the manager's data directory (CA, server
// certificate and admin token), loads the state from cfg.Store and starts
// following it. It does not listen; call Serve or ListenAndServe. Errors
// name the fednet manager flag at fault (the Config field of that name).
func New(cfg Config) (*Manager, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("--data-dir is required: a directory for the manager's database, CA and admin token")
	}
	if cfg.Store == nil {
		return nil, errors.New("Store is required: open the manager's store first (OpenStore opens the SQLite database in the data directory)")
	}
	if cfg.Listen == "" {
		cfg.Listen = DefaultListen
	}
	if cfg.Logf == nil {
		cfg.Logf = log.Printf
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	u, sans, err := names(cfg.Listen, cfg.Advertise, cfg.SANs)
	if err != nil {
		return nil, err
	}
	limits, err := cfg.Limits.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating data directory (--data-dir): %w", err)
	}
	if fi, err := os.Stat(cfg.DataDir); err != nil {
		return nil, fmt.Errorf("data directory (--data-dir): %w", err)
	} else if fi.Mode().Perm()&0o077 != 0 {
		cfg.Logf("warning: data directory %s is open to others (mode %v); chmod 700 it: it holds the CA key and admin token", cfg.DataDir, fi.Mode().Perm())
	}
	joins, err := joinURLs(u, cfg.JoinURLs)
	if err != nil {
		return nil, err
	}
	m := &Manager{cfg: cfg, limits: limits, url: u, joinURLs: joins, store: cfg.Store, revCache: map[int]api.Revision{}}
	m.authFail = newAuthLimiter(limits, cfg.Now, cfg.Logf)
	if err := m.loadIdentity(context.Background(), sans); err != nil {
		return nil, err
	}
	if err := m.load(context.Background()); err != nil {
		return nil, err
	}
	if m.console, err = newConsole(m); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	m.stop = cancel
	m.bg.Go(func() { m.follow(ctx) })
	if shared, ok := m.store.(store.Relay); ok {
		m.bg.Go(func() { m.relayThroughStore(ctx, shared) })
	}
	m.bg.Go(func() { m.authFail.run(ctx) })
	if cfg.CollectWhenQuiet {
		q := newQuietCollector(m.activity)
		t := time.NewTicker(quietTick)
		m.bg.Go(func() {
			defer t.Stop()
			q.run(ctx, t.C)
		})
	}
	return m, nil
}

// Close stops following the store. Serve must have returned. It does not
// close the store (its opener does). Close is safe to call more than once.
func (m *Manager) Close() error {
	m.once.Do(func() {
		m.console.Close()
		m.stop()
		m.bg.Wait()
	})
	return nil
}

// URL is the https URL join tokens carry (Config.Advertise, normalized).
func (m *Manager) URL() string { return m.url }

// CAFingerprint is the hex SHA-256 of the CA certificate's DER bytes, which
// agents and operators pin.
func (m *Manager) CAFingerprint() string { return m.certs.fingerprint() }

// CACertificatePEM returns the CA certificate (the content of ca.crt).
func (m *Manager) CACertificatePEM() []byte { return pemCert(m.certs.ca.Raw) }

// AdminToken returns the admin bearer token (the content of admin.token),
// "" when this manager's data directory has none (another manager of the
// federation made it; this one knows only its hash, from the store).
func (m *Manager) AdminToken() string { return m.adminToken }

// JoinURLs are the manager URLs join tokens carry (Config.JoinURLs).
func (m *Manager) JoinURLs() []string { return slices.Clone(m.joinURLs) }

// AdminTokenPath is the file holding the admin token.
func (m *Manager) AdminTokenPath() string { return filepath.Join(m.cfg.DataDir, AdminTokenFile) }

// names derives the advertised URL and the server certificate's names
// from Listen, Advertise and SANs.
func names(listen, advertise string, extra []string) (string, []string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", nil, fmt.Errorf("--listen %q: want HOST:PORT or :PORT, e.g. %s: %w", listen, DefaultListen, err)
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return "", nil, fmt.Errorf("--listen %q: bad port: %w", listen, err)
	}
	wildcard := host == ""
	if a, err := netip.ParseAddr(host); err == nil && a.IsUnspecified() {
		wildcard = true
	}
	var u *url.URL
	switch {
	case advertise != "":
		if u, err = parseAdvertise(advertise, port); err != nil {
			return "", nil, err
		}
	case wildcard || port == "0":
		return "", nil, fmt.Errorf("--advertise is required when the manager listens on %q: give the https URL agents reach it at, e.g. --advertise https://203.0.113.5:%s, or listen on one address (--listen 203.0.113.5:%[2]s)", listen, port)
	default:
		u = &url.URL{Scheme: "https", Host: net.JoinHostPort(host, port)}
	}
	all := []string{u.Hostname(), "localhost", "127.0.0.1", "::1"}
	if !wildcard {
		all = append(all, host)
	}
	for _, s := range extra {
		if strings.TrimSpace(s) == "" {
			return "", nil, errors.New("--san: an empty name; give a DNS name or IP address")
		}
	}
	sans, err := normalizeSANs(append(all, extra...))
	if err != nil {
		return "", nil, fmt.Errorf("the certificate's names (--san, --advertise, --listen): %w", err)
	}
	return u.String(), sans, nil
}

// parseAdvertise accepts https://host[:port], host:port or host; a missing
// port is Listen's.
func parseAdvertise(s, listenPort string) (*url.URL, error) {
	raw := strings.TrimSpace(s)
	if !strings.Contains(raw, "://") {
		raw = "https://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("--advertise %q is not a URL: %w; want https://HOST:PORT", s, err)
	}
	if u.Scheme != "https" {
		return nil, fmt.Errorf("--advertise %q: the manager serves https only; want https://HOST:PORT", s)
	}
	if u.Hostname() == "" || u.User != nil || strings.Trim(u.Path, "/") != "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("--advertise %q: want https://HOST:PORT with no user, path or query", s)
	}
	port := u.Port()
	if port == "" {
		if listenPort == "0" {
			return nil, fmt.Errorf("--advertise %q has no port and --listen's port is 0; want https://HOST:PORT", s)
		}
		port = listenPort
	}
	if a, err := netip.ParseAddr(u.Hostname()); err == nil && a.IsUnspecified() {
		return nil, fmt.Errorf("--advertise %q: %s is not an address agents can reach; give the manager's reachable address or name", s, a)
	}
	return &url.URL{Scheme: "https", Host: net.JoinHostPort(u.Hostname(), port)}, nil
}

// joinURLs normalizes Config.JoinURLs, own first when missing.
func joinURLs(own string, list []string) ([]string, error) {
	out := []string{own}
	for _, s := range list {
		u, err := parseAdvertise(s, "7443")
		if err != nil {
			return nil, fmt.Errorf("JoinURLs (--join-url) %q: want https://HOST:PORT of a manager of this federation", s)
		}
		if !slices.Contains(out, u.String()) {
			out = append(out, u.String())
		}
	}
	return out, nil
}

// loadIdentity loads (or, for a new federation, makes) the CA and the
// admin token, and checks them against the federation's identity in the
// store, which the first manager of a federation records: every manager
// of a store must have the same CA (agents pin it), and answers the same
// admin token. The CA's private key is never in the store: the operator
// copies ca.crt and ca.key to each manager's data directory.
func (m *Manager) loadIdentity(ctx context.Context, sans []string) error {
	id, err := m.store.Identity(ctx)
	known := err == nil
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("reading the federation's identity from the store: %w", err)
	}
	if known {
		if _, err := os.Stat(filepath.Join(m.cfg.DataDir, CAKeyFile)); errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("the store holds a federation whose CA is not in %s: every manager of a federation uses its CA (agents pin it), whose key is never in the store; "+
				"copy %s and %s (and %s, to have the admin token here too) from the data directory of a manager of this federation, then start again (docs/manager.md, \"Several managers\")",
				m.cfg.DataDir, CACertFile, CAKeyFile, AdminTokenFile)
		}
	}
	if m.certs, err = loadCerts(m.cfg.DataDir, sans, m.cfg.Now, m.cfg.Logf); err != nil {
		return err
	}
	if known {
		if got, want := m.certs.fingerprint(), fingerprintPEM(id.CACert); got != want {
			return fmt.Errorf("the CA in %s (fingerprint %s) is not the federation's (%s, in the store): this data directory belongs to another federation, or its CA was replaced; "+
				"copy %s and %s from a manager of this federation", m.cfg.DataDir, got, want, CACertFile, CAKeyFile)
		}
		return m.loadAdminToken(&id.AdminTokenHash)
	}
	if err := m.loadAdminToken(nil); err != nil {
		return err
	}
	mine := store.Identity{CACert: pemCert(m.certs.ca.Raw), AdminTokenHash: m.adminHash}
	got, err := m.store.InitIdentity(ctx, mine)
	if err != nil {
		return fmt.Errorf("recording the federation's identity in the store: %w", err)
	}
	if fingerprintPEM(got.CACert) != m.certs.fingerprint() || got.AdminTokenHash != m.adminHash {
		return errors.New("another manager recorded a different CA in the store at the same time (two first managers of one federation?); start the others from a copy of the first one's ca.crt, ca.key and admin.token")
	}
	return nil
}

// fingerprintPEM is the hex SHA-256 of the DER of a PEM certificate, ""
// when it holds none.
func fingerprintPEM(p []byte) string {
	b, _ := pem.Decode(p)
	if b == nil {
		return ""
	}
	sum := sha256.Sum256(b.Bytes)
	return hex.EncodeToString(sum[:])
}

// loadAdminToken reads admin.token. With want (the federation's admin token
// hash, from the store) a missing file is fine (the token is then known
// here by its hash only) and a different one is refused; without, a
// missing file is created.
func (m *Manager) loadAdminToken(want *store.Hash) error {
	path := m.AdminTokenPath()
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist) && want != nil:
		m.adminHash = *want
		return nil
	case errors.Is(err, fs.ErrNotExist):
		tok, err := randomSecret()
		if err != nil {
			return err
		}
		if err := writeFileAtomic(path, []byte(tok+"\n"), 0o600); err != nil {
			return err
		}
		data = []byte(tok)
	case err != nil:
		return fmt.Errorf("reading the admin token: %w", err)
	default:
		checkMode(path, m.cfg.Logf)
	}
	tok := strings.TrimSpace(string(data))
	if len(tok) < 16 {
		return fmt.Errorf("admin token in %s is shorter than 16 characters; remove the file and restart to make a new one", path)
	}
	if want != nil && store.HashSecret(tok) != *want {
		return fmt.Errorf("the admin token in %s is not the federation's (the store holds another one's hash): copy %s from a manager of this federation, or remove it to use the federation's token from there", path, AdminTokenFile)
	}
	m.adminToken, m.adminHash = tok, store.HashSecret(tok)
	return nil
}

// randomSecret returns 32 random bytes in base64url.
func randomSecret() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("reading random bytes: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// hashEqual compares two hashes in constant time.
func hashEqual(a, b store.Hash) bool { return subtle.ConstantTimeCompare(a[:], b[:]) == 1 }
