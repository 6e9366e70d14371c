package console

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeSource is a Source for the HTTP tests (the manager's own is tested in
// internal/manager and, with the page, by the Chromium test).
type fakeSource struct {
	mu       sync.Mutex
	snap     Snapshot
	specs    map[int]string
	failures int
}

const rightToken = "the-admin-token-0123456789"

func (f *fakeSource) Snapshot(context.Context) (Snapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.snap, nil
}

// set edits a copy of the snapshot (the hub may still read the one it got)
// and makes it the current one.
func (f *fakeSource) set(edit func(*Snapshot)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.snap
	s.Links, s.Gateways, s.Revisions = slices.Clone(s.Links), slices.Clone(s.Gateways), slices.Clone(s.Revisions)
	edit(&s)
	f.snap = s
}

func (f *fakeSource) SpecYAML(_ context.Context, n int) (string, time.Time, error) {
	s, ok := f.specs[n]
	if !ok {
		return "", time.Time{}, ErrNoRevision
	}
	return s, now, nil
}

func (f *fakeSource) CheckAdmin(_ *http.Request, token string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if token == rightToken {
		return nil
	}
	if f.failures++; f.failures > 3 {
		return ErrTooManyFailures
	}
	return ErrWrongToken
}

// testClock is a settable clock.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

type server struct {
	t     *testing.T
	src   *fakeSource
	clock *testClock
	c     *Console
	ts    *httptest.Server
	hc    *http.Client // with a cookie jar
}

func newServer(t *testing.T, edit func(*Config)) *server {
	t.Helper()
	s := &server{t: t, src: &fakeSource{snap: fixture(t), specs: map[int]string{1: "name: a\nsites: []\n", 2: "name: a\nsites: [x]\n"}}, clock: &testClock{t: time.Now()}}
	cfg := Config{Source: s.src, SessionKey: []byte(strings.Repeat("k", 32)), Logf: t.Logf, Now: s.clock.Now, Poll: 100 * time.Millisecond}
	if edit != nil {
		edit(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.c = c
	s.ts = httptest.NewTLSServer(c.Handler())
	t.Cleanup(func() {
		c.Close()
		s.ts.Close()
	})
	s.hc = s.client()
	return s
}

// client is a new browser: TLS to the test server, its own cookie jar.
func (s *server) client() *http.Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		s.t.Fatal(err)
	}
	hc := s.ts.Client()
	return &http.Client{Transport: hc.Transport, Jar: jar, Timeout: 10 * time.Second}
}

func (s *server) do(hc *http.Client, method, path, body string, header map[string]string) (*http.Response, string) {
	s.t.Helper()
	req, err := http.NewRequest(method, s.ts.URL+path, strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := hc.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	return resp, string(b)
}

func (s *server) login(hc *http.Client, token string) *http.Response {
	s.t.Helper()
	js, _ := json.Marshal(loginRequest{Token: token})
	resp, _ := s.do(hc, "POST", Prefix+"api/login", string(js), map[string]string{"Content-Type": "application/json"})
	return resp
}

// TestLogin: the page loads for anyone but shows nothing without a
// session; a wrong token gets 401 and no cookie; the admin token gets a
// session cookie that is HttpOnly, Secure, SameSite=Strict and __Host-;
// a forged, expired or logged-out session is refused.
func TestLogin(t *testing.T) {
	s := newServer(t, nil)

	resp, body := s.do(s.hc, "GET", Prefix, "", nil)
	if resp.StatusCode != 200 || !strings.Contains(body, "fednet console") || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET %s: %d %s", Prefix, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("Content-Security-Policy %q", csp)
	}
	for _, asset := range []string{"assets/console.js", "assets/console.css", "assets/vendor/cytoscape/cytoscape.min.js", "assets/vendor/cytoscape/LICENSE"} {
		if resp, _ := s.do(s.hc, "GET", Prefix+asset, "", nil); resp.StatusCode != 200 {
			t.Errorf("GET %s: %d", asset, resp.StatusCode)
		}
	}

	// Without a session: no data anywhere.
	for _, path := range []string{"api/events", "api/revisions/2/diff"} {
		resp, body := s.do(s.hc, "GET", Prefix+path, "", nil)
		if resp.StatusCode != http.StatusUnauthorized || strings.Contains(body, "aws-eu") {
			t.Errorf("GET %s without a session: %d %s", path, resp.StatusCode, body)
		}
	}
	if _, body := s.do(s.hc, "GET", Prefix+"api/session", "", nil); !strings.Contains(body, `"authenticated":false`) {
		t.Errorf("session without a cookie: %s", body)
	}

	// A wrong token: 401, no cookie.
	resp = s.login(s.hc, "wrong-token")
	if resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 {
		t.Errorf("wrong token: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}
	// A login sent by a page of another origin is refused.
	js, _ := json.Marshal(loginRequest{Token: rightToken})
	if resp, _ := s.do(s.client(), "POST", Prefix+"api/login", string(js), map[string]string{"Origin": "https://evil.example"}); resp.StatusCode != http.StatusForbidden || len(resp.Cookies()) != 0 {
		t.Errorf("cross-origin login: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}

	// The admin token.
	resp = s.login(s.hc, rightToken)
	if resp.StatusCode != 200 || len(resp.Cookies()) != 1 {
		t.Fatalf("login: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}
	c := resp.Cookies()[0]
	if c.Name != CookieName || !strings.HasPrefix(c.Name, "__Host-") || !c.HttpOnly || !c.Secure || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || c.Domain != "" {
		t.Errorf("session cookie %+v: want __Host-, HttpOnly, Secure, SameSite=Strict, Path=/, no Domain", c)
	}
	if strings.Contains(c.Value, rightToken) {
		t.Error("the cookie carries the admin token")
	}
	if _, body := s.do(s.hc, "GET", Prefix+"api/session", "", nil); !strings.Contains(body, `"authenticated":true`) {
		t.Errorf("session after login: %s", body)
	}
	if resp, body := s.do(s.hc, "GET", Prefix+"api/revisions/2/diff", "", nil); resp.StatusCode != 200 || !strings.Contains(body, `+sites: [x]`) || !strings.Contains(body, `-sites: []`) {
		t.Errorf("diff of revision 2: %d %s", resp.StatusCode, body)
	}
	if resp, _ := s.do(s.hc, "GET", Prefix+"api/revisions/9/diff", "", nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("diff of a missing revision: %d", resp.StatusCode)
	}

	// A forged cookie (another key's signature, or edited) is refused.
	other := &sessions{key: []byte(strings.Repeat("x", 32)), now: s.clock.Now}
	forged, _, _ := other.issue()
	edited := c.Value[:len(c.Value)-2] + "AA"
	for name, v := range map[string]string{"forged": forged, "edited": edited, "empty": ""} {
		hc := s.client()
		req, _ := http.NewRequest("GET", s.ts.URL+Prefix+"api/events", nil)
		req.AddCookie(&http.Cookie{Name: CookieName, Value: v})
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s cookie: %d", name, resp.StatusCode)
		}
	}

	// Expiry.
	s.clock.Advance(SessionTTL + time.Second)
	if resp, _ := s.do(s.hc, "GET", Prefix+"api/revisions/2/diff", "", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("expired session: %d", resp.StatusCode)
	}

	// Logout revokes the session even if the browser kept the cookie.
	s.login(s.hc, rightToken)
	kept := s.hc.Jar.Cookies(mustURL(t, s.ts.URL))
	s.do(s.hc, "POST", Prefix+"api/logout", "", nil)
	hc := s.client()
	hc.Jar.SetCookies(mustURL(t, s.ts.URL), kept)
	if resp, _ := s.do(hc, "GET", Prefix+"api/revisions/2/diff", "", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("logged-out session: %d", resp.StatusCode)
	}

	// Repeated failures are slowed down (the Source counts them).
	var last int
	for range 3 {
		last = s.login(s.client(), "wrong-again").StatusCode
	}
	if last != http.StatusTooManyRequests {
		t.Errorf("after many failures: %d, want 429", last)
	}
}

// stream reads an event stream's "view" events.
type stream struct {
	resp  *http.Response
	views chan View
}

func (s *server) open(hc *http.Client) *stream {
	s.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s.t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "GET", s.ts.URL+Prefix+"api/events", nil)
	hc2 := &http.Client{Transport: hc.Transport, Jar: hc.Jar} // no timeout: a stream
	resp, err := hc2.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		s.t.Fatalf("events: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	st := &stream{resp: resp, views: make(chan View, 100)}
	go func() {
		defer resp.Body.Close()
		defer close(st.views)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		event := ""
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: ") && event == "view":
				var v View
				if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &v); err != nil {
					s.t.Errorf("view: %v", err)
					return
				}
				st.views <- v
			}
		}
	}()
	return st
}

// next waits for a view that ok accepts.
func (st *stream) next(t *testing.T, within time.Duration, what string, ok func(View) bool) View {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case v, open := <-st.views:
			if !open {
				t.Fatalf("the stream ended before %s", what)
			}
			if ok(v) {
				return v
			}
		case <-deadline:
			t.Fatalf("no view with %s within %v", what, within)
		}
	}
}

func stateOf(v View, id string) LinkState {
	for _, l := range v.Links {
		if l.ID == id {
			return l.State
		}
	}
	return ""
}

// TestEventStream: a page gets the view at once, then each change pushed
// by the hub, with an event naming it.
func TestEventStream(t *testing.T) {
	s := newServer(t, nil)
	s.login(s.hc, rightToken)
	st := s.open(s.hc)
	v := st.next(t, 5*time.Second, "the federation", func(v View) bool { return v.Federation == "acme-prod" })
	if stateOf(v, "aws-gw|azure-gw") != LinkUp || len(v.Events) == 0 {
		t.Fatalf("first view: link %q, %d events", stateOf(v, "aws-gw|azure-gw"), len(v.Events))
	}

	start := time.Now()
	s.src.set(func(s *Snapshot) {
		s.Links[0].Up = false
		s.Now = s.Now.Add(time.Second)
	})
	v = st.next(t, 5*time.Second, "the link down", func(v View) bool { return stateOf(v, "aws-gw|azure-gw") == LinkDown })
	t.Logf("the change reached the page %v after it was made (poll %v)", time.Since(start).Round(time.Millisecond), 100*time.Millisecond)
	if v.Events[0].Subject != "link:aws-gw|azure-gw" || v.Events[0].Severity != Failure {
		t.Errorf("newest event %+v, want the link going down", v.Events[0])
	}

	// A second page sees the same view at once.
	st2 := s.open(s.hc)
	st2.next(t, 5*time.Second, "the link down", func(v View) bool { return stateOf(v, "aws-gw|azure-gw") == LinkDown })

	// Close ends the streams.
	s.c.Close()
	for range st.views {
	}
}

// TestStreamLimit: pages beyond MaxStreams are answered 503.
func TestStreamLimit(t *testing.T) {
	s := newServer(t, func(c *Config) { c.MaxStreams = 1 })
	s.login(s.hc, rightToken)
	s.open(s.hc)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", s.ts.URL+Prefix+"api/events", nil)
	resp, err := s.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("second stream: %d, want 503", resp.StatusCode)
	}
}

// TestStreamEndsAtExpiry: the stream tells the page when its session
// expires, and ends.
func TestStreamEndsAtExpiry(t *testing.T) {
	s := newServer(t, nil)
	s.login(s.hc, rightToken)
	st := s.open(s.hc)
	st.next(t, 5*time.Second, "a view", func(View) bool { return true })
	s.clock.Advance(SessionTTL)
	s.src.set(func(s *Snapshot) { s.Revision++ }) // a change, so that a view is due
	deadline := time.After(10 * time.Second)
	for {
		select {
		case _, open := <-st.views:
			if !open {
				return
			}
		case <-deadline:
			t.Fatal("the stream of an expired session did not end")
		}
	}
}

func TestConfigRequired(t *testing.T) {
	if _, err := New(Config{SessionKey: make([]byte, 32)}); err == nil {
		t.Error("New without a Source succeeded")
	}
	if _, err := New(Config{Source: &fakeSource{}, SessionKey: make([]byte, 8)}); err == nil {
		t.Error("New with a short SessionKey succeeded")
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
