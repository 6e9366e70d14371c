package client_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/client"
	"github.com/fednet/fednet/internal/client/clienttest"
	"github.com/fednet/fednet/internal/plan"
)

func ok(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, `[]`) }

func newClient(t *testing.T, url, fp string) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{URL: url, CAFingerprint: fp, Token: "admin-secret", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func TestPinning(t *testing.T) {
	ca, err := clienttest.NewCA("pinned")
	if err != nil {
		t.Fatal(err)
	}
	other, err := clienttest.NewCA("other")
	if err != nil {
		t.Fatal(err)
	}
	leaf := func(ca *clienttest.CA, opt clienttest.LeafOptions) tls.Certificate {
		if opt.Hosts == nil {
			opt.Hosts = []string{"127.0.0.1"}
		}
		c, err := ca.Leaf(opt)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// An impostor: a leaf of another CA, presented with the pinned CA's
	// (public) certificate appended.
	impostor := leaf(other, clienttest.LeafOptions{WithoutCA: true})
	impostor.Certificate = append(impostor.Certificate, ca.Cert.Raw)

	tests := []struct {
		name    string
		cert    tls.Certificate
		maxTLS  uint16
		pin     string
		wantErr string // "" for success
	}{
		{name: "good chain", cert: leaf(ca, clienttest.LeafOptions{})},
		{name: "pin with colons and capitals", cert: leaf(ca, clienttest.LeafOptions{}),
			pin: colons(strings.ToUpper(ca.Fingerprint()))},
		{name: "another CA", cert: leaf(other, clienttest.LeafOptions{}), wantErr: "no certificate in the chain has the pinned CA fingerprint"},
		{name: "CA not presented", cert: leaf(ca, clienttest.LeafOptions{WithoutCA: true}), wantErr: "pinned CA fingerprint"},
		{name: "impostor with the pinned CA in its chain", cert: impostor, wantErr: "certificate signed by unknown authority"},
		{name: "wrong host", cert: leaf(ca, clienttest.LeafOptions{Hosts: []string{"manager.example"}}), wantErr: "127.0.0.1"},
		{name: "expired", cert: leaf(ca, clienttest.LeafOptions{NotAfter: time.Now().Add(-time.Minute)}), wantErr: "expired"},
		{name: "TLS 1.2 only", cert: leaf(ca, clienttest.LeafOptions{}), maxTLS: tls.VersionTLS12, wantErr: "protocol version"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := clienttest.NewServerWith(t, http.HandlerFunc(ok), ca, &tls.Config{
				Certificates: []tls.Certificate{tt.cert},
				MaxVersion:   tt.maxTLS,
			})
			pin := tt.pin
			if pin == "" {
				pin = ca.Fingerprint()
			}
			_, err := newClient(t, srv.URL, pin).Sites(context.Background())
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("err %v, want success", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err %v, want one containing %q", err, tt.wantErr)
			}
			if tt.maxTLS == 0 && !errors.Is(err, client.ErrUntrusted) {
				t.Errorf("err %v does not wrap ErrUntrusted", err)
			}
			if !strings.Contains(err.Error(), srv.URL) {
				t.Errorf("err %v does not name the manager URL", err)
			}
		})
	}
}

func colons(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i += 2 {
		if i > 0 {
			b.WriteByte(':')
		}
		b.WriteString(s[i : i+2])
	}
	return b.String()
}

func TestNewRejectsBadConfig(t *testing.T) {
	fp := strings.Repeat("ab", 32)
	tests := []struct {
		cfg  client.Config
		want string
	}{
		{client.Config{URL: "", CAFingerprint: fp}, "--manager"},
		{client.Config{URL: "http://m:8443", CAFingerprint: fp}, "https://"},
		{client.Config{URL: "https://", CAFingerprint: fp}, "no host"},
		{client.Config{URL: "https://m:8443/?x=1", CAFingerprint: fp}, "no user, query"},
		{client.Config{URL: "https://m:8443", CAFingerprint: ""}, "--ca-fingerprint"},
		{client.Config{URL: "https://m:8443", CAFingerprint: "abcd"}, "64 hex digits"},
		{client.Config{URL: "https://m:8443", CAFingerprint: strings.Repeat("zz", 32)}, "64 hex digits"},
	}
	for _, tt := range tests {
		_, err := client.New(tt.cfg)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New(%+v): err %v, want one containing %q", tt.cfg, err, tt.want)
		}
	}
	if _, err := client.New(client.Config{URL: "https://[::1]:8443/", CAFingerprint: fp}); err != nil {
		t.Errorf("IPv6 URL: %v", err)
	}
}

func TestDialContext(t *testing.T) {
	srv := clienttest.NewServer(t, http.HandlerFunc(ok))
	var mu sync.Mutex
	var dialed []string
	c, err := client.New(client.Config{URL: "https://127.0.0.1:1", CAFingerprint: srv.Fingerprint(),
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			mu.Lock()
			dialed = append(dialed, addr)
			mu.Unlock()
			return (&net.Dialer{}).DialContext(ctx, network, srv.Listener.Addr().String())
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Sites(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(dialed) != 1 || dialed[0] != "127.0.0.1:1" {
		t.Errorf("dialed %v", dialed)
	}
}

func TestUnreachableNamesTheURL(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "https://" + ln.Addr().String()
	ln.Close()
	c := newClient(t, url, strings.Repeat("ab", 32))
	_, err = c.Overview(context.Background())
	if err == nil || !strings.Contains(err.Error(), "cannot reach the manager at "+url) {
		t.Fatalf("err %v, want one naming %s", err, url)
	}
	if client.StatusOf(err) != 0 || client.IsAuth(err) {
		t.Errorf("a connection error has status %d", client.StatusOf(err))
	}
}

func TestErrors(t *testing.T) {
	tests := []struct {
		name   string
		status int
		body   string
		want   string
	}{
		{"spec problems", 422,
			`{"code":"invalid_spec","message":"","problems":[{"line":12,"path":"sites[0].name","message":"must be a DNS label"},{"line":20,"path":"networks[0].id","message":"must be 1..16777215"}]}`,
			"manager: 422 invalid_spec: line 12: sites[0].name: must be a DNS label\n  line 20: networks[0].id: must be 1..16777215"},
		{"message holding the one problem", 422,
			`{"code":"invalid_spec","message":"the spec is not valid: line 3: name: required","problems":[{"line":3,"path":"name","message":"required"}]}`,
			"manager: 422 invalid_spec: the spec is not valid: line 3: name: required"},
		{"message holding the first of two problems", 422,
			`{"code":"invalid_spec","message":"the spec is not valid (2 problems): line 3: name: required; line 5: id: bad","problems":[{"line":3,"path":"name","message":"required"},{"line":5,"path":"id","message":"bad"}]}`,
			"manager: 422 invalid_spec: the spec is not valid (2 problems)\n  line 3: name: required\n  line 5: id: bad"},
		{"message and extra problem", 422,
			`{"code":"invalid_spec","message":"spec has 1 problem","problems":[{"line":3,"path":"name","message":"required"}]}`,
			"manager: 422 invalid_spec: spec has 1 problem\n  line 3: name: required"},
		{"conflict", 409, `{"code":"conflict","message":"join token tok1 was already used"}`,
			"manager: 409 conflict: join token tok1 was already used"},
		{"not JSON", 502, "bad gateway\n", "manager: 502 bad_gateway: bad gateway"},
		{"empty", 404, "", "manager: 404 not_found: Not Found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := clienttest.NewServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.body)
			}))
			_, err := newClient(t, srv.URL, srv.Fingerprint()).PutSpec(context.Background(), "x: 1", false)
			if err == nil || err.Error() != tt.want {
				t.Fatalf("err\n%v\nwant\n%s", err, tt.want)
			}
			if client.StatusOf(err) != tt.status {
				t.Errorf("StatusOf = %d, want %d", client.StatusOf(err), tt.status)
			}
			var ce *client.Error
			if !errors.As(err, &ce) || ce.API().Code != ce.Code {
				t.Errorf("err %T is not a *client.Error", err)
			}
		})
	}
}

// recorded is one request the fake manager saw.
type recorded struct {
	method, path, query, auth, contentType, ifMatch string
	body                                            map[string]any
}

// fakeManager answers every request with the canned body for its method
// and path and records what it got.
type fakeManager struct {
	mu      sync.Mutex
	got     []recorded
	answers map[string]string // "METHOD /path" -> JSON
	status  map[string]int
}

func (f *fakeManager) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	data, _ := io.ReadAll(r.Body)
	rec := recorded{method: r.Method, path: r.URL.EscapedPath(), query: r.URL.RawQuery,
		auth: r.Header.Get("Authorization"), contentType: r.Header.Get("Content-Type"), ifMatch: r.Header.Get("If-Match")}
	if len(data) > 0 {
		json.Unmarshal(data, &rec.body)
	}
	f.mu.Lock()
	f.got = append(f.got, rec)
	key := r.Method + " " + r.URL.EscapedPath()
	answer, status := f.answers[key], f.status[key]
	f.mu.Unlock()
	if status == 0 {
		status = http.StatusOK
		if answer == "" {
			status = http.StatusNoContent
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	io.WriteString(w, answer)
}

func (f *fakeManager) last() recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.got[len(f.got)-1]
}

func TestCalls(t *testing.T) {
	key := plan.Key{1, 2, 3}
	fake := &fakeManager{
		answers: map[string]string{
			"GET /v1/spec":                  `{"revision":3,"yaml":"name: x\n","changed":false}`,
			"PUT /v1/spec":                  `{"revision":4,"changed":true,"diff":"+peer","affected":["a-gw"]}`,
			"GET /v1/revisions":             `[{"revision":1,"sites":2},{"revision":2,"sites":3}]`,
			"POST /v1/tokens":               `{"id":"t1","gateway":"a-gw","token":"fednetjoin1.xyz"}`,
			"GET /v1/tokens":                `[{"id":"t1","gateway":"a-gw","used":true}]`,
			"POST /v1/enroll":               `{"gateway":"a-gw","credential":"cred","observedAddress":"192.0.2.1"}`,
			"GET /v1/gateways/a-gw/plan":    `{"generation":7,"revision":4,"plan":{"version":2,"gateway":"a-gw","tunnels":[{"backend":"wireguard","name":"fed0"}]},"rotateKey":1}`,
			"GET /v1/gateways":              `[{"name":"a-gw","site":"a","planGeneration":7}]`,
			"GET /v1/gateways/a%20b":        `{"name":"a b"}`,
			"GET /v1/sites":                 `[{"name":"a","provider":"aws","prefixes":["10.1.0.0/24"],"gateways":["a-gw"]}]`,
			"GET /v1/links":                 `[{"from":"a-gw","to":"b-gw","up":true,"rxBytes":5}]`,
			"GET /v1/networks":              `[{"name":"apps","id":100,"mode":"routed","sites":["a","b"]}]`,
			"GET /v1/status":                `{"revision":4,"generation":7,"gateways":[{"name":"a-gw"}],"links":[]}`,
			"GET /v1/gateways/b-gw/plan":    ``,
			"PUT /v1/gateways/a-gw/status":  ``,
			"PUT /v1/gateways/a-gw/key":     ``,
			"POST /v1/gateways/a-gw/rotate": `{"name":"a-gw"}`,
			"DELETE /v1/gateways/a-gw":      ``,
			"DELETE /v1/tokens/t1":          ``,
		},
	}
	srv := clienttest.NewServer(t, fake)
	c := newClient(t, srv.URL, srv.Fingerprint())
	ctx := context.Background()

	type want struct {
		method, path, query, auth string
		body                      map[string]any
	}
	admin := "Bearer admin-secret"
	tests := []struct {
		name  string
		call  func() (any, error)
		want  want
		check func(t *testing.T, v any)
	}{
		{"GetSpec", func() (any, error) { return c.GetSpec(ctx) },
			want{"GET", "/v1/spec", "", admin, nil},
			func(t *testing.T, v any) { is(t, v.(*api.SpecResponse).Revision, 3) }},
		{"PutSpec dry run", func() (any, error) { return c.PutSpec(ctx, "name: x\n", true) },
			want{"PUT", "/v1/spec", "dryRun=true", admin, map[string]any{"yaml": "name: x\n"}},
			func(t *testing.T, v any) { is(t, v.(*api.SpecResponse).Affected[0], "a-gw") }},
		{"PutSpec", func() (any, error) { return c.PutSpec(ctx, "name: x\n", false) },
			want{"PUT", "/v1/spec", "", admin, map[string]any{"yaml": "name: x\n"}},
			func(t *testing.T, v any) { is(t, v.(*api.SpecResponse).Revision, 4); is(t, fake.last().ifMatch, "") }},
		{"PutSpecIf", func() (any, error) { return c.PutSpecIf(ctx, "name: x\n", 3) },
			want{"PUT", "/v1/spec", "", admin, map[string]any{"yaml": "name: x\n"}},
			func(t *testing.T, v any) { is(t, v.(*api.SpecResponse).Revision, 4); is(t, fake.last().ifMatch, `"3"`) }},
		{"Revisions", func() (any, error) { return c.Revisions(ctx) },
			want{"GET", "/v1/revisions", "", admin, nil},
			func(t *testing.T, v any) { is(t, len(v.([]api.Revision)), 2) }},
		{"CreateToken", func() (any, error) { return c.CreateToken(ctx, "a-gw", 90*time.Minute) },
			want{"POST", "/v1/tokens", "", admin, map[string]any{"gateway": "a-gw", "ttl": "1h30m0s"}},
			func(t *testing.T, v any) { is(t, v.(*api.Token).Token, "fednetjoin1.xyz") }},
		{"CreateToken default TTL", func() (any, error) { return c.CreateToken(ctx, "a-gw", 0) },
			want{"POST", "/v1/tokens", "", admin, map[string]any{"gateway": "a-gw"}}, nil},
		{"Tokens", func() (any, error) { return c.Tokens(ctx) },
			want{"GET", "/v1/tokens", "", admin, nil},
			func(t *testing.T, v any) { is(t, v.([]api.Token)[0].Used, true) }},
		{"RevokeToken", func() (any, error) { return nil, c.RevokeToken(ctx, "t1") },
			want{"DELETE", "/v1/tokens/t1", "", admin, nil}, nil},
		{"Enroll", func() (any, error) {
			return c.Enroll(ctx, "join-secret", api.EnrollRequest{PublicKey: key, Endpoint: "192.0.2.1:51820"})
		},
			want{"POST", "/v1/enroll", "", "Bearer join-secret", map[string]any{"publicKey": key.String(), "endpoint": "192.0.2.1:51820"}},
			func(t *testing.T, v any) { is(t, v.(*api.EnrollResponse).Credential, "cred") }},
		{"WatchPlan changed", func() (any, error) {
			p, changed, err := c.WatchPlan(ctx, "a-gw", 6, 30*time.Second)
			is(t, changed, true)
			return p, err
		},
			want{"GET", "/v1/gateways/a-gw/plan", "after=6&timeout=30s", admin, nil},
			func(t *testing.T, v any) { is(t, v.(*api.PlanResponse).Generation, int64(7)) }},
		{"WatchPlan timeout", func() (any, error) {
			p, changed, err := c.WatchPlan(ctx, "b-gw", 7, 1500*time.Millisecond)
			is(t, changed, false)
			is(t, p == nil, true)
			return nil, err
		},
			want{"GET", "/v1/gateways/b-gw/plan", "after=7&timeout=1.5s", admin, nil}, nil},
		{"PutStatus", func() (any, error) {
			return nil, c.PutStatus(ctx, "a-gw", api.StatusReport{Generation: 7, Revision: 4, Links: []api.LinkStatus{{Peer: "b-gw", RxBytes: 9}}})
		},
			want{"PUT", "/v1/gateways/a-gw/status", "", admin, map[string]any{"generation": 7.0, "revision": 4.0,
				"links": []any{map[string]any{"peer": "b-gw", "established": false, "publicKey": "", "rxBytes": 9.0, "txBytes": 0.0, "lastHandshake": "0001-01-01T00:00:00Z"}}}}, nil},
		{"PutKey", func() (any, error) { return nil, c.PutKey(ctx, "a-gw", api.KeyRequest{PublicKey: key, Rotation: 2}) },
			want{"PUT", "/v1/gateways/a-gw/key", "", admin, map[string]any{"publicKey": key.String(), "rotation": 2.0}}, nil},
		{"Rotate", func() (any, error) { return nil, c.Rotate(ctx, "a-gw") },
			want{"POST", "/v1/gateways/a-gw/rotate", "", admin, nil}, nil},
		{"RemoveGateway", func() (any, error) { return nil, c.RemoveGateway(ctx, "a-gw") },
			want{"DELETE", "/v1/gateways/a-gw", "", admin, nil}, nil},
		{"Gateways", func() (any, error) { return c.Gateways(ctx) },
			want{"GET", "/v1/gateways", "", admin, nil},
			func(t *testing.T, v any) { is(t, v.([]api.Gateway)[0].PlanGeneration, int64(7)) }},
		{"Gateway escapes the name", func() (any, error) { return c.Gateway(ctx, "a b") },
			want{"GET", "/v1/gateways/a%20b", "", admin, nil},
			func(t *testing.T, v any) { is(t, v.(*api.Gateway).Name, "a b") }},
		{"Sites", func() (any, error) { return c.Sites(ctx) },
			want{"GET", "/v1/sites", "", admin, nil},
			func(t *testing.T, v any) { is(t, v.([]api.Site)[0].Prefixes[0].String(), "10.1.0.0/24") }},
		{"Links", func() (any, error) { return c.Links(ctx) },
			want{"GET", "/v1/links", "", admin, nil},
			func(t *testing.T, v any) { is(t, v.([]api.Link)[0].Up, true) }},
		{"Networks", func() (any, error) { return c.Networks(ctx) },
			want{"GET", "/v1/networks", "", admin, nil},
			func(t *testing.T, v any) { is(t, v.([]api.Network)[0].ID, 100) }},
		{"Overview", func() (any, error) { return c.Overview(ctx) },
			want{"GET", "/v1/status", "", admin, nil},
			func(t *testing.T, v any) { is(t, v.(*api.Overview).Generation, int64(7)) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := tt.call()
			if err != nil {
				t.Fatal(err)
			}
			got := fake.last()
			if got.method != tt.want.method || got.path != tt.want.path || got.query != tt.want.query || got.auth != tt.want.auth {
				t.Errorf("sent %s %s?%s (%s), want %s %s?%s (%s)", got.method, got.path, got.query, got.auth,
					tt.want.method, tt.want.path, tt.want.query, tt.want.auth)
			}
			if tt.want.body != nil && got.contentType != "application/json" {
				t.Errorf("Content-Type %q", got.contentType)
			}
			gb, _ := json.Marshal(got.body)
			wb, _ := json.Marshal(tt.want.body)
			if string(gb) != string(wb) {
				t.Errorf("body %s, want %s", gb, wb)
			}
			if tt.check != nil {
				tt.check(t, v)
			}
		})
	}
}

// TestPreconditionFailed: a 412 answer is an *Error carrying the current
// revision and the code.
func TestPreconditionFailed(t *testing.T) {
	srv := clienttest.NewServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusPreconditionFailed)
		io.WriteString(w, `{"code":"precondition_failed","message":"the spec changed since revision 3: revision 5 is current","field":"If-Match","revision":5}`)
	}))
	_, err := newClient(t, srv.URL, srv.Fingerprint()).PutSpecIf(context.Background(), "x: 1", 3)
	var e *client.Error
	if !errors.As(err, &e) || e.Status != 412 || e.Revision == nil || *e.Revision != 5 || client.CodeOf(err) != api.CodePreconditionFailed {
		t.Errorf("err %v, want a 412 *Error with revision 5", err)
	}
}

func is[T comparable](t *testing.T, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("got %v, want %v", got, want)
	}
}

// A plan of a newer format than this fednet knows is refused whole, with
// an error that says to upgrade; the agent then keeps its current state.
func TestWatchPlanRefusesNewerFormat(t *testing.T) {
	body := fmt.Sprintf(`{"generation":7,"revision":4,"plan":{"version":%d,"gateway":"a-gw","tunnels":[{"backend":"wireguard","name":"fed0"}],"future":{}}}`, plan.Version+1)
	srv := clienttest.NewServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, body)
	}))
	c := newClient(t, srv.URL, srv.Fingerprint())
	_, _, err := c.WatchPlan(context.Background(), "a-gw", 0, time.Second)
	if err == nil || !strings.Contains(err.Error(), "upgrade fednet") {
		t.Fatalf("WatchPlan of a newer plan format = %v, want an error saying to upgrade fednet", err)
	}
}

func TestWatchPlanIsCancellable(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	srv := clienttest.NewServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	c := newClient(t, srv.URL, srv.Fingerprint())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, _, err := c.WatchPlan(ctx, "a-gw", 0, time.Minute)
		done <- err
	}()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("WatchPlan did not return after cancel")
	}
}

// TestProtocol checks that the client speaks HTTP/1.1 to a manager that
// serves HTTP/2 as well, and HTTP/2 with Config.HTTP2.
func TestProtocol(t *testing.T) {
	real := clienttest.NewReal(t)
	for _, h2 := range []bool{false, true} {
		var mu sync.Mutex
		var protos []int
		real.OnRequest(http.MethodGet+" "+api.PathSites, func(r *http.Request) {
			mu.Lock()
			protos = append(protos, r.ProtoMajor)
			mu.Unlock()
		})
		c, err := client.New(client.Config{URL: real.URL(), CAFingerprint: real.CAFingerprint(), Token: real.AdminToken(), HTTP2: h2})
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if _, err := c.Sites(context.Background()); err != nil {
				t.Fatalf("HTTP2 %v: %v", h2, err)
			}
		}
		c.Close()
		want := 1
		if h2 {
			want = 2
		}
		mu.Lock()
		if len(protos) != 2 || protos[0] != want || protos[1] != want {
			t.Errorf("HTTP2 %v: the manager saw requests of HTTP/%v, want two of HTTP/%d", h2, protos, want)
		}
		mu.Unlock()
	}
}
