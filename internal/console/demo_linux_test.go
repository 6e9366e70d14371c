package console

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/demo"
	"github.com/fednet/fednet/internal/spec"
)

// demoSites is how many sites `fednet lab demo` builds by default.
const demoSites = 3

// TestConsoleOnDemoLab is the console on the federation `fednet lab demo`
// builds: its generated spec (demo.DemoSpecYAML: aws, azure and onprem;
// routed networks apps and ops, bridged network lan) in a lab, the spec
// applied through a manager's API and one agent per gateway enrolled with a
// join token, as the demo does. The page in a real Chromium shows every
// site, every gateway (the active one of its site, healthy), every link of
// the plans up with its round-trip time, every network with its sites,
// no relayed path (every pair of sites has a link), and logs no console
// error. With -console.screenshots DIR it writes console-demo.png there,
// the README's picture: make screenshot.
func TestConsoleOnDemoLab(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the lab creates network namespaces (CI runs as root)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	text, err := demo.DemoSpecYAML(demoSites)
	if err != nil {
		t.Fatal(err)
	}
	f, err := spec.Parse([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	lc := startLabConsole(ctx, t, "e2econdemo", []byte(text), f)
	c := startChromium(t, lc.pin)
	tb := c.tab()
	tb.login(lc.url, lc.token)

	ids := planLinks(t, f)
	took := tb.until(60*time.Second, "every link up and every gateway healthy",
		everyLinkUp(ids)+` && fednetConsole.graph().nodes('.gateway').every(n => n.hasClass('ok'))`)
	t.Logf("the page showed the %d links up %v after login", len(ids), took.Round(time.Millisecond))
	// The picture shows each link's round-trip time.
	tb.until(20*time.Second, "an RTT on every link", everyLinkRTT)
	st := tb.state()

	names := siteNames(f)
	slices.Sort(names)
	slices.Sort(st.Sites)
	if !slices.Equal(st.Sites, names) {
		t.Errorf("page shows sites %v, want %v", st.Sites, names)
	}

	wantGW := map[string]string{} // name: role and health
	for _, s := range f.Sites {
		for i, g := range s.Gateways {
			role := "active"
			if i > 0 {
				role = "standby"
			}
			wantGW[g.Name] = role + " ok"
		}
	}
	gotGW := map[string]string{}
	for _, g := range st.Gateways {
		gotGW[g.Name] = g.Role + " " + g.Health
	}
	if fmt.Sprint(gotGW) != fmt.Sprint(wantGW) {
		t.Errorf("gateways on the page (role, health): %v, want %v", gotGW, wantGW)
	}

	var shown, rows []string
	for _, lk := range st.Links {
		shown = append(shown, lk.ID)
		if lk.State == "up" && lk.Color != green {
			t.Errorf("link %s is up but coloured %s, want %s", lk.ID, lk.Color, green)
		}
	}
	slices.Sort(shown)
	if !slices.Equal(shown, ids) {
		t.Errorf("page shows links %v, want those of the plans %v", shown, ids)
	}
	for _, row := range st.Rows {
		id, class, _ := strings.Cut(row, " ")
		rows = append(rows, id)
		if class != "up" && class != "degraded" {
			t.Errorf("the links table says %q, want up", row)
		}
	}
	slices.Sort(rows)
	if !slices.Equal(rows, ids) {
		t.Errorf("the links table lists %v, want %v", rows, ids)
	}

	var wantNets []string
	for _, n := range f.Networks {
		wantNets = append(wantNets, n.Name+": "+strings.Join(n.Sites, ", "))
	}
	slices.Sort(wantNets)
	slices.Sort(st.Networks)
	if !slices.Equal(st.Networks, wantNets) {
		t.Errorf("networks on the page:\n  %s\nwant\n  %s", strings.Join(st.Networks, "\n  "), strings.Join(wantNets, "\n  "))
	}
	if len(st.Relays) != 0 {
		t.Errorf("relayed paths on the page: %v, want none (every pair of the demo's sites has a link)", st.Relays)
	}
	if !st.OnScreen {
		t.Error("some of the graph lies outside the page")
	}
	tb.screenshot("console-demo.png")

	if errs := tb.errors(); len(errs) > 0 {
		t.Errorf("console errors:\n%s", strings.Join(errs, "\n"))
	}
	if err := lc.m.AgentsAlive(); err != nil {
		t.Error(err)
	}
}
