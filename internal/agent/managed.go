package agent

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/client"
	"github.com/fednet/fednet/internal/dataplane"
	"github.com/fednet/fednet/internal/metrics"
	"github.com/fednet/fednet/internal/plan"
)

// Defaults of a managed agent.
const (
	DefaultStatusInterval = 5 * time.Second
	DefaultWatchTimeout   = 30 * time.Second
	DefaultBackoffMin     = 200 * time.Millisecond
	DefaultBackoffMax     = 5 * time.Second
)

// ManagedConfig configures an agent in managed mode: it enrolls with a
// manager, then watches and applies the plan the manager computes for its
// gateway.
type ManagedConfig struct {
	// DataDir holds the agent's state (see KeyFile, CredentialFile,
	// PlanFile); created with mode 0700. Required.
	DataDir string
	// JoinToken enrolls the agent when DataDir holds no credential yet; it
	// is ignored (with a log line) once enrolled.
	JoinToken string
	// Manager, when set, replaces the manager URL of the join token or of
	// the stored credential (and is stored), for a manager that moved or
	// is reached by another address from this gateway.
	Manager string
	// Endpoint is the gateway's public endpoint (host:port) to announce at
	// enrollment; empty lets the manager use what it observes.
	Endpoint string
	// NewDataplane returns the dataplane of this machine for a private key.
	// It is called at start and after each key rotation. Required.
	NewDataplane func(privateKey plan.Key) (dataplane.Dataplane, error)
	// StatusInterval is the period of status reports (default
	// DefaultStatusInterval); a report also follows every apply.
	StatusInterval time.Duration
	// WatchTimeout is the long-poll timeout of the plan watch (default
	// DefaultWatchTimeout).
	WatchTimeout time.Duration
	// Resync is the drift-repair period (default DefaultResync).
	Resync time.Duration
	// RequestTimeout bounds each call to the manager (default
	// client.DefaultTimeout).
	RequestTimeout time.Duration
	// Probes configures the link probes (docs/probe.md).
	Probes ProbeConfig
	// Bandwidth configures the available-bandwidth responder, the
	// scheduled estimates and the estimates the manager relays
	// (docs/bandwidth.md).
	Bandwidth BandwidthConfig
	// Metrics, when set, is fed the agent's figures (see metrics.Agent).
	Metrics *metrics.Agent
	// BackoffMin and BackoffMax bound the exponential backoff, with full
	// jitter, while the manager cannot be reached (defaults
	// DefaultBackoffMin, DefaultBackoffMax).
	BackoffMin, BackoffMax time.Duration
	// Logf logs one line; nil discards.
	Logf func(format string, args ...any)
}

// RunManaged runs a managed agent until ctx ends (then it returns nil) or
// the manager refuses the gateway's credential (then it returns an error
// saying the gateway was removed). In order:
//
//  1. If DataDir holds a cached plan, it is applied at once, before and
//     without contacting the manager, so a restart restores the tunnels
//     while the manager is away.
//  2. Without a credential the agent enrolls with JoinToken, sending the
//     public half of its private key (generated locally on first start).
//  3. It watches its plan (long poll), applies each new one, caches it,
//     and reports status at once and every StatusInterval. While the
//     manager cannot be reached it retries forever with backoff.
//  4. When a plan asks for a key rotation it makes a new key, sends its
//     public half and re-applies the plan with it.
//
// RunManaged never tears the data plane down, whatever the reason it
// returns. Errors about configuration or the data directory are returned
// at once.
func RunManaged(ctx context.Context, cfg ManagedConfig) error {
	m, err := newManaged(cfg)
	if err != nil {
		return err
	}
	return m.run(ctx)
}

// managed is one run of a managed agent.
type managed struct {
	cfg  ManagedConfig
	dir  dataDir
	logf func(string, ...any)
	// kick asks the reporter for a status report now.
	kick chan struct{}
	// links probes the links of the current plan; set by run.
	links *links
	// bw answers and runs available-bandwidth estimates; set by run.
	bw *bandwidth

	// applyMu serializes applies and key rotations.
	applyMu sync.Mutex

	mu       sync.Mutex // guards the fields below
	dp       dataplane.Dataplane
	key      plan.Key // private
	cred     *Credential
	cl       *client.Client
	current  *api.PlanResponse
	applyErr error
}

func newManaged(cfg ManagedConfig) (*managed, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("--data-dir DIR is required: where the agent keeps its key, credential and last plan")
	}
	if cfg.NewDataplane == nil {
		return nil, errors.New("agent: ManagedConfig.NewDataplane is required")
	}
	if cfg.StatusInterval <= 0 {
		cfg.StatusInterval = DefaultStatusInterval
	}
	if cfg.WatchTimeout <= 0 {
		cfg.WatchTimeout = DefaultWatchTimeout
	}
	if cfg.Resync <= 0 {
		cfg.Resync = DefaultResync
	}
	if cfg.BackoffMin <= 0 {
		cfg.BackoffMin = DefaultBackoffMin
	}
	if cfg.BackoffMax < cfg.BackoffMin {
		cfg.BackoffMax = max(DefaultBackoffMax, cfg.BackoffMin)
	}
	logf := cfg.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	return &managed{cfg: cfg, dir: dataDir(cfg.DataDir), logf: logf, kick: make(chan struct{}, 1)}, nil
}

func (m *managed) run(ctx context.Context) error {
	if err := m.dir.create(m.logf); err != nil {
		return err
	}
	unlock, err := m.dir.lock()
	if err != nil {
		return err
	}
	defer unlock()
	m.links = m.cfg.Probes.withMetrics(m.cfg.Metrics).start(ctx, m.logf, func() { m.poke() })
	defer m.links.Close()
	m.bw = m.cfg.Bandwidth.start(ctx, m.logf, m.cfg.Metrics)
	defer m.bw.Close()
	m.cfg.Metrics.SetLinkSource(func(ctx context.Context) []api.LinkStatus {
		m.mu.Lock()
		cur, dp := m.current, m.dp
		m.mu.Unlock()
		if cur == nil {
			return nil
		}
		return linkStatuses(ctx, cur.Plan, dp, m.links, m.cfg.Metrics, m.logf)
	})
	cred, err := m.dir.readCredential()
	if err != nil {
		return err
	}
	if err := m.loadKey(cred != nil); err != nil {
		return err
	}

	// 1. The cached plan, without the manager.
	cached, err := m.dir.readPlan()
	if err != nil {
		m.logf("ignoring the cached plan: %v", err)
		cached = nil
	}
	if cached != nil {
		m.logf("applying the cached plan of %s (revision %d, generation %d) before contacting the manager",
			cached.Plan.Name, cached.Revision, cached.Generation)
		m.apply(ctx, cached, "cached plan")
	}

	// 2. The credential.
	if cred == nil {
		if cred, err = m.enroll(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	} else {
		if m.cfg.JoinToken != "" {
			m.logf("already enrolled as gateway %s (%s); ignoring --token", cred.Gateway, m.dir.path(CredentialFile))
		}
		if m.cfg.Manager != "" && m.cfg.Manager != cred.Manager {
			m.logf("manager URL changed from %s to %s (--manager); saving it", cred.Manager, m.cfg.Manager)
			cred.Manager = m.cfg.Manager
			if err := m.dir.writeCredential(*cred); err != nil {
				return err
			}
		}
	}
	if cached != nil && cached.Plan.Name != cred.Gateway {
		m.logf("warning: the cached plan is for gateway %s, but this agent is %s; it will be replaced", cached.Plan.Name, cred.Gateway)
	}
	cl, err := client.New(client.Config{URL: cred.Manager, Token: cred.Credential, CAFingerprint: cred.CAFingerprint, Timeout: m.cfg.RequestTimeout})
	if err != nil {
		return fmt.Errorf("%s: %w", m.dir.path(CredentialFile), err)
	}
	defer cl.Close()
	m.mu.Lock()
	m.cred, m.cl = cred, cl
	m.mu.Unlock()
	m.logf("gateway %s: public key %s; manager %s", cred.Gateway, publicKey(m.key), cred.Manager)

	// 3. Reporter and drift repair beside the watch loop.
	bg, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); m.reportLoop(bg) }()
	go func() { defer wg.Done(); m.resyncLoop(bg) }()
	go func() { defer wg.Done(); m.measureLoop(bg) }()
	defer func() { stop(); wg.Wait() }()
	m.poke()
	return m.watch(ctx)
}

// loadKey reads the private key, or makes one when there is no credential
// yet (a first start).
func (m *managed) loadKey(enrolled bool) error {
	key, ok, err := m.dir.readKey(KeyFile)
	if err != nil {
		return err
	}
	if !ok {
		if enrolled {
			return fmt.Errorf("%s is missing, but %s says this gateway is enrolled with the key it held; "+
				"to enroll again with a new key, delete %s and %s and start the agent with a new join token",
				m.dir.path(KeyFile), m.dir.path(CredentialFile), m.dir.path(CredentialFile), m.dir.path(PlanFile))
		}
		if key, err = m.dir.newKey(KeyFile); err != nil {
			return err
		}
		m.logf("generated a WireGuard key in %s; public key %s", m.dir.path(KeyFile), publicKey(key))
	}
	dp, err := m.cfg.NewDataplane(key)
	if err != nil {
		return fmt.Errorf("setting up the data plane: %w", err)
	}
	m.mu.Lock()
	m.key, m.dp = key, dp
	m.mu.Unlock()
	return nil
}

// enroll trades the join token for a credential and stores it. It retries
// while the manager cannot be reached; an answer that refuses the token
// ends it.
func (m *managed) enroll(ctx context.Context) (*Credential, error) {
	if m.cfg.JoinToken == "" {
		return nil, fmt.Errorf("this agent is not enrolled (no %s) and no --token was given: create a join token with "+
			"\"fednet token create --gateway NAME\" and pass it with --token", m.dir.path(CredentialFile))
	}
	jt, err := api.ParseJoinToken(m.cfg.JoinToken)
	if err != nil {
		return nil, fmt.Errorf("--token: %w", err)
	}
	url := jt.Manager
	if m.cfg.Manager != "" {
		url = m.cfg.Manager
	}
	cl, err := client.New(client.Config{URL: url, CAFingerprint: jt.CAFingerprint, Timeout: m.cfg.RequestTimeout})
	if err != nil {
		return nil, fmt.Errorf("--token: %w", err)
	}
	defer cl.Close()
	req := api.EnrollRequest{PublicKey: publicKey(m.key), Endpoint: m.cfg.Endpoint}
	m.logf("enrolling with the manager at %s (join token %s)", url, jt.ID)
	bo := m.backoff()
	var out outage
	for {
		resp, err := cl.Enroll(ctx, jt.Secret, req)
		if err == nil {
			cred := Credential{
				Manager:       url,
				CAFingerprint: jt.CAFingerprint,
				Gateway:       resp.Gateway,
				Credential:    resp.Credential,
				// A key enrolled after a rotation request answers it.
				Rotation: resp.RotateKey,
				Enrolled: time.Now().UTC().Truncate(time.Second),
			}
			if err := m.dir.writeCredential(cred); err != nil {
				return nil, err
			}
			m.logf("enrolled as gateway %s (the manager sees us at %s); credential saved in %s",
				resp.Gateway, resp.ObservedAddress, m.dir.path(CredentialFile))
			return &cred, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if refused(err) || errors.Is(err, client.ErrUntrusted) {
			return nil, fmt.Errorf("enrolling with join token %s: %w", jt.ID, err)
		}
		out.failed(m.logf, "enrolling", err)
		if !sleep(ctx, bo.next()) {
			return nil, ctx.Err()
		}
	}
}

// watch is the plan watch loop.
func (m *managed) watch(ctx context.Context) error {
	m.mu.Lock()
	gw, cl := m.cred.Gateway, m.cl
	var after int64
	if m.current != nil && m.current.Plan.Name == gw {
		after = m.current.Generation
	}
	m.mu.Unlock()

	bo := m.backoff()
	var out outage
	refusedRotation := 0 // a rotation request the manager refused our key for
	for ctx.Err() == nil {
		if want := m.rotationWanted(); want > 0 && want != refusedRotation {
			err := m.rotate(ctx, want)
			switch {
			case err == nil:
			case ctx.Err() != nil:
				return nil
			case client.IsAuth(err):
				return m.removed(gw, err)
			case refused(err):
				m.logf("the manager refused our new key for rotation %d: %v; waiting for its next request", want, err)
				refusedRotation = want
			case errors.Is(err, errDataplane):
				return err
			default:
				out.failed(m.logf, "sending the new key", err)
				sleep(ctx, bo.next())
				continue
			}
		}
		resp, changed, err := cl.WatchPlan(ctx, gw, after, m.cfg.WatchTimeout)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if client.IsAuth(err) {
				return m.removed(gw, err)
			}
			out.failed(m.logf, "watching the plan", err)
			sleep(ctx, bo.next())
			continue
		}
		out.recovered(m.logf)
		bo.reset()
		if !changed {
			continue
		}
		after = resp.Generation
		if resp.Plan.Name != gw {
			m.logf("the manager sent a plan for gateway %q, not %s; not applying it", resp.Plan.Name, gw)
			continue
		}
		m.apply(ctx, resp, fmt.Sprintf("revision %d, generation %d", resp.Revision, resp.Generation))
		// Cached before it is reported: a plan the manager sees applied
		// survives a restart.
		if err := m.dir.writePlan(resp); err != nil {
			m.logf("caching the plan: %v", err)
		}
		m.poke()
	}
	return nil
}

// refused reports whether err is the manager refusing a request (4xx),
// which sending it again does not change; a 5xx or a network error may
// pass.
func refused(err error) bool {
	s := client.StatusOf(err)
	return s >= 400 && s < 500
}

// removed is the error RunManaged ends with when the manager refuses the
// gateway's credential.
func (m *managed) removed(gw string, err error) error {
	m.logf("the manager refused gateway %s's credential: it was removed or its credential revoked; stopping and leaving the data plane as it is", gw)
	return fmt.Errorf("gateway %s was removed from the federation or its credential was revoked (%w); "+
		"the data plane is left as it is (fednet agent --data-dir %s --down removes it); "+
		"to join again, delete %s and start the agent with a new join token (fednet token create --gateway %s)",
		gw, err, m.cfg.DataDir, m.dir.path(CredentialFile), gw)
}

// apply makes resp the current plan and applies it. Errors are logged and reported, not returned: the next plan or
// resync tries again.
func (m *managed) apply(ctx context.Context, resp *api.PlanResponse, why string) {
	m.applyMu.Lock()
	defer m.applyMu.Unlock()
	m.mu.Lock()
	m.current = resp
	m.mu.Unlock()
	m.applyCurrentLocked(ctx, why)
}

// applyCurrentLocked applies the current plan; applyMu must be held.
func (m *managed) applyCurrentLocked(ctx context.Context, why string) {
	m.mu.Lock()
	dp, cur := m.dp, m.current
	m.mu.Unlock()
	if cur == nil {
		return
	}
	changes, err := dp.Apply(ctx, cur.Plan)
	for _, c := range changes {
		m.logf("%s", c)
	}
	switch {
	case err != nil:
		m.logf("applying plan (%s): %v", why, err)
	case len(changes) > 0:
		m.logf("applied plan (%s): %d changes", why, len(changes))
	}
	m.mu.Lock()
	m.applyErr = err
	m.mu.Unlock()
	m.cfg.Metrics.SetPlan(cur.Plan)
	if err != nil {
		m.cfg.Metrics.ApplyFailed()
	} else {
		m.cfg.Metrics.SetRevision(cur.Revision)
	}
	if m.links != nil {
		m.links.Update(cur.Plan)
	}
	if m.bw != nil {
		m.bw.Update(cur.Plan)
	}
}

// resyncLoop re-applies the current plan every Resync to repair drift.
func (m *managed) resyncLoop(ctx context.Context) {
	t := time.NewTicker(m.cfg.Resync)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			m.applyMu.Lock()
			m.applyCurrentLocked(ctx, "resync")
			m.applyMu.Unlock()
		}
	}
}

// rotationWanted returns the rotation the current plan asks for, or 0.
func (m *managed) rotationWanted() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.current == nil || m.cred == nil || m.current.RotateKey <= m.cred.Rotation {
		return 0
	}
	return m.current.RotateKey
}

// errDataplane marks a failure to build the data plane, which retrying
// does not fix.
var errDataplane = errors.New("data plane")

// rotate answers rotation request want: a new key in NewKeyFile (kept
// across a crash, so a retry sends the same key), its public half to the
// manager, then the new key in place and the plan applied with it.
func (m *managed) rotate(ctx context.Context, want int) error {
	m.applyMu.Lock()
	defer m.applyMu.Unlock()
	next, ok, err := m.dir.readKey(NewKeyFile)
	if err != nil || !ok {
		if err != nil {
			m.logf("replacing a damaged %s: %v", m.dir.path(NewKeyFile), err)
		}
		if next, err = m.dir.newKey(NewKeyFile); err != nil {
			return err
		}
	}
	m.mu.Lock()
	old, gw, cl := m.key, m.cred.Gateway, m.cl
	m.mu.Unlock()
	if err := cl.PutKey(ctx, gw, api.KeyRequest{PublicKey: publicKey(next), Rotation: want}); err != nil {
		return fmt.Errorf("sending the new public key: %w", err)
	}
	dp, err := m.cfg.NewDataplane(next)
	if err != nil {
		return fmt.Errorf("%w: setting up the data plane with the new key: %w", errDataplane, err)
	}
	if err := renameKey(m.dir); err != nil {
		return fmt.Errorf("%w: %w", errDataplane, err)
	}
	m.mu.Lock()
	m.key, m.dp = next, dp
	m.cred.Rotation = want
	cred := *m.cred
	m.mu.Unlock()
	if err := m.dir.writeCredential(cred); err != nil {
		m.logf("saving the rotation counter: %v", err)
	}
	m.logf("rotated the WireGuard key (rotation %d): public key %s -> %s", want, publicKey(old), publicKey(next))
	m.applyCurrentLocked(ctx, fmt.Sprintf("new key, rotation %d", want))
	m.poke()
	return nil
}

// renameKey puts the new key in place of the old one.
func renameKey(d dataDir) error {
	if err := os.Rename(d.path(NewKeyFile), d.path(KeyFile)); err != nil {
		return fmt.Errorf("installing the new key: %w", err)
	}
	d.syncDir()
	return nil
}

// poke asks for a status report now.
func (m *managed) poke() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// reportLoop sends a status report every StatusInterval and when poked.
// A poke during a report that has not got through yet cancels it and
// sends a fresh one: the pending one is stale, and after a network outage
// it may wait for TCP's retransmission backoff while a new connection
// gets through at once.
func (m *managed) reportLoop(ctx context.Context) {
	t := time.NewTicker(m.cfg.StatusInterval)
	defer t.Stop()
	var out outage
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-m.kick:
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- m.report(rctx) }()
		var err error
		select {
		case err = <-done:
		case <-m.kick:
			cancel()
			<-done
			m.poke()
			cancel()
			continue
		}
		cancel()
		if err != nil && ctx.Err() == nil {
			out.failed(m.logf, "reporting status", err)
		} else if err == nil {
			out.recovered(m.logf)
		}
	}
}

// report sends one status report.
func (m *managed) report(ctx context.Context) error {
	r := m.status(ctx)
	m.mu.Lock()
	cl, gw := m.cl, m.cred.Gateway
	m.mu.Unlock()
	return cl.PutStatus(ctx, gw, r)
}

// status builds the status report of the current plan.
func (m *managed) status(ctx context.Context) api.StatusReport {
	m.mu.Lock()
	cur, applyErr, dp := m.current, m.applyErr, m.dp
	m.mu.Unlock()
	r := api.StatusReport{Links: []api.LinkStatus{}}
	if cur == nil {
		return r
	}
	r.Generation, r.Revision = cur.Generation, cur.Revision
	if applyErr != nil {
		r.ApplyError = applyErr.Error()
	}
	r.Links = linkStatuses(ctx, cur.Plan, dp, m.links, m.cfg.Metrics, m.logf)
	return r
}

func (m *managed) backoff() *backoff {
	return &backoff{min: m.cfg.BackoffMin, max: m.cfg.BackoffMax}
}

// backoff is exponential backoff with full jitter: the n-th wait is
// uniform in [0, min(max, min*2^n)).
type backoff struct {
	min, max time.Duration
	n        int
}

func (b *backoff) next() time.Duration {
	ceil := b.max
	if b.n < 30 {
		ceil = min(b.max, b.min<<b.n)
	}
	b.n++
	return time.Duration(rand.Int64N(int64(ceil)) + 1)
}

func (b *backoff) reset() { b.n = 0 }

// sleep waits d or until ctx ends; false when ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// outage logs a run of failures of one kind: the first at once, then at
// most one line a minute, and a line when it ends.
type outage struct {
	since    time.Time
	lastLog  time.Time
	failures int
	what     string
}

const outageLogEvery = time.Minute

func (o *outage) failed(logf func(string, ...any), what string, err error) {
	now := time.Now()
	o.failures++
	if o.failures == 1 {
		o.since, o.lastLog, o.what = now, now, what
		logf("%s: %v; retrying with backoff", what, err)
		return
	}
	if now.Sub(o.lastLog) >= outageLogEvery {
		o.lastLog = now
		logf("%s: still failing after %d attempts over %v: %v", what, o.failures, now.Sub(o.since).Round(time.Second), err)
	}
}

func (o *outage) recovered(logf func(string, ...any)) {
	if o.failures > 0 {
		logf("%s: works again after %d failed attempts over %v", o.what, o.failures, time.Since(o.since).Round(time.Millisecond))
	}
	*o = outage{}
}
