package clienttest

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/spec"
)

// Manager is a minimal in-memory manager that speaks the API of package
// api, for tests of clients and agents: specs and revisions, join tokens,
// enrollment, plan watch (long poll), status, key rotation, removal and the
// read models. It keeps no history beyond revisions and checks less than
// the real manager (internal/manager); use that one for integration tests.
// Down and Up stop and restart it on the same address, to simulate an
// outage. Safe for concurrent use.
type Manager struct {
	t     testing.TB
	ca    *CA
	cert  tls.Certificate
	addr  string
	admin string

	mu        sync.Mutex
	srv       *http.Server
	yaml      string
	fed       *spec.Federation
	revisions []api.Revision
	gen       int64
	gws       map[string]*fakeGateway
	tokens    []*fakeToken
	changed   chan struct{} // closed and replaced at every change
	// Requests counts requests by "METHOD path-pattern".
	requests map[string]int
	// fail, when set, answers matching requests with this status instead.
	fail map[string]int
}

type fakeGateway struct {
	key        plan.Key
	cred       string
	removed    bool
	observed   string
	endpoint   string
	plan       plan.Gateway
	hasPlan    bool
	planGen    int64
	rotate     int
	rotation   int
	report     api.StatusReport
	lastReport time.Time
}

type fakeToken struct {
	api.Token
	secret string
}

// NewManager starts a fake manager on 127.0.0.1 and stops it at the end of
// the test.
func NewManager(t testing.TB) *Manager {
	t.Helper()
	ca, err := NewCA("fednet fake manager CA")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.Leaf(LeafOptions{Hosts: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	m := &Manager{t: t, ca: ca, cert: cert, admin: "admin-" + random(8), gws: map[string]*fakeGateway{},
		changed: make(chan struct{}), requests: map[string]int{}, fail: map[string]int{}}
	if err := m.listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Down)
	return m
}

func (m *Manager) listen(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:   http.HandlerFunc(m.serve),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{m.cert}, MinVersion: tls.VersionTLS13},
		ErrorLog:  log.New(io.Discard, "", 0),
	}
	m.mu.Lock()
	m.srv, m.addr = srv, ln.Addr().String()
	m.mu.Unlock()
	go srv.ServeTLS(ln, "", "")
	return nil
}

// URL is the manager's base URL.
func (m *Manager) URL() string { return "https://" + m.addr }

// CAFingerprint is the fingerprint clients pin.
func (m *Manager) CAFingerprint() string { return m.ca.Fingerprint() }

// AdminToken is the admin bearer token.
func (m *Manager) AdminToken() string { return m.admin }

// Down stops serving and drops every connection; state is kept.
func (m *Manager) Down() {
	m.mu.Lock()
	srv := m.srv
	m.srv = nil
	m.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
}

// Up serves again on the same address after Down.
func (m *Manager) Up() {
	m.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := m.listen(m.addr)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			m.t.Fatalf("fake manager: listening again on %s: %v", m.addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Fail makes requests "METHOD /path" (the path as sent) get status code
// (0 removes the fault).
func (m *Manager) Fail(methodPath string, code int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if code == 0 {
		delete(m.fail, methodPath)
		return
	}
	m.fail[methodPath] = code
}

// Requests returns how many requests "METHOD /path" got.
func (m *Manager) Requests(methodPath string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.requests[methodPath]
}

// Report returns the last status report of gateway and when it came.
func (m *Manager) Report(gateway string) (api.StatusReport, time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if g := m.gws[gateway]; g != nil {
		return g.report, g.lastReport
	}
	return api.StatusReport{}, time.Time{}
}

// PublicKey returns the key gateway enrolled or rotated to.
func (m *Manager) PublicKey(gateway string) plan.Key {
	m.mu.Lock()
	defer m.mu.Unlock()
	if g := m.gws[gateway]; g != nil {
		return g.key
	}
	return plan.Key{}
}

// Generation returns the generation of gateway's current plan.
func (m *Manager) Generation(gateway string) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if g := m.gws[gateway]; g != nil {
		return g.planGen
	}
	return 0
}

type httpError struct {
	status int
	api.Error
}

func fail(status int, code, format string, args ...any) *httpError {
	return &httpError{status, api.Error{Code: code, Message: fmt.Sprintf(format, args...)}}
}

func (m *Manager) serve(w http.ResponseWriter, r *http.Request) {
	m.mu.Lock()
	m.requests[r.Method+" "+r.URL.Path]++
	code := m.fail[r.Method+" "+r.URL.Path]
	m.mu.Unlock()
	if code != 0 {
		writeJSON(w, code, api.Error{Code: "injected", Message: "injected fault"})
		return
	}
	v, status, herr := m.route(w, r)
	switch {
	case herr != nil:
		writeJSON(w, herr.status, herr.Error)
	case status == http.StatusNoContent:
		w.WriteHeader(status)
	default:
		writeJSON(w, status, v)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func bearer(r *http.Request) string {
	s, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return s
}

func decode(r *http.Request, v any) *httpError {
	dec := json.NewDecoder(io.LimitReader(r.Body, api.MaxRequestBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fail(400, api.CodeBadRequest, "request body: %v", err)
	}
	return nil
}

// route answers one request; it returns the value to encode and a status.
func (m *Manager) route(w http.ResponseWriter, r *http.Request) (any, int, *httpError) {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	if len(parts) < 2 || parts[0] != "v1" {
		return nil, 0, fail(404, api.CodeNotFound, "no such path %s", r.URL.Path)
	}
	if parts[1] == "enroll" && r.Method == http.MethodPost {
		return m.enroll(r)
	}
	if parts[1] == "gateways" && len(parts) == 4 && parts[3] != "rotate" {
		return m.gatewayCall(r, parts[2], parts[3])
	}
	if bearer(r) != m.admin {
		return nil, 0, fail(401, api.CodeUnauthenticated, "no or unknown token")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	key := r.Method + " " + strings.Join(parts[1:min(len(parts), 2)], "/")
	switch {
	case key == "GET spec":
		if m.fed == nil {
			return nil, 0, fail(404, api.CodeNotFound, "no spec yet: apply one with fednet apply -f spec.yaml")
		}
		return api.SpecResponse{Revision: len(m.revisions), YAML: m.yaml}, 200, nil
	case key == "PUT spec":
		var req api.SpecRequest
		if err := decode(r, &req); err != nil {
			return nil, 0, err
		}
		return m.putSpecLocked(req.YAML, r.URL.Query().Get("dryRun") == "true")
	case key == "GET revisions":
		return slices.Clone(m.revisions), 200, nil
	case key == "POST tokens":
		var req api.TokenRequest
		if err := decode(r, &req); err != nil {
			return nil, 0, err
		}
		return m.createTokenLocked(req)
	case key == "GET tokens":
		out := []api.Token{}
		for _, t := range m.tokens {
			tok := t.Token
			tok.Token = ""
			out = append(out, tok)
		}
		return out, 200, nil
	case key == "DELETE tokens" && len(parts) == 3:
		for _, t := range m.tokens {
			if t.ID == parts[2] {
				t.Revoked = true
				return nil, 204, nil
			}
		}
		return nil, 0, fail(404, api.CodeNotFound, "no join token %q", parts[2])
	case key == "GET gateways" && len(parts) == 2:
		return m.gatewaysLocked(), 200, nil
	case key == "GET gateways" && len(parts) == 3:
		for _, g := range m.gatewaysLocked() {
			if g.Name == parts[2] {
				return g, 200, nil
			}
		}
		return nil, 0, fail(404, api.CodeNotFound, "no gateway %q", parts[2])
	case key == "DELETE gateways" && len(parts) == 3:
		g := m.gws[parts[2]]
		if g == nil {
			return nil, 0, fail(404, api.CodeNotFound, "no enrolled gateway %q", parts[2])
		}
		g.removed = true
		m.recomputeLocked()
		return nil, 204, nil
	case key == "POST gateways" && len(parts) == 4:
		g := m.gws[parts[2]]
		if g == nil || g.removed {
			return nil, 0, fail(404, api.CodeNotFound, "no enrolled gateway %q", parts[2])
		}
		g.rotate = max(g.rotate, g.rotation) + 1
		m.gen++
		g.planGen = m.gen
		m.broadcastLocked()
		return nil, 204, nil
	case key == "GET sites":
		out := []api.Site{}
		for _, s := range m.fedSites() {
			out = append(out, s)
		}
		return out, 200, nil
	case key == "GET networks":
		out := []api.Network{}
		if m.fed != nil {
			for _, n := range m.fed.Networks {
				out = append(out, api.Network{Name: n.Name, ID: n.ID, Mode: string(n.Mode), Sites: n.Sites})
			}
		}
		return out, 200, nil
	case key == "GET links":
		return m.linksLocked(), 200, nil
	case key == "GET status":
		return api.Overview{Revision: len(m.revisions), Generation: m.gen, Gateways: m.gatewaysLocked(), Links: m.linksLocked()}, 200, nil
	}
	return nil, 0, fail(404, api.CodeNotFound, "no such call %s %s", r.Method, r.URL.Path)
}

func (m *Manager) fedSites() []api.Site {
	if m.fed == nil {
		return nil
	}
	var out []api.Site
	for _, s := range m.fed.Sites {
		site := api.Site{Name: s.Name, Provider: s.Provider, Region: s.Region, Prefixes: s.Prefixes, Gateways: []string{}}
		for _, g := range s.Gateways {
			site.Gateways = append(site.Gateways, g.Name)
		}
		out = append(out, site)
	}
	return out
}

func (m *Manager) putSpecLocked(doc string, dryRun bool) (any, int, *httpError) {
	f, err := spec.Parse([]byte(doc))
	if err != nil {
		e := &httpError{422, api.Error{Code: api.CodeInvalidSpec, Message: "the spec is not valid"}}
		var se *spec.Error
		if errors.As(err, &se) {
			for _, p := range se.Problems {
				e.Problems = append(e.Problems, api.Problem{Line: p.Line, Path: p.Path, Message: p.Message})
			}
		}
		return nil, 0, e
	}
	old := m.plansLocked(m.fed)
	next := m.plansLocked(f)
	resp := api.SpecResponse{Revision: len(m.revisions), YAML: doc, DryRun: dryRun, Affected: []string{}}
	var diff strings.Builder
	names := map[string]bool{}
	for n := range old {
		names[n] = true
	}
	for n := range next {
		names[n] = true
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	slices.Sort(sorted)
	for _, n := range sorted {
		a, b := old[n], next[n]
		if a == b {
			continue
		}
		resp.Affected = append(resp.Affected, n)
		fmt.Fprintf(&diff, "--- %s\n+++ %s\n", n, n)
		al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
		for _, l := range al {
			if l != "" && !slices.Contains(bl, l) {
				fmt.Fprintf(&diff, "-%s\n", l)
			}
		}
		for _, l := range bl {
			if l != "" && !slices.Contains(al, l) {
				fmt.Fprintf(&diff, "+%s\n", l)
			}
		}
	}
	resp.Diff = diff.String()
	resp.Changed = doc != m.yaml
	if dryRun || !resp.Changed {
		return resp, 200, nil
	}
	m.yaml, m.fed = doc, f
	rev := api.Revision{Revision: len(m.revisions) + 1, Created: time.Now().UTC(), Sites: len(f.Sites), Networks: len(f.Networks)}
	for _, s := range f.Sites {
		rev.Gateways += len(s.Gateways)
	}
	m.revisions = append(m.revisions, rev)
	resp.Revision = rev.Revision
	resp.Created = rev.Created
	m.recomputeLocked()
	return resp, 200, nil
}

// plansLocked renders the plans f would give, by gateway name.
func (m *Manager) plansLocked(f *spec.Federation) map[string]string {
	out := map[string]string{}
	if f == nil {
		return out
	}
	plans, err := plan.Compute(f, m.inputsLocked())
	if err != nil {
		return out
	}
	for _, p := range plans {
		out[p.Name] = p.String()
	}
	return out
}

func (m *Manager) inputsLocked() plan.Inputs {
	in := plan.Inputs{PublicKeys: map[string]plan.Key{}, Removed: map[string]bool{}}
	for name, g := range m.gws {
		if !g.key.IsZero() {
			in.PublicKeys[name] = g.key
		}
		if g.removed {
			in.Removed[name] = true
		}
	}
	return in
}

// recomputeLocked computes every plan and gives the changed ones a new
// generation.
func (m *Manager) recomputeLocked() {
	if m.fed == nil {
		return
	}
	plans, err := plan.Compute(m.fed, m.inputsLocked())
	if err != nil {
		m.t.Errorf("fake manager: computing plans: %v", err)
		return
	}
	m.gen++
	for _, p := range plans {
		g := m.gws[p.Name]
		if g == nil {
			g = &fakeGateway{}
			m.gws[p.Name] = g
		}
		if !g.hasPlan || !reflect.DeepEqual(g.plan, p) {
			g.plan, g.hasPlan, g.planGen = p, true, m.gen
		}
	}
	m.broadcastLocked()
}

func (m *Manager) broadcastLocked() {
	close(m.changed)
	m.changed = make(chan struct{})
}

func (m *Manager) createTokenLocked(req api.TokenRequest) (any, int, *httpError) {
	if _, _, ok := m.specGateway(req.Gateway); !ok {
		return nil, 0, &httpError{404, api.Error{Code: api.CodeNotFound, Field: "gateway",
			Message: fmt.Sprintf("gateway: no gateway %q in the current spec", req.Gateway)}}
	}
	ttl := time.Hour
	if req.TTL != "" {
		d, err := time.ParseDuration(req.TTL)
		if err != nil || d <= 0 || d > 168*time.Hour {
			return nil, 0, &httpError{400, api.Error{Code: api.CodeBadRequest, Field: "ttl", Message: fmt.Sprintf("ttl: %q is not a duration between 1s and 168h", req.TTL)}}
		}
		ttl = d
	}
	t := &fakeToken{Token: api.Token{ID: random(4), Gateway: req.Gateway, Expires: time.Now().Add(ttl).UTC()}, secret: random(16)}
	t.Token.Token = api.JoinToken{Manager: m.URL(), CAFingerprint: m.CAFingerprint(), ID: t.ID, Secret: t.secret}.String()
	m.tokens = append(m.tokens, t)
	return t.Token, 201, nil
}

func (m *Manager) specGateway(name string) (*spec.Gateway, *spec.Site, bool) {
	if m.fed == nil {
		return nil, nil, false
	}
	return m.fed.Gateway(name)
}

func (m *Manager) enroll(r *http.Request) (any, int, *httpError) {
	var req api.EnrollRequest
	if err := decode(r, &req); err != nil {
		return nil, 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	secret := bearer(r)
	var tok *fakeToken
	for _, t := range m.tokens {
		if t.secret == secret {
			tok = t
		}
	}
	switch {
	case tok == nil:
		return nil, 0, fail(401, api.CodeUnauthenticated, "unknown join token")
	case tok.Used:
		return nil, 0, fail(409, api.CodeConflict, "join token %s was already used; create a new one with fednet token create --gateway %s", tok.ID, tok.Gateway)
	case tok.Revoked || time.Now().After(tok.Expires):
		return nil, 0, fail(409, api.CodeConflict, "join token %s is revoked or expired", tok.ID)
	case req.PublicKey.IsZero():
		return nil, 0, &httpError{400, api.Error{Code: api.CodeBadRequest, Field: "publicKey", Message: "publicKey: required"}}
	}
	tok.Used = true
	g := m.gws[tok.Gateway]
	if g == nil {
		g = &fakeGateway{}
		m.gws[tok.Gateway] = g
	}
	g.key, g.cred, g.removed, g.endpoint = req.PublicKey, "cred-"+random(16), false, req.Endpoint
	g.observed, _, _ = net.SplitHostPort(r.RemoteAddr)
	m.recomputeLocked()
	g.rotation = g.rotate
	return api.EnrollResponse{Gateway: tok.Gateway, Credential: g.cred, ObservedAddress: g.observed, RotateKey: g.rotate}, 200, nil
}

// gatewayCall answers a gateway's own calls (plan, status, key) and the
// admin's GET/DELETE of one gateway.
func (m *Manager) gatewayCall(r *http.Request, name, what string) (any, int, *httpError) {
	m.mu.Lock()
	g := m.gws[name]
	var self bool
	for _, gg := range m.gws {
		if gg.cred != "" && gg.cred == bearer(r) {
			if gg != g {
				m.mu.Unlock()
				return nil, 0, fail(403, api.CodeForbidden, "this credential is not gateway %s's", name)
			}
			self = true
		}
	}
	switch {
	case !self:
		m.mu.Unlock()
		return nil, 0, fail(401, api.CodeUnauthenticated, "no or unknown credential")
	case g.removed:
		m.mu.Unlock()
		return nil, 0, fail(403, api.CodeForbidden, "gateway %s was removed", name)
	}
	switch {
	case what == "plan" && r.Method == http.MethodGet:
		after, _ := strconv.ParseInt(r.URL.Query().Get("after"), 10, 64)
		timeout := 30 * time.Second
		if s := r.URL.Query().Get("timeout"); s != "" {
			d, err := time.ParseDuration(s)
			if err != nil {
				m.mu.Unlock()
				return nil, 0, fail(400, api.CodeBadRequest, "timeout: %v", err)
			}
			timeout = d
		}
		deadline := time.NewTimer(timeout)
		defer deadline.Stop()
		for {
			if g.removed {
				m.mu.Unlock()
				return nil, 0, fail(403, api.CodeForbidden, "gateway %s was removed", name)
			}
			if g.hasPlan && g.planGen > after {
				resp := api.PlanResponse{Generation: g.planGen, Revision: len(m.revisions), Plan: g.plan, RotateKey: g.rotate}
				m.mu.Unlock()
				return resp, 200, nil
			}
			changed := m.changed
			m.mu.Unlock()
			select {
			case <-changed:
				m.mu.Lock()
			case <-deadline.C:
				return nil, 204, nil
			case <-r.Context().Done():
				return nil, 204, nil
			}
		}
	case what == "status" && r.Method == http.MethodPut:
		m.mu.Unlock()
		var rep api.StatusReport
		if err := decode(r, &rep); err != nil {
			return nil, 0, err
		}
		m.mu.Lock()
		g.report, g.lastReport = rep, time.Now()
		m.mu.Unlock()
		return nil, 204, nil
	case what == "key" && r.Method == http.MethodPut:
		m.mu.Unlock()
		var req api.KeyRequest
		if err := decode(r, &req); err != nil {
			return nil, 0, err
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		if req.Rotation != g.rotate {
			return nil, 0, fail(409, api.CodeConflict, "rotation %d is not the one asked for (%d)", req.Rotation, g.rotate)
		}
		g.key, g.rotation = req.PublicKey, req.Rotation
		m.recomputeLocked()
		return nil, 204, nil
	}
	m.mu.Unlock()
	return nil, 0, fail(404, api.CodeNotFound, "no such call %s %s", r.Method, r.URL.Path)
}

func (m *Manager) gatewaysLocked() []api.Gateway {
	out := []api.Gateway{}
	if m.fed == nil {
		return out
	}
	for _, s := range m.fed.Sites {
		for _, sg := range s.Gateways {
			gw := api.Gateway{Name: sg.Name, Site: s.Name, Endpoint: sg.Endpoint, TransitAddress: sg.TransitAddress}
			if g := m.gws[sg.Name]; g != nil {
				gw.Enrolled = g.cred != ""
				gw.Removed = g.removed
				gw.PublicKey = g.key
				gw.ObservedAddress = g.observed
				gw.PlanGeneration = g.planGen
				gw.AppliedGeneration = g.report.Generation
				gw.AppliedRevision = g.report.Revision
				gw.ApplyError = g.report.ApplyError
				gw.LastReport = g.lastReport
			}
			out = append(out, gw)
		}
	}
	return out
}

func (m *Manager) linksLocked() []api.Link {
	out := []api.Link{}
	names := make([]string, 0, len(m.gws))
	for n := range m.gws {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		g := m.gws[n]
		if g.removed {
			continue
		}
		for _, l := range g.report.Links {
			out = append(out, api.Link{From: n, To: l.Peer, Up: !l.LastHandshake.IsZero() && time.Since(l.LastHandshake) < 3*time.Minute,
				Endpoint: l.Endpoint, LastHandshake: l.LastHandshake, RxBytes: l.RxBytes, TxBytes: l.TxBytes})
		}
	}
	return out
}

func random(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
