package clienttest

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/manager"
	"github.com/fednet/fednet/internal/manager/store"
)

// Real is the real manager (internal/manager) serving HTTPS on 127.0.0.1
// in the test's process, on a data directory of its own, behind Faults
// (embedded: Fail, Set, OnRequest and Requests inject and count), which
// pass every request on until told otherwise. Down and Up stop and restart
// it on the same data directory and address, as an operator restarting the
// manager would; the faults stay. Safe for concurrent use.
type Real struct {
	*Faults
	t    testing.TB
	dir  string
	addr string
	logf func(string, ...any)

	mu    sync.Mutex
	m     *manager.Manager
	h     http.Handler // m's API handler, which Faults passes requests to
	store store.Store
	stop  func()
	fp    string
	admin string
}

// NewReal starts a real manager and stops it at the end of the test. Its
// log goes to t.Logf while the test runs.
func NewReal(t testing.TB) *Real {
	t.Helper()
	r := &Real{t: t, dir: filepath.Join(t.TempDir(), "manager"), addr: "127.0.0.1:0"}
	// The manager of the moment: it changes across Down and Up.
	r.Faults = NewFaults(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		h := r.h
		r.mu.Unlock()
		h.ServeHTTP(w, req)
	}))
	var mu sync.Mutex
	done := false
	t.Cleanup(func() { mu.Lock(); done = true; mu.Unlock() })
	r.logf = func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if !done {
			t.Logf("manager: "+format, args...)
		}
	}
	if err := r.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Down)
	return r
}

func (r *Real) start() error {
	ln, err := net.Listen("tcp", r.addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", r.addr, err)
	}
	st, err := manager.OpenStore(context.Background(), r.dir, false)
	if err != nil {
		ln.Close()
		return err
	}
	wrap := func(h http.Handler) http.Handler {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.h = h
		return r.Faults
	}
	m, err := manager.New(manager.Config{DataDir: r.dir, Store: st, Listen: ln.Addr().String(), Logf: r.logf, Wrap: wrap})
	if err != nil {
		ln.Close()
		st.Close()
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Serve(ctx, ln) }()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.addr, r.m, r.store = ln.Addr().String(), m, st
	r.fp, r.admin = m.CAFingerprint(), m.AdminToken()
	r.stop = func() {
		cancel()
		if err := <-done; err != nil {
			r.t.Errorf("manager Serve: %v", err)
		}
		if err := m.Close(); err != nil {
			r.t.Errorf("manager Close: %v", err)
		}
		if err := st.Close(); err != nil {
			r.t.Errorf("closing the manager's store: %v", err)
		}
	}
	return nil
}

// Manager returns the running manager (nil while down).
func (r *Real) Manager() *manager.Manager {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m
}

// URL is the manager's base URL; it stays the same across Down and Up.
func (r *Real) URL() string { return "https://" + r.address() }

func (r *Real) address() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.addr
}

// CAFingerprint is the fingerprint clients pin; it survives restarts.
func (r *Real) CAFingerprint() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fp
}

// AdminToken is the admin bearer token; it survives restarts.
func (r *Real) AdminToken() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.admin
}

// DataDir is the manager's data directory.
func (r *Real) DataDir() string { return r.dir }

// Report returns gateway's last status report as the manager stored it,
// and when it came (zero values when there is none or the manager is
// down).
func (r *Real) Report(gateway string) (api.StatusReport, time.Time) {
	r.mu.Lock()
	st, up := r.store, r.m != nil
	r.mu.Unlock()
	if !up {
		return api.StatusReport{}, time.Time{}
	}
	reps, err := st.Reports(context.Background())
	if err != nil {
		r.t.Errorf("reading the manager's reports: %v", err)
		return api.StatusReport{}, time.Time{}
	}
	for _, rep := range reps {
		if rep.Gateway != gateway {
			continue
		}
		var out api.StatusReport
		if err := json.Unmarshal(rep.JSON, &out); err != nil {
			r.t.Errorf("the stored report of %s: %v", gateway, err)
		}
		return out, rep.Received
	}
	return api.StatusReport{}, time.Time{}
}

// Down stops the manager (watches end, connections close); its state stays
// in the data directory. Down of a stopped manager does nothing.
func (r *Real) Down() {
	r.mu.Lock()
	stop := r.stop
	r.stop, r.m = nil, nil
	r.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// Up starts the manager again on the same data directory and address.
func (r *Real) Up() {
	r.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := r.start()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("restarting the manager: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
