package manager

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/manager/store"
)

// BandwidthWait is how long an operator's bandwidth request waits for the
// agent's answer: a long poll's turn plus an estimate's 10 s bound, with
// room.
const BandwidthWait = 60 * time.Second

// relay hands measurement requests from operators to agents and the
// results back (api.PathBandwidth, api.PathMeasurements). It lives in
// memory only: a request outlives neither the operator's call nor the
// manager. On a store several managers share (store.Relay), requests and
// results also travel through the store (see relayThroughStore), so that
// the operator's manager and the agent's need not be the same; every
// manager then holds every pending request. The zero value is ready; safe
// for concurrent use.
type relay struct {
	mu      sync.Mutex
	pending map[string][]*measurement // not yet handed out, by gateway
	wake    map[string]chan struct{}  // closed when a gateway's queue grows
	byID    map[string]*measurement   // until answered or given up
}

type measurement struct {
	api.Measurement
	gateway string
	// result takes the answer for the operator waiting here (buffered:
	// one answer); nil for a request another manager's operator made.
	result chan api.BandwidthResult
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

// lookup returns the measurement id, while it is not answered or given up.
func (rl *relay) lookup(id string) (*measurement, bool) {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	m, ok := rl.byID[id]
	return m, ok
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
	p, ok, err := st.entry(from)
	if err != nil {
		return err
	}
	if !ok {
		return noPlan(st, from)
	}
	if g := st.gateways[from]; g.PublicKey.IsZero() {
		return fail(http.StatusConflict, "name", "gateway %s has not enrolled yet; no agent runs there to send the probes", from)
	}
	if _, peer := p.held.Peer(req.To); !peer {
		return fail(http.StatusBadRequest, "to", "gateway %s has no link to %q; name one of its peers (fednet get links)", from, req.To)
	}
	mm := &measurement{Measurement: api.Measurement{ID: newID(), Kind: api.MeasurementBandwidth, To: req.To}, gateway: from, result: make(chan api.BandwidthResult, 1)}
	m.relay.add(mm)
	defer m.relay.drop(mm)
	if shared, ok := m.store.(store.Relay); ok {
		// The agent may be watching another manager: tell them all.
		data, err := json.Marshal(mm.Measurement)
		if err != nil {
			return err
		}
		if err := shared.PutRelayRequest(r.Context(), store.RelayMessage{Kind: store.RelayRequest, ID: mm.ID, Gateway: from, Data: data}, BandwidthWait+10*time.Second); err != nil {
			return fail(http.StatusServiceUnavailable, "", "the request could not be passed to the other managers: %v; try again", err)
		}
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := shared.DeleteRelay(ctx, mm.ID); err != nil {
				m.cfg.Logf("ending relayed measurement %s: %v (it expires by itself)", mm.ID, err)
			}
		}()
	}
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
	name, id := r.PathValue("name"), r.PathValue("id")
	notFound := fail(http.StatusNotFound, "id", "no measurement %q is waiting for gateway %s (its operator gave up after %v)", id, name, BandwidthWait)
	mm, ok := m.relay.lookup(id)
	if !ok || mm.gateway != name {
		return notFound
	}
	if mm.result == nil {
		// Another manager's operator waits: the answer goes through the
		// store.
		data, err := json.Marshal(res)
		if err != nil {
			return err
		}
		err = m.store.(store.Relay).PutRelayResult(r.Context(), store.RelayMessage{Kind: store.RelayResult, ID: id, Gateway: name, Data: data})
		if errors.Is(err, store.ErrNotFound) {
			m.relay.drop(mm)
			return notFound
		}
		if err != nil {
			return fail(http.StatusServiceUnavailable, "", "the result could not be passed to the manager its operator asked: %v; try again", err)
		}
		m.relay.drop(mm)
	} else if !m.relay.answer(name, id, res) {
		return notFound
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// relayThroughStore keeps this manager's relay in step with the other
// managers' on a store that relays (store.Relay), until ctx ends:
// requests their operators made join the pending ones here (for an agent
// watching this manager), results reach the operator waiting here, and
// requests that are over are dropped. It watches again after a failure.
func (m *Manager) relayThroughStore(ctx context.Context, shared store.Relay) {
	for ctx.Err() == nil {
		err := shared.WatchRelay(ctx, nil, m.relayed)
		if ctx.Err() != nil || errors.Is(err, store.ErrClosed) {
			return
		}
		m.cfg.Logf("following relayed measurements: %v; watching again in 1s", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// relayed applies one message from the store to the relay.
func (m *Manager) relayed(msg store.RelayMessage) {
	switch msg.Kind {
	case store.RelayRequest:
		if _, ok := m.relay.lookup(msg.ID); ok {
			return // made here
		}
		var req api.Measurement
		if err := json.Unmarshal(msg.Data, &req); err != nil || req.ID != msg.ID {
			m.cfg.Logf("relayed measurement %s: not a request this manager understands; ignored", msg.ID)
			return
		}
		m.relay.add(&measurement{Measurement: req, gateway: msg.Gateway})
	case store.RelayResult:
		mm, ok := m.relay.lookup(msg.ID)
		if !ok {
			return
		}
		if mm.result == nil {
			m.relay.drop(mm)
			return
		}
		var res api.BandwidthResult
		if err := json.Unmarshal(msg.Data, &res); err != nil {
			res = api.BandwidthResult{Error: "the agent's result could not be read: " + err.Error()}
		}
		m.relay.answer(msg.Gateway, msg.ID, res)
	case store.RelayGone:
		if mm, ok := m.relay.lookup(msg.ID); ok && mm.result == nil {
			m.relay.drop(mm)
		}
	}
}

func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
