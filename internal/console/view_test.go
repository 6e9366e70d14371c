package console

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/spec"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// now is the tests' clock.
var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// fixture is the snapshot of testdata/federation.yaml as a manager would
// give it: every gateway enrolled, the plans computed by the planner, and
// reports that make one link of each state.
func fixture(t *testing.T) Snapshot {
	t.Helper()
	_, f := federation(t)
	gws, err := plan.Compute(f, plan.Inputs{})
	if err != nil {
		t.Fatal(err)
	}
	s := Snapshot{Federation: f.Name, Revision: 2, Generation: 7, Plans: map[string]plan.Gateway{}, Now: now,
		Revisions: []api.Revision{
			{Revision: 1, Created: now.Add(-2 * time.Hour), Sites: 3, Gateways: 4, Networks: 2},
			{Revision: 2, Created: now.Add(-time.Hour), Sites: 4, Gateways: 5, Networks: 3},
		}}
	for _, g := range gws {
		s.Plans[g.Name] = g
	}
	for _, site := range f.Sites {
		as := api.Site{Name: site.Name, Provider: site.Provider, Region: site.Region, Prefixes: site.Prefixes}
		for _, g := range site.Gateways {
			as.Gateways = append(as.Gateways, g.Name)
			s.Gateways = append(s.Gateways, api.Gateway{Name: g.Name, Site: site.Name, Enrolled: true, EnrolledAt: now.Add(-50 * time.Minute),
				Endpoint: g.Endpoint, TransitAddress: g.TransitAddress, PlanGeneration: 7, AppliedGeneration: 7, AppliedRevision: 2,
				LastReport: now.Add(-2 * time.Second)})
		}
		s.Sites = append(s.Sites, as)
	}
	for _, n := range f.Networks {
		s.Networks = append(s.Networks, api.Network{Name: n.Name, ID: n.ID, Mode: string(n.Mode), Sites: n.Sites})
	}
	good := &api.LinkProbe{Up: true, Window: time.Minute, Sent: 60, RTTP50: 900 * time.Microsecond, RTTP99: 2 * time.Millisecond}
	lossy := &api.LinkProbe{Up: true, Window: time.Minute, Sent: 60, Lost: 3, Loss: 0.05, RTTP50: time.Millisecond, RTTP99: 3 * time.Millisecond}
	cut := &api.LinkProbe{Up: false, RecentLoss: 1, Window: time.Minute, Sent: 60, Lost: 3, Loss: 0.05}
	hs := now.Add(-20 * time.Second)
	s.Links = []api.Link{
		{From: "aws-gw", To: "azure-gw", Up: true, LastHandshake: hs, Probe: good, AvailableBandwidth: 940e6},
		{From: "azure-gw", To: "aws-gw", Up: true, LastHandshake: hs, Probe: good},
		{From: "azure-gw", To: "gcp-gw", Up: true, LastHandshake: hs, Probe: lossy},
		{From: "office-gw1", To: "gcp-gw", Up: false, LastHandshake: hs, Probe: cut},
		{From: "gcp-gw", To: "office-gw1", Up: true, LastHandshake: hs, Probe: good},
	}
	return s
}

// federation is testdata/federation.yaml, as text and parsed.
func federation(t *testing.T) ([]byte, *spec.Federation) {
	t.Helper()
	text, err := os.ReadFile(filepath.Join("testdata", "federation.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := spec.Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	return text, f
}

func TestBuild(t *testing.T) {
	s := fixture(t)
	v := Build(s)

	// Roles: the office's first gateway is active, the second standby.
	roles := map[string]Role{}
	for _, g := range v.Gateways {
		roles[g.Name] = g.Role
		if g.RoleSource != "plan" || g.Health != HealthOK {
			t.Errorf("gateway %s: role source %q, health %q; want plan, ok", g.Name, g.RoleSource, g.Health)
		}
	}
	want := map[string]Role{"aws-gw": RoleActive, "azure-gw": RoleActive, "gcp-gw": RoleActive, "office-gw1": RoleActive, "office-gw2": RoleStandby}
	for name, r := range want {
		if roles[name] != r {
			t.Errorf("gateway %s is %q, want %q", name, roles[name], r)
		}
	}

	// Links: one per planned peer pair, none between the disabled pair,
	// none between the office's own gateways.
	states := map[string]LinkState{}
	for _, l := range v.Links {
		states[l.ID] = l.State
	}
	for _, id := range []string{"aws-gw|gcp-gw", "office-gw1|office-gw2"} {
		if _, ok := states[id]; ok {
			t.Errorf("link %s is shown; the plans have no such link", id)
		}
	}
	wantStates := map[string]LinkState{
		"aws-gw|azure-gw":   LinkUp,       // both sides up, no loss
		"azure-gw|gcp-gw":   LinkDegraded, // up, 5 % loss
		"gcp-gw|office-gw1": LinkDown,     // one side down is down
		"aws-gw|office-gw1": LinkUnknown,  // nobody reported
	}
	for id, st := range wantStates {
		if states[id] != st {
			t.Errorf("link %s is %q, want %q", id, states[id], st)
		}
	}
	// Every gateway but the standby's site mate links to every gateway of
	// the other enabled site pairs: 5 gateways, 10 pairs, less aws–gcp and
	// the office's own pair.
	if len(v.Links) != 8 {
		t.Errorf("%d links, want 8: %v", len(v.Links), states)
	}
	for _, l := range v.Links {
		for i, d := range l.Directions {
			if wantFrom := []string{l.A, l.B}[i]; len(l.Directions) == 2 && d.From != wantFrom {
				t.Errorf("link %s: direction %d is from %s, want %s", l.ID, i, d.From, wantFrom)
			}
		}
	}
	if v.Summary != (Summary{Sites: 4, Gateways: 5, Enrolled: 5, LinksUp: 1, LinksDegraded: 1, LinksDown: 1, LinksUnknown: 5}) {
		t.Errorf("summary %+v", v.Summary)
	}

	// The disabled link's routed traffic crosses one site.
	if len(v.Relays) != 1 || v.Relays[0].ID != "aws-eu|gcp-us" || len(v.Relays[0].Via) != 1 || !slices.Contains([]string{"azure-we", "office"}, v.Relays[0].Via[0]) {
		t.Errorf("relays %+v, want aws-eu|gcp-us via azure-we or office", v.Relays)
	}

	// Newest revision first; sites know their networks.
	if v.Revisions[0].Revision != 2 {
		t.Errorf("revisions not newest first: %+v", v.Revisions)
	}
	for _, site := range v.Sites {
		if site.Name == "gcp-us" && !slices.Equal(site.Networks, []string{"apps"}) {
			t.Errorf("gcp-us is in %v, want [apps]", site.Networks)
		}
	}

	got, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "view.golden.json", append(got, '\n'))
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from what Build gives now (go test -update rewrites it); got:\n%s", path, got)
	}
}

// TestBuildEmpty: a manager without a spec gives an empty view whose lists
// are empty, not null (the page iterates them).
func TestBuildEmpty(t *testing.T) {
	v := Build(Snapshot{Now: now})
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte("null")) {
		t.Errorf("empty view has a null list: %s", b)
	}
}

func TestGatewayHealth(t *testing.T) {
	base := api.Gateway{Enrolled: true, PlanGeneration: 3, AppliedGeneration: 3, LastReport: now.Add(-time.Second)}
	for _, c := range []struct {
		name string
		edit func(*api.Gateway)
		want Health
	}{
		{"ok", func(*api.Gateway) {}, HealthOK},
		{"behind", func(g *api.Gateway) { g.AppliedGeneration = 2 }, HealthBehind},
		{"silent", func(g *api.Gateway) { g.LastReport = now.Add(-SilentAfter - time.Second) }, HealthSilent},
		{"error", func(g *api.Gateway) { g.ApplyError = "boom" }, HealthError},
		{"pending", func(g *api.Gateway) { g.Enrolled, g.LastReport = false, time.Time{} }, HealthPending},
		{"removed", func(g *api.Gateway) { g.Removed = true; g.ApplyError = "x" }, HealthRemoved},
	} {
		g := base
		c.edit(&g)
		if got := health(g, now); got != c.want {
			t.Errorf("%s: health %q, want %q", c.name, got, c.want)
		}
	}
}
