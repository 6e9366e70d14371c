// Package console is the manager's read-only web console: a page that
// shows the federation live (sites, gateways with their role, links
// coloured by state with their figures, relayed paths, networks, spec
// revisions with their diffs, recent events), served by the manager under
// Prefix with the API, over the same TLS.
//
// The page and its scripts are embedded (assets/, with a vendored
// cytoscape.js for the graph); nothing is built at run time. An operator
// logs in with the admin token, which the console exchanges for a session
// cookie (HttpOnly, Secure, SameSite=Strict, __Host- prefixed); the token
// never appears in a URL or in the page's storage. The cookie authorizes
// the console's own read-only endpoints and nothing else: the API takes
// bearer tokens only. Updates reach the page by server-sent events: a hub
// looks at the manager's state every Config.Poll while a page watches (and
// for Config.Linger after the last one leaves) and sends the view when it
// changed. docs/console.md describes the page and the login.
package console

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pmezard/go-difflib/difflib"
)

// Prefix is the path under which the manager serves the console.
const Prefix = "/ui/"

// Errors a Source returns.
var (
	// ErrWrongToken: the token given at login is not the admin token.
	ErrWrongToken = errors.New("wrong admin token")
	// ErrTooManyFailures: the address failed to authenticate too often;
	// it must slow down.
	ErrTooManyFailures = errors.New("too many failed authentications from this address")
	// ErrNoRevision: no spec revision of that number.
	ErrNoRevision = errors.New("no such revision")
)

// Source is what the console shows, and how it checks a login: the
// manager implements it. Its methods are called concurrently.
type Source interface {
	// Snapshot returns the federation as the manager sees it now.
	Snapshot(ctx context.Context) (Snapshot, error)
	// SpecYAML returns the spec of revision n and when it was stored, or
	// ErrNoRevision.
	SpecYAML(ctx context.Context, n int) (string, time.Time, error)
	// CheckAdmin returns nil when token is the admin token, else
	// ErrWrongToken (counting the failure against r's address) or
	// ErrTooManyFailures.
	CheckAdmin(r *http.Request, token string) error
}

// Config configures a Console.
type Config struct {
	// Source is the manager's side. Required.
	Source Source
	// SessionKey signs session cookies, at least 32 bytes. Managers that
	// share it accept each other's sessions; changing it ends every
	// session. Required.
	SessionKey []byte
	// Logf logs; log.Printf when nil.
	Logf func(format string, args ...any)
	// Now is the clock (session expiry, gateway silence); time.Now when nil.
	Now func() time.Time
	// Poll is how often the hub looks at the manager's state while a page
	// watches; DefaultPoll when zero.
	Poll time.Duration
	// Linger is how long the hub keeps looking after the last page left,
	// so that events in between are not lost to a reload; DefaultLinger
	// when zero.
	Linger time.Duration
	// MaxStreams bounds the pages watching at once; DefaultMaxStreams
	// when zero. More are answered 503.
	MaxStreams int
	// Done, when set, returns a channel closed when the server starts
	// shutting down, so that event streams end at once.
	Done func(r *http.Request) <-chan struct{}
}

// Defaults of Config.
const (
	DefaultPoll       = 500 * time.Millisecond
	DefaultLinger     = 5 * time.Minute
	DefaultMaxStreams = 32
)

// keepAlive is how often an idle event stream gets a comment line, so
// that proxies and the browser keep it open.
const keepAlive = 15 * time.Second

// writeTimeout bounds one write to an event stream: a page that stopped
// reading is dropped.
const writeTimeout = 10 * time.Second

//go:embed assets
var assets embed.FS

// Console serves the web console. Create it with New; its methods are
// safe for concurrent use. Close it when done.
type Console struct {
	cfg      Config
	sessions *sessions
	hub      *hub
	streams  chan struct{} // a slot per stream
	static   http.Handler
}

// New returns a console. It starts nothing until a page watches.
func New(cfg Config) (*Console, error) {
	if cfg.Source == nil {
		return nil, errors.New("console: Source is required")
	}
	if len(cfg.SessionKey) < 32 {
		return nil, errors.New("console: SessionKey must be at least 32 bytes")
	}
	if cfg.Logf == nil {
		cfg.Logf = log.Printf
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Poll <= 0 {
		cfg.Poll = DefaultPoll
	}
	if cfg.Linger <= 0 {
		cfg.Linger = DefaultLinger
	}
	if cfg.MaxStreams <= 0 {
		cfg.MaxStreams = DefaultMaxStreams
	}
	c := &Console{
		cfg:      cfg,
		sessions: &sessions{key: cfg.SessionKey, now: cfg.Now},
		streams:  make(chan struct{}, cfg.MaxStreams),
		static:   http.StripPrefix(Prefix, http.FileServerFS(assets)),
	}
	c.hub = newHub(cfg)
	return c, nil
}

// Close stops the hub; streams still open end. Safe to call more than once.
func (c *Console) Close() error {
	c.hub.close()
	return nil
}

// Handler serves the console's paths (all under Prefix).
func (c *Console) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+Prefix+"{$}", c.serveIndex)
	mux.HandleFunc("GET "+Prefix+"assets/", c.serveStatic)
	mux.HandleFunc("GET "+Prefix+"api/session", c.getSession)
	mux.HandleFunc("POST "+Prefix+"api/login", c.postLogin)
	mux.HandleFunc("POST "+Prefix+"api/logout", c.postLogout)
	mux.HandleFunc("GET "+Prefix+"api/events", c.getEvents)
	mux.HandleFunc("GET "+Prefix+"api/revisions/{n}/diff", c.getDiff)
	mux.HandleFunc(Prefix, func(w http.ResponseWriter, r *http.Request) {
		answer(w, http.StatusNotFound, "no such console page %s; the console is at %s", r.URL.Path, Prefix)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		// Scripts, styles and data from this origin only; no framing, no
		// referrer, no sniffing.
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		mux.ServeHTTP(w, r)
	})
}

// serveIndex serves the page, serveStatic its assets (no directory
// listings). They hold no data: anyone may load them; the data comes from
// the endpoints that need a session.
func (c *Console) serveIndex(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-cache")
	http.ServeFileFS(w, r, assets, "assets/index.html")
}

func (c *Console) serveStatic(w http.ResponseWriter, r *http.Request) {
	if strings.HasSuffix(r.URL.Path, "/") {
		answer(w, http.StatusNotFound, "no such console file %s", r.URL.Path)
		return
	}
	w.Header().Set("Cache-Control", "no-cache")
	c.static.ServeHTTP(w, r)
}

// answer writes a JSON message {"message": ...} with status.
func answer(w http.ResponseWriter, status int, format string, args ...any) {
	writeJSON(w, status, map[string]string{"message": fmt.Sprintf(format, args...)})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"message":"encoding the answer failed"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// sameOrigin refuses a request that a page of another origin sent: its
// Origin header, when present, must name this host.
func sameOrigin(w http.ResponseWriter, r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	if err == nil && u.Scheme == "https" && u.Host == r.Host {
		return true
	}
	answer(w, http.StatusForbidden, "requests from %s are not accepted; open the console at https://%s%s", o, r.Host, Prefix)
	return false
}

// loginRequest is the body of POST api/login.
type loginRequest struct {
	Token string `json:"token"`
}

// maxLoginBody bounds the login request.
const maxLoginBody = 4 << 10

func (c *Console) postLogin(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(w, r) {
		return
	}
	var req loginRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, maxLoginBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil || strings.TrimSpace(req.Token) == "" {
		answer(w, http.StatusBadRequest, `want {"token": "..."}: the admin token (the file admin.token in the manager's data directory)`)
		return
	}
	switch err := c.cfg.Source.CheckAdmin(r, strings.TrimSpace(req.Token)); {
	case errors.Is(err, ErrWrongToken):
		answer(w, http.StatusUnauthorized, "wrong token: give the admin token (the file admin.token in the manager's data directory)")
		return
	case errors.Is(err, ErrTooManyFailures):
		w.Header().Set("Retry-After", "1")
		answer(w, http.StatusTooManyRequests, "too many failed logins from your address; wait and try again")
		return
	case err != nil:
		c.cfg.Logf("console login: %v", err)
		answer(w, http.StatusInternalServerError, "login failed: %v", err)
		return
	}
	value, exp, err := c.sessions.issue()
	if err != nil {
		answer(w, http.StatusInternalServerError, "making a session: %v", err)
		return
	}
	http.SetCookie(w, cookie(value, exp))
	c.cfg.Logf("console: admin login from %s", r.RemoteAddr)
	writeJSON(w, http.StatusOK, map[string]any{"authenticated": true, "expires": exp})
}

func (c *Console) postLogout(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(w, r) {
		return
	}
	c.sessions.revoke(r)
	http.SetCookie(w, cookie("", time.Time{}))
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNoContent)
}

func (c *Console) getSession(w http.ResponseWriter, r *http.Request) {
	exp, err := c.sessions.check(r)
	if err != nil {
		writeJSON(w, http.StatusOK, map[string]any{"authenticated": false})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"authenticated": true, "expires": exp})
}

// session answers 401 and returns false for a request without a session.
func (c *Console) session(w http.ResponseWriter, r *http.Request) (time.Time, bool) {
	exp, err := c.sessions.check(r)
	if err != nil {
		answer(w, http.StatusUnauthorized, "log in first: %s", Prefix)
		return time.Time{}, false
	}
	return exp, true
}

// getEvents is the page's event stream: the view at once and whenever it
// changes ("view"), a comment every keepAlive, and "expired" when the
// session ends.
func (c *Console) getEvents(w http.ResponseWriter, r *http.Request) {
	exp, ok := c.session(w, r)
	if !ok {
		return
	}
	select {
	case c.streams <- struct{}{}:
		defer func() { <-c.streams }()
	default:
		answer(w, http.StatusServiceUnavailable, "%d console pages are open already, the most this manager serves; close one", c.cfg.MaxStreams)
		return
	}
	views, stop := c.hub.subscribe()
	defer stop()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	send := func(s string) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(writeTimeout))
		if _, err := io.WriteString(w, s); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !send("retry: 2000\n\n") {
		return
	}
	var done <-chan struct{}
	if c.cfg.Done != nil {
		done = c.cfg.Done(r)
	}
	expire := time.NewTimer(exp.Sub(c.cfg.Now()))
	defer expire.Stop()
	keep := time.NewTicker(keepAlive)
	defer keep.Stop()
	for {
		select {
		case p := <-views:
			if _, err := c.sessions.check(r); err != nil {
				send("event: expired\ndata: {}\n\n")
				return
			}
			if !send("event: view\ndata: " + string(p) + "\n\n") {
				return
			}
		case <-keep.C:
			if !send(": keep-alive\n\n") {
				return
			}
		case <-expire.C:
			send("event: expired\ndata: {}\n\n")
			return
		case <-done:
			return
		case <-c.hub.done:
			return
		case <-r.Context().Done():
			return
		}
	}
}

// Diff answers GET api/revisions/{n}/diff.
type Diff struct {
	Revision int       `json:"revision"`
	Created  time.Time `json:"created"`
	// Diff is the unified diff of the spec from revision n-1 (nothing, for
	// the first) to revision n.
	Diff string `json:"diff"`
}

func (c *Console) getDiff(w http.ResponseWriter, r *http.Request) {
	if _, ok := c.session(w, r); !ok {
		return
	}
	n, err := strconv.Atoi(r.PathValue("n"))
	if err != nil || n < 1 {
		answer(w, http.StatusBadRequest, "revision %q: want a revision number, 1 or more", r.PathValue("n"))
		return
	}
	ctx := r.Context()
	to, created, err := c.cfg.Source.SpecYAML(ctx, n)
	var from string
	if err == nil && n > 1 {
		from, _, err = c.cfg.Source.SpecYAML(ctx, n-1)
	}
	switch {
	case errors.Is(err, ErrNoRevision):
		answer(w, http.StatusNotFound, "there is no spec revision %d", n)
		return
	case err != nil:
		c.cfg.Logf("console: reading spec revision %d: %v", n, err)
		answer(w, http.StatusInternalServerError, "reading spec revision %d: %v", n, err)
		return
	}
	fromLabel := fmt.Sprintf("revision %d", n-1)
	if n == 1 {
		fromLabel = "no spec"
	}
	d, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: difflib.SplitLines(from), B: difflib.SplitLines(to),
		FromFile: fromLabel, ToFile: fmt.Sprintf("revision %d", n), Context: 3,
	})
	if err != nil {
		answer(w, http.StatusInternalServerError, "diffing revision %d: %v", n, err)
		return
	}
	writeJSON(w, http.StatusOK, Diff{Revision: n, Created: created, Diff: d})
}

// hub looks at the manager's state while pages watch and hands each of
// them the latest view. Safe for concurrent use.
type hub struct {
	cfg  Config
	done chan struct{} // closed by close
	ctx  context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup

	mu        sync.Mutex
	subs      map[chan []byte]struct{}
	running   bool
	idleSince time.Time
	stopped   time.Time // when the loop last stopped; zero: never ran
	view      *View     // the last view built, nil while not running
	key       []byte    // its JSON without Now and Events, to tell a change
	payload   []byte    // the last view sent, nil while not running
	sent      time.Time // when it was sent
	events    eventLog
	failing   bool // the last look failed (logged once)
}

func newHub(cfg Config) *hub {
	ctx, cancel := context.WithCancel(context.Background())
	return &hub{cfg: cfg, done: make(chan struct{}), ctx: ctx, stop: cancel, subs: map[chan []byte]struct{}{}}
}

// subscribe returns a channel that holds the latest view (JSON) whenever
// it changed, starting with the current one, and a function to stop.
func (h *hub) subscribe() (<-chan []byte, func()) {
	ch := make(chan []byte, 1)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.subs[ch] = struct{}{}
	if h.payload != nil {
		ch <- h.payload
	}
	if !h.running && h.ctx.Err() == nil {
		h.running = true
		h.wg.Go(h.run)
	}
	return ch, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		delete(h.subs, ch)
		if len(h.subs) == 0 {
			h.idleSince = time.Now()
		}
	}
}

// close stops the loop and ends the streams. Safe to call more than once.
func (h *hub) close() {
	h.mu.Lock()
	if h.ctx.Err() == nil {
		h.stop()
		close(h.done)
	}
	h.mu.Unlock()
	h.wg.Wait()
}

// run looks every Poll until nobody watched for Linger, or close.
func (h *hub) run() {
	t := time.NewTicker(h.cfg.Poll)
	defer t.Stop()
	for {
		h.look()
		select {
		case <-h.ctx.Done():
			return
		case <-t.C:
		}
		h.mu.Lock()
		if len(h.subs) == 0 && time.Since(h.idleSince) > h.cfg.Linger {
			h.running, h.view, h.key, h.payload = false, nil, nil, nil
			h.stopped = h.cfg.Now()
			h.mu.Unlock()
			return
		}
		h.mu.Unlock()
	}
}

// resend is how often an unchanged view is sent anyway, so that the page
// sees the manager's clock move (ages) and knows the stream lives.
const resend = 5 * time.Second

// look builds the view, notes the events since the last one, and sends
// it to every page when it changed (or resend passed).
func (h *hub) look() {
	ctx, cancel := context.WithTimeout(h.ctx, 10*time.Second)
	defer cancel()
	snap, err := h.cfg.Source.Snapshot(ctx)
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil {
		if !h.failing && h.ctx.Err() == nil {
			h.cfg.Logf("console: reading the manager's state: %v (logged once until it works again)", err)
		}
		h.failing = true
		return
	}
	h.failing = false
	v := Build(snap)
	if h.view == nil {
		for _, e := range history(v) {
			if h.stopped.IsZero() || e.Time.After(h.stopped) {
				h.events.add(e)
			}
		}
	} else {
		h.events.add(changes(*h.view, v)...)
	}
	prev := v
	h.view = &prev
	now := v.Now
	v.Now = time.Time{}
	key, err := json.Marshal(v)
	if err != nil {
		h.cfg.Logf("console: encoding the view: %v", err)
		return
	}
	if string(key) == string(h.key) && time.Since(h.sent) < resend && h.payload != nil {
		return
	}
	v.Now = now
	v.Events = h.events.newestFirst()
	p, err := json.Marshal(v)
	if err != nil {
		h.cfg.Logf("console: encoding the view: %v", err)
		return
	}
	h.key, h.payload, h.sent = key, p, time.Now()
	for ch := range h.subs {
		select {
		case <-ch: // a page that has not taken the last one gets this instead
		default:
		}
		ch <- p
	}
}
