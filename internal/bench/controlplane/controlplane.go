// Package controlplane measures fednet's control plane at scale, as
// `fednet bench control-plane` reports it: N simulated agents (real HTTPS,
// real enrollment, real long polls through fednet's client with deltas and
// gzip, a status report every 5 s, a data plane that applies nothing)
// against real fednet manager processes on SQLite or on a real etcd
// cluster: their load while nothing changes, then a sequence of spec
// changes (a site added, a site's prefix changed, a bridged network added
// over every site, a gateway removed). For each change: the plan
// computation time (the managers' own log lines), propagation p50/p99/max
// to every affected agent (from the start of the API call to the arrival
// of the agent's new plan), the bytes the managers sent, the managers' CPU
// seconds and peak RSS; then the time for every agent to reconnect after
// all managers restart at once, and how the manager answered an operator
// meanwhile.
//
// Everything runs on loopback: managers, etcd members and agents on one
// machine (and its CPUs), so the figures include the agents' own work.
package controlplane

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/bench/controlplane/cpspec"
	"github.com/fednet/fednet/internal/client"
	"github.com/fednet/fednet/internal/cpuprofile"
	"github.com/fednet/fednet/internal/lab/etcdlab"
	"github.com/fednet/fednet/internal/manager"
	"github.com/fednet/fednet/internal/plan"
)

// Stores.
const (
	SQLite = "sqlite"
	Etcd   = "etcd"
)

// Change kinds, in the order Run makes them.
const (
	SiteAdded      = "site added"
	PrefixChanged  = "prefix changed"
	NetworkAdded   = "network added"
	GatewayRemoved = "gateway removed"
)

// Config is one run.
type Config struct {
	// Gateways is N, the number of sites (one gateway and one simulated
	// agent each). Required.
	Gateways int
	// Managers is how many manager processes run (several need etcd);
	// 1 when zero.
	Managers int
	// Store is SQLite or Etcd (a cluster of EtcdMembers started for the
	// run); SQLite with one manager, Etcd with several, when empty.
	Store string
	// EtcdMembers is the etcd cluster's size; 3 when zero.
	EtcdMembers int
	// Binary is the fednet executable that runs the managers; this
	// process's when empty.
	Binary string
	// Dir holds the managers' data directories, the etcd data and the
	// logs. Required.
	Dir string
	// NoDeltas and NoCompression make the agents take whole plans and
	// uncompressed answers (to measure what deltas and gzip save).
	NoDeltas, NoCompression bool
	// NoLocal makes the agents take plans without their Local (as fednet
	// agent --no-failover), to measure what carrying it costs.
	NoLocal bool
	// HTTP2 makes the agents speak HTTP/2 to the managers, one connection
	// each, as before fednet's client spoke HTTP/1.1 alone (to measure
	// what HTTP/1.1 saves).
	HTTP2 bool
	// CollectInWindow leaves the collections of this process's heap, the
	// N simulated agents' shared one, where they fall, rather than
	// collecting it before each change (see Change.AgentPreGCCPUSeconds).
	CollectInWindow bool
	// Progress, when set, gets a line per step.
	Progress io.Writer
}

// ProfileEnv, when set in the bench's environment, names a directory
// where the run writes CPU profiles: of this process (the simulated
// agents) bench.pprof while it sets up, bench-KIND.pprof during each
// change (bench-site-added.pprof, ...) and bench-reconnect.pprof, and
// NAME-K.pprof of each manager's K-th start (split likewise: NAME-K.pprof
// until the first change, then NAME-K.1.pprof for the first change (a
// site added), .2 to .4 for the next, .5 from the reconnect on), and
// NAME-K.heap.pprof, a heap profile of that manager when it stopped.
const ProfileEnv = "FEDNET_BENCH_CPUPROFILE"

// Result is one run's figures.
type Result struct {
	Gateways    int    `json:"gateways"`
	Managers    int    `json:"managers"`
	Store       string `json:"store"`
	EtcdMembers int    `json:"etcdMembers,omitempty"`
	CPUs        int    `json:"cpus"`
	Deltas      bool   `json:"deltas"`
	Compression bool   `json:"compression"`
	// Local says the agents took their plans' Local (the default).
	Local bool `json:"local"`
	// HTTP2 says the agents spoke HTTP/2 (--http2), not HTTP/1.1.
	HTTP2 bool `json:"http2,omitempty"`
	// Setup: enrolling every agent and handing each its first (whole)
	// plan.
	EnrollSeconds    float64 `json:"enrollSeconds"`
	FirstPlanSeconds float64 `json:"firstPlanSeconds"`
	FirstPlanBytes   int64   `json:"firstPlanBytes"`
	// Steady is the load between changes.
	Steady    Steady    `json:"steady"`
	Changes   []Change  `json:"changes"`
	Reconnect Reconnect `json:"reconnect"`
	// StatusReports is how many periodic status reports the agents sent
	// over the run (one each every 5 s, as fednet agent), and
	// StatusReportFails how many of them failed (while every manager
	// restarted, before an agent noticed).
	StatusReports     int `json:"statusReports"`
	StatusReportFails int `json:"statusReportFails"`
}

// Change is what one spec change cost.
type Change struct {
	Kind string `json:"kind"`
	// Affected is how many agents' plans changed; Missed how many of
	// them did not get it within the deadline (must be 0).
	Affected int `json:"affected"`
	Missed   int `json:"missed"`
	// PlanMs is the planning time of the manager the change went
	// through; FollowerPlanMs the longest of the others'.
	PlanMs         float64 `json:"planMs"`
	FollowerPlanMs float64 `json:"followerPlanMs,omitempty"`
	// PlanPath is how the manager the change went through planned it,
	// from its log: how many plans it edited (plan.Update) and how many
	// it computed whole, and why.
	PlanPath string `json:"planPath,omitempty"`
	// Propagation to the affected agents, from the start of the API
	// call, in milliseconds.
	P50Ms float64 `json:"p50Ms"`
	P99Ms float64 `json:"p99Ms"`
	MaxMs float64 `json:"maxMs"`
	// APIMs is how long the API call took; APISpansMs where the time of
	// it went in the manager, by part (the manager's log line of the
	// change: read, parse, lock, catch-up, edit, resolve, plan, deltas,
	// commit, publish, diff, answer, and handler, the sum). Agents get the
	// change at publish.
	APIMs      float64            `json:"apiMs"`
	APISpansMs map[string]float64 `json:"apiSpansMs,omitempty"`
	// Bytes the managers sent to the agents (TLS included), until every
	// affected agent had its plan and had reported it.
	Bytes int64 `json:"bytes"`
	// ManagerCPUSeconds over every manager process; PeakRSSMB the
	// largest peak resident set of one manager so far.
	ManagerCPUSeconds float64 `json:"managerCpuSeconds"`
	// ManagerGCCPUSeconds is the part of it the managers' garbage
	// collections took (those that began in the change's window, from
	// the managers' GODEBUG=gctrace=1 lines).
	ManagerGCCPUSeconds float64 `json:"managerGcCpuSeconds"`
	EtcdCPUSeconds      float64 `json:"etcdCpuSeconds,omitempty"`
	// AgentCPUSeconds is this process's: the N simulated agents (decoding,
	// applying and checking their plans, reporting; the bench's own
	// bookkeeping is little), on the same CPUs.
	AgentCPUSeconds float64 `json:"agentCpuSeconds"`
	// AgentGCCPUSeconds is the part of it this process's garbage
	// collector took (runtime/metrics).
	AgentGCCPUSeconds float64 `json:"agentGcCpuSeconds"`
	// AgentPreGCCPUSeconds is the CPU of the collection of this
	// process's heap made right before the change, outside its window
	// (not with Config.CollectInWindow). The N agents share one heap of
	// about a gigabyte at 1000, whose collection (0.5 CPU-s, and every
	// agent slowed by the collector's barriers while it marks) lands in
	// every second change or so; a real agent's heap is a few megabytes,
	// collected in about a millisecond on its own CPU. Collected before
	// each change, the heap does not need collecting within it.
	AgentPreGCCPUSeconds float64 `json:"agentPreGcCpuSeconds,omitempty"`
	// SettleSeconds is how long the bench waited, before the change, for
	// the managers to be at rest (under 0.15 cores over 250 ms, looked at
	// from 3 s after the change before on, at most 10 s): the collection a
	// manager makes when quiet after a change falls there.
	SettleSeconds float64 `json:"settleSeconds,omitempty"`
	PeakRSSMB     float64 `json:"peakRssMB"`
}

// Steady is the managers' load while nothing changes: every agent
// long-polls its plan and reports its status every 5 s.
type Steady struct {
	// Seconds is the length of the window measured.
	Seconds float64 `json:"seconds"`
	// ManagerCores is the managers' CPU seconds per second over the
	// window, summed over the managers; EtcdCores etcd's.
	ManagerCores float64 `json:"managerCores"`
	EtcdCores    float64 `json:"etcdCores,omitempty"`
	// RSSMB is the largest resident set of one manager at the end.
	RSSMB float64 `json:"rssMB"`
}

// steadyWindow is how long the steady load is measured.
const steadyWindow = 10 * time.Second

// Reconnect is the restart of every manager at once.
type Reconnect struct {
	// DownSeconds is how long the managers took to stop and start again
	// (until every one answered).
	DownSeconds float64 `json:"downSeconds"`
	// Seconds is the time from the managers' start until the last agent
	// had a request answered again; P50Seconds the median agent's.
	Seconds    float64 `json:"seconds"`
	P50Seconds float64 `json:"p50Seconds"`
	// Reconnected counts the agents that did, of Agents.
	Reconnected int `json:"reconnected"`
	Agents      int `json:"agents"`
	// MaxTries is the most failed requests in a row of one agent (each
	// followed by its jittered backoff); FailedAfterUp counts requests
	// that failed after every manager answered again.
	MaxTries      int `json:"maxTries"`
	FailedAfterUp int `json:"failedAfterUp"`
	// FailuresAfterUp say which agent's request failed after every
	// manager answered again, when and why (the first five).
	FailuresAfterUp []string `json:"failuresAfterUp,omitempty"`
	// AdminP50Ms and AdminMaxMs: an operator's GET /v1/spec every 250 ms
	// while the agents reconnect.
	AdminP50Ms float64 `json:"adminP50Ms"`
	AdminMaxMs float64 `json:"adminMaxMs"`
	AdminFails int     `json:"adminFails"`
}

// countFailures counts the requests of agent name that failed after upAt
// (every manager answered again), and says the first five.
func (rc *Reconnect) countFailures(name string, failed []failure, upAt time.Time) {
	for _, f := range failed {
		if !f.at.After(upAt) {
			continue
		}
		rc.FailedAfterUp++
		if len(rc.FailuresAfterUp) < 5 {
			rc.FailuresAfterUp = append(rc.FailuresAfterUp, fmt.Sprintf("%s, %v after the managers answered: %s", name, f.at.Sub(upAt).Round(time.Millisecond), f.err))
		}
	}
}

// deadline bounds each wait of a run for agents to get a plan.
const deadline = 120 * time.Second

// run is one run in progress.
type run struct {
	cfg      Config
	etcd     *etcdlab.Cluster
	managers []*managerProc
	fp       string
	admin    *client.Client
	agents   []*agent
	read     atomic.Int64 // bytes the agents read
	keys     []plan.Key
	revision int // the spec's current revision, which the next change is based on
	stop     context.CancelFunc
	wg       sync.WaitGroup
	// profileDir is ProfileEnv's directory; stopProfile ends the profile
	// being written.
	profileDir  string
	stopProfile func()
}

func (r *run) progress(format string, args ...any) {
	if r.cfg.Progress != nil {
		fmt.Fprintf(r.cfg.Progress, "control-plane bench (%d gateways): "+format+"\n", append([]any{r.cfg.Gateways}, args...)...)
	}
}

// Run runs the bench once. It needs an etcd binary for Etcd; it raises the
// open file limit (every agent holds a connection, and so does each
// manager for it).
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if cfg.Gateways < 2 || cfg.Gateways > 4000 {
		return nil, fmt.Errorf("--gateways %d: want 2 to 4000", cfg.Gateways)
	}
	if cfg.Managers <= 0 {
		cfg.Managers = 1
	}
	if cfg.Store == "" {
		cfg.Store = SQLite
		if cfg.Managers > 1 {
			cfg.Store = Etcd
		}
	}
	if cfg.Store == SQLite && cfg.Managers > 1 {
		return nil, errors.New("several managers share an etcd store: use --store etcd with --managers > 1 (a SQLite file is one manager's)")
	}
	if cfg.Store != SQLite && cfg.Store != Etcd {
		return nil, fmt.Errorf("--store %q: want sqlite or etcd", cfg.Store)
	}
	if cfg.EtcdMembers <= 0 {
		cfg.EtcdMembers = 3
	}
	if cfg.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("finding the fednet executable: %w", err)
		}
		cfg.Binary = exe
	}
	if err := raiseFileLimit(4*cfg.Gateways + 1024); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, err
	}
	r := &run{cfg: cfg, profileDir: os.Getenv(ProfileEnv)}
	defer r.close()
	if err := r.profile("bench"); err != nil {
		return nil, err
	}
	defer r.profile("")
	res := &Result{Gateways: cfg.Gateways, Managers: cfg.Managers, Store: cfg.Store, CPUs: runtime.NumCPU(), Deltas: !cfg.NoDeltas, Compression: !cfg.NoCompression, Local: !cfg.NoLocal, HTTP2: cfg.HTTP2}
	if cfg.Store == Etcd {
		res.EtcdMembers = cfg.EtcdMembers
	}
	if err := r.startManagers(ctx); err != nil {
		return nil, err
	}
	if err := r.setup(ctx, res); err != nil {
		return nil, err
	}
	res.Steady = r.steady(ctx)
	r.progress("steady: managers %.2f cores, %.0f MB", res.Steady.ManagerCores, res.Steady.RSSMB)
	for _, kind := range []string{SiteAdded, PrefixChanged, NetworkAdded, GatewayRemoved} {
		settled := r.settle(ctx)
		var pre float64
		if !cfg.CollectInWindow {
			gc0 := selfGCCPU()
			runtime.GC()
			pre = selfGCCPU() - gc0
		}
		if err := r.profile("bench-" + strings.ReplaceAll(kind, " ", "-")); err != nil {
			return nil, err
		}
		c, err := r.change(ctx, kind)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", kind, err)
		}
		// The change's profiles end with its window (its costs read);
		// the reports, the settling and the quiet collections after it
		// go to profiles of their own.
		if err := r.profile("bench-" + strings.ReplaceAll(kind, " ", "-") + "-after"); err != nil {
			return nil, err
		}
		c.AgentPreGCCPUSeconds = pre
		c.SettleSeconds = settled.Seconds()
		r.progress("%s: %d agents, p99 %.0f ms, planning %.0f ms, %d bytes", kind, c.Affected, c.P99Ms, c.PlanMs, c.Bytes)
		res.Changes = append(res.Changes, c)
	}
	if err := r.profile("bench-reconnect"); err != nil {
		return nil, err
	}
	rc, err := r.reconnect(ctx)
	if err != nil {
		return nil, fmt.Errorf("reconnect: %w", err)
	}
	res.Reconnect = rc
	for _, a := range r.agents {
		a.mu.Lock()
		res.StatusReports += a.reports
		res.StatusReportFails += a.reportFails
		a.mu.Unlock()
	}
	r.progress("reconnect of %d agents after a restart of every manager: %.1f s", rc.Agents, rc.Seconds)
	return res, nil
}

// profile ends the CPU profile of this process being written, if any, and
// starts writing NAME.pprof in the profile directory (ProfileEnv), unless
// name is "" or there is no such directory: one profile for the setup and
// one for each change, so a change's profile holds its own work alone.
func (r *run) profile(name string) error {
	if r.stopProfile != nil {
		r.stopProfile()
		r.stopProfile = nil
	}
	if name == "" || r.profileDir == "" {
		return nil
	}
	if name != "bench" {
		// The managers' next profile (manager.ProfileEnv).
		for _, m := range r.managers {
			if m.running() {
				_ = m.cmd.Process.Signal(syscall.SIGUSR1)
			}
		}
	}
	stop, err := cpuprofile.Start(filepath.Join(r.profileDir, name+".pprof"))
	if err != nil {
		return fmt.Errorf("%s: %w", ProfileEnv, err)
	}
	r.stopProfile = stop
	return nil
}

// raiseFileLimit raises RLIMIT_NOFILE to at least n (up to the hard
// limit, which root may raise); manager processes inherit it.
func raiseFileLimit(n int) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("reading the open file limit: %w", err)
	}
	if lim.Cur >= uint64(n) {
		return nil
	}
	want := lim
	want.Cur = uint64(n)
	if want.Max < want.Cur {
		want.Max = want.Cur
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
		return fmt.Errorf("raising the open file limit to %d (it is %d, at most %d; run as root or raise ulimit -n): %w", n, lim.Cur, lim.Max, err)
	}
	return nil
}

// startManagers starts the store (etcd) and the managers: the first makes
// the federation's CA and admin token, the others get copies.
func (r *run) startManagers(ctx context.Context) error {
	storeURL := ""
	if r.cfg.Store == Etcd {
		var members []etcdlab.Member
		for i := range r.cfg.EtcdMembers {
			members = append(members, etcdlab.Member{Name: fmt.Sprintf("etcd%d", i)})
		}
		r.progress("starting %d etcd members", len(members))
		c, err := etcdlab.Start(ctx, etcdlab.Config{Members: members, Dir: filepath.Join(r.cfg.Dir, "etcd"), Token: "fednet-bench"})
		if err != nil {
			return err
		}
		r.etcd = c
		storeURL = c.StoreURL()
	}
	var urls []string
	for i := range r.cfg.Managers {
		addr, err := freePort()
		if err != nil {
			return err
		}
		m := &managerProc{name: fmt.Sprintf("manager%d", i), dir: filepath.Join(r.cfg.Dir, fmt.Sprintf("manager%d", i)), addr: addr,
			log: filepath.Join(r.cfg.Dir, fmt.Sprintf("manager%d.log", i)), binary: r.cfg.Binary}
		r.managers = append(r.managers, m)
		urls = append(urls, m.url())
	}
	for _, m := range r.managers {
		m.args = []string{"manager", "--data-dir", m.dir, "--listen", m.addr, "--advertise", m.url(), "--metrics-listen", ""}
		if storeURL != "" {
			m.args = append(m.args, "--store", storeURL)
		}
		for _, u := range urls {
			if u != m.url() {
				m.args = append(m.args, "--join-url", u)
			}
		}
	}
	r.progress("starting %d managers (%s store)", len(r.managers), r.cfg.Store)
	first := r.managers[0]
	if err := first.start(); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := waitFile(wctx, filepath.Join(first.dir, manager.AdminTokenFile), first); err != nil {
		return err
	}
	fp, err := caFingerprint(first.dir)
	if err != nil {
		return err
	}
	r.fp = fp
	if err := first.waitUp(wctx, fp); err != nil {
		return err
	}
	for _, m := range r.managers[1:] {
		if err := copyFiles(first.dir, m.dir, manager.CACertFile, manager.CAKeyFile, manager.AdminTokenFile); err != nil {
			return err
		}
		if err := m.start(); err != nil {
			return err
		}
	}
	for _, m := range r.managers[1:] {
		if err := m.waitUp(wctx, fp); err != nil {
			return err
		}
	}
	tok, err := os.ReadFile(filepath.Join(first.dir, manager.AdminTokenFile))
	if err != nil {
		return err
	}
	// The operator talks to the first manager; changes go through it.
	r.admin, err = client.New(client.Config{URL: first.url(), Token: strings.TrimSpace(string(tok)), CAFingerprint: fp, Timeout: time.Minute})
	return err
}

// spec writes the federation of n sites with the run's keys (see
// cpspec.Federation).
func (r *run) spec(n int, prefix0 string, bridged bool) string {
	return cpspec.Federation(r.keys, n, prefix0, bridged)
}

// setup applies the first spec, enrolls every agent and waits until each
// has its first plan.
func (r *run) setup(ctx context.Context, res *Result) error {
	n := r.cfg.Gateways
	r.keys = make([]plan.Key, n+1)
	for i := range r.keys {
		rand.Read(r.keys[i][:])
	}
	first, err := r.admin.PutSpec(ctx, r.spec(n, "", false), false)
	if err != nil {
		return fmt.Errorf("applying the first spec: %w", err)
	}
	r.revision = first.Revision
	r.progress("enrolling %d agents", n)
	start := time.Now()
	r.agents = make([]*agent, n)
	errs := make(chan error, n)
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			a, err := r.enroll(ctx, i)
			if err != nil {
				errs <- fmt.Errorf("enrolling g%04d: %w", i, err)
				return
			}
			r.agents[i] = a
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	res.EnrollSeconds = time.Since(start).Seconds()
	runCtx, cancel := context.WithCancel(context.Background())
	r.stop = cancel
	before := r.read.Load()
	start = time.Now()
	for _, a := range r.agents {
		r.wg.Go(func() { a.run(runCtx) })
		r.wg.Go(func() { a.report(runCtx) })
	}
	if missed := r.waitAll(ctx, func(a *agent) bool { return a.generation() > 0 }); missed > 0 {
		return fmt.Errorf("%d agents got no first plan within %v", missed, deadline)
	}
	res.FirstPlanSeconds = time.Since(start).Seconds()
	res.FirstPlanBytes = r.read.Load() - before
	r.progress("every agent has its plan (%.1f s)", res.FirstPlanSeconds)
	return nil
}

// enroll makes agent i: a join token from the operator, enrollment with
// the gateway's key through the token's first manager, and a client of
// every manager, its own first (agents spread over the managers).
// enrollTries bounds the tries of one enrollment.
const enrollTries = 10

func (r *run) enroll(ctx context.Context, i int) (*agent, error) {
	name := fmt.Sprintf("g%04d", i)
	tok, err := r.admin.CreateToken(ctx, name, 0)
	if err != nil {
		return nil, err
	}
	jt, err := api.ParseJoinToken(tok.Token)
	if err != nil {
		return nil, err
	}
	urls := jt.URLs()
	k := i % len(urls)
	urls = append(urls[k:], urls[:k]...)
	a := &agent{name: name, read: &r.read, arrived: map[int64]time.Time{}, kick: make(chan struct{}, 1)}
	ecl, err := client.New(client.Config{URLs: urls, CAFingerprint: jt.CAFingerprint, Timeout: time.Minute})
	if err != nil {
		return nil, err
	}
	defer ecl.Close()
	// As fednet agent does: a manager that answers 503 (several managers
	// enrolling at once kept changing the state under it) is asked again
	// after a jittered backoff.
	var er *api.EnrollResponse
	for try := 1; ; try++ {
		er, err = ecl.Enroll(ctx, jt.Secret, api.EnrollRequest{PublicKey: r.keys[i]})
		if err == nil || client.StatusOf(err) != http.StatusServiceUnavailable || try == enrollTries {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(mrand.N(min(backoffMax, backoffMin<<(try-1)))):
		}
	}
	if err != nil {
		return nil, err
	}
	a.cl, err = client.New(client.Config{URLs: urls, Token: er.Credential, CAFingerprint: jt.CAFingerprint, Timeout: 30 * time.Second,
		DialContext: countingDialer(&r.read), NoDeltas: r.cfg.NoDeltas, NoCompression: r.cfg.NoCompression, NoLocal: r.cfg.NoLocal, HTTP2: r.cfg.HTTP2})
	return a, err
}

// waitAll waits until done holds for every agent that is not removed, at
// most deadline; it returns how many it does not hold for.
func (r *run) waitAll(ctx context.Context, done func(*agent) bool) int {
	end := time.Now().Add(deadline)
	for {
		missed := 0
		for _, a := range r.agents {
			a.mu.Lock()
			removed, err := a.removed, a.err
			a.mu.Unlock()
			if !removed && err == nil && !done(a) {
				missed++
			}
		}
		if missed == 0 || time.Now().After(end) || ctx.Err() != nil {
			return missed
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// usage sums the managers' CPU and takes the largest peak RSS; etcd's CPU
// apart.
func (r *run) usage() (mgr usage, etcd time.Duration) {
	for _, m := range r.managers {
		if m.running() {
			u, err := processUsage(m.cmd.Process.Pid)
			if err == nil {
				mgr.cpu += u.cpu
				mgr.peak = max(mgr.peak, u.peak)
				mgr.rss = max(mgr.rss, u.rss)
			}
		}
	}
	if r.etcd != nil {
		for _, name := range r.etcd.Members() {
			if pid := r.etcd.PID(name); pid != 0 {
				if u, err := processUsage(pid); err == nil {
					etcd += u.cpu
				}
			}
		}
	}
	return mgr, etcd
}

// Settling before a change: the managers count as at rest once they used
// less than restCores over a restWindow, looked at from settleAfter after
// the change before on (longer than a manager waits, quiet, before it
// collects: 2 s), for at most maxSettle.
const (
	settleAfter = 3 * time.Second
	restWindow  = 250 * time.Millisecond
	restCores   = 0.15
	maxSettle   = 10 * time.Second
)

// settle waits until the managers are at rest, as they are between an
// operator's changes, and returns how long it waited: after a change a
// manager collects its heap once quiet for 2 s (fednet manager does, see
// manager.Config.CollectWhenQuiet), and a change made while it does
// would count that collection's CPU as the change's.
func (r *run) settle(ctx context.Context) time.Duration {
	start := time.Now()
	wait := settleAfter
	for time.Since(start) < maxSettle {
		select {
		case <-ctx.Done():
			return time.Since(start)
		case <-time.After(wait):
		}
		wait = restWindow
		u0, _ := r.usage()
		t0 := time.Now()
		select {
		case <-ctx.Done():
			return time.Since(start)
		case <-time.After(restWindow):
		}
		u1, _ := r.usage()
		if (u1.cpu - u0.cpu).Seconds() < restCores*time.Since(t0).Seconds() {
			break
		}
	}
	return time.Since(start)
}

// selfCPU is the CPU time this process used so far (0 when unknown).
func selfCPU() time.Duration {
	u, err := processUsage(os.Getpid())
	if err != nil {
		return 0
	}
	return u.cpu
}

// selfGCCPU returns the CPU seconds this process's garbage collector
// took so far.
func selfGCCPU() float64 {
	s := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64 {
		return 0
	}
	return s[0].Value.Float64()
}

// steady measures the managers over steadyWindow while nothing changes
// (a measurement window, not a wait for anything).
func (r *run) steady(ctx context.Context) Steady {
	mgr0, etcd0 := r.usage()
	start := time.Now()
	select {
	case <-ctx.Done():
	case <-time.After(steadyWindow):
	}
	mgr1, etcd1 := r.usage()
	secs := time.Since(start).Seconds()
	return Steady{Seconds: secs, ManagerCores: (mgr1.cpu - mgr0.cpu).Seconds() / secs, EtcdCores: (etcd1 - etcd0).Seconds() / secs, RSSMB: float64(mgr1.rss) / (1 << 20)}
}

// change makes one change through the first manager and measures it.
func (r *run) change(ctx context.Context, kind string) (Change, error) {
	n := r.cfg.Gateways
	c := Change{Kind: kind}
	gens := map[string]int64{}
	for _, a := range r.agents {
		gens[a.name] = a.generation()
	}
	mgr0, etcd0 := r.usage()
	agents0, agentsGC0 := selfCPU(), selfGCCPU()
	bytes0 := r.read.Load()
	// A spec is applied as fednet apply applies it after its dry run:
	// based on the revision the dry run diffed against (If-Match), and
	// answered without the diff the dry run showed.
	apply := func(doc string) error {
		res, err := r.admin.PutSpecIf(ctx, doc, r.revision)
		if err == nil {
			r.revision = res.Revision
		}
		return err
	}
	start := time.Now()
	var err error
	switch kind {
	case SiteAdded:
		err = apply(r.spec(n+1, "", false))
	case PrefixChanged:
		err = apply(r.spec(n+1, "10.200.0.0/24", false))
	case NetworkAdded:
		err = apply(r.spec(n+1, "10.200.0.0/24", true))
	case GatewayRemoved:
		err = r.admin.RemoveGateway(ctx, r.agents[n-1].name)
	}
	c.APIMs = ms(time.Since(start))
	if err != nil {
		return c, err
	}
	gws, err := r.admin.Gateways(ctx)
	if err != nil {
		return c, err
	}
	target := map[string]int64{}
	for _, g := range gws {
		if g.PlanGeneration > gens[g.Name] && !g.Removed {
			target[g.Name] = g.PlanGeneration
		}
	}
	var affected []*agent
	for _, a := range r.agents {
		if _, ok := target[a.name]; ok {
			affected = append(affected, a)
		}
	}
	c.Affected = len(affected)
	end := time.Now().Add(deadline)
	var lat []time.Duration
	for {
		lat = lat[:0]
		c.Missed = 0
		for _, a := range affected {
			if at, ok := a.arrival(target[a.name]); ok {
				lat = append(lat, at.Sub(start))
			} else {
				c.Missed++
			}
		}
		if c.Missed == 0 || time.Now().After(end) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Let the reports of the last agents land before reading the costs.
	time.Sleep(200 * time.Millisecond)
	c.Bytes = r.read.Load() - bytes0
	mgr1, etcd1 := r.usage()
	c.ManagerCPUSeconds = (mgr1.cpu - mgr0.cpu).Seconds()
	c.EtcdCPUSeconds = (etcd1 - etcd0).Seconds()
	c.AgentCPUSeconds = (selfCPU() - agents0).Seconds()
	c.AgentGCCPUSeconds = selfGCCPU() - agentsGC0
	for _, m := range r.managers {
		c.ManagerGCCPUSeconds += m.gcCPU(start, time.Now()).Seconds()
	}
	c.PeakRSSMB = float64(mgr1.peak) / (1 << 20)
	slices.Sort(lat)
	if len(lat) > 0 {
		c.P50Ms, c.P99Ms, c.MaxMs = ms(percentile(lat, 0.50)), ms(percentile(lat, 0.99)), ms(lat[len(lat)-1])
	}
	var gen int64
	for _, g := range target {
		gen = max(gen, g)
	}
	if len(r.managers) > 0 {
		c.APISpansMs = applySpans(r.managers[0].log)[gen]
	}
	for i, m := range r.managers {
		if p, ok := plannings(m.log)[gen]; ok {
			if i == 0 {
				c.PlanMs, c.PlanPath = p.ms, p.how
			} else {
				c.FollowerPlanMs = max(c.FollowerPlanMs, p.ms)
			}
		}
	}
	if c.Missed > 0 {
		return c, fmt.Errorf("%d of %d affected agents did not get their plan within %v", c.Missed, c.Affected, deadline)
	}
	return c, nil
}

// reconnect stops every manager at once, starts them again, and measures
// how the agents come back.
func (r *run) reconnect(ctx context.Context) (Reconnect, error) {
	var rc Reconnect
	for _, a := range r.agents {
		a.mu.Lock()
		if !a.removed {
			rc.Agents++
		}
		a.mu.Unlock()
	}
	stopAt := time.Now()
	group(r.managers, (*managerProc).stop)
	startAt := time.Now()
	var startErr error
	var mu sync.Mutex
	group(r.managers, func(m *managerProc) {
		if err := m.start(); err != nil {
			mu.Lock()
			startErr = err
			mu.Unlock()
		}
	})
	if startErr != nil {
		return rc, startErr
	}
	// An operator's requests while the agents reconnect.
	probeCtx, stopProbe := context.WithCancel(ctx)
	var adminLat []time.Duration
	var probes sync.WaitGroup
	probes.Go(func() {
		for probeCtx.Err() == nil {
			t := time.Now()
			_, err := r.admin.GetSpec(probeCtx)
			if probeCtx.Err() != nil {
				return
			}
			if err != nil {
				rc.AdminFails++
			} else {
				adminLat = append(adminLat, time.Since(t))
			}
			select {
			case <-probeCtx.Done():
			case <-time.After(250 * time.Millisecond):
			}
		}
	})
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for _, m := range r.managers {
		if err := m.waitUp(wctx, r.fp); err != nil {
			stopProbe()
			probes.Wait()
			return rc, err
		}
	}
	upAt := time.Now()
	rc.DownSeconds = upAt.Sub(stopAt).Seconds()
	missed := r.waitAll(ctx, func(a *agent) bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.reconnected.After(stopAt)
	})
	stopProbe()
	probes.Wait()
	var times []time.Duration
	for _, a := range r.agents {
		a.mu.Lock()
		if a.reconnected.After(stopAt) {
			times = append(times, a.reconnected.Sub(startAt))
		}
		rc.MaxTries = max(rc.MaxTries, a.maxTries)
		rc.countFailures(a.name, a.failedAt, upAt)
		a.mu.Unlock()
	}
	rc.Reconnected = len(times)
	slices.Sort(times)
	if len(times) > 0 {
		rc.Seconds = times[len(times)-1].Seconds()
		rc.P50Seconds = percentile(times, 0.5).Seconds()
	}
	slices.Sort(adminLat)
	if len(adminLat) > 0 {
		rc.AdminP50Ms, rc.AdminMaxMs = ms(percentile(adminLat, 0.5)), ms(adminLat[len(adminLat)-1])
	}
	if missed > 0 {
		return rc, fmt.Errorf("%d agents did not reconnect within %v", missed, deadline)
	}
	return rc, nil
}

// close stops the agents, the managers and etcd.
func (r *run) close() {
	if r.stop != nil {
		r.stop()
		r.wg.Wait()
	}
	for _, a := range r.agents {
		if a != nil && a.cl != nil {
			a.cl.Close()
		}
	}
	if r.admin != nil {
		r.admin.Close()
	}
	group(r.managers, (*managerProc).stop)
	if r.etcd != nil {
		r.etcd.Close()
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// percentile of sorted values (nearest rank).
func percentile(sorted []time.Duration, p float64) time.Duration {
	i := int(p*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
