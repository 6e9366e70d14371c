package demo_test

import (
	"context"
	"fmt"
	neturl "net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/client"
	"github.com/fednet/fednet/internal/demo"
	"github.com/fednet/fednet/internal/lab"
)

// haLab builds a lab of three sites with managers managers (several: on
// an etcd cluster of as many members beside them), applies the spec and
// enrolls every gateway.
func haLab(t *testing.T, ctx context.Context, name string, managers int) (*lab.Lab, *demo.Managed, string) {
	t.Helper()
	needRoot(t)
	lab.Down(ctx, name)
	f, err := demo.GenerateSpec(3)
	if err != nil {
		t.Fatal(err)
	}
	l, err := lab.Up(ctx, lab.Config{Federation: f, Name: name, Manager: true, Managers: managers})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		l.Down(context.Background())
		noLab(t, name)
	})
	m, err := demo.StartManaged(ctx, l, binary)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Stop(context.Background()) })
	text, err := demo.GenerateSpecYAML(3)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Apply(ctx, text); err != nil {
		t.Fatal(err)
	}
	for _, g := range l.Gateways() {
		if err := m.Enroll(ctx, g.Name); err != nil {
			t.Fatal(err)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if _, err := demo.WaitReachable(wctx, demo.CrossSitePairs(l, l.Sites()), m.AgentsAlive); err != nil {
		t.Fatalf("the federation did not converge: %v", err)
	}
	return l, m, text
}

// sitePinger pings every cross-site pair in rounds until stopped, and counts
// what was lost.
type sitePinger struct {
	stop chan struct{}
	done chan struct{}

	mu         sync.Mutex
	sent, lost int
	lostPairs  []string
}

func startSitePinger(ctx context.Context, pairs []demo.Pair) *sitePinger {
	p := &sitePinger{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for round := 0; round < 200; round++ { // bounded: 200 rounds of 2 s
			select {
			case <-p.stop:
				return
			case <-ctx.Done():
				return
			default:
			}
			res := demo.PingAll(ctx, pairs, 20, 100*time.Millisecond)
			p.mu.Lock()
			for i, r := range res {
				p.sent += r.Sent
				if lost := r.Sent - r.Received; lost > 0 {
					p.lost += lost
					p.lostPairs = append(p.lostPairs, fmt.Sprintf("%s->%s (%d of %d, round %d)", pairs[i].From.Name, pairs[i].To.Name, lost, r.Sent, round))
				}
			}
			p.mu.Unlock()
		}
	}()
	return p
}

func (p *sitePinger) finish() (sent, lost int, pairs []string) {
	close(p.stop)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sent, p.lost, p.lostPairs
}

// applies puts spec changes (underlay MTUs in turn) through c, and keeps
// the revisions the managers acknowledged, in order.
type applies struct {
	base  string
	acked []api.SpecResponse
	fails []error
}

func (a *applies) apply(ctx context.Context, t *testing.T, c *client.Client, k int) {
	t.Helper()
	doc, err := demo.WithUnderlayMTU(a.base, 1500-2*(k%10))
	if err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	resp, err := c.PutSpec(actx, doc, false)
	if err != nil {
		a.fails = append(a.fails, err)
		return
	}
	if resp.Changed {
		a.acked = append(a.acked, *resp)
	}
}

// cliApply runs `fednet apply` with every manager's URL on node, and
// records the revision it stored (read back through the client).
func cliApply(ctx context.Context, t *testing.T, a *applies, m *demo.Managed, node *lab.Node, k int) {
	t.Helper()
	doc, err := demo.WithUnderlayMTU(a.base, 1500-2*(k%10))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file, tokenFile := filepath.Join(dir, "spec.yaml"), filepath.Join(dir, "admin.token")
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tokenFile, []byte(m.AdminToken()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	out, err := node.Run(actx, binary, "apply", "-f", file, "--manager", strings.Join(m.URLs(), ","), "--token-file", tokenFile, "--ca-fingerprint", m.CAFingerprint())
	if err != nil {
		t.Errorf("fednet apply --manager %s with the first manager and an etcd member down: %v", strings.Join(m.URLs(), ","), err)
		a.fails = append(a.fails, err)
		return
	}
	cur, err := m.Admin.GetSpec(actx)
	if err != nil || cur.YAML != doc {
		t.Fatalf("after fednet apply the current spec is not the one applied (%v):\n%s", err, out)
	}
	a.acked = append(a.acked, api.SpecResponse{Revision: cur.Revision, YAML: cur.YAML})
	t.Logf("fednet apply through the managers' URL list (%s down) stored revision %d", m.URLAt(0), cur.Revision)
}

// check: the acknowledged revisions are strictly increasing, every one of
// them is stored (the revisions run 1..N without a gap), the last one is
// the current spec, and every agent applied the plans of the last one.
func (a *applies) check(ctx context.Context, t *testing.T, m *demo.Managed, l *lab.Lab) {
	t.Helper()
	if len(a.acked) == 0 {
		t.Fatalf("no apply was acknowledged; failures: %v", a.fails)
	}
	for i := 1; i < len(a.acked); i++ {
		if a.acked[i].Revision <= a.acked[i-1].Revision {
			t.Errorf("acknowledged revisions not increasing: %d after %d", a.acked[i].Revision, a.acked[i-1].Revision)
		}
	}
	revs, err := m.Admin.Revisions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var numbers []int
	for _, r := range revs {
		numbers = append(numbers, r.Revision)
	}
	for i, n := range numbers {
		if n != i+1 {
			t.Errorf("stored revisions %v have a gap at %d", numbers, i+1)
			break
		}
	}
	for _, r := range a.acked {
		if !slices.Contains(numbers, r.Revision) {
			t.Errorf("acknowledged revision %d is lost (stored: %v)", r.Revision, numbers)
		}
	}
	last := a.acked[len(a.acked)-1]
	cur, err := m.Admin.GetSpec(ctx)
	if err != nil || cur.Revision != last.Revision || cur.YAML != last.YAML {
		t.Errorf("current spec %d (%v), want the last acknowledged revision %d with its YAML", cur.Revision, err, last.Revision)
	}
	var names []string
	for _, g := range l.Gateways() {
		names = append(names, g.Name)
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	took, err := m.WaitApplied(wctx, names)
	if err != nil {
		t.Errorf("the agents did not converge to revision %d: %v", last.Revision, err)
	}
	gws, err := m.Admin.Gateways(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range gws {
		if g.AppliedRevision != last.Revision {
			t.Errorf("%s applied revision %d, want %d", g.Name, g.AppliedRevision, last.Revision)
		}
	}
	t.Logf("%d applies acknowledged (revisions %d..%d), %d failed while a part was down; agents converged %v after the last check began",
		len(a.acked), a.acked[0].Revision, last.Revision, len(a.fails), took.Round(time.Millisecond))
}

// TestManagersOnEtcdSurviveFailures: three managers on a three-member
// etcd cluster (one member beside each). During a loop of applies the
// etcd leader is killed, then the manager every agent is attached to;
// applies go on through every manager still up, and through each of them
// alone, while one manager and one etcd member are down. Every
// acknowledged revision survives, revisions stay monotonic, every agent
// converges to the last revision, and no ping between sites is lost.
func TestManagersOnEtcdSurviveFailures(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	l, m, text := haLab(t, ctx, "e2eha", 3)
	etcd := m.Etcd()
	if etcd == nil {
		t.Fatal("three managers but no etcd cluster")
	}
	p := startSitePinger(ctx, demo.CrossSitePairs(l, l.Sites()))
	a := &applies{base: text}
	k := 0
	for range 3 {
		k++
		a.apply(ctx, t, m.Admin, k)
	}

	leader, err := etcd.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := etcd.Kill(leader); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed the etcd leader %s", leader)
	for range 3 {
		k++
		a.apply(ctx, t, m.Admin, k)
	}

	// The agents enrolled with tokens made by the first manager, whose
	// URL comes first: they watch there (checked: each holds a connection
	// to it). Kill it, and see how long an agent goes without a change
	// made through another manager.
	for _, g := range l.Gateways() {
		if err := attached(ctx, g, m.URLAt(0)); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Manager(0).Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-m.Manager(0).Done()
	killed := time.Now()
	for i := 1; i < len(l.Managers); i++ {
		one, err := client.New(client.Config{URL: m.URLAt(i), Token: m.AdminToken(), CAFingerprint: m.CAFingerprint(), DialContext: m.Dialer()})
		if err != nil {
			t.Fatal(err)
		}
		k++
		before := len(a.acked)
		a.apply(ctx, t, one, k)
		one.Close()
		if len(a.acked) == before {
			t.Errorf("fednet apply through %s with %s and etcd %s down failed: %v", m.URLAt(i), m.URLAt(0), leader, a.fails[len(a.fails)-1])
		}
	}
	// The operator's command itself, given every manager (the dead one
	// first), from a gateway's namespace.
	k++
	cliApply(ctx, t, a, m, l.Gateways()[0], k)
	var names []string
	for _, g := range l.Gateways() {
		names = append(names, g.Name)
	}
	wctx, wcancel := context.WithTimeout(ctx, 60*time.Second)
	if _, err := m.WaitApplied(wctx, names); err != nil {
		t.Errorf("with their manager killed the agents did not get the change: %v", err)
	}
	wcancel()
	t.Logf("agents attached to the killed manager had the change made through another %v after the kill", time.Since(killed).Round(time.Millisecond))

	// Both come back; applies go on.
	if err := etcd.Restart(ctx, leader); err != nil {
		t.Fatal(err)
	}
	if err := m.StartManagerAt(ctx, 0); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		k++
		a.apply(ctx, t, m.Admin, k)
	}
	a.check(ctx, t, m, l)
	if sent, lost, pairs := p.finish(); lost > 0 || sent == 0 {
		t.Errorf("%d of %d pings between sites lost while managers and etcd members failed: %v", lost, sent, pairs)
	} else {
		t.Logf("%d pings between sites, none lost", sent)
	}
	if err := m.AgentsAlive(); err != nil {
		t.Error(err)
	}
}

// attached returns nil when the gateway node holds an established TCP
// connection to the manager at url (its agent's watch), an error saying
// which connections it has otherwise.
func attached(ctx context.Context, g *lab.Node, url string) error {
	u, err := neturl.Parse(url)
	if err != nil {
		return err
	}
	out, err := g.Run(ctx, "ss", "-Htn", "state", "established")
	if err != nil {
		return err
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 4 && f[3] == u.Host {
			return nil
		}
	}
	return fmt.Errorf("%s holds no connection to the manager at %s; its connections:\n%s", g.Name, u.Host, out)
}

// TestManagerOnSQLiteSurvivesRestarts: the same loop of applies with one
// manager on SQLite, killed and started again in the middle: every
// acknowledged revision survives, revisions stay monotonic, every agent
// converges, and no ping between sites is lost.
func TestManagerOnSQLiteSurvivesRestarts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	l, m, text := haLab(t, ctx, "e2esqlite", 1)
	p := startSitePinger(ctx, demo.CrossSitePairs(l, l.Sites()))
	a := &applies{base: text}
	for k := 1; k <= 9; k++ {
		if k == 4 {
			if err := m.Manager(0).Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			<-m.Manager(0).Done()
			a.apply(ctx, t, m.Admin, k) // fails: nobody answers
			if err := m.StartManagerAt(ctx, 0); err != nil {
				t.Fatal(err)
			}
			continue
		}
		a.apply(ctx, t, m.Admin, k)
	}
	a.check(ctx, t, m, l)
	if sent, lost, pairs := p.finish(); lost > 0 || sent == 0 {
		t.Errorf("%d of %d pings between sites lost while the manager restarted: %v", lost, sent, pairs)
	} else {
		t.Logf("%d pings between sites, none lost", sent)
	}
}
