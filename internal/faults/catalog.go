package faults

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"syscall"
	"time"

	"github.com/fednet/fednet/internal/demo"
	"github.com/fednet/fednet/internal/lab"
	"github.com/fednet/fednet/internal/plan"
)

// instance is one fault ready to inject on the running lab.
type instance struct {
	// target names what fails (Result.Target).
	target string
	// blast says which probed pairs the fault concerns.
	blast Blast
	// client sends the TCP transfer to server.
	client, server *lab.Node
	// inject injects the fault; lasts is how long it takes (the flap's
	// toggles), hold how long the fault then stays (default Config.Hold).
	inject func(ctx context.Context) error
	lasts  time.Duration
	hold   time.Duration
	// wayBack: the fault's window after the repair holds the way back to
	// the repaired link (at least WayBackAfter), whose losses are counted.
	wayBack bool
	// repair undoes the fault; nil when the federation must heal by itself
	// (recovery then counts from the injection).
	repair func(ctx context.Context) error
	// verify runs once every pair answers again; an error means the fault
	// did not recover (manager-killed-during-change: the change landed).
	verify func(ctx context.Context) error
	// cleanup restores what the fault's setup changed beyond the fault
	// (the manager stopped again in --manager-down).
	cleanup func(ctx context.Context) error
	// manager overrides the report's manager state.
	manager string
	// linkChanges counts the link changes of a flap; countPaths asks for
	// the agents' path changes meanwhile.
	linkChanges int
	countPaths  bool
}

// prepare resolves fault name on the lab as it is now: what to fail, which
// pairs that concerns, where the transfer goes.
func (r *runner) prepare(ctx context.Context, name string) (*instance, error) {
	switch name {
	case ActiveGatewayDown, ActiveUplinkCut, WGDevKilled, AgentKilled, StandbyDown, SiteLANSplit:
		return r.prepareGateway(ctx, name)
	case LinkCut, LinkCutOneWay, LinkFlap:
		return r.prepareLink(ctx, name)
	case RelayDown:
		return r.prepareRelay(ctx)
	case ManagerKilled:
		return r.prepareManager(ctx)
	case OperatorActivate:
		return r.prepareActivate(ctx)
	}
	return nil, fmt.Errorf("no fault %q", name)
}

// prepareGateway prepares the faults of the HA site's gateways.
func (r *runner) prepareGateway(ctx context.Context, name string) (*instance, error) {
	active, err := r.active(ctx)
	if err != nil {
		return nil, err
	}
	standby := r.standby(active)
	peer, err := r.routedPeer(r.haSite)
	if err != nil {
		return nil, err
	}
	in := &instance{target: active.Name, blast: Blast{Gateways: []string{active.Name}, Sites: []string{r.haSite}}}
	if in.client, in.server, err = r.transferHosts(peer, r.haSite); err != nil {
		return nil, err
	}
	switch name {
	case ActiveGatewayDown:
		in.inject, in.repair = r.machineDown(active)
	case ActiveUplinkCut:
		in.inject = func(ctx context.Context) error { return r.l.SetUplink(ctx, active, false) }
		in.repair = func(ctx context.Context) error { return r.l.SetUplink(ctx, active, true) }
	case WGDevKilled:
		in.inject = func(ctx context.Context) error {
			killed, err := active.Kill(ctx, func(p lab.ProcessInfo) bool { return p.CommandMatches("wgdev") })
			if err == nil && len(killed) == 0 {
				err = fmt.Errorf("%s runs no fednet wgdev (kernel WireGuard?); nothing to kill", active.Name)
			}
			return err
		}
	case AgentKilled:
		in.inject = func(ctx context.Context) error { return r.killAgent(ctx, active) }
		in.repair = func(ctx context.Context) error { return r.m.StartAgent(active.Name) }
	case StandbyDown:
		if standby == nil {
			return nil, fmt.Errorf("site %s has no standby gateway", r.haSite)
		}
		in.target = standby.Name
		in.blast.Gateways = []string{standby.Name}
		in.inject, in.repair = r.machineDown(standby)
	case SiteLANSplit:
		if standby == nil {
			return nil, fmt.Errorf("site %s has no standby gateway", r.haSite)
		}
		in.target = active.Name + "," + standby.Name
		in.blast.Gateways = []string{active.Name, standby.Name}
		in.inject = func(ctx context.Context) error { return r.l.Separate(ctx, active, standby, true) }
		in.repair = func(ctx context.Context) error { return r.l.Separate(ctx, active, standby, false) }
	}
	return in, nil
}

// machineDown returns the injection and repair of a gateway machine that
// goes down: its cables out, every process killed (agent, wgdev); back:
// cables in, the agent started again on its data directory (with the
// manager down it applies the plan it cached).
func (r *runner) machineDown(gw *lab.Node) (inject, repair func(context.Context) error) {
	inject = func(ctx context.Context) error {
		if err := r.l.SetCables(ctx, gw, false); err != nil {
			return err
		}
		_, err := gw.KillAll(ctx)
		return err
	}
	repair = func(ctx context.Context) error {
		if err := r.l.SetCables(ctx, gw, true); err != nil {
			return err
		}
		return r.m.StartAgent(gw.Name)
	}
	return inject, repair
}

// killAgent kills a gateway's agent with SIGKILL and waits until it is
// gone.
func (r *runner) killAgent(ctx context.Context, gw *lab.Node) error {
	p := r.m.Agent(gw.Name)
	if p == nil || p.Exited() {
		return fmt.Errorf("%s has no running agent", gw.Name)
	}
	if err := p.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	select {
	case <-p.Done():
		return nil
	case <-time.After(lab.StopTimeout):
		return fmt.Errorf("the agent of %s (pid %d) did not exit after SIGKILL", gw.Name, p.PID)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// prepareLink prepares the faults of one inter-site link.
func (r *runner) prepareLink(ctx context.Context, name string) (*instance, error) {
	active, err := r.activeOrNil(ctx)
	if err != nil {
		return nil, err
	}
	plans, err := r.plans(active)
	if err != nil {
		return nil, err
	}
	a, b, err := r.directLink(plans)
	if err != nil {
		return nil, err
	}
	ga, gb := r.siteGateway(plans, a), r.siteGateway(plans, b)
	failed, err := r.plansWith(active, plan.Inputs{}.WithLinkDown(a, b))
	if err != nil {
		return nil, err
	}
	in := &instance{target: ga.Name + "<->" + gb.Name, blast: Blast{Links: []plan.SitePair{plan.Pair(a, b)}, Networks: rebuilt(plans, failed)}}
	if in.client, in.server, err = r.transferHosts(a, b); err != nil {
		return nil, err
	}
	set := func(ctx context.Context, blocked bool) error {
		return errors.Join(r.l.Block(ctx, ga, gb, blocked), r.l.Block(ctx, gb, ga, blocked))
	}
	in.inject = func(ctx context.Context) error { return set(ctx, true) }
	in.repair = func(ctx context.Context) error { return set(ctx, false) }
	in.wayBack = name == LinkCut && !r.cfg.NoWayBack
	switch name {
	case LinkCutOneWay:
		in.target = ga.Name + "->" + gb.Name
		in.inject = func(ctx context.Context) error { return r.l.Block(ctx, ga, gb, true) }
		in.repair = func(ctx context.Context) error { return r.l.Block(ctx, ga, gb, false) }
	case LinkFlap:
		// Cut at 0, restore at one period, ... : the injection makes every
		// change but the last restore, which is the repair.
		changes := int(r.cfg.FlapDuration / r.cfg.FlapPeriod)
		if changes%2 == 1 {
			changes++ // end restored
		}
		in.linkChanges = changes
		in.countPaths = true
		in.lasts = time.Duration(changes-1) * r.cfg.FlapPeriod
		in.hold = r.cfg.FlapPeriod
		in.inject = func(ctx context.Context) error {
			next := time.Now()
			for i := 0; i < changes-1; i++ {
				if err := sleepUntil(ctx, next); err != nil {
					return err
				}
				if err := set(ctx, i%2 == 0); err != nil {
					return err
				}
				next = next.Add(r.cfg.FlapPeriod)
			}
			return nil
		}
	}
	return in, nil
}

// prepareRelay prepares relay-down: the gateway that relays a pair of
// sites' traffic goes down.
func (r *runner) prepareRelay(ctx context.Context) (*instance, error) {
	active, err := r.activeOrNil(ctx)
	if err != nil {
		return nil, err
	}
	plans, err := r.plans(active)
	if err != nil {
		return nil, err
	}
	a, b, relay, err := r.relayed(plans)
	if err != nil {
		return nil, err
	}
	failed, err := r.plansWith(active, plan.Inputs{}.WithGatewayDown(relay.Name))
	if err != nil {
		return nil, err
	}
	in := &instance{target: relay.Name, blast: Blast{Gateways: []string{relay.Name}, Sites: []string{relay.Site}, SitesDown: []string{relay.Site}, Networks: rebuilt(plans, failed)}}
	if in.client, in.server, err = r.transferHosts(a, b); err != nil {
		return nil, err
	}
	in.inject, in.repair = r.machineDown(relay)
	return in, nil
}

// prepareManager prepares manager-killed-during-change: a spec change
// that touches every gateway (the underlay MTU) is applied and the manager
// is killed with SIGKILL as soon as it has stored it, while the agents
// fetch and apply their new plans; the repair starts the manager again,
// and the fault has recovered once every agent reports the new plan
// applied. It concerns no pair: all must keep answering. With the manager
// down, it is started for the change and stopped again afterwards.
func (r *runner) prepareManager(ctx context.Context) (*instance, error) {
	sites := r.l.Sites()
	peer, err := r.routedPeer(sites[0])
	if err != nil {
		return nil, err
	}
	in := &instance{target: "manager", manager: ManagerWasKilled}
	if in.client, in.server, err = r.transferHosts(sites[0], peer); err != nil {
		return nil, err
	}
	mtu := r.f.Overlay.UnderlayMTU - 20
	changed, err := demo.WithUnderlayMTU(r.yaml, mtu)
	if err != nil {
		return nil, err
	}
	var affected []string
	in.inject = func(ctx context.Context) error {
		if r.managerDown {
			if err := r.m.StartManager(ctx); err != nil {
				return err
			}
		}
		resp, err := r.m.Apply(ctx, changed)
		if err != nil {
			return fmt.Errorf("applying underlayMTU %d: %w", mtu, err)
		}
		affected = resp.Affected
		if _, err := r.l.Manager.KillAll(ctx); err != nil {
			return err
		}
		r.step("%s: revision %d stored (underlayMTU %d, %d gateways affected); manager killed", ManagerKilled, resp.Revision, mtu, len(affected))
		return nil
	}
	in.repair = func(ctx context.Context) error { return r.m.StartManager(ctx) }
	in.verify = func(ctx context.Context) error {
		wctx, cancel := context.WithTimeout(ctx, r.cfg.RecoverTimeout)
		defer cancel()
		if _, err := r.m.WaitApplied(wctx, affected); err != nil {
			return fmt.Errorf("the change did not land after the manager's restart: %w", err)
		}
		f, err := parseSpec(changed)
		if err != nil {
			return err
		}
		r.f, r.yaml = f, changed
		return nil
	}
	if r.managerDown {
		in.cleanup = func(ctx context.Context) error { return r.m.StopManager(ctx) }
	}
	return in, nil
}

// moveTimeout bounds how long operator-activate waits for the role to
// move: the named gateway takes it once it has run for the agents'
// hold-down (10 s), and with --manager-down the agents first reconnect to
// the manager started for the change (their backoff).
const moveTimeout = 60 * time.Second

// prepareActivate prepares operator-activate: an operator moves the HA
// site's active role to the standby (fednet gateway activate, through the
// API) and, after the hold, back. Each step waits until the named gateway
// holds the virtual address. It concerns the HA site's pairs. With the
// manager down, it is started for the two changes and stopped again.
func (r *runner) prepareActivate(ctx context.Context) (*instance, error) {
	active, err := r.active(ctx)
	if err != nil {
		return nil, err
	}
	standby := r.standby(active)
	if standby == nil {
		return nil, fmt.Errorf("site %s has no standby gateway", r.haSite)
	}
	peer, err := r.routedPeer(r.haSite)
	if err != nil {
		return nil, err
	}
	in := &instance{target: active.Name + "->" + standby.Name + "->" + active.Name,
		blast: Blast{Gateways: []string{active.Name, standby.Name}, Sites: []string{r.haSite}}}
	if in.client, in.server, err = r.transferHosts(peer, r.haSite); err != nil {
		return nil, err
	}
	in.inject = func(ctx context.Context) error {
		if r.managerDown {
			if err := r.m.StartManager(ctx); err != nil {
				return err
			}
		}
		return r.activate(ctx, standby)
	}
	in.repair = func(ctx context.Context) error { return r.activate(ctx, active) }
	if r.managerDown {
		in.cleanup = func(ctx context.Context) error { return r.m.StopManager(ctx) }
	}
	return in, nil
}

// activate asks the manager to make gw its site's active gateway (again
// while it refuses a gateway whose report is not fresh yet: a manager just
// started) and waits until gw alone holds the virtual address.
func (r *runner) activate(ctx context.Context, gw *lab.Node) error {
	wctx, cancel := context.WithTimeout(ctx, moveTimeout)
	defer cancel()
	for {
		_, err := r.m.Admin.Activate(wctx, gw.Name)
		if err == nil {
			break
		}
		if wctx.Err() != nil {
			return fmt.Errorf("activating %s: %w", gw.Name, err)
		}
		if err := sleepUntil(wctx, time.Now().Add(200*time.Millisecond)); err != nil {
			return fmt.Errorf("activating %s: %w", gw.Name, err)
		}
	}
	start := time.Now()
	for {
		h, err := r.l.VirtualAddressHolders(wctx, r.haSite)
		if err == nil && len(h) == 1 && h[0] == gw {
			r.step("%s: %s holds the virtual address %.2f s after the activation", OperatorActivate, gw.Name, time.Since(start).Seconds())
			return nil
		}
		if err := sleepUntil(wctx, time.Now().Add(20*time.Millisecond)); err != nil {
			return fmt.Errorf("%s activated but it does not hold site %s's virtual address after %v", gw.Name, r.haSite, moveTimeout)
		}
	}
}

// activeOrNil returns the HA site's active gateway, or nil when the spec
// has no HA site.
func (r *runner) activeOrNil(ctx context.Context) (*lab.Node, error) {
	if r.haSite == "" {
		return nil, nil
	}
	return r.active(ctx)
}

// sleepUntil waits until t or ctx ends.
func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// rebuilt returns the bridged networks whose VXLAN ports differ between
// two sets of plans on some gateway: moving a network's frames onto its
// relay tree rebuilds its ports at every member, so all its pairs notice.
func rebuilt(before, after map[string]plan.Gateway) []string {
	var out []string
	for name, g := range before {
		for _, b := range g.Bridges {
			var other *plan.Bridge
			for i, a := range after[name].Bridges {
				if a.Network == b.Network {
					other = &after[name].Bridges[i]
				}
			}
			if (other == nil || !slices.EqualFunc(b.VXLANs, other.VXLANs, func(x, y plan.VXLAN) bool {
				return x.Name == y.Name && x.UDPPort == y.UDPPort && slices.Equal(x.Remotes, y.Remotes)
			})) && !slices.Contains(out, b.Network) {
				out = append(out, b.Network)
			}
		}
	}
	slices.Sort(out)
	return out
}
