package agent_test

import (
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/agent"
	"github.com/fednet/fednet/internal/dataplane"
	"github.com/fednet/fednet/internal/metrics"
	"github.com/fednet/fednet/internal/metrics/metricstest"
)

// supervised is a fake data plane whose tunnel events the test raises, as
// the Linux one's WireGuard driver does when a userspace process dies.
type supervised struct {
	*dataplane.Fake
	mu sync.Mutex
	f  func(dataplane.TunnelEvent)
}

func (s *supervised) OnEvent(f func(dataplane.TunnelEvent)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.f = f
}

// raise delivers e and reports whether a function was set.
func (s *supervised) raise(e dataplane.TunnelEvent) bool {
	s.mu.Lock()
	f := s.f
	s.mu.Unlock()
	if f != nil {
		f(e)
	}
	return f != nil
}

// TestLoopSupervisesTheDataplane: the loop turns supervision on for the
// data plane in force (and off for one it replaces, and when it ends); a
// lost tunnel makes it apply the plan again at once, and each event is
// counted in fednet_dataplane_restarts_total.
func TestLoopSupervisesTheDataplane(t *testing.T) {
	g := testPlan(t)
	first := &supervised{Fake: dataplane.NewFake()}
	mx := metrics.NewAgent()
	src := newFeed()
	_, _, cancel := startLoop(t, agent.LoopConfig{Source: src, Dataplane: first, Resync: time.Hour, Metrics: mx})
	src.send(t, agent.Update{Plan: &g})

	s := first.State()
	s.Tunnels, s.Routes = nil, nil
	first.SetState(s)
	if !first.raise(dataplane.TunnelEvent{Interface: "fed0", Cause: "(pid 7) exited: signal: killed"}) {
		t.Fatal("the loop did not turn supervision on")
	}
	eventually(t, "the lost tunnel made anew", func() bool {
		s := first.State()
		return len(s.Tunnels) == 1 && len(s.Routes) == len(g.Routes)
	})
	first.raise(dataplane.TunnelEvent{Interface: "fed0", Restored: true, Took: 40 * time.Millisecond})
	rec := httptest.NewRecorder()
	mx.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	scrape, err := metricstest.Parse(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, result := range []string{"lost", "restored"} {
		v, ok := scrape.Value("fednet_dataplane_restarts_total", map[string]string{"gateway": g.Name, "site": g.Site, "result": result})
		if !ok || v != 1 {
			t.Errorf("fednet_dataplane_restarts_total{result=%q} = %v, %v; want 1", result, v, ok)
		}
	}

	second := &supervised{Fake: dataplane.NewFake()}
	src.send(t, agent.Update{Why: "new key", Dataplane: second})
	if first.raise(dataplane.TunnelEvent{Interface: "fed0"}) {
		t.Error("the replaced data plane still supervises")
	}
	cancel()
	eventually(t, "supervision off at the end", func() bool { return !second.raise(dataplane.TunnelEvent{Interface: "fed0"}) })
}
