package agent

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

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
	// HA configures failover (docs/resilience.md); on unless HA.Off.
	HA HAConfig
	// DataDir holds the agent's state (see KeyFile, CredentialFile,
	// PlanFile); created with mode 0700. Required.
	DataDir string
	// JoinToken enrolls the agent when DataDir holds no credential yet; it
	// is ignored (with a log line) once enrolled.
	JoinToken string
	// Manager, when set, replaces the manager URLs of the join token or of
	// the stored credential (and is stored), for a manager that moved or
	// is reached by another address from this gateway: one URL, or the
	// URLs of several managers of the federation, comma-separated.
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
	// jitter, while the manager cannot be reached, does not know the
	// gateway or has no plan for it (defaults DefaultBackoffMin,
	// DefaultBackoffMax).
	BackoffMin, BackoffMax time.Duration
	// Logf logs one line; nil discards.
	Logf func(format string, args ...any)
}

// RunManaged runs a managed agent: the reconcile loop (Loop) over the
// manager source. It runs until ctx ends (then it returns nil) or the
// manager says the gateway was removed (then it returns an error saying
// so). In order:
//
//  1. If DataDir holds a cached plan, it is applied at once, before and
//     without contacting the manager, so a restart restores the tunnels
//     while the manager is away.
//  2. Without a credential the agent enrolls with JoinToken, sending the
//     public half of its private key (generated locally on first start).
//  3. It watches its plan (long poll), applies each new one, caches it,
//     and reports status at once and every StatusInterval. While the
//     manager cannot be reached, answers 401 (it does not know the
//     gateway's credential: its state was lost or restored from an older
//     backup) or has no plan for the gateway (403 other than
//     gateway_removed, 404: e.g. the spec no longer lists it), it keeps
//     the data plane as it is and retries forever with backoff, logging
//     the condition at once and then at most once a minute. A plan it
//     cannot read (a newer plan format) is refused: the plan in force
//     stays, the refusal is reported as the apply error, and the watch
//     goes on.
//  4. When a plan asks for a key rotation it makes a new key, sends its
//     public half and re-applies the plan with it.
//
// Only a 403 with code gateway_removed (the gateway was removed from the
// federation) ends it with an error. RunManaged never tears the data plane
// down, whatever the reason it returns. Errors about configuration or the
// data directory are returned at once.
func RunManaged(ctx context.Context, cfg ManagedConfig) error {
	s, err := newManagerSource(cfg)
	if err != nil {
		return err
	}
	unlock, err := s.open()
	if err != nil {
		return err
	}
	defer unlock()
	src := newHASource(s, cfg.HA, cfg.Metrics, s.logf)
	if h, ok := src.(*haSource); ok {
		s.failover = h.Status
	}
	loop, err := NewLoop(LoopConfig{
		Source: src, Dataplane: s.dp, Resync: cfg.Resync, Probes: cfg.Probes, Bandwidth: cfg.Bandwidth,
		Metrics: cfg.Metrics, LinkChanged: s.poke, Logf: s.logf,
	})
	if err != nil {
		return err
	}
	s.loop = loop
	return loop.Run(ctx)
}

// managerSource is the Source of managed mode. Beside delivering plans it
// reports the loop's status to the manager and runs the measurements the
// manager relays.
type managerSource struct {
	cfg  ManagedConfig
	dir  dataDir
	logf func(string, ...any)
	// kick asks the reporter for a status report now.
	kick chan struct{}
	// loop is the loop the source feeds (its status and links go into
	// reports, its estimator runs relayed measurements); set before Run.
	loop *Loop
	// failover returns what the failover holds of the site, for reports
	// (nil with failover off); set before Run.
	failover func() *api.FailoverStatus

	// Set by open, read-only after.
	dp     dataplane.Dataplane // built with the key at start
	stored *Credential         // the credential in DataDir, nil before enrollment
	cached *api.PlanResponse   // the plan cache, nil when none

	mu      sync.Mutex // guards the fields below
	key     plan.Key   // private
	cred    *Credential
	cl      *client.Client
	current *api.PlanResponse // the last plan delivered
}

func newManagerSource(cfg ManagedConfig) (*managerSource, error) {
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
	return &managerSource{cfg: cfg, dir: dataDir(cfg.DataDir), logf: logf, kick: make(chan struct{}, 1)}, nil
}

// open takes the data directory (made if needed, then locked) and reads
// what the agent keeps there: the credential, the key (made on a first
// start) with its data plane, and the plan cache. unlock releases the
// directory.
func (s *managerSource) open() (unlock func(), err error) {
	if err := s.dir.create(s.logf); err != nil {
		return nil, err
	}
	release, err := s.dir.lock()
	if err != nil {
		return nil, err
	}
	if err := s.read(); err != nil {
		release()
		return nil, err
	}
	return release, nil
}

// read reads the credential, the key and the plan cache (see open).
func (s *managerSource) read() error {
	var err error
	if s.stored, err = s.dir.readCredential(); err != nil {
		return err
	}
	if err := s.loadKey(s.stored != nil); err != nil {
		return err
	}
	if s.cached, err = s.dir.readPlan(); err != nil {
		s.logf("ignoring the cached plan: %v", err)
		s.cached = nil
	}
	return nil
}

// loadKey reads the private key, or makes one when there is no credential
// yet (a first start), and builds the data plane with it.
func (s *managerSource) loadKey(enrolled bool) error {
	key, ok, err := s.dir.readKey(KeyFile)
	if err != nil {
		return err
	}
	if !ok {
		if enrolled {
			return fmt.Errorf("%s is missing, but %s says this gateway is enrolled with the key it held; "+
				"to enroll again with a new key, delete %s and %s and start the agent with a new join token",
				s.dir.path(KeyFile), s.dir.path(CredentialFile), s.dir.path(CredentialFile), s.dir.path(PlanFile))
		}
		if key, err = s.dir.newKey(KeyFile); err != nil {
			return err
		}
		s.logf("generated a WireGuard key in %s; public key %s", s.dir.path(KeyFile), publicKey(key))
	}
	dp, err := s.cfg.NewDataplane(key)
	if err != nil {
		return fmt.Errorf("setting up the data plane: %w", err)
	}
	s.mu.Lock()
	s.key = key
	s.mu.Unlock()
	s.dp = dp
	return nil
}

// Run implements Source.
func (s *managerSource) Run(ctx context.Context, deliver Deliver) error {
	// 1. The cached plan, without the manager.
	if c := s.cached; c != nil {
		s.logf("applying the cached plan of %s (revision %d, generation %d) before contacting the manager",
			c.Plan.Name, c.Revision, c.Generation)
		s.deliverPlan(deliver, c, "cached plan")
	}

	// 2. The credential.
	cred := s.stored
	if cred == nil {
		var err error
		if cred, err = s.enroll(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	} else {
		if s.cfg.JoinToken != "" {
			s.logf("already enrolled as gateway %s (%s); ignoring --token", cred.Gateway, s.dir.path(CredentialFile))
		}
		if urls := splitURLs(s.cfg.Manager); len(urls) > 0 && !slices.Equal(urls, cred.URLs()) {
			s.logf("manager URL changed from %s to %s (--manager); saving it", strings.Join(cred.URLs(), ","), strings.Join(urls, ","))
			cred.Manager, cred.Managers = urls[0], nil
			if len(urls) > 1 {
				cred.Managers = urls
			}
			if err := s.dir.writeCredential(*cred); err != nil {
				return err
			}
		}
	}
	if c := s.cached; c != nil && c.Plan.Name != cred.Gateway {
		s.logf("warning: the cached plan is for gateway %s, but this agent is %s; it will be replaced", c.Plan.Name, cred.Gateway)
	}
	// An agent that does not fail over has no use for the plans' Local.
	cl, err := client.New(client.Config{URLs: cred.URLs(), Token: cred.Credential, CAFingerprint: cred.CAFingerprint, Timeout: s.cfg.RequestTimeout, NoLocal: s.cfg.HA.Off})
	if err != nil {
		return fmt.Errorf("%s: %w", s.dir.path(CredentialFile), err)
	}
	defer cl.Close()
	s.mu.Lock()
	s.cred, s.cl = cred, cl
	key := s.key
	s.mu.Unlock()
	s.logf("gateway %s: public key %s; manager %s", cred.Gateway, publicKey(key), strings.Join(cred.URLs(), ", "))

	// 3. Reports and relayed measurements beside the watch.
	bg, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); s.reportLoop(bg) }()
	go func() { defer wg.Done(); s.measureLoop(bg) }()
	defer func() { stop(); wg.Wait() }()
	s.poke()
	return s.watch(ctx, deliver)
}

// splitURLs splits --manager: one URL, or several comma-separated.
func splitURLs(s string) []string {
	var out []string
	for _, u := range strings.Split(s, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	return out
}

// deliverPlan hands a manager's plan to the loop and makes it the current
// one.
func (s *managerSource) deliverPlan(deliver Deliver, resp *api.PlanResponse, why string) Result {
	s.mu.Lock()
	s.current = resp
	s.mu.Unlock()
	return deliver(Update{Plan: &resp.Plan, Revision: resp.Revision, Generation: resp.Generation, Why: why})
}

// enroll trades the join token for a credential and stores it. It retries
// while the manager cannot be reached; an answer that refuses the token
// ends it.
func (s *managerSource) enroll(ctx context.Context) (*Credential, error) {
	if s.cfg.JoinToken == "" {
		return nil, fmt.Errorf("this agent is not enrolled (no %s) and no --token was given: create a join token with "+
			"\"fednet token create --gateway NAME\" and pass it with --token", s.dir.path(CredentialFile))
	}
	jt, err := api.ParseJoinToken(s.cfg.JoinToken)
	if err != nil {
		return nil, fmt.Errorf("--token: %w", err)
	}
	urls := jt.URLs()
	if u := splitURLs(s.cfg.Manager); len(u) > 0 {
		urls = u
	}
	url := strings.Join(urls, ", ")
	cl, err := client.New(client.Config{URLs: urls, CAFingerprint: jt.CAFingerprint, Timeout: s.cfg.RequestTimeout})
	if err != nil {
		return nil, fmt.Errorf("--token: %w", err)
	}
	defer cl.Close()
	s.mu.Lock()
	req := api.EnrollRequest{PublicKey: publicKey(s.key), Endpoint: s.cfg.Endpoint}
	s.mu.Unlock()
	s.logf("enrolling with the manager at %s (join token %s)", url, jt.ID)
	bo := s.backoff()
	var out outage
	for {
		resp, err := cl.Enroll(ctx, jt.Secret, req)
		if err == nil {
			cred := Credential{
				Manager:       urls[0],
				CAFingerprint: jt.CAFingerprint,
				Gateway:       resp.Gateway,
				Credential:    resp.Credential,
				// A key enrolled after a rotation request answers it.
				Rotation: resp.RotateKey,
				Enrolled: time.Now().UTC().Truncate(time.Second),
			}
			if len(urls) > 1 {
				cred.Managers = urls
			}
			if err := s.dir.writeCredential(cred); err != nil {
				return nil, err
			}
			s.logf("enrolled as gateway %s (the manager sees us at %s); credential saved in %s",
				resp.Gateway, resp.ObservedAddress, s.dir.path(CredentialFile))
			return &cred, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if classify(err) != answerRetry || errors.Is(err, client.ErrUntrusted) {
			return nil, fmt.Errorf("enrolling with join token %s: %w", jt.ID, err)
		}
		out.failed(s.logf, "enrolling", err)
		if !sleep(ctx, bo.next()) {
			return nil, ctx.Err()
		}
	}
}

// watch is the plan watch loop.
func (s *managerSource) watch(ctx context.Context, deliver Deliver) error {
	s.mu.Lock()
	gw, cl := s.cred.Gateway, s.cl
	var after int64
	// A plan held without its Local (cached by an agent that predates
	// Local, or ran with failover off) is taken again whole, with it.
	if s.current != nil && s.current.Plan.Name == gw && (s.current.Plan.Local != nil || s.cfg.HA.Off) {
		after = s.current.Generation
	}
	s.mu.Unlock()

	bo := s.backoff()
	var out outage
	refusedRotation := 0 // a rotation request the manager refused our key for
	unreadable := ""     // the unreadable answer refused last, refused once
	for ctx.Err() == nil {
		if want := s.rotationWanted(); want > 0 && want != refusedRotation {
			err := s.rotate(ctx, want, deliver)
			switch a := classify(err); {
			case err == nil:
			case ctx.Err() != nil:
				return nil
			case errors.Is(err, errDataplane):
				return err
			case a == answerRemoved:
				return s.removed(gw, err)
			case a == answerRefused || a == answerNoPlan:
				s.logf("the manager refused our new key for rotation %d: %v; waiting for its next request", want, err)
				refusedRotation = want
			default:
				out.failed(s.logf, "sending the new key", s.explain(gw, err))
				sleep(ctx, bo.next())
				continue
			}
		}
		resp, changed, err := cl.WatchPlan(ctx, gw, after, s.cfg.WatchTimeout)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			switch classify(err) {
			case answerRemoved:
				return s.removed(gw, err)
			case answerUnreadable:
				// The manager answered with a plan this agent cannot read
				// (a newer plan format): refuse it once, keep watching.
				if msg := err.Error(); msg != unreadable {
					unreadable = msg
					deliver(Update{Why: "plan watch", Err: fmt.Errorf("the manager's plan for %s: %w", gw, err)})
					s.poke()
				}
			default:
				out.failed(s.logf, "watching the plan", s.explain(gw, err))
			}
			sleep(ctx, bo.next())
			continue
		}
		out.recovered(s.logf)
		bo.reset()
		unreadable = ""
		if !changed {
			continue
		}
		after = resp.Generation
		if resp.Plan.Name != gw {
			s.logf("the manager sent a plan for gateway %q, not %s; not applying it", resp.Plan.Name, gw)
			continue
		}
		// Cached before the loop has it, so before any report says it is
		// applied: a plan the manager sees applied survives a restart.
		if err := s.dir.writePlan(resp); err != nil {
			s.logf("caching the plan: %v", err)
		}
		if res := s.deliverPlan(deliver, resp, fmt.Sprintf("revision %d, generation %d", resp.Revision, resp.Generation)); errors.Is(res.Err, ErrStopped) {
			return nil
		}
		s.poke()
	}
	return nil
}

// answer is what the agent makes of a manager's answer to one of its
// calls.
type answer int

const (
	// answerRetry: no answer (the manager is out of reach), a 5xx, a 408
	// or a 429: try again with backoff.
	answerRetry answer = iota
	// answerRemoved: 403 with code gateway_removed; the gateway was
	// removed from the federation, the agent stops.
	answerRemoved
	// answerUnknown: 401; the manager does not know the credential (its
	// state was lost or restored from an older backup): keep the data
	// plane, retry with backoff.
	answerUnknown
	// answerNoPlan: 403 with another code, or 404; the manager knows the
	// gateway but has no plan for it (e.g. the spec no longer lists it):
	// keep the data plane, wait for one.
	answerNoPlan
	// answerRefused: another 4xx; sending the same request again does not
	// change it.
	answerRefused
	// answerUnreadable: a success answer this agent cannot decode (a plan
	// of a newer format).
	answerUnreadable
)

var answerNames = [...]string{"retry", "removed", "unknown", "no plan", "refused", "unreadable"}

func (a answer) String() string {
	if int(a) < len(answerNames) {
		return answerNames[a]
	}
	return fmt.Sprintf("answer(%d)", int(a))
}

// classify sorts err, an error of a client call (nil: answerRetry).
func classify(err error) answer {
	var e *client.Error
	if !errors.As(err, &e) {
		if err != nil && undecodable(err) {
			return answerUnreadable
		}
		return answerRetry
	}
	switch {
	case e.Status == http.StatusForbidden && e.Code == api.CodeGatewayRemoved:
		return answerRemoved
	case e.Status == http.StatusUnauthorized:
		return answerUnknown
	case e.Status == http.StatusForbidden || e.Status == http.StatusNotFound:
		return answerNoPlan
	case e.Status == http.StatusRequestTimeout || e.Status == http.StatusTooManyRequests:
		return answerRetry
	case e.Status >= 400 && e.Status < 500:
		return answerRefused
	}
	return answerRetry
}

// undecodable reports whether err is the client failing to decode a
// success answer of the manager (for a plan: one of a newer format than
// this agent reads, or with fields it does not know), as opposed to the
// manager being out of reach.
func undecodable(err error) bool {
	return errors.Is(err, client.ErrUndecodable)
}

// explain adds to err, for the log, what the agent makes of it.
func (s *managerSource) explain(gw string, err error) error {
	switch classify(err) {
	case answerUnknown:
		return fmt.Errorf("the manager does not know gateway %s's credential (%w): its state was lost or restored from an older backup, "+
			"or the gateway enrolled again elsewhere; the data plane stays as it is", gw, err)
	case answerNoPlan:
		return fmt.Errorf("the manager has no plan for gateway %s (%w); the data plane stays as it is until it has one", gw, err)
	}
	return err
}

// removed is the error RunManaged ends with when the manager says the
// gateway was removed.
func (s *managerSource) removed(gw string, err error) error {
	s.logf("the manager says gateway %s was removed or its credential revoked (403 %s); stopping and leaving the data plane as it is", gw, api.CodeGatewayRemoved)
	return fmt.Errorf("gateway %s was removed from the federation and its credential revoked (%w); "+
		"the data plane is left as it is (fednet agent --data-dir %s --down removes it); "+
		"to join again, delete %s and start the agent with a new join token (fednet token create --gateway %s)",
		gw, err, s.cfg.DataDir, s.dir.path(CredentialFile), gw)
}

// rotationWanted returns the rotation the current plan asks for, or 0.
func (s *managerSource) rotationWanted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.current == nil || s.cred == nil || s.current.RotateKey <= s.cred.Rotation {
		return 0
	}
	return s.current.RotateKey
}

// errDataplane marks a failure to build the data plane, which retrying
// does not fix.
var errDataplane = errors.New("data plane")

// rotate answers rotation request want: a new key in NewKeyFile (kept
// across a crash, so a retry sends the same key), its public half to the
// manager, then the new key in place and the plan in force applied with a
// data plane built for it.
func (s *managerSource) rotate(ctx context.Context, want int, deliver Deliver) error {
	next, ok, err := s.dir.readKey(NewKeyFile)
	if err != nil || !ok {
		if err != nil {
			s.logf("replacing a damaged %s: %v", s.dir.path(NewKeyFile), err)
		}
		if next, err = s.dir.newKey(NewKeyFile); err != nil {
			return err
		}
	}
	s.mu.Lock()
	old, gw, cl := s.key, s.cred.Gateway, s.cl
	s.mu.Unlock()
	if err := cl.PutKey(ctx, gw, api.KeyRequest{PublicKey: publicKey(next), Rotation: want}); err != nil {
		return fmt.Errorf("sending the new public key: %w", err)
	}
	dp, err := s.cfg.NewDataplane(next)
	if err != nil {
		return fmt.Errorf("%w: setting up the data plane with the new key: %w", errDataplane, err)
	}
	if err := renameKey(s.dir); err != nil {
		return fmt.Errorf("%w: %w", errDataplane, err)
	}
	s.mu.Lock()
	s.key = next
	s.cred.Rotation = want
	cred := *s.cred
	s.mu.Unlock()
	if err := s.dir.writeCredential(cred); err != nil {
		s.logf("saving the rotation counter: %v", err)
	}
	s.logf("rotated the WireGuard key (rotation %d): public key %s -> %s", want, publicKey(old), publicKey(next))
	deliver(Update{Why: fmt.Sprintf("new key, rotation %d", want), Dataplane: dp})
	s.poke()
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
func (s *managerSource) poke() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// reportLoop sends a status report every StatusInterval and when poked.
// A poke during a report that has not got through yet cancels it and
// sends a fresh one: the pending one is stale, and after a network outage
// it may wait for TCP's retransmission backoff while a new connection
// gets through at once. Refusals the plan watch logs (401, 403, 404) are
// not logged again here.
func (s *managerSource) reportLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.StatusInterval)
	defer t.Stop()
	var out outage
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.kick:
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- s.report(rctx) }()
		var err error
		select {
		case err = <-done:
		case <-s.kick:
			cancel()
			<-done
			s.poke()
			cancel()
			continue
		}
		cancel()
		switch {
		case err == nil:
			out.recovered(s.logf)
		case ctx.Err() == nil && !watchSaysIt(err):
			out.failed(s.logf, "reporting status", err)
		}
	}
}

// watchSaysIt reports whether err is a refusal the plan watch logs.
func watchSaysIt(err error) bool {
	a := classify(err)
	return a == answerRemoved || a == answerUnknown || a == answerNoPlan
}

// report sends one status report.
func (s *managerSource) report(ctx context.Context) error {
	r := s.status(ctx)
	s.mu.Lock()
	cl, gw := s.cl, s.cred.Gateway
	s.mu.Unlock()
	return cl.PutStatus(ctx, gw, r)
}

// status builds the status report of the plan in force.
func (s *managerSource) status(ctx context.Context) api.StatusReport {
	st := s.loop.Status()
	r := api.StatusReport{Links: []api.LinkStatus{}}
	if st.Err != nil {
		r.ApplyError = clip(st.Err.Error(), maxApplyError)
	}
	if st.Plan == nil {
		return r
	}
	r.Generation, r.Revision = st.Generation, st.Revision
	r.Links = s.loop.Links(ctx, *st.Plan)
	vias := relays(*st.Plan)
	for i, l := range r.Links {
		r.Links[i].Via = vias[l.Peer]
	}
	if s.failover != nil {
		r.Failover = s.failover()
	}
	return r
}

// relays returns, by peer, the gateway of another site that p sends the
// traffic for the peer's site to (a relayed path); peers whose site p
// reaches directly are not in it, nor any when p has no Local (which
// holds the sites' prefixes).
func relays(p plan.Gateway) map[string]string {
	if p.Local == nil || p.Local.Federation == nil {
		return nil
	}
	carrier := map[netip.Prefix]plan.Peer{}
	for _, pe := range p.Peers {
		for _, a := range pe.AllowedIPs {
			carrier[a] = pe
		}
	}
	prefixes := map[string][]netip.Prefix{}
	for _, site := range p.Local.Federation.Sites {
		prefixes[site.Name] = site.Prefixes
	}
	out := map[string]string{}
	for _, pe := range p.Peers {
		for _, a := range prefixes[pe.Site] {
			if c, ok := carrier[a]; ok && c.Site != pe.Site {
				out[pe.Gateway] = c.Gateway
				break
			}
		}
	}
	return out
}

// maxApplyError bounds the apply error of a status report (the manager
// refuses reports with more than 8 KiB); the log has it whole.
const maxApplyError = 4 << 10

// clip returns s as valid UTF-8 of at most n bytes, saying what it cut.
func clip(s string, n int) string {
	s = strings.ToValidUTF8(s, "?")
	if len(s) <= n {
		return s
	}
	tail := fmt.Sprintf(" ... (%d bytes more; see the agent's log)", len(s)-n)
	cut := max(n-len(tail), 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + tail
}

func (s *managerSource) backoff() *backoff {
	return &backoff{min: s.cfg.BackoffMin, max: s.cfg.BackoffMax}
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
// most one line a minute, and a line when it ends. A failure that the
// agent makes something else of than the one before (classify: e.g. the
// manager answers 401 where it was out of reach) is logged at once too.
type outage struct {
	since    time.Time
	lastLog  time.Time
	failures int
	what     string
	kind     answer
	// now is the clock (nil: time.Now).
	now func() time.Time
}

const outageLogEvery = time.Minute

func (o *outage) clock() time.Time {
	if o.now != nil {
		return o.now()
	}
	return time.Now()
}

func (o *outage) failed(logf func(string, ...any), what string, err error) {
	now := o.clock()
	o.failures++
	if kind := classify(err); o.failures == 1 || kind != o.kind || what != o.what {
		if o.failures == 1 {
			o.since = now
		}
		o.lastLog, o.what, o.kind = now, what, kind
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
		logf("%s: works again after %d failed attempts over %v", o.what, o.failures, o.clock().Sub(o.since).Round(time.Millisecond))
	}
	*o = outage{now: o.now}
}
