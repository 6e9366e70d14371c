// Package demo federates the sites of a lab with real agents and proves it:
// keys, plans, one `fednet agent` per gateway, convergence, a connectivity
// matrix, overlay against underlay latency and throughput, and a wire check
// that nothing crosses the internet in clear. `fednet lab demo` and the
// end-to-end tests run it.
package demo

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/fednet/fednet/internal/atomicfile"
	"github.com/fednet/fednet/internal/lab"
	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/spec"
)

// Deployment is a federation running on a lab: one agent per gateway,
// configured from plan files in the gateways' state directories.
type Deployment struct {
	Lab    *lab.Lab
	Binary string
	// Federation is the spec the current plans come from.
	Federation *spec.Federation

	mu     sync.Mutex
	keys   map[string]plan.Key // public keys by gateway
	agents map[string]*lab.Process
	// charons are the IPsec daemons of gateways with IPsec links.
	charons map[string]*lab.Charon
}

// Deploy generates a key for every gateway of l (in the gateway's state
// directory, mode 0600), computes the plans and starts one agent per gateway
// with binary (the fednet executable). It does not wait for the tunnels.
func Deploy(ctx context.Context, l *lab.Lab, binary string) (*Deployment, error) {
	return DeployHook(ctx, l, binary, nil)
}

// DeployHook is Deploy with before (if not nil) called before each
// gateway's agent starts, for tests that change the machine between two
// agents' starts.
func DeployHook(ctx context.Context, l *lab.Lab, binary string, before func(d *Deployment, gateway string)) (*Deployment, error) {
	d := &Deployment{Lab: l, Binary: binary, Federation: l.Federation, keys: map[string]plan.Key{}, agents: map[string]*lab.Process{}}
	for _, gw := range l.Gateways() {
		k, err := wgtypes.GeneratePrivateKey()
		if err != nil {
			return nil, fmt.Errorf("generating key for %s: %w", gw.Name, err)
		}
		if err := os.WriteFile(keyPath(gw), []byte(k.String()+"\n"), 0o600); err != nil {
			return nil, fmt.Errorf("writing key for %s: %w", gw.Name, err)
		}
		d.keys[gw.Name] = plan.Key(k.PublicKey())
	}
	if err := d.writePlans(l.Federation); err != nil {
		return nil, err
	}
	for _, gw := range l.Gateways() {
		if before != nil {
			before(d, gw.Name)
		}
		args := []string{"agent", "--plan", planPath(gw), "--key", keyPath(gw)}
		ipsecArgs, err := d.startIPsec(ctx, gw)
		if err != nil {
			d.Stop(ctx)
			return nil, err
		}
		p, err := l.Start(gw, binary, append(args, ipsecArgs...)...)
		if err != nil {
			d.Stop(ctx)
			return nil, fmt.Errorf("starting the agent of %s: %w", gw.Name, err)
		}
		d.agents[gw.Name] = p
	}
	return d, nil
}

// Replan computes the plans of f (a changed spec of the same lab), writes
// them for every gateway f still has and tells those agents to reload.
// Gateways that f no longer has keep their agent and their old plan, as a
// machine that was dropped from a federation would.
func (d *Deployment) Replan(f *spec.Federation) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.writePlans(f); err != nil {
		return err
	}
	d.Federation = f
	var errs []error
	for _, s := range f.Sites {
		for _, g := range s.Gateways {
			if p := d.agents[g.Name]; p != nil {
				errs = append(errs, p.Signal(syscall.SIGHUP))
			}
		}
	}
	return errors.Join(errs...)
}

func (d *Deployment) writePlans(f *spec.Federation) error {
	gws, err := plan.Compute(f, plan.Inputs{PublicKeys: d.keys})
	if err != nil {
		return fmt.Errorf("planning: %w", err)
	}
	for _, g := range gws {
		node := d.Lab.Gateway(g.Name)
		if node == nil {
			return fmt.Errorf("gateway %s of the spec is not in the lab", g.Name)
		}
		if err := atomicfile.Write(planPath(node), g.JSON(), 0o644); err != nil {
			return fmt.Errorf("plan of %s: %w", g.Name, err)
		}
	}
	return nil
}

// Agent returns the agent process of a gateway, or nil.
func (d *Deployment) Agent(gateway string) *lab.Process {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.agents[gateway]
}

// Stop ends every agent. The tunnels stay (the userspace WireGuard devices
// run on); lab.Down removes them with the namespaces.
func (d *Deployment) Stop(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	var errs []error
	for _, p := range d.agents {
		errs = append(errs, p.Stop(ctx))
	}
	for _, c := range d.charons {
		errs = append(errs, c.Process.Stop(ctx))
	}
	return errors.Join(errs...)
}

// AgentsAlive returns an error naming the first agent that has exited, with
// the end of its log.
func (d *Deployment) AgentsAlive() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for name, p := range d.agents {
		if p.Exited() {
			return fmt.Errorf("the agent of %s exited (%v); its log:\n%s", name, p.Err(), tail(p.LogText(), 2000))
		}
	}
	return nil
}

func keyPath(gw *lab.Node) string  { return filepath.Join(gw.Dir, "private.key") }
func planPath(gw *lab.Node) string { return filepath.Join(gw.Dir, "plan.json") }

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// Pair is one directed host-to-host check across sites.
type Pair struct {
	From, To *lab.Node
}

// CrossSitePairs returns every (host, host of another site) pair of the
// given sites, in a stable order.
func CrossSitePairs(l *lab.Lab, sites []string) []Pair {
	var out []Pair
	for _, a := range sites {
		for _, b := range sites {
			if a == b {
				continue
			}
			for _, ha := range l.Hosts(a) {
				for _, hb := range l.Hosts(b) {
					out = append(out, Pair{From: ha, To: hb})
				}
			}
		}
	}
	return out
}

// PingAll pings each pair count times at once (interval apart) and returns
// the results in pair order.
func PingAll(ctx context.Context, pairs []Pair, count int, interval time.Duration) []lab.PingResult {
	res := make([]lab.PingResult, len(pairs))
	var wg sync.WaitGroup
	for i, p := range pairs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := lab.Ping(ctx, p.From, p.To.LAN.Addr(), count, interval)
			if err != nil {
				r = lab.PingResult{Sent: count}
			}
			res[i] = r
		}()
	}
	wg.Wait()
	return res
}

// WaitReachable pings every pair once per round until all answer or ctx
// ends; it returns how long that took.
func WaitReachable(ctx context.Context, pairs []Pair, check func() error) (time.Duration, error) {
	start := time.Now()
	for round := 0; ; round++ {
		if check != nil {
			if err := check(); err != nil {
				return time.Since(start), err
			}
		}
		res := PingAll(ctx, pairs, 1, 200*time.Millisecond)
		bad := 0
		var first Pair
		for i, r := range res {
			if r.Received == 0 {
				if bad == 0 {
					first = pairs[i]
				}
				bad++
			}
		}
		if bad == 0 {
			return time.Since(start), nil
		}
		select {
		case <-ctx.Done():
			return time.Since(start), fmt.Errorf("after %d rounds, %d of %d pairs still unreachable (first: %s -> %s %s): %w",
				round+1, bad, len(pairs), first.From, first.To, first.To.LAN.Addr(), ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Unreachable reports whether from gets no answer from to in count pings.
func Unreachable(ctx context.Context, from *lab.Node, to netip.Addr, count int) bool {
	r, err := lab.Ping(ctx, from, to, count, 200*time.Millisecond)
	return err != nil || r.Received == 0
}

// RoutedPairs splits the host pairs of different sites of l by the routed
// networks of f: reach holds the pairs whose sites share one (they must
// answer each other), isolated the pairs whose sites share none (their
// packets must be dropped). Both are in a stable order.
func RoutedPairs(l *lab.Lab, f *spec.Federation) (reach, isolated []Pair) {
	share := func(a, b string) bool {
		for _, n := range f.Networks {
			if n.Mode == spec.Routed && slices.Contains(n.Sites, a) && slices.Contains(n.Sites, b) {
				return true
			}
		}
		return false
	}
	for _, p := range CrossSitePairs(l, l.Sites()) {
		if share(p.From.Site, p.To.Site) {
			reach = append(reach, p)
		} else {
			isolated = append(isolated, p)
		}
	}
	return reach, isolated
}

// BridgedPairs returns every pair of hosts of a lab bridged network at
// different sites, in a stable order.
func BridgedPairs(l *lab.Lab, network string) []Pair {
	var out []Pair
	for _, a := range l.Sites() {
		for _, b := range l.Sites() {
			if a == b {
				continue
			}
			for _, ha := range l.BridgedHosts(network, a) {
				for _, hb := range l.BridgedHosts(network, b) {
					out = append(out, Pair{From: ha, To: hb})
				}
			}
		}
	}
	return out
}
