package manager

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/manager/store"
	"github.com/fednet/fednet/internal/plan"
)

// clock is a settable clock for Config.Now: real time plus an offset, so
// that certificates stay valid for real TLS clients.
type clock struct {
	mu     sync.Mutex
	offset time.Duration
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
}

// testLog forwards to t.Logf until the test ends, and keeps every line.
type testLog struct {
	mu    sync.Mutex
	t     *testing.T
	done  bool
	lines []string
}

func (l *testLog) Logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	line := fmt.Sprintf(format, args...)
	l.lines = append(l.lines, line)
	if !l.done {
		l.t.Log(line)
	}
}

func (l *testLog) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.done = true
}

// harness is a manager serving HTTPS on 127.0.0.1 for one test.
type harness struct {
	t      *testing.T
	dir    string
	clock  *clock
	log    *testLog
	limits Limits
	m      *Manager
	store  store.Store
	shared bool // the store is the test's, not the harness's to open and close
	// open, when set, opens the harness's own store (else the SQLite store
	// of dir).
	open     func() (store.Store, error)
	joinURLs []string
	// collectWhenQuiet is Config.CollectWhenQuiet.
	collectWhenQuiet bool
	admin            string // the admin token, when the manager's data directory has none
	url              string
	hc               *http.Client
	stop             func()
}

// newHarness starts a manager on a fresh data directory, with the default
// limits but a failed-authentication burst that tests sending many bad
// credentials on purpose do not exhaust.
func newHarness(t *testing.T) *harness { return newHarnessWith(t, Limits{AuthFailureBurst: 1000}) }

// newHarnessWith starts a manager with limits on a fresh data directory.
func newHarnessWith(t *testing.T, limits Limits) *harness {
	t.Helper()
	h := &harness{t: t, dir: filepath.Join(t.TempDir(), "data"), clock: &clock{}, log: &testLog{t: t}, limits: limits}
	t.Cleanup(h.log.stop)
	h.start()
	return h
}

// sharing starts a second manager on the store (and data directory) of h,
// as a second manager on one etcd would run; the test closes neither.
func (h *harness) sharing() *harness {
	h.t.Helper()
	h2 := &harness{t: h.t, dir: h.dir, clock: h.clock, log: h.log, limits: h.limits, store: h.store, shared: true}
	h2.start()
	return h2
}

// openStore opens the SQLite store of data directory dir and closes it at
// the end of the test.
func openStore(t *testing.T, dir string) store.Store {
	t.Helper()
	s, err := OpenStore(context.Background(), dir, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// start starts (or restarts) the manager on h.dir.
func (h *harness) start() {
	t := h.t
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	st := h.store
	if !h.shared {
		open := h.open
		if open == nil {
			open = func() (store.Store, error) { return OpenStore(context.Background(), h.dir, false) }
		}
		if st, err = open(); err != nil {
			ln.Close()
			t.Fatal(err)
		}
	}
	m, err := New(Config{DataDir: h.dir, Store: st, Listen: ln.Addr().String(), Logf: h.log.Logf, Now: h.clock.Now, Limits: h.limits, JoinURLs: h.joinURLs, CollectWhenQuiet: h.collectWhenQuiet})
	if err != nil {
		ln.Close()
		if !h.shared {
			st.Close()
		}
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Serve(ctx, ln) }()
	stopped := false
	h.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		if err := m.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if h.shared {
			return
		}
		if err := st.Close(); err != nil {
			t.Errorf("closing the store: %v", err)
		}
	}
	t.Cleanup(h.stop)
	h.m, h.store, h.url = m, st, m.URL()
	h.hc = pinnedClient(t, m)
}

// restart stops the manager and starts a new one on the same directory.
func (h *harness) restart() {
	h.t.Helper()
	h.stop()
	h.start()
}

func pinnedClient(t *testing.T, m *Manager) *http.Client {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(m.CACertificatePEM()) {
		t.Fatal("CA certificate does not parse")
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13}, ForceAttemptHTTP2: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// answer is an HTTP answer.
type answer struct {
	status int
	header http.Header
	body   []byte
	err    api.Error // decoded when the status is not 2xx
}

// req describes a request; body is sent as is when a string or []byte,
// as JSON otherwise.
type req struct {
	method, path, token string
	body                any
	header              map[string]string
}

func (h *harness) do(r req) answer {
	h.t.Helper()
	a, err := h.try(r)
	if err != nil {
		h.t.Fatalf("%s %s: %v", r.method, r.path, err)
	}
	return a
}

// try is do without failing the test (for use in goroutines).
func (h *harness) try(r req) (answer, error) {
	var body io.Reader
	switch b := r.body.(type) {
	case nil:
	case string:
		body = strings.NewReader(b)
	case []byte:
		body = bytes.NewReader(b)
	default:
		js, err := json.Marshal(b)
		if err != nil {
			return answer{}, err
		}
		body = bytes.NewReader(js)
	}
	hr, err := http.NewRequest(r.method, h.url+r.path, body)
	if err != nil {
		return answer{}, err
	}
	if r.token != "" {
		hr.Header.Set("Authorization", "Bearer "+r.token)
	}
	for k, v := range r.header {
		hr.Header.Set(k, v)
	}
	resp, err := h.hc.Do(hr)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, err
	}
	a := answer{status: resp.StatusCode, header: resp.Header, body: data}
	if resp.StatusCode >= 300 {
		if err := json.Unmarshal(data, &a.err); err != nil {
			return a, fmt.Errorf("error body %q is not an api.Error: %v", data, err)
		}
	}
	return a, nil
}

// ok does r as admin (unless r.token is set) and decodes a 2xx answer into
// out (when not nil).
func (h *harness) ok(r req, out any) answer {
	h.t.Helper()
	if r.token == "" {
		r.token = h.m.AdminToken()
		if h.admin != "" {
			r.token = h.admin
		}
	}
	a := h.do(r)
	if a.status < 200 || a.status > 299 {
		h.t.Fatalf("%s %s: %d %+v", r.method, r.path, a.status, a.err)
	}
	if out != nil {
		if err := json.Unmarshal(a.body, out); err != nil {
			h.t.Fatalf("%s %s: decoding %s: %v", r.method, r.path, a.body, err)
		}
	}
	return a
}

// putSpec stores doc as the spec and returns the answer.
func (h *harness) putSpec(doc string) api.SpecResponse {
	h.t.Helper()
	var out api.SpecResponse
	h.ok(req{method: "PUT", path: api.PathSpec, body: api.SpecRequest{YAML: doc}}, &out)
	return out
}

// token creates a join token for gateway and returns its secret.
func (h *harness) token(gateway string) (api.Token, string) {
	h.t.Helper()
	var tok api.Token
	h.ok(req{method: "POST", path: api.PathTokens, body: api.TokenRequest{Gateway: gateway}}, &tok)
	jt, err := api.ParseJoinToken(tok.Token)
	if err != nil {
		h.t.Fatal(err)
	}
	return tok, jt.Secret
}

// enroll enrolls gateway with a fresh token and key; it returns the
// credential and the key.
func (h *harness) enroll(gateway string) (string, plan.Key) {
	h.t.Helper()
	_, secret := h.token(gateway)
	key := randomKey(h.t)
	var out api.EnrollResponse
	h.ok(req{method: "POST", path: api.PathEnroll, token: secret, body: api.EnrollRequest{PublicKey: key}}, &out)
	if out.Gateway != gateway || out.Credential == "" {
		h.t.Fatalf("enrollment answer %+v", out)
	}
	return out.Credential, key
}

// plan reads a gateway's current plan as admin.
func (h *harness) plan(gateway string) api.PlanResponse {
	h.t.Helper()
	var out api.PlanResponse
	h.ok(req{method: "GET", path: gwPath(api.PathPlan, gateway)}, &out)
	return out
}

func gwPath(p, name string) string { return strings.Replace(p, "{name}", name, 1) }

func randomKey(t *testing.T) plan.Key {
	var k plan.Key
	if _, err := rand.Read(k[:]); err != nil {
		t.Fatal(err)
	}
	return k
}

// peerKey returns the key gateway's plan has for peer, and whether peer is
// in it.
func peerKey(p plan.Gateway, peer string) (plan.Key, bool) {
	for _, pe := range p.Peers {
		if pe.Gateway == peer {
			return pe.WireGuard.PublicKey, true
		}
	}
	return plan.Key{}, false
}

// threeSites is examples/three-sites.yaml: gateways aws-gw, azure-gw,
// onprem-gw.
func threeSites(t *testing.T) string { return example(t, "three-sites.yaml") }

// example returns the spec examples/name.
func example(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("../../examples/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// manySites is a spec of n edge sites (10.6.i.0/24, gateway gw-i) in one
// routed network; mtu is the underlay MTU.
func manySites(n, mtu int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: fednet/v1\nkind: Federation\nname: many\noverlay:\n  underlayMTU: %d\nsites:\n", mtu)
	var names []string
	for i := range n {
		name := fmt.Sprintf("edge-%02d", i)
		names = append(names, name)
		fmt.Fprintf(&b, "  - name: %s\n    provider: edge\n    prefixes: [10.6.%d.0/24]\n    gateways:\n      - name: gw-%02d\n        endpoint: 198.51.100.%d:51820\n", name, i, i, i+1)
	}
	fmt.Fprintf(&b, "networks:\n  - name: apps\n    id: 100\n    mode: routed\n    sites: [%s]\n", strings.Join(names, ", "))
	return b.String()
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func jsonUnmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }
