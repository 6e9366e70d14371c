package clienttest_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/client"
	"github.com/fednet/fednet/internal/client/clienttest"
)

// TestFaults: each fault reaches a client of the real manager as a client
// would see it from a faulty network or manager, and clearing it restores
// the real answer.
func TestFaults(t *testing.T) {
	m := clienttest.NewReal(t)
	c, err := client.New(client.Config{URL: m.URL(), Token: m.AdminToken(), CAFingerprint: m.CAFingerprint(), Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	const path = "GET " + api.PathRevisions
	call := func() error { _, err := c.Revisions(ctx); return err }

	m.Fail(path, http.StatusServiceUnavailable)
	if err := call(); client.StatusOf(err) != 503 || client.CodeOf(err) != "injected" {
		t.Errorf("status fault: %v", err)
	}
	m.Set(path, clienttest.Fault{Reset: true})
	if err := call(); err == nil || client.StatusOf(err) != 0 {
		t.Errorf("reset: %v, want an error without an answer", err)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	m.Set(path, clienttest.Fault{Drop: true})
	if _, err := c.Revisions(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("drop: %v, want the caller's deadline", err)
	}
	m.Set(path, clienttest.Fault{Delay: 50 * time.Millisecond})
	if err := call(); err != nil {
		t.Errorf("a short delay: %v", err)
	}
	var seen string
	m.OnRequest(path, func(r *http.Request) { seen = r.Header.Get("Authorization") })
	m.Set(path, clienttest.Fault{})
	if err := call(); err != nil {
		t.Errorf("no fault: %v", err)
	}
	if seen != "Bearer "+m.AdminToken() {
		t.Errorf("the hook saw Authorization %q", seen)
	}
	// Six: Go's HTTP/1.1 transport sends a GET again, once, when the
	// connection it reused breaks before an answer (the reset).
	if n := m.Requests(path); n != 6 {
		t.Errorf("%d requests counted, want 6", n)
	}
	// Other paths were never faulted, and the faults survive a restart.
	m.Fail(path, http.StatusInternalServerError)
	m.Down()
	m.Up()
	if err := call(); client.StatusOf(err) != 500 {
		t.Errorf("a fault after a restart: %v", err)
	}
	if _, err := c.Tokens(ctx); err != nil {
		t.Errorf("another path: %v", err)
	}
}
