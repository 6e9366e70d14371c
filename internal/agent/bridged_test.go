package agent

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/await"
	"github.com/fednet/fednet/internal/ha"
	"github.com/fednet/fednet/internal/plan"
)

// recorder is a haSource whose loop records the plans it is given.
func recorder(t *testing.T, self string, f *plan.Local) (*haSource, *[]plan.Gateway) {
	t.Helper()
	st, err := ha.New(ha.Config{Self: self, Federation: f.Federation}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var got []plan.Gateway
	h := &haSource{state: st, logf: t.Logf, quiet: true, announce: make(chan struct{}, 1)}
	h.deliver = func(u Update) Result { got = append(got, *u.Plan); return Result{} }
	return h, &got
}

func bridge(p plan.Gateway, name string) (plan.Bridge, bool) {
	i := slices.IndexFunc(p.Bridges, func(b plan.Bridge) bool { return b.Name == name })
	if i < 0 {
		return plan.Bridge{}, false
	}
	return p.Bridges[i], true
}

// TestBridgedHandoverDrains: onprem-gw1 steps down (the operator moved the
// role to onprem-gw2); the plan it applies keeps its bridge fbr200,
// draining, with its LAN port and its VXLAN port, and the firewall's
// tunnel port for it, while the rest is the standby's plan (no virtual
// address). The drain ends once the remote gateways send the lab site to
// onprem-gw2 and DrainMin passed; the plan then put in force has no
// bridge. Taking the role back ends a drain at once.
func TestBridgedHandoverDrains(t *testing.T) {
	active := haPlans(t)["onprem-gw1"]
	l := active.Local
	standby, err := plan.ForGateway(l.Federation, l.Inputs().WithActive("lab", "onprem-gw2"), "onprem-gw1")
	if err != nil {
		t.Fatal(err)
	}
	standby.Local = l
	if !active.LAN.Active || standby.LAN.Active || len(standby.Bridges) != 0 {
		t.Fatalf("planner: active %v standby %v with %d bridges; want an active plan and a standby one without bridges", active.LAN.Active, standby.LAN.Active, len(standby.Bridges))
	}
	h, got := recorder(t, "onprem-gw1", l)
	h.applied = &active
	h.deliverMoving(Update{Plan: &standby})
	if len(*got) != 1 {
		t.Fatalf("%d plans applied, want 1", len(*got))
	}
	p := (*got)[0]
	want, _ := bridge(active, "fbr200")
	b, ok := bridge(p, "fbr200")
	if !ok || !b.Drain || b.Port != want.Port || len(b.VXLANs) != len(want.VXLANs) || b.VXLANs[0].Name != "fvx200" {
		t.Fatalf("the stepping-down plan's bridges = %+v; want fbr200 of the active plan, draining", p.Bridges)
	}
	if p.LAN.Active || !slices.Contains(p.Firewall.TunnelPorts, plan.VXLANPort) {
		t.Errorf("draining plan: LAN active %v, tunnel ports %v; want standby, with %d", p.LAN.Active, p.Firewall.TunnelPorts, plan.VXLANPort)
	}
	if _, ok := bridge(standby, "fbr200"); ok {
		t.Error("withDraining changed the plan it was given")
	}
	since := h.drain.since

	// A plan delivered meanwhile (the manager's) keeps the drain.
	h.deliverMoving(Update{Plan: &standby})
	if b, ok := bridge((*got)[1], "fbr200"); !ok || !b.Drain {
		t.Fatal("a second standby plan during the drain dropped the bridge")
	}

	// The remote gateways move the site; the drain ends at DrainMin.
	now := since.Add(100 * time.Millisecond)
	for _, g := range []struct{ name, site string }{{"aws-gw", "aws-eu"}, {"azure-gw", "azure-we"}, {"gcp-gw", "gcp-ew"}} {
		h.state.Answered(g.name, false, now)
		h.state.Receive(ha.Hello{From: g.name, Entries: []ha.Entry{{Gateway: g.name, Site: g.site, Seq: now.UnixNano(), Sends: map[string]string{"lab": "onprem-gw2"}}}}, now)
	}
	if h.endDrainLocked(now) {
		t.Fatal("drain ended before DrainMin")
	}
	if !h.endDrainLocked(since.Add(ha.DrainMin)) {
		t.Fatal("drain not ended at DrainMin with every remote moved")
	}
	h.deliverMoving(Update{Plan: &standby})
	if p := (*got)[2]; len(p.Bridges) != 0 {
		t.Errorf("after the drain the plan has bridges %+v", p.Bridges)
	}

	// Stepping down again and taking the role back: no drain left.
	h.applied = &active
	h.deliverMoving(Update{Plan: &standby})
	h.deliverMoving(Update{Plan: &active})
	if h.drain != nil {
		t.Error("the drain outlived taking the role back")
	}
	if b, _ := bridge((*got)[4], "fbr200"); b.Drain {
		t.Error("the active plan's bridge drains")
	}
}

// TestWayBackMakesPortsAhead: aws-gw while aws-eu <-> azure-we is down
// bridges lan through the relay tree (fvx200-N); back on the link, the
// lead plan it applies first has the full mesh's port fvx200 besides the
// tree's, flooding to nobody, and the firewall takes its UDP port from the
// tunnels; at the end of the lead, a plan that switches the bridges alone
// (the routes and peers of the applied plan, the bridges of the plan as
// planned, the firewall of the lead); then the plan as planned (fvx200
// alone, flooding to the other members). The bridge learns nothing on
// fvx200 from the lead to the switch, and fvx200 forgets what it learned
// after the switch.
func TestWayBackMakesPortsAhead(t *testing.T) {
	normal := haPlans(t)["aws-gw"]
	l := normal.Local
	cutIn := l.Inputs().WithLinkDown("aws-eu", "azure-we")
	cut, err := plan.ForGateway(l.Federation, cutIn, "aws-gw")
	if err != nil {
		t.Fatal(err)
	}
	cut.Local = l
	tree, _ := bridge(cut, "fbr200")
	mesh, _ := bridge(normal, "fbr200")
	if len(tree.VXLANs) != 1 || tree.VXLANs[0].Name == "fvx200" || len(mesh.VXLANs) != 1 || mesh.VXLANs[0].Name != "fvx200" {
		t.Fatalf("planner: tree ports %+v, mesh ports %+v; want one tree port, then fvx200", tree.VXLANs, mesh.VXLANs)
	}
	h, got := recorder(t, "aws-gw", l)
	var mu sync.Mutex
	var forgot []string
	h.forget = func(dev string) error {
		mu.Lock()
		defer mu.Unlock()
		forgot = append(forgot, dev)
		return nil
	}
	var learning []string
	h.learning = func(dev string, on bool) error {
		learning = append(learning, fmt.Sprintf("%s %v after %d plans", dev, on, len(*got)))
		return nil
	}
	h.applied = &cut
	pair := plan.Pair("aws-eu", "azure-we")
	h.appliedDown = map[plan.SitePair]bool{pair: true}
	h.deliverMoving(Update{Plan: &normal})
	if len(*got) != 3 {
		t.Fatalf("%d plans applied on the way back, want 3 (the lead's, the bridges' switch, the plan)", len(*got))
	}
	lead, _ := bridge((*got)[0], "fbr200")
	names := func(b plan.Bridge) (out []string) {
		for _, v := range b.VXLANs {
			out = append(out, v.Name)
		}
		return out
	}
	if !slices.Equal(names(lead), []string{"fvx200", tree.VXLANs[0].Name}) {
		t.Fatalf("lead ports %v, want fvx200 and %s", names(lead), tree.VXLANs[0].Name)
	}
	if len(lead.VXLANs[0].Remotes) != 0 || !slices.Equal(lead.VXLANs[1].Remotes, tree.VXLANs[0].Remotes) {
		t.Errorf("lead: fvx200 floods to %v (want nobody), the tree port to %v (want %v)", lead.VXLANs[0].Remotes, lead.VXLANs[1].Remotes, tree.VXLANs[0].Remotes)
	}
	if fw := (*got)[0].Firewall.TunnelPorts; !slices.Contains(fw, plan.VXLANPort) || !slices.Contains(fw, tree.VXLANs[0].UDPPort) {
		t.Errorf("lead's tunnel ports %v, want %d and %d", fw, plan.VXLANPort, tree.VXLANs[0].UDPPort)
	}
	sw := (*got)[1]
	if b, _ := bridge(sw, "fbr200"); !slices.Equal(names(b), []string{"fvx200"}) || !slices.Equal(b.VXLANs[0].Remotes, mesh.VXLANs[0].Remotes) {
		t.Errorf("the switch's ports %v, want the plan's fvx200 flooding to %v", names(b), mesh.VXLANs[0].Remotes)
	}
	if !slices.Equal(sw.Routes, cut.Routes) || !slices.Equal(sw.Firewall.TunnelPorts, (*got)[0].Firewall.TunnelPorts) {
		t.Errorf("the switch changes more than the bridges: routes %v (applied %v), tunnel ports %v (lead %v)", sw.Routes, cut.Routes, sw.Firewall.TunnelPorts, (*got)[0].Firewall.TunnelPorts)
	}
	if !plan.Equal((*got)[2], normal) {
		t.Error("the plan after the switch is not the plan as planned")
	}
	if b, _ := bridge(cut, "fbr200"); len(b.VXLANs) != 1 {
		t.Error("withNewPorts changed the applied plan")
	}
	// The bridge learns nothing on the new port from the lead to the
	// switch.
	if want := []string{"fvx200 false after 1 plans", "fvx200 true after 2 plans"}; !slices.Equal(learning, want) {
		t.Errorf("learning on the new port: %q, want %q", learning, want)
	}
	// The new port forgets what it learned after the switch, at each of
	// SwitchForget.
	forgotten := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(forgot)
	}
	if err := await.Poll(5*time.Second, func() (bool, string) {
		return len(forgotten()) >= len(SwitchForget), fmt.Sprintf("forgot %v", forgotten())
	}); err != nil {
		t.Fatal(err)
	}
	if f := forgotten(); !slices.Equal(f, slices.Repeat([]string{"fvx200"}, len(SwitchForget))) {
		t.Errorf("forgot %v, want fvx200 %d times", f, len(SwitchForget))
	}

	// A failover (the link goes down) has no lead.
	*got = nil
	h.applied, h.appliedDown = &normal, nil
	h.dec.LinksDown = map[plan.SitePair]bool{pair: true}
	h.deliverMoving(Update{Plan: &cut})
	if len(*got) != 1 {
		t.Errorf("%d plans applied on a failover, want 1", len(*got))
	}
	await.Holds(t, SwitchForget[len(SwitchForget)-1]+100*time.Millisecond, 20*time.Millisecond, func() (bool, string) {
		f := forgotten()
		return len(f) == len(SwitchForget), fmt.Sprintf("a failover made ports forget: %v", f[len(SwitchForget):])
	})
}
