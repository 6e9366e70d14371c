// Package faults is the fault suite: on a lab federated by real agents and
// a real manager (demo.Managed), it injects one failure after another — a
// gateway machine down, its uplink cut, its userspace WireGuard or its
// agent killed, a standby down, an inter-site link cut (both ways, one way,
// flapping), a relay down, a site's gateways split on their LAN, the
// manager killed during a change — while ICMP probes every 10 ms cross
// every pair of hosts at different sites and an iperf3 TCP transfer
// crosses the path the fault hits. It repairs each fault and reports per
// fault what was lost, the longest outage, whether the TCP connection
// survived, whether and when every pair answered again, and what the pairs
// the fault does not concern lost; then the checks of issue 11's "done
// when". `fednet lab faults` and `make faults` run it; docs/resilience.md
// explains each fault. It is lab code: agent and manager never import it.
package faults

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fednet/fednet/internal/demo"
	"github.com/fednet/fednet/internal/lab"
	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/spec"
)

// Config says how to run the suite. Zero fields take the defaults named.
type Config struct {
	// SpecYAML is the federation (required): at least three sites, one of
	// them with two gateways (examples/ha.yaml).
	SpecYAML string
	// Only runs these faults (names of Names), in the suite's order; empty
	// runs them all.
	Only []string
	// ManagerDown stops the manager once every agent has its plan, so the
	// federation must cope alone.
	ManagerDown bool
	// Binary is the fednet executable the manager and agents run
	// (default: this one).
	Binary string
	// LabName names the lab (default "faults").
	LabName string
	// HostsPerSite overrides the spec's lab.hostsPerSite.
	HostsPerSite int
	// Keep leaves the lab running after the run.
	Keep bool

	// Interval between two probes of a pair (default 10 ms).
	Interval time.Duration
	// Settle is how long the transfer runs before the injection (default
	// 2 s).
	Settle time.Duration
	// Hold is how long a fault lasts before the repair (default 5 s).
	Hold time.Duration
	// After is how long the transfer goes on after the repair (default
	// 10 s): long enough for TCP's retransmission backoff after an outage
	// of a few seconds.
	After time.Duration
	// WayBack measures link-cut's way back: its transfer and probes go on
	// for WayBackAfter after the repair (the agents' hold-down and a few
	// seconds), at least After, and WayBackLost counts what every pair
	// lost after the repair. Default true (Run sets it unless NoWayBack).
	NoWayBack bool
	// RecoverTimeout bounds the wait for every pair to answer after the
	// repair (default 30 s); BaselineTimeout the wait before a fault
	// (default 30 s); ConvergeTimeout the first convergence (default 60 s).
	RecoverTimeout, BaselineTimeout, ConvergeTimeout time.Duration
	// TransferRate caps the TCP transfer in bit/s (0: 20 Mbit/s), so that
	// it does not starve the probes of CPU on a small machine.
	TransferRate float64
	// FlapPeriod and FlapDuration shape link-flap: the link is cut and
	// restored every FlapPeriod for FlapDuration (default 2 s and 20 s).
	FlapPeriod, FlapDuration time.Duration
	// PathChanges counts the path changes the agents logged in text (the
	// agents' log output written during a flap). Default: lines matching
	// DefaultPathChange.
	PathChanges func(agentLogs string) int
	// Progress receives one line per step; nil discards.
	Progress io.Writer
}

// Fault names, in the order the suite runs them.
const (
	ActiveGatewayDown = "active-gateway-down"
	ActiveUplinkCut   = "active-uplink-cut"
	WGDevKilled       = "wgdev-killed"
	AgentKilled       = "agent-killed"
	StandbyDown       = "standby-down"
	LinkCut           = "link-cut"
	LinkCutOneWay     = "link-cut-one-way"
	LinkFlap          = "link-flap"
	RelayDown         = "relay-down"
	SiteLANSplit      = "site-lan-split"
	ManagerKilled     = "manager-killed-during-change"
	OperatorActivate  = "operator-activate"
)

// Names lists every fault, in the order the suite runs them.
var Names = []string{ActiveGatewayDown, ActiveUplinkCut, WGDevKilled, AgentKilled, StandbyDown,
	LinkCut, LinkCutOneWay, LinkFlap, RelayDown, SiteLANSplit, ManagerKilled, OperatorActivate}

// DefaultPathChange matches the log line an agent writes for each change
// of a path (a site's prefixes moved to another gateway, a link relayed or
// back to direct): the contract between the agents and link-flap's count.
var DefaultPathChange = regexp.MustCompile(`(?i)\bpath change`)

// Selected returns the faults of only in the suite's order (all when only
// is empty), or an error naming an unknown one.
func Selected(only []string) ([]string, error) {
	if len(only) == 0 {
		return slices.Clone(Names), nil
	}
	for _, n := range only {
		if !slices.Contains(Names, n) {
			return nil, fmt.Errorf("--only %q: no such fault; the faults are %s", n, strings.Join(Names, ", "))
		}
	}
	var out []string
	for _, n := range Names {
		if slices.Contains(only, n) {
			out = append(out, n)
		}
	}
	return out, nil
}

func (c *Config) defaults() error {
	if c.LabName == "" {
		c.LabName = "faults"
	}
	if c.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("finding the fednet executable: %w", err)
		}
		c.Binary = exe
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.Interval, 10*time.Millisecond)
	def(&c.Settle, 2*time.Second)
	def(&c.Hold, 5*time.Second)
	def(&c.After, 10*time.Second)
	def(&c.RecoverTimeout, 30*time.Second)
	def(&c.BaselineTimeout, 30*time.Second)
	def(&c.ConvergeTimeout, 60*time.Second)
	def(&c.FlapPeriod, 2*time.Second)
	def(&c.FlapDuration, 20*time.Second)
	if c.TransferRate == 0 {
		c.TransferRate = 20e6
	}
	if c.PathChanges == nil {
		c.PathChanges = func(logs string) int { return len(DefaultPathChange.FindAllStringIndex(logs, -1)) }
	}
	switch {
	case c.Interval < lab.MinProbeInterval:
		return fmt.Errorf("probe interval (--interval) %v: use at least %v", c.Interval, lab.MinProbeInterval)
	case c.Settle < 0 || c.Hold < 0:
		return fmt.Errorf("settle %v, hold (--hold) %v: neither may be negative", c.Settle, c.Hold)
	case c.After < time.Second:
		return fmt.Errorf("transfer after the repair (--after) %v: use at least 1s", c.After)
	case c.FlapPeriod <= 0 || c.FlapDuration < 2*c.FlapPeriod:
		return fmt.Errorf("flap period %v over %v: the flap needs at least one cut and one restore", c.FlapPeriod, c.FlapDuration)
	case c.TransferRate < 0:
		return fmt.Errorf("transfer rate (--transfer-mbps) %g bit/s: use a positive rate, or 0 for the default", c.TransferRate)
	}
	return nil
}

// runner holds a running suite.
type runner struct {
	cfg         Config
	l           *lab.Lab
	m           *demo.Managed
	f           *spec.Federation // the spec the agents run
	yaml        string
	pairs       []Pair
	targets     []lab.ProbeTarget
	hosts       map[string]*lab.Node // by name
	haSite      string
	managerDown bool
	start       time.Time
	out         io.Writer
}

func (r *runner) step(format string, args ...any) {
	fmt.Fprintf(r.out, "[%6.1fs] %s\n", time.Since(r.start).Seconds(), fmt.Sprintf(format, args...))
}

// Run builds the lab of cfg.SpecYAML, federates it with a manager and one
// agent per gateway, runs the selected faults one after another and
// removes the lab (unless Keep), whatever happens. The report is returned
// even when checks fail; the error is non-nil when a check failed or the
// suite could not run.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	start := time.Now()
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	names, err := Selected(cfg.Only)
	if err != nil {
		return nil, err
	}
	f, err := spec.Parse([]byte(cfg.SpecYAML))
	if err != nil {
		return nil, err
	}
	if len(f.Sites) < 3 {
		return nil, fmt.Errorf("the fault suite needs at least three sites (a relay, a way around a cut link); the spec has %d", len(f.Sites))
	}
	out := cfg.Progress
	if out == nil {
		out = io.Discard
	}
	r := &runner{cfg: cfg, f: f, yaml: cfg.SpecYAML, start: start, out: out, hosts: map[string]*lab.Node{}}
	for _, s := range f.Sites {
		if len(s.Gateways) >= 2 && r.haSite == "" {
			r.haSite = s.Name
		}
	}

	if err := lab.Down(ctx, cfg.LabName); err != nil {
		return nil, fmt.Errorf("removing an old lab %q: %w", cfg.LabName, err)
	}
	bridged, err := demo.LabBridged(f)
	if err != nil {
		return nil, err
	}
	r.step("building lab %q: %d sites, %d gateways", cfg.LabName, len(f.Sites), gatewayCount(f))
	l, err := lab.Up(ctx, lab.Config{Federation: f, Name: cfg.LabName, Manager: true, Bridged: bridged, HostsPerSite: cfg.HostsPerSite})
	if err != nil {
		return nil, err
	}
	r.l = l
	defer func() {
		if cfg.Keep {
			r.step("lab kept: fednet lab status --name %s; remove it with fednet lab down --name %s", cfg.LabName, cfg.LabName)
			return
		}
		cleanup, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if r.m != nil {
			r.m.Stop(cleanup)
		}
		if err := l.Down(cleanup); err != nil {
			r.step("removing the lab: %v", err)
		}
	}()
	rep := &Report{Federation: f.Name, Lab: cfg.LabName, Manager: ManagerRunning, HASite: r.haSite,
		IntervalMs: millis(cfg.Interval), TransferMbps: round(cfg.TransferRate/1e6, 1)}
	if cfg.ManagerDown {
		rep.Manager = ManagerDown
	}
	if err := r.federate(ctx, bridged, rep); err != nil {
		rep.DurationS = round(time.Since(start).Seconds(), 1)
		return rep, err
	}
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		res := r.run(ctx, name)
		rep.Faults = append(rep.Faults, res)
		r.step("%s", Line(res, Evaluate([]Result{res})))
	}
	rep.Checks = Evaluate(rep.Faults)
	rep.ChecksPassed = Passed(rep.Checks)
	rep.DurationS = round(time.Since(start).Seconds(), 1)
	if !rep.ChecksPassed {
		return rep, errors.New("fault checks failed")
	}
	return rep, nil
}

// federate starts the manager and the agents and waits until every pair
// answers, holding the HA site's virtual address by hand when no agent
// does; with ManagerDown it then stops the manager.
func (r *runner) federate(ctx context.Context, bridged []lab.BridgedNetwork, rep *Report) error {
	l := r.l
	r.step("manager at %s; spec applied through the API; one agent per gateway, enrolled with a join token", l.Manager.Public.Addr())
	m, err := demo.StartManaged(ctx, l, r.cfg.Binary)
	if err != nil {
		return err
	}
	r.m = m
	agentsStart := time.Now()
	if _, err := m.Apply(ctx, r.yaml); err != nil {
		return fmt.Errorf("applying the spec: %w", err)
	}
	for _, gw := range l.Gateways() {
		if err := m.Enroll(ctx, gw.Name); err != nil {
			return err
		}
	}
	r.pairs, r.targets = probePairs(l, r.f, bridged)
	for _, n := range l.Nodes() {
		if n.Role == lab.RoleHost {
			r.hosts[n.Name] = n
		}
	}
	rep.Pairs = len(r.pairs)

	cctx, cancel := context.WithTimeout(ctx, r.cfg.ConvergeTimeout)
	defer cancel()
	// Pairs away from the HA site first: they need no virtual address.
	var away []demo.Pair
	for i, p := range r.pairs {
		if p.FromSite != r.haSite && p.ToSite != r.haSite {
			away = append(away, demo.Pair{From: r.targets[i].From, To: r.hosts[p.To]})
		}
	}
	if _, err := demo.WaitReachable(cctx, away, m.AgentsAlive); err != nil {
		return fmt.Errorf("the federation did not converge: %w", err)
	}
	if r.haSite != "" {
		holders, err := r.waitHolder(cctx, 5*time.Second)
		if err != nil {
			return err
		}
		rep.VirtualAddress = "agents"
		if len(holders) == 0 {
			active, err := r.plannedActive(nil)
			if err != nil {
				return err
			}
			r.step("no agent holds the virtual address of %s: the suite adds it to the active gateway %s by hand", r.haSite, active.Name)
			if err := l.HoldVirtualAddress(ctx, active); err != nil {
				return err
			}
			rep.VirtualAddress = "suite"
		}
	}
	var all []demo.Pair
	for i, p := range r.pairs {
		all = append(all, demo.Pair{From: r.targets[i].From, To: r.hosts[p.To]})
	}
	if _, err := demo.WaitReachable(cctx, all, m.AgentsAlive); err != nil {
		return fmt.Errorf("the federation did not converge: %w", err)
	}
	tunnels, err := r.waitTunnels(cctx)
	if err != nil {
		return fmt.Errorf("the federation did not converge: %w", err)
	}
	rep.ConvergedS = round(time.Since(agentsStart).Seconds(), 2)
	r.step("converged: %d host pairs and %d tunnels answer (%.2f s after the agents started)", len(r.pairs), tunnels, rep.ConvergedS)
	if r.cfg.ManagerDown {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if _, err := m.WaitApplied(wctx, gatewayNames(l)); err != nil {
			return err
		}
		if err := m.StopManager(ctx); err != nil {
			return fmt.Errorf("stopping the manager: %w", err)
		}
		r.managerDown = true
		r.step("manager stopped: every agent runs on the plan it has")
	}
	return nil
}

// waitHolder polls the HA site's virtual address holders for up to wait
// and returns them (none when nobody took it).
func (r *runner) waitHolder(ctx context.Context, wait time.Duration) ([]*lab.Node, error) {
	deadline := time.Now().Add(wait)
	for {
		h, err := r.l.VirtualAddressHolders(ctx, r.haSite)
		if err != nil || len(h) > 0 || time.Now().After(deadline) {
			return h, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// probePairs returns every unordered pair of hosts at different sites
// that share a routed network, then of each bridged network, with the
// prober's targets in the same order.
func probePairs(l *lab.Lab, f *spec.Federation, bridged []lab.BridgedNetwork) ([]Pair, []lab.ProbeTarget) {
	order := map[*lab.Node]int{}
	for i, n := range l.Nodes() {
		order[n] = i
	}
	var pairs []Pair
	var targets []lab.ProbeTarget
	add := func(ps []demo.Pair, network string) {
		for _, p := range ps {
			if order[p.From] > order[p.To] {
				continue // the echo covers both directions
			}
			pairs = append(pairs, Pair{From: p.From.Name, To: p.To.Name, FromSite: p.From.Site, ToSite: p.To.Site, Address: p.To.LAN.Addr(), Network: network})
			targets = append(targets, lab.ProbeTarget{From: p.From, To: p.To.LAN.Addr()})
		}
	}
	reach, _ := demo.RoutedPairs(l, f)
	add(reach, "")
	for _, b := range bridged {
		add(demo.BridgedPairs(l, b.Name), b.Name)
	}
	return pairs, targets
}

// waitTunnels waits until every gateway's echo reaches every peer's
// transit address through their tunnel, standby gateways' tunnels
// included, and returns how many tunnels (one per direction) it checked.
// The host pairs do not cross a standby's tunnels; a fault injected
// before they answer would find the standby with tunnels that never
// carried a packet (WireGuard retries a lost first handshake 5 s later),
// and the remote gateways judging the site by its active gateway alone.
func (r *runner) waitTunnels(ctx context.Context) (int, error) {
	plans, err := r.plans(nil)
	if err != nil {
		return 0, err
	}
	type tunnel struct {
		from *lab.Node
		to   string
		addr netip.Addr
	}
	var all []tunnel
	for _, g := range plans {
		from := r.l.Gateway(g.Name)
		for _, p := range g.Peers {
			if peer, ok := plans[p.Gateway]; ok && from != nil {
				all = append(all, tunnel{from, p.Gateway, peer.TransitAddress()})
			}
		}
	}
	for round := 0; ; round++ {
		var mu sync.Mutex
		var wg sync.WaitGroup
		var silent []string
		for _, t := range all {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if res, err := lab.Ping(ctx, t.from, t.addr, 1, 200*time.Millisecond); err != nil || res.Received == 0 {
					mu.Lock()
					silent = append(silent, t.from.Name+" -> "+t.to)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if len(silent) == 0 {
			return len(all), nil
		}
		select {
		case <-ctx.Done():
			slices.Sort(silent)
			return 0, fmt.Errorf("after %d rounds, %d of %d tunnels do not answer an echo to the far gateway's transit address (%s): %w",
				round+1, len(silent), len(all), strings.Join(silent, ", "), ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// plans computes the plans of the spec the agents run with active as the
// HA site's active gateway (the planner's choice when nil).
func (r *runner) plans(active *lab.Node) (map[string]plan.Gateway, error) {
	return r.plansWith(active, plan.Inputs{})
}

// plansWith is plans with the failures of in as inputs.
func (r *runner) plansWith(active *lab.Node, in plan.Inputs) (map[string]plan.Gateway, error) {
	if active != nil {
		in = in.WithActive(active.Site, active.Name)
	}
	gws, err := plan.Compute(r.f, in)
	if err != nil {
		return nil, fmt.Errorf("planning: %w", err)
	}
	out := map[string]plan.Gateway{}
	for _, g := range gws {
		out[g.Name] = g
	}
	return out, nil
}

// plannedActive returns the gateway the plans make active at the HA site.
func (r *runner) plannedActive(active *lab.Node) (*lab.Node, error) {
	ps, err := r.plans(active)
	if err != nil {
		return nil, err
	}
	g, ok := activeGateway(ps, r.haSite, "")
	if !ok {
		return nil, fmt.Errorf("site %s has no active gateway in the plans", r.haSite)
	}
	return r.l.Gateway(g.Name), nil
}

// active returns the HA site's active gateway: the one holding the virtual
// address (the plans' choice when none or several do).
func (r *runner) active(ctx context.Context) (*lab.Node, error) {
	if r.haSite == "" {
		return nil, fmt.Errorf("the spec has no site with two gateways; the gateway faults need one (examples/ha.yaml)")
	}
	h, err := r.l.VirtualAddressHolders(ctx, r.haSite)
	if err != nil {
		return nil, err
	}
	if len(h) == 1 {
		return h[0], nil
	}
	return r.plannedActive(nil)
}

// standby returns a gateway of the HA site other than active.
func (r *runner) standby(active *lab.Node) *lab.Node {
	for _, g := range r.l.SiteGateways(r.haSite) {
		if g != active {
			return g
		}
	}
	return nil
}

// siteGateway returns the active gateway of a site in plans, as a node.
func (r *runner) siteGateway(plans map[string]plan.Gateway, site string) *lab.Node {
	g, ok := activeGateway(plans, site, "")
	if !ok {
		return nil
	}
	return r.l.Gateway(g.Name)
}

// transferHosts returns the first hosts of sites a and b, for a TCP
// transfer from a to b.
func (r *runner) transferHosts(a, b string) (client, server *lab.Node, err error) {
	ha, hb := r.l.Hosts(a), r.l.Hosts(b)
	if len(ha) == 0 || len(hb) == 0 {
		return nil, nil, fmt.Errorf("sites %s and %s need a host each for the transfer (lab.hostsPerSite)", a, b)
	}
	return ha[0], hb[0], nil
}

// routedPeer returns the first site other than site that shares a routed
// network with it.
func (r *runner) routedPeer(site string) (string, error) {
	for _, p := range r.pairs {
		if p.Network == "" && p.FromSite == site {
			return p.ToSite, nil
		}
		if p.Network == "" && p.ToSite == site {
			return p.FromSite, nil
		}
	}
	return "", fmt.Errorf("site %s shares no routed network with another site", site)
}

// directLink returns two single-gateway sites that share a routed network,
// whose traffic goes straight between them and could go around through a
// third site: the link link-cut cuts.
func (r *runner) directLink(plans map[string]plan.Gateway) (a, b string, err error) {
	for _, p := range r.pairs {
		if p.Network != "" || p.FromSite == r.haSite || p.ToSite == r.haSite {
			continue
		}
		path, err := Path(plans, p)
		if err != nil || len(path) != 2 {
			continue
		}
		for _, s := range r.f.Sites {
			if s.Name != p.FromSite && s.Name != p.ToSite && r.f.LinkEnabled(s.Name, p.FromSite) && r.f.LinkEnabled(s.Name, p.ToSite) {
				return p.FromSite, p.ToSite, nil
			}
		}
	}
	return "", "", errors.New("no two single-gateway sites talk straight to each other with a third site linked to both")
}

// relayed returns a routed pair of sites whose traffic the plans relay,
// and the relay gateway.
func (r *runner) relayed(plans map[string]plan.Gateway) (a, b string, relay *lab.Node, err error) {
	for _, p := range r.pairs {
		if p.Network != "" {
			continue
		}
		path, err := Path(plans, p)
		if err == nil && len(path) > 2 {
			return p.FromSite, p.ToSite, r.l.Gateway(path[1]), nil
		}
	}
	return "", "", nil, errors.New("the spec relays no routed traffic; disable or weigh a link (topology.links) so that some is")
}

func gatewayCount(f *spec.Federation) int {
	n := 0
	for _, s := range f.Sites {
		n += len(s.Gateways)
	}
	return n
}

func gatewayNames(l *lab.Lab) []string {
	var out []string
	for _, g := range l.Gateways() {
		out = append(out, g.Name)
	}
	return out
}

func round(v float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}

// addrOf returns a host's address for a transfer.
func addrOf(n *lab.Node) netip.Addr { return n.LAN.Addr() }
