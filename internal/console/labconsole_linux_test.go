package console

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/fednet/fednet/internal/demo"
	"github.com/fednet/fednet/internal/lab"
	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/spec"
)

// fednetBinary is the fednet executable the lab runs (built by TestMain as root).
var fednetBinary string

func TestMain(m *testing.M) { os.Exit(demo.RunTests(m, &fednetBinary)) }

// labConsole is a federation run on a lab as `fednet lab demo` runs it
// (`fednet manager` in the lab's manager node, the spec applied through
// the API, one `fednet agent` per gateway enrolled with a join token), and
// the console as a browser in this namespace reaches it.
type labConsole struct {
	lab *lab.Lab
	m   *demo.Managed
	// url is the console's page, through a proxy in this namespace.
	url string
	// pin is the manager's key, for startChromium.
	pin string
	// token is the admin token.
	token string
}

// startLabConsole builds lab name for f (specYAML is its text, applied as
// is), starts the manager, applies the spec, enrolls every gateway and
// opens a proxy to the console. A lab of that name left over from a
// crashed run goes first. The agents, the manager and the lab are removed
// at the end of the test, whether it passed or not, and a lab left behind
// fails it.
func startLabConsole(ctx context.Context, t *testing.T, name string, specYAML []byte, f *spec.Federation) *labConsole {
	t.Helper()
	bridged, err := demo.LabBridged(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := lab.Down(ctx, name); err != nil {
		t.Fatalf("removing an old lab %q: %v", name, err)
	}
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
	if err := l.SaveSpec(specYAML); err != nil {
		t.Fatal(err)
	}
	m, err := demo.StartManaged(ctx, l, fednetBinary)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Stop(context.Background()) })
	if _, err := m.Apply(ctx, string(specYAML)); err != nil {
		t.Fatal(err)
	}
	for _, gw := range l.Gateways() {
		if err := m.Enroll(ctx, gw.Name); err != nil {
			t.Fatal(err)
		}
	}

	// The browser runs in this namespace; the manager in the lab.
	local := proxy(t, m.Dialer(), strings.TrimPrefix(m.URL(), "https://"))
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
	return &labConsole{lab: l, m: m, url: "https://" + local + Prefix, pin: pin, token: strings.TrimSpace(string(token))}
}

// planLinks are the IDs of the links the page must show for f: one per
// pair of gateways that peer in the plans, sorted.
func planLinks(t *testing.T, f *spec.Federation) []string {
	t.Helper()
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
	return ids
}

// siteNames are the names of f's sites, in spec order.
func siteNames(f *spec.Federation) []string {
	var names []string
	for _, s := range f.Sites {
		names = append(names, s.Name)
	}
	return names
}

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

// everyLinkUp is allLinks with every link up.
func everyLinkUp(ids []string) string { return allLinks(ids, func(string) string { return "up" }) }

// everyLinkRTT is a page predicate: every link of the graph is labelled
// with its round-trip time.
const everyLinkRTT = `fednetConsole.graph().edges('.link').every(e => / ms$/.test(e.data('label')))`
