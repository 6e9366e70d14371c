package manager

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/manager/store"
)

// TestWatchesPerCredential: one credential holds at most
// Limits.WatchesPerCredential long polls (plan and measurement watches
// alike); one more is 429 naming the flag, and a slot frees when a watch
// ends. Another credential is not affected.
func TestWatchesPerCredential(t *testing.T) {
	h := newHarnessWith(t, Limits{WatchesPerCredential: 2, AuthFailureBurst: 1000})
	h.putSpec(threeSites(t))
	cred, _ := h.enroll("aws-gw")
	other, _ := h.enroll("azure-gw")
	p := h.plan("aws-gw")
	watch := func(timeout string) chan answer {
		c := make(chan answer, 1)
		go func() {
			a, _ := h.try(req{method: "GET", path: gwPath(api.PathPlan, "aws-gw") + "?after=" + itoa(p.Generation) + "&timeout=" + timeout, token: cred})
			c <- a
		}()
		return c
	}
	first := watch("60s")
	waitParked(t, h.m, 1)
	measurements := make(chan answer, 1)
	go func() {
		a, _ := h.try(req{method: "GET", path: gwPath(api.PathMeasurements, "aws-gw") + "?timeout=60s", token: cred})
		measurements <- a
	}()
	eventually(t, 5*time.Second, "the measurement watch holding a slot", func() bool {
		h.m.slots.mu.Lock()
		defer h.m.slots.mu.Unlock()
		return h.m.slots.held[store.HashSecret(cred)] == 2
	})
	a := h.do(req{method: "GET", path: gwPath(api.PathPlan, "aws-gw") + "?after=" + itoa(p.Generation) + "&timeout=60s", token: cred})
	if a.status != 429 || a.err.Code != api.CodeTooManyRequests || !strings.Contains(a.err.Message, "--max-watches-per-credential") {
		t.Errorf("a third watch: %d %+v", a.status, a.err)
	}
	// A plan that is ready is answered: only waiting takes a slot.
	h.ok(req{method: "GET", path: gwPath(api.PathPlan, "aws-gw"), token: cred}, nil)
	// Another gateway's credential has slots of its own.
	if a := h.do(req{method: "GET", path: gwPath(api.PathPlan, "azure-gw") + "?after=" + itoa(h.plan("azure-gw").Generation) + "&timeout=10ms", token: other}); a.status != 204 {
		t.Errorf("another credential's watch: %d %+v", a.status, a.err)
	}
	// A change ends the plan watch and frees its slot.
	h.ok(req{method: "POST", path: gwPath(api.PathRotate, "aws-gw")}, nil)
	if a := <-first; a.status != 200 {
		t.Fatalf("the first watch: %d", a.status)
	}
	p = h.plan("aws-gw")
	third := watch("50ms")
	if a := <-third; a.status != 204 {
		t.Errorf("a watch after one ended: %d %+v, want 204 at its timeout", a.status, a.err)
	}
	h.stop()
	<-measurements
}

// TestFailedAuthLimit: an address that keeps failing authentication gets
// 429 (with Retry-After) once past its burst; a valid credential from the
// same address still works; the failures are logged as one summary line
// per interval, not a line each.
func TestFailedAuthLimit(t *testing.T) {
	h := newHarnessWith(t, Limits{AuthFailuresPerSecond: 0.001, AuthFailureBurst: 3, AuthLogInterval: 200 * time.Millisecond})
	var statuses []int
	for i := range 8 {
		a := h.do(req{method: "GET", path: api.PathGateways, token: fmt.Sprintf("guess-%d", i)})
		statuses = append(statuses, a.status)
		if a.status == 429 && (a.err.Code != api.CodeTooManyRequests || a.header.Get("Retry-After") == "" || !strings.Contains(a.err.Message, "127.0.0.1")) {
			t.Errorf("429: %+v, Retry-After %q", a.err, a.header.Get("Retry-After"))
		}
	}
	if fmt.Sprint(statuses) != "[401 401 401 429 429 429 429 429]" {
		t.Errorf("statuses %v, want 3 × 401, then 429", statuses)
	}
	h.ok(req{method: "GET", path: api.PathGateways}, nil)
	eventually(t, 10*time.Second, "a summary log line", func() bool { return len(h.log.matching("refused 8 requests")) > 0 })
	lines := h.log.matching("refused")
	if len(lines) != 1 || !strings.Contains(lines[0], "from 1 addresses (most: 127.0.0.1 (8)); 5 of them rate-limited (429)") {
		t.Errorf("log lines about the failures: %q", lines)
	}
	if n := len(h.log.matching("guess")) + len(h.log.matching(": 401 ")); n > 0 {
		t.Errorf("%d log lines for single failed authentications", n)
	}
}

// matching returns the log lines containing s.
func (l *testLog) matching(s string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
}

// dialTLS opens a TLS connection to h's manager with the given ALPN
// protocol, trusting its CA.
func (h *harness) dialTLS(proto string, timeout time.Duration) (*tls.Conn, error) {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(h.m.CACertificatePEM())
	d := &net.Dialer{Timeout: timeout}
	conn, err := d.Dial("tcp", strings.TrimPrefix(h.url, "https://"))
	if err != nil {
		return nil, err
	}
	tc := tls.Client(conn, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", NextProtos: []string{proto}, MinVersion: tls.VersionTLS13})
	tc.SetDeadline(time.Now().Add(timeout))
	if err := tc.Handshake(); err != nil {
		conn.Close()
		return nil, err
	}
	tc.SetDeadline(time.Time{})
	return tc, nil
}

// closedWithin reports whether the server closes conn within d (reading
// and dropping whatever it sends, such as HTTP/2 SETTINGS and GOAWAY).
func closedWithin(conn net.Conn, d time.Duration) bool {
	conn.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, conn)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// TestIdleConnections: a connection with no request in flight is closed
// after Limits.IdleTimeout, over HTTP/2 (no request at all after the
// preface) as over HTTP/1.1 (after an answered request).
func TestIdleConnections(t *testing.T) {
	h := newHarnessWith(t, Limits{IdleTimeout: 300 * time.Millisecond, AuthFailureBurst: 1000})
	c2, err := h.dialTLS("h2", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if c2.ConnectionState().NegotiatedProtocol != "h2" {
		t.Fatalf("negotiated %q, want h2", c2.ConnectionState().NegotiatedProtocol)
	}
	fr := http2.NewFramer(c2, c2)
	if _, err := io.WriteString(c2, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	if !closedWithin(c2, 10*time.Second) {
		t.Error("an idle HTTP/2 connection was not closed within 10s (idle timeout 300ms)")
	}

	c1, err := h.dialTLS("http/1.1", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	fmt.Fprintf(c1, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", api.PathOpenAPI)
	resp, err := http.ReadResponse(bufio.NewReader(c1), nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Close {
		t.Fatalf("HTTP/1.1 request: %d, close %v", resp.StatusCode, resp.Close)
	}
	if !closedWithin(c1, 10*time.Second) {
		t.Error("an idle HTTP/1.1 connection was not closed within 10s (idle timeout 300ms)")
	}
}

// TestSlowBody: a request body that does not arrive within
// Limits.BodyTimeout is answered 408 over HTTP/1.1 and HTTP/2 alike, while
// a long poll (no body) is not cut by it.
func TestSlowBody(t *testing.T) {
	h := newHarnessWith(t, Limits{BodyTimeout: 300 * time.Millisecond, AuthFailureBurst: 1000})
	h.putSpec(threeSites(t))

	c1, err := h.dialTLS("http/1.1", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	fmt.Fprintf(c1, "PUT %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"yaml\":\"", api.PathSpec, h.m.AdminToken())
	c1.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c1), nil)
	if err != nil {
		t.Fatalf("HTTP/1.1 slow body: no answer within 10s: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Errorf("HTTP/1.1 slow body: %d, want 408", resp.StatusCode)
	}

	pr, pw := io.Pipe()
	defer pw.Close()
	go io.WriteString(pw, `{"yaml":"`) // and then nothing
	hr, err := http.NewRequest("PUT", h.url+api.PathSpec, pr)
	if err != nil {
		t.Fatal(err)
	}
	hr.Header.Set("Authorization", "Bearer "+h.m.AdminToken())
	done := make(chan *http.Response, 1)
	go func() {
		resp, err := h.hc.Do(hr)
		if err != nil {
			t.Errorf("HTTP/2 slow body: %v", err)
		}
		done <- resp
	}()
	select {
	case resp := <-done:
		if resp != nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestTimeout || resp.ProtoMajor != 2 {
				t.Errorf("HTTP/2 slow body: %d over HTTP/%d, want 408 over HTTP/2", resp.StatusCode, resp.ProtoMajor)
			}
		}
	case <-time.After(10 * time.Second):
		t.Fatal("HTTP/2 slow body: no answer within 10s")
	}

	// A watch outlasts the body timeout.
	if a := h.do(req{method: "GET", path: gwPath(api.PathPlan, "aws-gw") + "?after=" + itoa(h.plan("aws-gw").Generation) + "&timeout=1s", token: h.m.AdminToken()}); a.status != 204 {
		t.Errorf("a 1s watch with a 300ms body timeout: %d %+v", a.status, a.err)
	}
}

// TestMaxConnections: past Limits.MaxConnections, a new connection waits
// (its TLS handshake does not complete) until one of the open ones closes.
func TestMaxConnections(t *testing.T) {
	h := newHarnessWith(t, Limits{MaxConnections: 2, AuthFailureBurst: 1000})
	h.hc.CloseIdleConnections()
	h.stop() // the harness client's connections must not count; start over
	h.start()
	var open []*tls.Conn
	for range 2 {
		c, err := h.dialTLS("http/1.1", 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		open = append(open, c)
	}
	if c, err := h.dialTLS("http/1.1", 500*time.Millisecond); err == nil {
		c.Close()
		t.Fatal("a third connection was served with two open and a cap of 2")
	}
	open[0].Close()
	c, err := h.dialTLS("http/1.1", 10*time.Second)
	if err != nil {
		t.Fatalf("a connection after one closed: %v", err)
	}
	c.Close()
}
