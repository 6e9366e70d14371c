package console

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/demo"
	"github.com/fednet/fednet/internal/lab"
	"github.com/fednet/fednet/internal/plan"
)

// fednetBinary is the fednet executable the lab runs (built by TestMain as root).
var fednetBinary string

func TestMain(m *testing.M) { os.Exit(demo.RunTests(m, &fednetBinary)) }

// proxy forwards TCP connections from 127.0.0.1 in this namespace to addr,
// dialled with dial (from inside the lab: this namespace has no route to
// the lab's addresses, and the lab never touches it). It returns the
// address to connect to; it stops at the end of the test.
func proxy(t *testing.T, dial func(ctx context.Context, network, addr string) (net.Conn, error), addr string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	track := func(c net.Conn, on bool) {
		mu.Lock()
		defer mu.Unlock()
		if on {
			conns[c] = true
		} else {
			delete(conns, c)
		}
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				track(c, true)
				defer track(c, false)
				u, err := dial(ctx, "tcp", addr)
				if err != nil {
					return
				}
				defer u.Close()
				track(u, true)
				defer track(u, false)
				done := make(chan struct{}, 2)
				go func() { io.Copy(u, c); done <- struct{}{} }()
				go func() { io.Copy(c, u); done <- struct{}{} }()
				<-done // either side closed: close both (defers)
			})
		}
	})
	return ln.Addr().String()
}

// TestConsoleOnLab is the console end to end: the federation of
// testdata/federation.yaml in a lab, run by `fednet manager` and one
// `fednet agent` per gateway, and the console in a real Chromium. A wrong
// token sees nothing; the admin token sees every site, gateway and link and
// the relayed path; cutting a site's internet link turns its links red
// within 5 s; restoring it brings them back; the page logs no console
// error. With -console.screenshots DIR it writes console-up.png (every
// link up) and console.png (the cut, the README's picture) there: make
// screenshot.
func TestConsoleOnLab(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the lab creates network namespaces (CI runs as root)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	text, f := federation(t)
	bridged, err := demo.LabBridged(f)
	if err != nil {
		t.Fatal(err)
	}
	const name = "e2econsole"
	lab.Down(ctx, name)
	l, err := lab.Up(ctx, lab.Config{Federation: f, Name: name, Manager: true, Bridged: bridged})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		l.Down(context.Background())
		if st, err := lab.Status(context.Background(), name); err == nil && st.Exists() {
			t.Errorf("lab %q left behind:\n%s", name, st)
		}
	})
	m, err := demo.StartManaged(ctx, l, fednetBinary)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Stop(context.Background()) })
	if _, err := m.Apply(ctx, string(text)); err != nil {
		t.Fatal(err)
	}
	for _, gw := range l.Gateways() {
		if err := m.Enroll(ctx, gw.Name); err != nil {
			t.Fatal(err)
		}
	}

	// The browser runs in this namespace; the manager in the lab.
	managerAddr := strings.TrimPrefix(m.URL(), "https://")
	local := proxy(t, m.Dialer(), managerAddr)
	conn, err := tls.Dial("tcp", local, &tls.Config{InsecureSkipVerify: true}) // only to read the key to pin
	if err != nil {
		t.Fatal(err)
	}
	pin := spkiOf(conn.ConnectionState())
	conn.Close()
	token, err := os.ReadFile(filepath.Join(l.Manager.Dir, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	url := "https://" + local + Prefix
	c := startChromium(t, pin)

	var siteNames []string
	for _, s := range f.Sites {
		siteNames = append(siteNames, s.Name)
	}
	checkWrongToken(t, c.tab(), url, siteNames)

	// The links the page must show: those of the plans.
	gws, err := plan.Compute(f, plan.Inputs{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, g := range gws {
		for _, p := range g.Peers {
			if id := pairID(g.Name, p.Gateway); !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
	}
	slices.Sort(ids)
	const cut = "gcp-us"
	cutGW := l.SiteGateways(cut)[0].Name
	touchesCut := func(id string) bool { a, b, _ := strings.Cut(id, "|"); return a == cutGW || b == cutGW }

	tb := c.tab()
	tb.login(url, strings.TrimSpace(string(token)))
	took := tb.until(60*time.Second, "every link up", allLinks(ids, func(string) string { return "up" }))
	t.Logf("the page showed the %d links up %v after login", len(ids), took.Round(time.Millisecond))
	st := tb.state()
	slices.Sort(st.Sites)
	if !slices.Equal(st.Sites, siteNames) {
		t.Errorf("page shows sites %v, want %v", st.Sites, siteNames)
	}
	roles := map[string]string{}
	for _, g := range st.Gateways {
		roles[g.Name] = g.Role
	}
	if len(roles) != 5 || roles["office-gw1"] != "active" || roles["office-gw2"] != "standby" || roles["aws-gw"] != "active" {
		t.Errorf("gateways and roles on the page: %v", roles)
	}
	if len(st.Relays) != 1 || !strings.HasPrefix(st.Relays[0], "aws-eu|gcp-us via ") {
		t.Errorf("relayed paths on the page: %v, want aws-eu|gcp-us", st.Relays)
	}
	if !st.OnScreen {
		t.Error("some of the graph lies outside the page")
	}
	// Every link shows its RTT; hovering one shows its figures.
	tb.until(20*time.Second, "an RTT on every link", `fednetConsole.graph().edges('.link').every(e => / ms$/.test(e.data('label')))`)
	card := tb.hover("link:azure-gw|office-gw1")
	for _, want := range []string{"azure-gw → office-gw1", "office-gw1 → azure-gw", "RTT p50 / p99", "loss (1 min)", "handshake", "endpoint"} {
		if !strings.Contains(card, want) {
			t.Errorf("hover card of azure-gw|office-gw1 lacks %q:\n%s", want, card)
		}
	}
	tb.screenshot("console-up.png")

	// Cut gcp-us off the internet: its links turn red within 5 s.
	t.Cleanup(func() { l.SetInternet(context.Background(), cut, true) })
	if err := l.SetInternet(ctx, cut, false); err != nil {
		t.Fatal(err)
	}
	took = tb.until(5*time.Second, "the links of "+cut+" red", allLinks(ids, func(id string) string {
		if touchesCut(id) {
			return "down"
		}
		return "up"
	})+` && fednetConsole.graph().edges('.link.down').every(e => e.style('line-color') === '`+red+`')`)
	t.Logf("cut %s's internet link: its links turned red on the page %v later", cut, took.Round(time.Millisecond))
	st = tb.state()
	for _, lk := range st.Links {
		want := green
		if touchesCut(lk.ID) {
			want = red
		}
		if lk.Color != want {
			t.Errorf("after the cut, link %s is %s, coloured %s; want %s", lk.ID, lk.State, lk.Color, want)
		}
	}
	for _, row := range st.Rows {
		id, class, _ := strings.Cut(row, " ")
		if touchesCut(id) != (class == "down") {
			t.Errorf("after the cut, the links table says %q", row)
		}
	}
	tb.until(5*time.Second, "the event", fmt.Sprintf(`document.getElementById('events').innerText.includes('%s down')`, "– "+cutGW))
	tb.screenshot("console.png")

	if err := l.SetInternet(ctx, cut, true); err != nil {
		t.Fatal(err)
	}
	took = tb.until(30*time.Second, "every link up again", allLinks(ids, func(string) string { return "up" }))
	t.Logf("restored %s's internet link: every link up again on the page %v later", cut, took.Round(time.Millisecond))

	if errs := tb.errors(); len(errs) > 0 {
		t.Errorf("console errors:\n%s", strings.Join(errs, "\n"))
	}
	if err := m.AgentsAlive(); err != nil {
		t.Error(err)
	}

	// Stopped by SIGTERM, each daemon says in one line what it leaves
	// running (issue 15: neither said anything).
	if err := m.StopAgent(ctx, "office-gw2"); err != nil {
		t.Fatal(err)
	}
	const agentLine = "agent stopping (terminated signal received); left running as they are: tunnel fed0 with 3 peers"
	if log := m.Agent("office-gw2").LogText(); !strings.Contains(log, agentLine) || !strings.Contains(log, "--down removes them") {
		t.Errorf("the agent's log does not say what it leaves running (%q):\n%s", agentLine, log)
	}
	if err := m.StopManager(ctx); err != nil {
		t.Fatal(err)
	}
	const managerLine = "manager stopping (terminated signal received): the API and the console close; every agent keeps its tunnels"
	if log := m.ManagerProcess().LogText(); !strings.Contains(log, managerLine) {
		t.Errorf("the manager's log does not say what stays running (%q):\n%s", managerLine, log)
	}
	tb.until(30*time.Second, "the page noticing", `!document.getElementById('live').classList.contains('on')`)
}

// allLinks is a page predicate: the graph shows exactly the links of ids,
// each in the state want gives it (up also accepts degraded: probe loss
// over the minute is no part of these tests).
func allLinks(ids []string, want func(id string) string) string {
	return linksPredicate(ids, func(id string) string {
		if w := want(id); w != "up" {
			return w
		}
		return "up|degraded"
	})
}
