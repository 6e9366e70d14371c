package manager

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"sync"
	"time"

	"github.com/fednet/fednet/internal/api"
)

// BandwidthWait is how long an operator's bandwidth request waits for the
// agent's answer: a long poll's turn plus an estimate's 10 s bound, with
// room.
const BandwidthWait = 60 * time.Second

// relay hands measurement requests from operators to agents and the
// results back (api.PathBandwidth, api.PathMeasurements). It lives in
// memory only: a request outlives neither the operator's call nor the
// manager. The zero value is ready; safe for concurrent use.
type relay struct {
	mu      sync.Mutex
	pending map[string][]*measurement // not yet handed out, by gateway
	wake    map[string]chan struct{}  // closed when a gateway's queue grows
	byID    map[string]*measurement   // until answered or given up
}

type measurement struct {
	api.Measurement
	gateway string
	result  chan api.BandwidthResult // buffered: one answer
}

// add queues m for its gateway and wakes that gateway's long poll.
func (rl *relay) add(m *measurement) {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	if rl.pending == nil {
		rl.pending, rl.wake, rl.byID = map[string][]*measurement{}, map[string]chan struct{}{}, map[string]*measurement{}
	}
	rl.pending[m.gateway] = append(rl.pending[m.gateway], m)
	rl.byID[m.ID] = m
	if c, ok := rl.wake[m.gateway]; ok {
		close(c)
		delete(rl.wake, m.gateway)
	}
}

// drop forgets m (answered, or its operator gave up).
func (rl *relay) drop(m *measurement) {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	delete(rl.byID, m.ID)
	q := rl.pending[m.gateway]
	for i, p := range q {
		if p == m {
			rl.pending[m.gateway] = append(q[:i:i], q[i+1:]...)
			break
		}
	}
}

// next takes the gateway's oldest pending measurement, or returns a
// channel closed when one is queued.
func (rl *relay) next(gateway string) (*measurement, <-chan struct{}) {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	if q := rl.pending[gateway]; len(q) > 0 {
		rl.pending[gateway] = q[1:]
		return q[0], nil
	}
	if rl.wake == nil {
		rl.pending, rl.wake, rl.byID = map[string][]*measurement{}, map[string]chan struct{}{}, map[string]*measurement{}
	}
	c, ok := rl.wake[gateway]
	if !ok {
		c = make(chan struct{})
		rl.wake[gateway] = c
	}
	return nil, c
}

// answer delivers a result to the waiting operator.
func (rl *relay) answer(gateway, id string, res api.BandwidthResult) bool {
	rl.mu.Lock()
	m, ok := rl.byID[id]
	if ok && m.gateway == gateway {
		delete(rl.byID, id)
	}
	rl.mu.Unlock()
	if !ok || m.gateway != gateway {
		return false
	}
	select {
	case m.result <- res:
	default:
	}
	return true
}

// postBandwidth relays an estimate of the link from {name} to the body's
// gateway to {name}'s agent and answers with the result.
func (m *Manager) postBandwidth(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	var req api.BandwidthRequest
	if err := decode(w, r, &req, false, ""); err != nil {
		return err
	}
	from := r.PathValue("name")
	st := m.snapshot()
	p, ok := st.plans[from]
	if !ok {
		return noPlan(st, from)
	}
	if g := st.gateways[from]; g.PublicKey.IsZero() {
		return fail(http.StatusConflict, "name", "gateway %s has not enrolled yet; no agent runs there to send the probes", from)
	}
	peer := false
	for _, pp := range p.plan.Peers {
		peer = peer || pp.Gateway == req.To
	}
	if !peer {
		return fail(http.StatusBadRequest, "to", "gateway %s has no link to %q; name one of its peers (fednet get links)", from, req.To)
	}
	mm := &measurement{Measurement: api.Measurement{ID: newID(), Kind: api.MeasurementBandwidth, To: req.To}, gateway: from, result: make(chan api.BandwidthResult, 1)}
	m.relay.add(mm)
	defer m.relay.drop(mm)
	t := time.NewTimer(BandwidthWait)
	defer t.Stop()
	select {
	case res := <-mm.result:
		if res.Error != "" {
			return fail(http.StatusConflict, "to", "gateway %s could not estimate the link to %s: %s", from, req.To, res.Error)
		}
		res.From, res.To = from, req.To
		return writeJSON(w, http.StatusOK, res)
	case <-t.C:
		return fail(http.StatusGatewayTimeout, "name", "gateway %s did not answer within %v; is its agent running, connected and of this version?", from, BandwidthWait)
	case <-r.Context().Done():
		return r.Context().Err()
	}
}

// getMeasurements is the agents' long poll for relayed requests: 200 with
// the oldest api.Measurement for {name}, or 204 after ?timeout. While it
// waits it holds one of its credential's watch slots.
func (m *Manager) getMeasurements(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r, "timeout"); err != nil {
		return err
	}
	timeout := DefaultWatchTimeout
	if q := r.URL.Query(); q.Has("timeout") {
		var err error
		if timeout, err = parseTimeout(q.Get("timeout")); err != nil {
			return err
		}
	}
	name := r.PathValue("name")
	t := time.NewTimer(timeout)
	defer t.Stop()
	drain := drainOf(r.Context())
	var release func()
	defer func() {
		if release != nil {
			release()
		}
	}()
	for {
		mm, wake := m.relay.next(name)
		if mm != nil {
			return writeJSON(w, http.StatusOK, mm.Measurement)
		}
		if release == nil {
			var err error
			if release, err = m.watchSlot(r); err != nil {
				return err
			}
		}
		select {
		case <-wake:
		case <-t.C:
			w.WriteHeader(http.StatusNoContent)
			return nil
		case <-drain:
			w.WriteHeader(http.StatusNoContent)
			return nil
		case <-r.Context().Done():
			w.WriteHeader(http.StatusNoContent)
			return nil
		}
	}
}

// putMeasurement takes an agent's result of measurement {id}.
func (m *Manager) putMeasurement(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	var res api.BandwidthResult
	if err := decode(w, r, &res, false, ""); err != nil {
		return err
	}
	if !m.relay.answer(r.PathValue("name"), r.PathValue("id"), res) {
		return fail(http.StatusNotFound, "id", "no measurement %q is waiting for gateway %s (its operator gave up after %v)", r.PathValue("id"), r.PathValue("name"), BandwidthWait)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
