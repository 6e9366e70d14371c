package manager

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/cookiejar"
	"strings"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/console"
)

// browser is an HTTP client with a cookie jar, pinned to h's CA.
func (h *harness) browser() *http.Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		h.t.Fatal(err)
	}
	return &http.Client{Transport: h.hc.Transport, Jar: jar}
}

func consoleLogin(t *testing.T, h *harness, hc *http.Client, token string) *http.Response {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"token": token})
	resp, err := hc.Post(h.url+console.Prefix+"api/login", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// TestConsole: the manager serves the console with the API; the admin
// token logs in, the session cookie it gets authorizes the console only
// (never the API), and the console's event stream shows the manager's
// sites, gateways and links, and a link going down.
func TestConsole(t *testing.T) {
	h := newHarness(t)
	h.putSpec(threeSites(t))
	cred, _ := h.enroll("aws-gw")
	p := h.plan("aws-gw")
	report := func(up bool) {
		pr := &api.LinkProbe{Up: up, Window: time.Minute, Sent: 60, RTTP50: time.Millisecond, RTTP99: 2 * time.Millisecond}
		if !up {
			pr.RecentLoss, pr.Lost, pr.Loss = 1, 3, 0.05
		}
		h.ok(req{method: "PUT", path: gwPath(api.PathStatus, "aws-gw"), token: cred, body: api.StatusReport{
			Generation: p.Generation, Revision: p.Revision,
			Links: []api.LinkStatus{{Peer: "azure-gw", LastHandshake: h.clock.Now().Add(-5 * time.Second), Probe: pr}},
		}}, nil)
	}
	report(true)

	hc := h.browser()
	// A browser at the manager's root finds the console.
	noRedirect := &http.Client{Transport: h.hc.Transport, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	r, _ := http.NewRequest("GET", h.url+"/", nil)
	r.Header.Set("Accept", "text/html,application/xhtml+xml")
	resp, err := noRedirect.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != console.Prefix {
		t.Errorf("GET / from a browser: %d to %q, want 302 to %s", resp.StatusCode, resp.Header.Get("Location"), console.Prefix)
	}
	if a := h.do(req{method: "GET", path: "/"}); a.status != http.StatusNotFound {
		t.Errorf("GET / from an API client: %d, want the JSON 404", a.status)
	}

	if resp := consoleLogin(t, h, hc, "not-the-admin-token"); resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 {
		t.Fatalf("wrong token: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}
	if resp := consoleLogin(t, h, hc, h.m.AdminToken()); resp.StatusCode != http.StatusOK {
		t.Fatalf("login with the admin token: %d", resp.StatusCode)
	}
	// The session cookie is no credential for the API.
	resp, err = hc.Get(h.url + api.PathSpec)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET %s with the console's cookie only: %d, want 401", api.PathSpec, resp.StatusCode)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sr, _ := http.NewRequestWithContext(ctx, "GET", h.url+console.Prefix+"api/events", nil)
	resp, err = hc.Do(sr)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("events: %d", resp.StatusCode)
	}
	views := make(chan console.View, 10)
	go func() {
		defer close(views)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok && data != "{}" {
				var v console.View
				if json.Unmarshal([]byte(data), &v) == nil {
					views <- v
				}
			}
		}
	}()
	wait := func(what string, ok func(console.View) bool) console.View {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			select {
			case v, open := <-views:
				if !open {
					t.Fatalf("the stream ended before %s", what)
				}
				if ok(v) {
					return v
				}
			case <-deadline:
				t.Fatalf("no view with %s", what)
			}
		}
	}
	state := func(v console.View, id string) console.LinkState {
		for _, l := range v.Links {
			if l.ID == id {
				return l.State
			}
		}
		return ""
	}
	v := wait("the link up", func(v console.View) bool { return state(v, "aws-gw|azure-gw") == console.LinkUp })
	if len(v.Sites) != 3 || len(v.Gateways) != 3 || v.Revision != 1 || len(v.Revisions) != 1 || len(v.Networks) == 0 {
		t.Errorf("view: %d sites, %d gateways, revision %d, %d revisions, %d networks", len(v.Sites), len(v.Gateways), v.Revision, len(v.Revisions), len(v.Networks))
	}
	for _, g := range v.Gateways {
		if g.Role != console.RoleActive || g.Enrolled != (g.Name == "aws-gw") {
			t.Errorf("gateway %s: role %q, enrolled %v", g.Name, g.Role, g.Enrolled)
		}
	}
	start := time.Now()
	report(false)
	wait("the link down", func(v console.View) bool { return state(v, "aws-gw|azure-gw") == console.LinkDown })
	t.Logf("a status report with the link down reached the console's stream after %v", time.Since(start).Round(time.Millisecond))

	// The diff of a revision.
	resp2, err := hc.Get(h.url + console.Prefix + "api/revisions/1/diff")
	if err != nil {
		t.Fatal(err)
	}
	var d console.Diff
	json.NewDecoder(resp2.Body).Decode(&d)
	resp2.Body.Close()
	if resp2.StatusCode != 200 || !strings.Contains(d.Diff, "+++ revision 1") || !strings.Contains(d.Diff, "+  - name: aws-eu") {
		t.Errorf("diff of revision 1: %d %q", resp2.StatusCode, d.Diff)
	}
}

// TestConsoleLoginLimited: wrong console logins count against the address
// like failed API authentications: beyond the burst, 429.
func TestConsoleLoginLimited(t *testing.T) {
	h := newHarnessWith(t, Limits{AuthFailureBurst: 2, AuthFailuresPerSecond: 0.01})
	hc := h.browser()
	var codes []int
	for range 3 {
		codes = append(codes, consoleLogin(t, h, hc, "guess").StatusCode)
	}
	if codes[0] != 401 || codes[1] != 401 || codes[2] != http.StatusTooManyRequests {
		t.Errorf("three wrong logins: %v, want 401 401 429", codes)
	}
}
