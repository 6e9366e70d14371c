package manager

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/api"
)

// simAgent is an in-process agent without a data plane: it long-polls its
// plan over its own TLS connection and remembers when each plan arrived.
type simAgent struct {
	name, cred string
	hc         *http.Client

	mu       sync.Mutex
	gen      int64
	received map[int]time.Time // by spec revision: when a plan of it arrived first
	plan     api.PlanResponse
	err      error
}

func (a *simAgent) run(ctx context.Context, url string) {
	for ctx.Err() == nil {
		a.mu.Lock()
		after := a.gen
		a.mu.Unlock()
		r, err := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s%s?after=%d&timeout=60s", url, gwPath(api.PathPlan, a.name), after), nil)
		if err != nil {
			a.fail(err)
			return
		}
		r.Header.Set("Authorization", "Bearer "+a.cred)
		resp, err := a.hc.Do(r)
		if err != nil {
			if ctx.Err() == nil {
				a.fail(err)
			}
			return
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		now := time.Now()
		switch {
		case err != nil:
			a.fail(err)
			return
		case resp.StatusCode == http.StatusNoContent:
			continue
		case resp.StatusCode != http.StatusOK:
			a.fail(fmt.Errorf("status %d: %s", resp.StatusCode, body))
			return
		}
		var p api.PlanResponse
		if err := json.Unmarshal(body, &p); err != nil {
			a.fail(err)
			return
		}
		a.mu.Lock()
		a.gen, a.plan = p.Generation, p
		if _, ok := a.received[p.Revision]; !ok {
			a.received[p.Revision] = now
		}
		a.mu.Unlock()
	}
}

func (a *simAgent) fail(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.err = fmt.Errorf("agent %s: %w", a.name, err)
}

// arrived returns when the agent first got a plan of revision rev.
func (a *simAgent) arrived(rev int) (time.Time, bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	at, ok := a.received[rev]
	return at, ok, a.err
}

// TestFiftyAgents runs 50 simulated agents, each long-polling its own plan
// over its own connection, applies a spec change that affects all of them
// and measures, per agent, the time from the start of the PUT to the
// arrival of its new plan. Every agent must get it; the figures are logged
// ("propagation 50 agents: ..."), not asserted.
func TestFiftyAgents(t *testing.T) {
	const n = 50
	h := newHarness(t)
	h.putSpec(manySites(n, 1500))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	agents := make([]*simAgent, n)
	for i := range n {
		name := fmt.Sprintf("gw-%02d", i)
		cred, _ := h.enroll(name)
		agents[i] = &simAgent{name: name, cred: cred, hc: pinnedClient(t, h.m), received: map[int]time.Time{}}
	}
	for _, a := range agents {
		wg.Go(func() { a.run(ctx, h.url) })
	}
	// Every agent has its current plan and waits for the next.
	eventually(t, 30*time.Second, "every agent has its first plan and waits", func() bool {
		for _, a := range agents {
			if _, ok, err := a.arrived(1); !ok || err != nil {
				return false
			}
		}
		return h.m.watchers.Load() >= n
	})

	// A new site: every gateway gets a peer more.
	start := time.Now()
	r := h.putSpec(manySites(n+1, 1500))
	returned := time.Since(start)
	if r.Revision != 2 || len(r.Affected) != n+1 {
		t.Fatalf("spec put: revision %d, %d affected", r.Revision, len(r.Affected))
	}
	var lat []time.Duration
	eventually(t, 30*time.Second, "every agent has revision 2", func() bool {
		lat = lat[:0]
		for _, a := range agents {
			at, ok, err := a.arrived(2)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				return false
			}
			lat = append(lat, at.Sub(start))
		}
		return true
	})
	for _, a := range agents {
		a.mu.Lock()
		_, ok := peerKey(a.plan.Plan, fmt.Sprintf("gw-%02d", n))
		a.mu.Unlock()
		if !ok {
			t.Errorf("%s's new plan lacks the new gateway", a.name)
		}
	}
	slices.Sort(lat)
	pct := func(p float64) time.Duration { return lat[max(0, int(p*float64(len(lat))+0.5)-1)] }
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000) }
	t.Logf("propagation %d agents: p50=%s p99=%s min=%s max=%s (PUT returned after %s; measured from the start of the PUT to the arrival of each agent's new plan)",
		n, ms(pct(0.50)), ms(pct(0.99)), ms(lat[0]), ms(lat[len(lat)-1]), ms(returned))
}
