// Package client is the typed client of the manager's HTTPS JSON API
// (internal/api), used by the operator CLI and by agents in managed mode.
//
// A Client trusts exactly one certificate authority: the one whose DER
// bytes hash (SHA-256) to Config.CAFingerprint, which a join token or
// "fednet login" pins. The system roots are never consulted.
//
// A federation may run several managers on one store; a Client given all
// their URLs (Config.URLs) sends each call to the manager that answered
// last and, when it cannot reach it (or it answers 502, 503 or 504), to
// the next, in order, once each. Callers that retry back off with jitter
// between such rounds (the agent does).
//
// A Client is safe for concurrent use. Besides its configuration and
// connection pools it holds which manager answered last and, for plan
// watches, each gateway's last plan, from which it takes deltas.
package client

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/plandelta"
	"github.com/fednet/fednet/internal/spec"
)

// ErrUndecodable is wrapped by the error of a call whose success answer
// this client cannot decode: a plan of a newer format than it reads, or
// fields it does not know. It tells such an answer from a manager out of
// reach (errors.Is).
var ErrUndecodable = errors.New("decoding the answer of the manager")

// DefaultTimeout bounds one request (for a plan watch: on top of the
// watch's own timeout) when Config.Timeout is zero.
const DefaultTimeout = 15 * time.Second

// maxResponseBytes bounds how much of a response body the client reads.
const maxResponseBytes = 64 << 20

// Config says which manager to talk to and how to authenticate.
type Config struct {
	// URL is the manager's base URL, https://host:port. Required unless
	// URLs is set.
	URL string
	// URLs are the base URLs of every manager of the federation (they
	// share one store), tried in order after the one that answered last.
	// URL, when set too, is tried first.
	URLs []string
	// Token is the bearer token of every call: the admin token for
	// operators, a gateway's credential for agents. Enroll uses the join
	// token's secret instead. May be empty for a client that only enrolls.
	Token string
	// CAFingerprint is the hex SHA-256 of the manager CA certificate's DER
	// bytes (colons and case are ignored). Required.
	CAFingerprint string
	// Timeout bounds each request; DefaultTimeout when zero.
	Timeout time.Duration
	// DialContext, when set, opens the TCP connections (e.g. from inside
	// another network namespace); a net.Dialer by default. The TLS
	// handshake and pinning run on top of it unchanged.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
	// NoDeltas makes plan watches ask for whole plans, never for deltas
	// (to measure what deltas save).
	NoDeltas bool
	// NoCompression makes requests without Accept-Encoding: gzip (to
	// measure what compression saves).
	NoCompression bool
	// NoLocal makes plan watches not announce api.PlanFeatureLocal, so
	// that the plans come without their Local, as to an agent that does
	// not plan failures itself (or predates Local).
	NoLocal bool
	// HTTP2 makes the client offer HTTP/2, as it did before it spoke
	// HTTP/1.1 alone (to measure what HTTP/1.1 saves; see New).
	HTTP2 bool
}

// Client calls the manager's API. Methods are safe for concurrent use and
// return a *Error for every answer of the manager that is not a success.
type Client struct {
	targets   []target
	preferred atomic.Int64 // index of the target that answered last
	token     string
	timeout   time.Duration
	noDeltas  bool
	noLocal   bool

	mu    sync.Mutex          // guards plans
	plans map[string]heldPlan // by gateway: the last plan a watch returned
}

// target is one manager: its URL and a connection pool pinned for its
// name.
type target struct {
	base *url.URL
	hc   *http.Client
}

// heldPlan is a plan the client returned, which the next watch may take
// a delta from, with its digest (made when a whole plan comes, then
// carried from delta to delta; nil for a plan not keyed).
type heldPlan struct {
	generation int64
	plan       plan.Gateway
	digest     *plandelta.Digest
}

// ErrUntrusted is wrapped by the error of every call whose TLS handshake
// failed because the manager's certificate is not signed by the pinned CA.
var ErrUntrusted = errors.New("manager certificate is not trusted")

// New checks cfg and returns a Client. It does not contact the manager.
func New(cfg Config) (*Client, error) {
	urls := cfg.URLs
	if cfg.URL != "" {
		urls = append([]string{cfg.URL}, urls...)
	}
	if len(urls) == 0 {
		_, err := ParseURL("")
		return nil, err
	}
	fp, err := ParseFingerprint(cfg.CAFingerprint)
	if err != nil {
		return nil, err
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	dial := cfg.DialContext
	if dial == nil {
		dial = (&net.Dialer{Timeout: timeout}).DialContext
	}
	dial = watchful(dial)
	c := &Client{token: cfg.Token, timeout: timeout, noDeltas: cfg.NoDeltas, noLocal: cfg.NoLocal, plans: map[string]heldPlan{}}
	seen := map[string]bool{}
	for _, raw := range urls {
		base, err := ParseURL(raw)
		if err != nil {
			return nil, err
		}
		if seen[base.String()] {
			continue
		}
		seen[base.String()] = true
		// HTTP/1.1: a request is answered in its connection's goroutine
		// with one write, where Go's HTTP/2 server hands each request to
		// a goroutine and each frame it writes to another, which cost
		// the managers CPU (measured in docs/manager.md, "The API").
		// An agent holds two connections, its long poll's and its
		// reports'; a manager that vanished without closing them is
		// found by TCP (watchful), as HTTP/2 pings found it.
		protocols := new(http.Protocols)
		protocols.SetHTTP1(true)
		tr := &http.Transport{
			Proxy:               nil, // the manager is reached directly
			DialContext:         dial,
			TLSClientConfig:     pinnedTLS(fp, base.Hostname()),
			TLSHandshakeTimeout: timeout,
			Protocols:           protocols,
			MaxIdleConnsPerHost: 4,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  cfg.NoCompression,
		}
		if cfg.HTTP2 {
			protocols.SetHTTP2(true)
			tr.HTTP2 = &http.HTTP2Config{SendPingTimeout: 20 * time.Second, PingTimeout: 10 * time.Second}
		}
		c.targets = append(c.targets, target{base: base, hc: &http.Client{Transport: tr}})
	}
	return c, nil
}

// URL returns the base URL of the manager that answered last (the first
// before any answer).
func (c *Client) URL() string { return c.targets[c.preferred.Load()].base.String() }

// URLs returns every manager's base URL, in the order given.
func (c *Client) URLs() []string {
	out := make([]string, len(c.targets))
	for i, t := range c.targets {
		out[i] = t.base.String()
	}
	return out
}

// Close releases idle connections. The Client stays usable.
func (c *Client) Close() {
	for _, t := range c.targets {
		t.hc.CloseIdleConnections()
	}
}

// ParseURL checks a manager URL: https, a host, nothing after the path.
func ParseURL(s string) (*url.URL, error) {
	if s == "" {
		return nil, errors.New("manager URL is empty: pass --manager https://HOST:PORT")
	}
	u, err := url.Parse(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("manager URL %q is not a URL: %w", s, err)
	}
	if u.Scheme != "https" {
		return nil, fmt.Errorf("manager URL %q must start with https:// (the manager serves HTTPS only)", s)
	}
	if u.Host == "" || u.Hostname() == "" {
		return nil, fmt.Errorf("manager URL %q has no host: use https://HOST:PORT", s)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("manager URL %q must be https://HOST:PORT with no user, query or fragment", s)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	return u, nil
}

// ParseFingerprint decodes a hex SHA-256 fingerprint, ignoring case, colons
// and spaces (so the output of openssl x509 -fingerprint -sha256 works).
func ParseFingerprint(s string) ([sha256.Size]byte, error) {
	var fp [sha256.Size]byte
	clean := strings.Map(func(r rune) rune {
		if r == ':' || r == ' ' {
			return -1
		}
		return r
	}, strings.TrimSpace(s))
	if clean == "" {
		return fp, errors.New("CA fingerprint is empty: pass --ca-fingerprint HEX (the manager prints it at start; join tokens carry it)")
	}
	b, err := hex.DecodeString(clean)
	if err != nil || len(b) != sha256.Size {
		return fp, fmt.Errorf("CA fingerprint %q is not a SHA-256 in hex (64 hex digits)", s)
	}
	copy(fp[:], b)
	return fp, nil
}

// Fingerprint returns the hex SHA-256 of a certificate's DER bytes, the
// form Config.CAFingerprint takes.
func Fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:])
}

// pinnedTLS returns a TLS 1.3 configuration that trusts only the CA whose
// DER hashes to fp, which must be in the chain the server presents, and
// checks the leaf's name against host (a DNS name or an IP address).
func pinnedTLS(fp [sha256.Size]byte, host string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		ServerName: host,
		// The standard verification would use the system roots; the
		// callback below does the full verification against the pinned CA.
		InsecureSkipVerify: true,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			return verifyPinned(raw, fp, host)
		},
	}
}

// verifyPinned verifies the chain raw (leaf first) against the one CA in it
// whose fingerprint is fp.
func verifyPinned(raw [][]byte, fp [sha256.Size]byte, host string) error {
	if len(raw) == 0 {
		return fmt.Errorf("%w: no certificate presented", ErrUntrusted)
	}
	certs := make([]*x509.Certificate, len(raw))
	var ca *x509.Certificate
	var seen []string
	for i, der := range raw {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return fmt.Errorf("%w: certificate %d: %w", ErrUntrusted, i, err)
		}
		certs[i] = c
		if sha256.Sum256(der) == fp {
			ca = c
		}
		seen = append(seen, Fingerprint(der))
	}
	if ca == nil {
		return fmt.Errorf("%w: no certificate in the chain has the pinned CA fingerprint %x (chain: %s); check --ca-fingerprint or the join token",
			ErrUntrusted, fp[:], strings.Join(seen, ", "))
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		if c != ca {
			inter.AddCert(c)
		}
	}
	_, err := certs[0].Verify(x509.VerifyOptions{
		DNSName:       host,
		Roots:         roots,
		Intermediates: inter,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUntrusted, err)
	}
	return nil
}

// Error is a manager's answer that is not a success: the HTTP status and
// the api.Error body (or what could be made of a body that is not one),
// whose fields (Code, Message, Field, Problems) it promotes.
type Error struct {
	Status int
	apiError
}

// apiError lets Error embed api.Error, whose field name would clash with
// the Error method.
type apiError = api.Error

// API returns the body the manager sent.
func (e *Error) API() api.Error { return e.apiError }

// Error returns "manager: STATUS CODE: MESSAGE". A rejected spec's
// problems follow one a line, unless there is only one and the message
// holds it already (then it is all on one line).
func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "manager: %d %s: ", e.Status, e.Code)
	msg := e.Message
	problems := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		problems[i] = problemString(p)
	}
	switch {
	case len(problems) == 0:
	case msg == "":
		msg, problems = problems[0], problems[1:]
	case len(problems) == 1 && strings.Contains(msg, problems[0]):
		problems = nil
	default:
		// A message that lists the problems itself is cut where they
		// start, so each is printed once, on its own line.
		if i := strings.Index(msg, problems[0]); i > 0 {
			msg = strings.TrimRight(msg[:i], ":\n ")
		}
		problems = slices.DeleteFunc(problems, func(p string) bool { return strings.Contains(msg, p) })
	}
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	b.WriteString(msg)
	for _, p := range problems {
		b.WriteString("\n  ")
		b.WriteString(p)
	}
	return b.String()
}

// problemString formats p as the spec parser does: "line 12: path: message".
func problemString(p api.Problem) string {
	return spec.Problem{Line: p.Line, Path: p.Path, Message: p.Message}.String()
}

// StatusOf returns the HTTP status of a *Error in err's chain, or 0 when
// err is not an answer of the manager (nil, a network error, ...).
func StatusOf(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Status
	}
	return 0
}

// IsAuth reports whether err is the manager refusing the caller's token
// (401) or what it asked (403).
func IsAuth(err error) bool {
	s := StatusOf(err)
	return s == http.StatusUnauthorized || s == http.StatusForbidden
}

// CodeOf returns the api.Error code of a *Error in err's chain, or "" when
// err is not an answer of the manager.
func CodeOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// request is one API call.
type request struct {
	method string
	path   string // with {name} / {id} already filled
	query  url.Values
	body   any    // JSON-encoded when not nil
	token  string // overrides the client's token when not empty
	header http.Header
	// timeout, when not zero, replaces the client's timeout.
	timeout time.Duration
}

// do performs r and decodes a success answer into out (unless out is nil
// or the answer has no body). It returns the HTTP status of a success (or
// of the error answer). It sends r to the manager that answered last, and
// when that one cannot be reached or answers 502, 503 or 504, to the
// others in order, once each.
func (c *Client) do(ctx context.Context, r request, out any) (int, error) {
	n := len(c.targets)
	first := int(c.preferred.Load())
	var status int
	var err error
	for k := range n {
		i := (first + k) % n
		status, err = c.doAt(ctx, c.targets[i], r, out)
		if !failOver(status, err) || ctx.Err() != nil {
			if err == nil || status != 0 {
				c.preferred.Store(int64(i))
			}
			return status, err
		}
	}
	return status, err
}

// failOver reports whether a call that ended so should be tried on
// another manager: no answer at all, or an answer from something in front
// of a manager that is down.
func failOver(status int, err error) bool {
	if err == nil {
		return false
	}
	switch status {
	case 0, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// doAt performs r on one manager.
func (c *Client) doAt(ctx context.Context, t target, r request, out any) (int, error) {
	timeout := r.timeout
	if timeout <= 0 {
		timeout = c.timeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	u := t.base.String() + r.path // r.path is escaped already
	if len(r.query) > 0 {
		u += "?" + r.query.Encode()
	}
	var body io.Reader
	if r.body != nil {
		data, err := json.Marshal(r.body)
		if err != nil {
			return 0, fmt.Errorf("encoding %s %s: %w", r.method, r.path, err)
		}
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u, body)
	if err != nil {
		return 0, fmt.Errorf("%s %s: %w", r.method, r.path, err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "fednet")
	if r.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range r.header {
		req.Header[k] = v
	}
	token := r.token
	if token == "" {
		token = c.token
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := t.hc.Do(req)
	if err != nil {
		return 0, connError(t.base, err)
	}
	defer resp.Body.Close()
	// Read into a pooled buffer: decoding copies what it keeps (strings,
	// RawMessage), and a plan watch's answers are read at every change.
	buf := bodyBuffers.Get().(*bytes.Buffer)
	defer bodyBuffers.Put(buf)
	buf.Reset()
	_, err = buf.ReadFrom(io.LimitReader(resp.Body, maxResponseBytes))
	data := buf.Bytes()
	if err != nil {
		return 0, fmt.Errorf("reading the answer of the manager at %s to %s %s: %w", t.base, r.method, r.path, connError(t.base, err))
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, decodeError(resp.StatusCode, data)
	}
	if out != nil && resp.StatusCode != http.StatusNoContent && len(bytes.TrimSpace(data)) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%w at %s to %s %s: %w", ErrUndecodable, t.base, r.method, r.path, err)
		}
	}
	return resp.StatusCode, nil
}

// bodyBuffers hold the answers being read (a thousand agents' answers to a
// change of every plan would each grow a fresh one to its size).
var bodyBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// connError names the manager's URL in an error that happened before any
// answer.
func connError(base *url.URL, err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // the URL is said below, once
	}
	if errors.Is(err, ErrUntrusted) {
		return fmt.Errorf("manager at %s: %w", base, err)
	}
	return fmt.Errorf("cannot reach the manager at %s: %w", base, err)
}

// decodeError makes a *Error of a non-success answer.
func decodeError(status int, data []byte) error {
	e := &Error{Status: status}
	if err := json.Unmarshal(data, &e.apiError); err != nil || (e.Code == "" && e.Message == "") {
		e.apiError = api.Error{Message: strings.TrimSpace(string(data))}
		if len(e.Message) > 200 {
			e.Message = e.Message[:200] + "..."
		}
	}
	if e.Code == "" {
		e.Code = codeFor(status)
	}
	return e
}

// codeFor is the api code that goes with an HTTP status; for a status the
// API does not use (an answer from a proxy), the status text.
func codeFor(status int) string {
	if c := api.CodeFor(status); c != "" {
		return c
	}
	return strings.ReplaceAll(strings.ToLower(http.StatusText(status)), " ", "_")
}

// gatewayPath fills {name} of p (a gateway or host name).
func gatewayPath(p, name string) string {
	return strings.Replace(p, "{name}", url.PathEscape(name), 1)
}

// formatDuration renders d for a query parameter ("30s", "1.5s").
func formatDuration(d time.Duration) string {
	if d%time.Second == 0 {
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	}
	return d.String()
}
