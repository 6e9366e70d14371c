package agent

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/await"
	"github.com/fednet/fednet/internal/dataplane"
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

// recordedOps records the way back's bridgedOps, with how many plans were
// applied before each.
type recordedOps struct {
	mu    sync.Mutex
	plans func() int
	log   []string
}

func (r *recordedOps) note(format string, args ...any) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log = append(r.log, fmt.Sprintf(format, args...)+fmt.Sprintf(" after %d plans", r.plans()))
	return nil
}

func (r *recordedOps) ForgetLearned(dev string) error { return r.note("forget %s", dev) }
func (r *recordedOps) SetPortLearning(dev string, on bool) error {
	return r.note("learning %s %v", dev, on)
}
func (r *recordedOps) ForgetPort(dev string) error { return r.note("forget port %s", dev) }
func (r *recordedOps) SeparateShapes(s []dataplane.Shapes) error {
	return r.note("separate %v", s)
}

func (r *recordedOps) Log() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.log)
}

// wayBackPlans plans gateway with the links down, and as planned.
func wayBackPlans(t *testing.T, gateway string, down ...[2]string) (held, normal plan.Gateway) {
	t.Helper()
	normal = haPlans(t)[gateway]
	l := normal.Local
	in := l.Inputs()
	for _, d := range down {
		in = in.WithLinkDown(d[0], d[1])
	}
	held, err := plan.ForGateway(l.Federation, in, gateway)
	if err != nil {
		t.Fatal(err)
	}
	held.Local = l
	return held, normal
}

func bridgePortNames(b plan.Bridge) (out []string) {
	for _, v := range b.VXLANs {
		out = append(out, v.Name)
	}
	return out
}

// TestWayBackMakesPortsAhead: aws-gw while aws-eu <-> azure-we is down
// bridges lan through the relay tree (fvx200-N). Back on the link: first
// the shapes are kept apart (fvx200 from fvx200-*), the tree's port stops
// learning and forgets; the lead plan it applies then has the full mesh's
// port fvx200 besides the tree's, flooding to the members at once, and the
// firewall takes its UDP port from the tunnels; at the end of the lead, a
// plan that switches the bridges alone (the routes and peers of the
// applied plan, the bridges of the plan as planned, the firewall of the
// lead); then the plan as planned (fvx200 alone), and the separation goes.
// A failover has no lead.
func TestWayBackMakesPortsAhead(t *testing.T) {
	cut, normal := wayBackPlans(t, "aws-gw", [2]string{"aws-eu", "azure-we"})
	tree, _ := bridge(cut, "fbr200")
	mesh, _ := bridge(normal, "fbr200")
	if len(tree.VXLANs) != 1 || tree.VXLANs[0].Name == "fvx200" || len(mesh.VXLANs) != 1 || mesh.VXLANs[0].Name != "fvx200" {
		t.Fatalf("planner: tree ports %+v, mesh ports %+v; want one tree port, then fvx200", tree.VXLANs, mesh.VXLANs)
	}
	treePort := tree.VXLANs[0].Name
	h, got := recorder(t, "aws-gw", normal.Local)
	ops := &recordedOps{plans: func() int { return len(*got) }}
	h.bridged = ops
	h.after = func(_ time.Duration, f func()) { f() }
	h.applied = &cut
	pair := plan.Pair("aws-eu", "azure-we")
	h.appliedDown = map[plan.SitePair]bool{pair: true}
	h.deliverMoving(Update{Plan: &normal})
	if len(*got) != 3 {
		t.Fatalf("%d plans applied on the way back, want 3 (the lead's, the bridges' switch, the plan)", len(*got))
	}
	lead, _ := bridge((*got)[0], "fbr200")
	if !slices.Equal(bridgePortNames(lead), []string{"fvx200", treePort}) {
		t.Fatalf("lead ports %v, want fvx200 and %s", bridgePortNames(lead), treePort)
	}
	if !slices.Equal(lead.VXLANs[0].Remotes, mesh.VXLANs[0].Remotes) || !slices.Equal(lead.VXLANs[1].Remotes, tree.VXLANs[0].Remotes) {
		t.Errorf("lead: fvx200 floods to %v (want %v), the tree port to %v (want %v)", lead.VXLANs[0].Remotes, mesh.VXLANs[0].Remotes, lead.VXLANs[1].Remotes, tree.VXLANs[0].Remotes)
	}
	// During the lead the bridge learns behind neither shape: a relay that
	// learned a host behind the mesh's port would send the tree's frames
	// to that host into the mesh, where the separation drops them.
	if !lead.VXLANs[0].NoLearning || !lead.VXLANs[1].NoLearning {
		t.Errorf("lead: learning off on fvx200 %v, on %s %v; want off on both", lead.VXLANs[0].NoLearning, treePort, lead.VXLANs[1].NoLearning)
	}
	if b, _ := bridge(cut, "fbr200"); b.VXLANs[0].NoLearning {
		t.Error("newWayBack changed the applied plan's tree port")
	}
	if fw := (*got)[0].Firewall.TunnelPorts; !slices.Contains(fw, plan.VXLANPort) || !slices.Contains(fw, tree.VXLANs[0].UDPPort) {
		t.Errorf("lead's tunnel ports %v, want %d and %d", fw, plan.VXLANPort, tree.VXLANs[0].UDPPort)
	}
	sw := (*got)[1]
	if b, _ := bridge(sw, "fbr200"); !slices.Equal(bridgePortNames(b), []string{"fvx200"}) || !slices.Equal(b.VXLANs[0].Remotes, mesh.VXLANs[0].Remotes) || b.VXLANs[0].NoLearning {
		t.Errorf("the switch's ports %+v, want the plan's fvx200 flooding to %v and learning", b.VXLANs, mesh.VXLANs[0].Remotes)
	}
	if !slices.Equal(sw.Routes, cut.Routes) || !slices.Equal(sw.Firewall.TunnelPorts, (*got)[0].Firewall.TunnelPorts) {
		t.Errorf("the switch changes more than the bridges: routes %v (applied %v), tunnel ports %v (lead %v)", sw.Routes, cut.Routes, sw.Firewall.TunnelPorts, (*got)[0].Firewall.TunnelPorts)
	}
	if !plan.Equal((*got)[2], normal) {
		t.Error("the plan after the switch is not the plan as planned")
	}
	if b, _ := bridge(cut, "fbr200"); len(b.VXLANs) != 1 {
		t.Error("newWayBack changed the applied plan")
	}
	want := []string{
		"separate [{fvx200 fvx200-}] after 0 plans",
		"learning " + treePort + " false after 0 plans",
		"forget port " + treePort + " after 0 plans",
		"separate [] after 3 plans",
	}
	want = append(want, settleForgets([]string{"fvx200"}, 3)...)
	if l := ops.Log(); !slices.Equal(l, want) {
		t.Errorf("bridged ops:\n%s\nwant:\n%s", strings.Join(l, "\n"), strings.Join(want, "\n"))
	}

	// A failover (the link goes down) has no lead; outside the plan, the
	// new shape's port forgets what was learned.
	*got = nil
	h.applied, h.appliedDown = &normal, nil
	h.dec.LinksDown = map[plan.SitePair]bool{pair: true}
	h.deliverMoving(Update{Plan: &cut})
	if l := ops.Log()[len(want):]; len(*got) != 1 || !slices.Equal(l, settleForgets([]string{treePort}, 1)) {
		t.Errorf("a failover: %d plans applied (want 1), bridged ops %v, want %v", len(*got), l, settleForgets([]string{treePort}, 1))
	}
}

// settleForgets are the ops of forgetAfterReshape(ports) after the given
// number of plans, when its timers fire at once.
func settleForgets(ports []string, plans int) []string {
	var out []string
	for range SwitchForget {
		for _, p := range ports {
			out = append(out, fmt.Sprintf("forget %s after %d plans", p, plans), fmt.Sprintf("forget port %s after %d plans", p, plans))
		}
	}
	return out
}

// reshaped names the ports to gateways of every bridge whose ports to
// gateways changed (made, deleted), and of new bridges; never a port that
// only floods elsewhere, a draining bridge's, nor a host's port.
func TestReshaped(t *testing.T) {
	cut, normal := wayBackPlans(t, "aws-gw", [2]string{"aws-eu", "azure-we"})
	moved := normal
	moved.Bridges = slices.Clone(normal.Bridges)
	moved.Bridges[0].VXLANs = slices.Clone(moved.Bridges[0].VXLANs)
	moved.Bridges[0].VXLANs[0].Remotes = moved.Bridges[0].VXLANs[0].Remotes[:1]
	draining := cut
	draining.Bridges = slices.Clone(cut.Bridges)
	draining.Bridges[0].Drain = true
	withHost := normal
	withHost.Bridges = slices.Clone(normal.Bridges)
	withHost.Bridges[0].VXLANs = append(slices.Clone(normal.Bridges[0].VXLANs), plan.VXLAN{Name: "fnb0", Kind: plan.ToHost})
	none := normal
	none.Bridges = nil
	tests := []struct {
		name       string
		prev, next plan.Gateway
		want       []string
	}{
		{"same plan", normal, normal, nil},
		{"tree to mesh", cut, normal, []string{"fvx200"}},
		{"mesh to tree", normal, cut, bridgePortNames(cut.Bridges[0])},
		{"a remote moved", normal, moved, nil},
		{"draining", normal, draining, nil},
		{"a host's port added", normal, withHost, nil},
		{"a new bridge", none, normal, []string{"fvx200"}},
		{"bridge gone", normal, none, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := reshaped(tt.prev, tt.next); !slices.Equal(got, tt.want) {
				t.Errorf("reshaped = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestWayBackQuietPorts: when a way back changes one relay tree's port for
// another's (not the mesh), the new port is made ahead flooding to nobody,
// learns nothing from the lead to the switch (plan.VXLAN.NoLearning), and
// the new tree's ports forget what they and the bridge learned after the
// plan applied, at each of SwitchForget; nothing is separated.
func TestWayBackQuietPorts(t *testing.T) {
	applied, _ := wayBackPlans(t, "aws-gw", [2]string{"aws-eu", "azure-we"}, [2]string{"aws-eu", "lab"})
	next, _ := wayBackPlans(t, "aws-gw", [2]string{"aws-eu", "azure-we"})
	w := newWayBack(applied, next)
	if len(w.quiet) == 0 || len(w.shapes) != 0 {
		t.Fatalf("way back from %v to %v: quiet %v, shapes %v; want a quiet port, no shapes", bridgePorts(applied), bridgePorts(next), w.quiet, w.shapes)
	}
	h, got := recorder(t, "aws-gw", next.Local)
	ops := &recordedOps{plans: func() int { return len(*got) }}
	h.bridged = ops
	h.applied = &applied
	h.appliedDown = map[plan.SitePair]bool{plan.Pair("aws-eu", "lab"): true}
	h.dec.LinksDown = map[plan.SitePair]bool{plan.Pair("aws-eu", "azure-we"): true}
	h.deliverMoving(Update{Plan: &next})
	lead, _ := bridge((*got)[0], "fbr200")
	for _, v := range lead.VXLANs {
		if slices.Contains(w.quiet, v.Name) && (len(v.Remotes) != 0 || !v.NoLearning) {
			t.Errorf("lead: the new port %s floods to %v, learning off %v; want nobody, off", v.Name, v.Remotes, v.NoLearning)
		}
	}
	q := w.quiet[0]
	sw, _ := bridge((*got)[1], "fbr200")
	if i := slices.IndexFunc(sw.VXLANs, func(v plan.VXLAN) bool { return v.Name == q }); i < 0 || sw.VXLANs[i].NoLearning {
		t.Errorf("the switch's ports %+v: want %s, learning", sw.VXLANs, q)
	}
	want := settleForgets(bridgePorts(next), 3)
	if !slices.Contains(bridgePorts(next), q) {
		t.Fatalf("the new tree's ports %v lack the quiet port %s", bridgePorts(next), q)
	}
	if err := await.Poll(10*time.Second, func() (bool, string) {
		return len(ops.Log()) >= len(want), fmt.Sprintf("ops %v", ops.Log())
	}); err != nil {
		t.Fatal(err)
	}
	if l := ops.Log(); !slices.Equal(l, want) {
		t.Errorf("bridged ops:\n%s\nwant:\n%s", strings.Join(l, "\n"), strings.Join(want, "\n"))
	}
}

func bridgePorts(p plan.Gateway) []string {
	b, _ := bridge(p, "fbr200")
	return bridgePortNames(b)
}

// TestStartEndsALeftSeparation: an agent killed during a bridged way back's
// lead leaves the shapes' separation (an nftables table) behind; the next
// agent removes it before it puts any plan in force.
func TestStartEndsALeftSeparation(t *testing.T) {
	plans := haPlans(t)
	p := plans["aws-gw"]
	applied := 0
	ops := &recordedOps{plans: func() int { return applied }}
	inner := funcSource(func(ctx context.Context, d Deliver) error {
		d(Update{Plan: &p, Why: "test"})
		return nil
	})
	h := newHASource(inner, HAConfig{}, nil, t.Logf).(*haSource)
	h.quiet = true // no echo or hello may leave the test's namespace
	h.bridged = ops
	if err := h.Run(context.Background(), func(u Update) Result { applied++; return Result{} }); err != nil {
		t.Fatal(err)
	}
	if log := ops.Log(); len(log) == 0 || log[0] != "separate [] after 0 plans" || applied == 0 {
		t.Errorf("bridged ops %q, %d plans applied; want the separation removed first", log, applied)
	}
}
