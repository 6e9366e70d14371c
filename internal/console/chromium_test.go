package console

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// screenshots, when set, is a directory the page tests write their
// screenshots to (make screenshot: docs/img).
var screenshots = flag.String("console.screenshots", "", "write the console tests' screenshots (PNG) to this directory")

// chromium is a headless Chromium for one test: Debian's chromium, driven
// through the DevTools protocol by chromedp.
type chromium struct {
	t       *testing.T
	browser context.Context
}

// startChromium starts Chromium trusting the server key whose
// SubjectPublicKeyInfo hashes (SHA-256, base64) to spki: the manager's
// certificate comes from its own CA, which the browser does not know. Not
// as root and without chromium the test skips; as root it fails, naming
// make deps.
func startChromium(t *testing.T, spki string) *chromium {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Geteuid() != 0 {
			t.Skip("chromium is not installed (make deps installs it, as root)")
		}
		t.Fatal("chromium is not installed: run make deps (it installs Debian's chromium), then the test again")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // root has no user namespace sandbox here
		chromedp.DisableGPU,
		chromedp.WindowSize(1680, 1000),
		chromedp.Flag("ignore-certificate-errors-spki-list", spki),
		chromedp.Flag("lang", "en-US"),
	)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	browser, cancel := chromedp.NewContext(alloc, chromedp.WithLogf(t.Logf))
	t.Cleanup(cancel)
	if err := chromedp.Do(browser); err != nil { // starts the browser
		t.Fatalf("starting %s: %v", path, err)
	}
	return &chromium{t: t, browser: browser}
}

// spkiOf is the pin of a TLS server's leaf certificate for
// ignore-certificate-errors-spki-list.
func spkiOf(cs tls.ConnectionState) string {
	sum := sha256.Sum256(cs.PeerCertificates[0].RawSubjectPublicKeyInfo)
	return base64.StdEncoding.EncodeToString(sum[:])
}

// tab is one browser tab in a browser context of its own (its own
// cookies), with the console messages of its pages.
type tab struct {
	t   *testing.T
	ctx context.Context

	mu   sync.Mutex
	msgs []chromedp.ConsoleMessage
}

func (c *chromium) tab() *tab {
	ctx, cancel := chromedp.NewContext(c.browser, chromedp.WithNewBrowserContext())
	c.t.Cleanup(cancel)
	tb := &tab{t: c.t, ctx: ctx}
	// A 16:9 page, the size of the screenshots.
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1600, 900)); err != nil {
		c.t.Fatalf("opening a tab: %v", err)
	}
	msgs := chromedp.Console(ctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			tb.mu.Lock()
			tb.msgs = append(tb.msgs, m)
			tb.mu.Unlock()
		}
	}()
	return tb
}

// errors are the console's errors and uncaught exceptions so far; the
// other messages go to the test log.
func (tb *tab) errors() []string {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	var out []string
	for _, m := range tb.msgs {
		if m.Type == chromedp.ConsoleError || m.IsException() {
			out = append(out, fmt.Sprintf("%s (%s:%d)", m, m.URL, m.Line))
		}
	}
	return out
}

// login opens the console at url and signs in with token.
func (tb *tab) login(url, token string) {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, 30*time.Second)
	defer cancel()
	err := chromedp.Do(ctx,
		chromedp.Navigate(url),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), token),
		chromedp.Click(chromedp.ID("signin")),
	)
	if err != nil {
		tb.t.Fatalf("signing in at %s: %v", url, err)
	}
}

// pageState is what the page shows, read from its DOM and its graph.
type pageState struct {
	LoginVisible bool   `json:"loginVisible"`
	AppVisible   bool   `json:"appVisible"`
	LoginError   string `json:"loginError"`
	Text         string `json:"text"`
	Sites        []string
	Gateways     []struct{ Name, Role, Health string }
	Links        []struct{ ID, State, Color, Label string }
	Relays       []string
	Rows         []string // the links table: "ID STATE"
	Networks     []string // the networks list: "NAME: SITE, SITE"
	OnScreen     bool     // every node inside the graph's viewport
	Elements     int      // graph elements
}

const readPage = `(() => {
  const s = {loginVisible: !document.getElementById('login').hidden, appVisible: !document.getElementById('app').hidden,
    loginError: document.getElementById('login-error').textContent, text: document.body.innerText,
    Sites: [], Gateways: [], Links: [], Relays: [], Rows: [], Networks: [], OnScreen: false, Elements: 0};
  const cy = window.fednetConsole && window.fednetConsole.graph();
  if (cy) {
    s.Elements = cy.elements().length;
    s.Sites = cy.nodes('.site').map(n => n.data('name'));
    s.Gateways = cy.nodes('.gateway').map(n => ({Name: n.data('name'), Role: n.hasClass('active') ? 'active' : 'standby',
      Health: ['ok', 'behind', 'silent', 'pending', 'removed', 'error'].find(h => n.hasClass(h)) || ''}));
    s.Links = cy.edges('.link').map(e => ({ID: e.id().slice(5), State: e.data('state'), Color: e.style('line-color'), Label: e.data('label')}));
    s.Relays = cy.edges('.relay').map(e => e.id().slice(6) + ' ' + e.data('label'));
    const w = cy.width(), h = cy.height();
    s.OnScreen = cy.nodes().length > 0 && cy.nodes().every(n => {
      const b = n.renderedBoundingBox({includeLabels: true});
      return b.x1 >= 0 && b.y1 >= 0 && b.x2 <= w && b.y2 <= h;
    });
  }
  s.Rows = [...document.querySelectorAll('#links tr[data-link]')].map(tr => tr.dataset.link + ' ' + tr.className);
  s.Networks = [...document.querySelectorAll('#networks li[data-network]')].map(li =>
    li.dataset.network + ': ' + [...li.querySelectorAll('.chip')].map(c => c.textContent).join(', '));
  return s;
})()`

func (tb *tab) state() pageState {
	tb.t.Helper()
	s, err := chromedp.Run(tb.ctx, chromedp.Evaluate[pageState](readPage))
	if err != nil {
		tb.t.Fatalf("reading the page: %v", err)
	}
	return s
}

// until polls the page (every 100 ms, in the page) until the JavaScript
// predicate holds, and returns how long it took.
func (tb *tab) until(within time.Duration, what, predicate string) time.Duration {
	tb.t.Helper()
	start := time.Now()
	_, err := chromedp.Run(tb.ctx, chromedp.Poll[bool](predicate, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(within)))
	if err != nil {
		s := tb.state()
		tb.t.Fatalf("the page did not show %s within %v: %v\nlinks: %+v\nrows: %v", what, within, err, s.Links, s.Rows)
	}
	return time.Since(start)
}

// fetchStatus is the HTTP status of a GET of path from the page (with its
// cookies, if any).
func (tb *tab) fetchStatus(path string) int {
	tb.t.Helper()
	n, err := chromedp.Run(tb.ctx, chromedp.Evaluate[int](fmt.Sprintf("fetch(%q, {credentials: 'same-origin'}).then(r => r.status)", path), chromedp.EvalAwaitPromise))
	if err != nil {
		tb.t.Fatalf("fetching %s from the page: %v", path, err)
	}
	return n
}

// hover shows the hover card of a graph element and returns its text.
func (tb *tab) hover(id string) string {
	tb.t.Helper()
	js := fmt.Sprintf(`(() => { const e = fednetConsole.graph().getElementById(%q); e.emit('mouseover');
	  const t = document.getElementById('tooltip').innerText; e.emit('mouseout'); return t; })()`, id)
	s, err := chromedp.Run(tb.ctx, chromedp.Evaluate[string](js))
	if err != nil {
		tb.t.Fatalf("hovering %s: %v", id, err)
	}
	return s
}

// screenshot writes the page to name in the screenshots directory, if set.
func (tb *tab) screenshot(name string) {
	tb.t.Helper()
	if *screenshots == "" {
		return
	}
	png, err := chromedp.Run(tb.ctx, chromedp.CaptureScreenshot())
	if err != nil {
		tb.t.Fatalf("screenshot: %v", err)
	}
	path := filepath.Join(*screenshots, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		tb.t.Fatal(err)
	}
	tb.t.Logf("wrote %s", path)
}

// Colours the page gives link states (console.js).
const (
	red   = "rgb(248,81,73)"
	green = "rgb(63,185,80)"
	amber = "rgb(227,163,43)" // degraded
)

// checkWrongToken signs in with a wrong token and checks that the page
// shows nothing of the federation and that its data stays closed.
func checkWrongToken(t *testing.T, tb *tab, url string, names []string) {
	t.Helper()
	tb.login(url, "not-the-admin-token-at-all")
	tb.until(10*time.Second, "the login error", `!document.getElementById('login-error').hidden`)
	s := tb.state()
	if !s.LoginVisible || s.AppVisible || s.Elements != 0 || !strings.Contains(s.LoginError, "rong token") {
		t.Errorf("after a wrong token: login %v, app %v, %d graph elements, error %q", s.LoginVisible, s.AppVisible, s.Elements, s.LoginError)
	}
	for _, n := range names {
		if strings.Contains(s.Text, n) {
			t.Errorf("after a wrong token the page shows %q", n)
		}
	}
	for _, path := range []string{"api/events", "api/revisions/1/diff"} {
		if code := tb.fetchStatus(path); code != 401 {
			t.Errorf("GET %s from the page after a wrong token: %d, want 401", path, code)
		}
	}
}

// linksPredicate is a page predicate: the graph has exactly the links of
// ids, and state says the state each must have ("a|b": either).
func linksPredicate(ids []string, state func(id string) string) string {
	var conds []string
	for _, id := range ids {
		conds = append(conds, fmt.Sprintf("/^(%s)$/.test(cy.getElementById('link:%s').data('state'))", state(id), id))
	}
	return fmt.Sprintf(`(() => { const cy = window.fednetConsole && fednetConsole.graph(); if (!cy) return false;
	  return cy.edges('.link').length === %d && %s; })()`, len(ids), strings.Join(conds, " && "))
}

// TestPage drives the page in Chromium against a console whose source is
// a fake (TestConsoleOnLab does it against a manager on a lab): a wrong
// token sees nothing; the admin token sees every site, gateway, link and
// relay, hover cards with the link's figures, a link turning red when the
// source says it is down; and the page logs no console error.
func TestPage(t *testing.T) {
	s := newServer(t, nil)
	conn, err := tls.Dial("tcp", s.ts.Listener.Addr().String(), &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	pin := spkiOf(conn.ConnectionState())
	conn.Close()
	c := startChromium(t, pin)
	url := s.ts.URL + Prefix
	v := Build(s.src.snap)
	var names []string
	for _, site := range v.Sites {
		names = append(names, site.Name)
	}

	checkWrongToken(t, c.tab(), url, names)

	tb := c.tab()
	tb.login(url, rightToken)
	var ids []string
	want := map[string]string{}
	for _, l := range v.Links {
		ids = append(ids, l.ID)
		want[l.ID] = string(l.State)
	}
	tb.until(10*time.Second, "every link", linksPredicate(ids, func(id string) string { return want[id] }))
	st := tb.state()
	slices.Sort(st.Sites)
	if !slices.Equal(st.Sites, names) || len(st.Gateways) != 5 || len(st.Rows) != len(ids) {
		t.Errorf("page shows sites %v, %d gateways, %d table rows; want %v, 5, %d", st.Sites, len(st.Gateways), len(st.Rows), names, len(ids))
	}
	if !slices.Equal(st.Relays, []string{"aws-eu|gcp-us via azure-we"}) {
		t.Errorf("relays %v", st.Relays)
	}
	if !st.OnScreen {
		t.Error("some of the graph lies outside the page")
	}
	for _, l := range st.Links {
		if l.ID == "gcp-gw|office-gw1" && l.Color != red || l.ID == "aws-gw|azure-gw" && (l.Color != green || l.Label != "0.90 ms") {
			t.Errorf("link %s is %s, coloured %s, labelled %q", l.ID, l.State, l.Color, l.Label)
		}
	}
	card := tb.hover("link:aws-gw|azure-gw")
	for _, want := range []string{"aws-gw → azure-gw", "RTT p50 / p99", "0.90 ms / 2.00 ms", "loss (1 min)", "940 Mbit/s"} {
		if !strings.Contains(card, want) {
			t.Errorf("hover card of aws-gw|azure-gw lacks %q:\n%s", want, card)
		}
	}
	// The handshake was 20 s before the snapshot; the page's clock runs on
	// from the snapshot's, so a busy machine may show a few seconds more.
	if !regexp.MustCompile(`handshake\s+2[0-5] s ago`).MatchString(card) {
		t.Errorf("hover card of aws-gw|azure-gw does not say the handshake was 20 s ago:\n%s", card)
	}
	if card := tb.hover("gateway:office-gw2"); !strings.Contains(card, "standby (from the plan)") {
		t.Errorf("hover card of office-gw2:\n%s", card)
	}

	// The source says a link went down: the page turns it red.
	s.src.set(func(s *Snapshot) {
		s.Links[0].Up = false
		s.Now = s.Now.Add(time.Second)
	})
	took := tb.until(5*time.Second, "aws-gw|azure-gw red", `fednetConsole.graph().getElementById('link:aws-gw|azure-gw').style('line-color') === '`+red+`'`)
	t.Logf("aws-gw|azure-gw turned red %v after the source said it was down", took.Round(time.Millisecond))
	tb.until(5*time.Second, "the event", `document.getElementById('events').innerText.includes('link aws-gw – azure-gw down')`)

	if errs := tb.errors(); len(errs) > 0 {
		t.Errorf("console errors:\n%s", strings.Join(errs, "\n"))
	}
}
