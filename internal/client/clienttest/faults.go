package clienttest

import (
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/fednet/fednet/internal/api"
)

// Fault is what Faults does to a request instead of (or before) passing it
// on. The zero Fault passes it on.
type Fault struct {
	// Delay holds the request this long before the rest of the fault (or
	// passing it on); the client may give up meanwhile.
	Delay time.Duration
	// Status answers with this status and an api.Error body (code
	// "injected") instead of passing the request on.
	Status int
	// Drop never answers: the request is held until the client gives up or
	// the server stops, then its connection (HTTP/1.1) or stream (HTTP/2)
	// is reset.
	Drop bool
	// Reset resets the connection (HTTP/1.1) or stream (HTTP/2) without
	// an answer.
	Reset bool
}

// Faults is middleware that injects faults into the requests on their way
// to a handler (the real manager's, in Real): per "METHOD /path" (the path
// as sent), a Fault; it counts every request and can run a hook before one
// is passed on. Safe for concurrent use.
type Faults struct {
	next http.Handler

	mu       sync.Mutex
	faults   map[string]Fault
	hooks    map[string]func(*http.Request)
	requests map[string]int
}

// NewFaults returns middleware around next that passes every request on
// until told otherwise.
func NewFaults(next http.Handler) *Faults {
	return &Faults{next: next, faults: map[string]Fault{}, hooks: map[string]func(*http.Request){}, requests: map[string]int{}}
}

// Set makes requests "METHOD /path" meet f (the zero Fault removes it).
func (f *Faults) Set(methodPath string, fault Fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fault == (Fault{}) {
		delete(f.faults, methodPath)
		return
	}
	f.faults[methodPath] = fault
}

// Fail makes requests "METHOD /path" get status (0 removes the fault).
func (f *Faults) Fail(methodPath string, status int) { f.Set(methodPath, Fault{Status: status}) }

// OnRequest runs hook (nil removes it) on every request "METHOD /path"
// before its fault, or before passing it on; the request waits for it.
func (f *Faults) OnRequest(methodPath string, hook func(*http.Request)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if hook == nil {
		delete(f.hooks, methodPath)
		return
	}
	f.hooks[methodPath] = hook
}

// Requests returns how many requests "METHOD /path" came, faulted or not.
func (f *Faults) Requests(methodPath string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests[methodPath]
}

// ServeHTTP implements http.Handler.
func (f *Faults) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Method + " " + r.URL.Path
	f.mu.Lock()
	f.requests[key]++
	fault, hook := f.faults[key], f.hooks[key]
	f.mu.Unlock()
	if hook != nil {
		hook(r)
	}
	if fault.Delay > 0 {
		select {
		case <-time.After(fault.Delay):
		case <-r.Context().Done():
			panic(http.ErrAbortHandler)
		}
	}
	switch {
	case fault.Drop:
		<-r.Context().Done()
		panic(http.ErrAbortHandler)
	case fault.Reset:
		// The server resets the connection (HTTP/1.1) or the stream
		// (HTTP/2) of a handler that aborts, and logs nothing.
		panic(http.ErrAbortHandler)
	case fault.Status != 0:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(fault.Status)
		json.NewEncoder(w).Encode(api.Error{Code: "injected", Message: "injected fault"})
		return
	}
	f.next.ServeHTTP(w, r)
}
