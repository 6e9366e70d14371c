package agent

import (
	"context"
	"os"
	"testing"

	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/spec"
)

type funcSource func(context.Context, Deliver) error

func (f funcSource) Run(ctx context.Context, d Deliver) error { return f(ctx, d) }

// haPlans plans examples/ha.yaml as the manager does (Local attached).
func haPlans(t *testing.T) map[string]plan.Gateway {
	t.Helper()
	data, err := os.ReadFile("../../examples/ha.yaml")
	if err != nil {
		t.Fatal(err)
	}
	f, err := spec.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	gws, err := plan.Compute(f, plan.Inputs{})
	if err != nil {
		t.Fatal(err)
	}
	plan.AttachLocal(gws, f, plan.Inputs{})
	out := map[string]plan.Gateway{}
	for _, g := range gws {
		out[g.Name] = g
	}
	return out
}

// delivered runs a haSource over one plan and returns what it delivered.
func delivered(t *testing.T, p plan.Gateway, cfg HAConfig) []Update {
	t.Helper()
	var got []Update
	inner := funcSource(func(ctx context.Context, d Deliver) error {
		d(Update{Plan: &p, Why: "test"})
		return nil
	})
	src := newHASource(inner, cfg, nil, nil)
	if h, ok := src.(*haSource); ok {
		h.quiet = true // no echo or hello may leave the test's namespace
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := src.Run(ctx, func(u Update) Result { got = append(got, u); return Result{} }); err != nil {
		t.Fatal(err)
	}
	return got
}

// An agent that starts on the site's first gateway without holding the
// virtual address does not take the site's hosts before the election: the
// plan it puts in force first is the standby's. Its standby sibling and a
// remote gateway get their plans as planned.
func TestHASourceFirstPlan(t *testing.T) {
	plans := haPlans(t)
	gw1 := plans["onprem-gw1"]
	if !gw1.LAN.Active {
		t.Fatal("the planner makes onprem-gw1 active")
	}
	got := delivered(t, gw1, HAConfig{})
	if len(got) != 1 || got[0].Plan.LAN.Active {
		t.Fatalf("first plan of onprem-gw1 (not holding the address): %d updates, active %v; want one, standby", len(got), len(got) == 1 && got[0].Plan.LAN.Active)
	}
	for _, name := range []string{"onprem-gw2", "aws-gw"} {
		got := delivered(t, plans[name], HAConfig{})
		if len(got) != 1 || !plan.Equal(*got[0].Plan, plans[name]) {
			t.Errorf("%s: the plan was changed before any failure", name)
		}
	}
	// Off, or a plan without Local: as planned.
	if got := delivered(t, gw1, HAConfig{Off: true}); len(got) != 1 || !got[0].Plan.LAN.Active {
		t.Error("--no-failover changed the plan")
	}
	bare := gw1
	bare.Local = nil
	if got := delivered(t, bare, HAConfig{}); len(got) != 1 || !got[0].Plan.LAN.Active {
		t.Error("a plan without local inputs was changed")
	}
}

// TestRelays: with every link up no peer's site is relayed; with the link
// aws-eu<->gcp-ew down, aws-gw sends gcp-ew's traffic through a gateway
// of a third site, and its report names that gateway for the link to
// gcp-gw only.
func TestRelays(t *testing.T) {
	plans := haPlans(t)
	if r := relays(plans["aws-gw"]); len(r) != 0 {
		t.Errorf("relays with every link up: %v", r)
	}
	l := plans["aws-gw"].Local
	p, err := plan.ForGateway(l.Federation, l.Inputs().WithLinkDown("aws-eu", "gcp-ew"), "aws-gw")
	if err != nil {
		t.Fatal(err)
	}
	p.Local = l
	r := relays(p)
	via, ok := r["gcp-gw"]
	if !ok || len(r) != 1 {
		t.Fatalf("relays with aws-eu<->gcp-ew down: %v; want gcp-gw only", r)
	}
	_, site, _ := l.Federation.Gateway(via)
	if site.Name == "aws-eu" || site.Name == "gcp-ew" {
		t.Errorf("gcp-gw relayed via %s of site %s, not a third site", via, site.Name)
	}
	p.Local = nil
	if r := relays(p); r != nil {
		t.Errorf("relays of a plan without Local: %v", r)
	}
}
