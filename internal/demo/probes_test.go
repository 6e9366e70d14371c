package demo_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/await"
	"github.com/fednet/fednet/internal/demo"
	"github.com/fednet/fednet/internal/lab"
)

// linksWhere returns an error naming the first link of the manager's
// links view (restricted to those pick selects) that fails ok, or that is
// missing: want is how many links pick must select.
func linksWhere(ctx context.Context, m *demo.Managed, want int, pick func(api.Link) bool, ok func(api.Link) error) error {
	links, err := m.Admin.Links(ctx)
	if err != nil {
		return err
	}
	n := 0
	for _, l := range links {
		if !pick(l) {
			continue
		}
		n++
		if err := ok(l); err != nil {
			return fmt.Errorf("%s -> %s: %w (probe %+v)", l.From, l.To, err, l.Probe)
		}
	}
	if n != want {
		return fmt.Errorf("%d links reported, want %d", n, want)
	}
	return nil
}

// linksAre is the condition "linksWhere holds" for await; it logs each
// new reason it is not, with the time since it was made, so a slow
// convergence shows its steps.
func linksAre(t *testing.T, ctx context.Context, m *demo.Managed, what string, want int, pick func(api.Link) bool, ok func(api.Link) error) await.Cond {
	start := time.Now()
	var last string
	return func() (bool, string) {
		err := linksWhere(ctx, m, want, pick, ok)
		if err == nil {
			return true, ""
		}
		if msg := err.Error(); msg != last {
			t.Logf("%s: %v after %v", what, err, time.Since(start).Round(time.Millisecond))
			last = msg
		}
		return false, what + ": " + last
	}
}

func healthy(l api.Link) error {
	p := l.Probe
	switch {
	case !l.Up:
		return fmt.Errorf("down")
	case p == nil || p.Sent == 0 || p.RTTP50 <= 0 || p.RTTP99 < p.RTTP50:
		return fmt.Errorf("no RTT")
	case p.Lost != 0 || p.Loss != 0 || p.RecentLoss != 0:
		return fmt.Errorf("loss")
	}
	return nil
}

// TestLinkProbes: in a managed lab federation every link shows its RTT and
// no loss; cutting a site's internet link shows the links to it down with
// 100 % loss of the recent probes; restoring it brings every link back.
// The times are measured and logged (the pass/fail checks correctness,
// with generous limits).
func TestLinkProbes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	l, m := managedLab(t, ctx, "e2eprobe", 3)
	n := len(l.Gateways())
	all := func(api.Link) bool { return true }
	took := await.Until(t, 30*time.Second, linksAre(t, ctx, m, "every link measured without loss", n*(n-1), all, healthy))
	t.Logf("every link measured without loss %v after convergence", took.Round(time.Millisecond))
	// And it stays so: every look in the next 10 s.
	await.Holds(t, 10*time.Second, 500*time.Millisecond, await.NoError(func() error { return linksWhere(ctx, m, n*(n-1), all, healthy) }))
	links, _ := m.Admin.Links(ctx)
	for _, lk := range links {
		t.Logf("%s -> %s: rtt p50 %v p99 %v, jitter %v, %d probes, loss %.0f%%", lk.From, lk.To,
			lk.Probe.RTTP50, lk.Probe.RTTP99, lk.Probe.Jitter, lk.Probe.Sent, 100*lk.Probe.Loss)
	}
	out, err := operator(ctx, m, "status")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("fednet status:\n%s", out)
	if !strings.Contains(out, "RTT P50/P99") || !strings.Contains(out, " 0% ") {
		t.Errorf("fednet status does not show RTT and loss:\n%s", out)
	}
	if out, err := operator(ctx, m, "get", "links", "-o", "json"); err != nil || !strings.Contains(out, `"rttP50Ns"`) {
		t.Errorf("fednet get links -o json carries no probe figures (%v):\n%s", err, out)
	}

	cut := l.Sites()[1]
	cutGW := map[string]bool{}
	for _, gw := range l.SiteGateways(cut) {
		cutGW[gw.Name] = true
	}
	// The cut site's own agent cannot reach the manager: the view of the
	// cut is the other gateways' links to it.
	toCut := func(l api.Link) bool { return cutGW[l.To] }
	want := len(cutGW) * (n - len(cutGW))
	t.Cleanup(func() { l.SetInternet(context.Background(), cut, true) })
	if err := l.SetInternet(ctx, cut, false); err != nil {
		t.Fatal(err)
	}
	down := await.Until(t, 15*time.Second, linksAre(t, ctx, m, "links to the cut site down", want, toCut, func(l api.Link) error {
		if l.Up || l.Probe == nil || l.Probe.RecentLoss != 1 {
			return fmt.Errorf("not down with 100%% recent loss")
		}
		return nil
	}))
	t.Logf("cut %s's internet link: the links to it are down with 100%% recent loss after %v", cut, down.Round(time.Millisecond))

	if err := l.SetInternet(ctx, cut, true); err != nil {
		t.Fatal(err)
	}
	back := await.Until(t, 15*time.Second, linksAre(t, ctx, m, "every link up again", n*(n-1), all, func(l api.Link) error {
		if !l.Up || l.Probe == nil || !l.Probe.Up || l.Probe.RecentLoss == 1 {
			return fmt.Errorf("not up again")
		}
		return nil
	}))
	t.Logf("restored %s's internet link: every link up again after %v", cut, back.Round(time.Millisecond))
	if err := m.AgentsAlive(); err != nil {
		t.Fatal(err)
	}
}

// operator runs a fednet operator command in the manager's node, with the
// admin token and the CA fingerprint on the command line.
func operator(ctx context.Context, m *demo.Managed, args ...string) (string, error) {
	token, err := readAdminToken(m.Lab)
	if err != nil {
		return "", err
	}
	args = append(args, "--manager", m.URL(), "--token", token, "--ca-fingerprint", m.CAFingerprint())
	return m.Lab.Manager.Run(ctx, m.Binary, args...)
}

func readAdminToken(l *lab.Lab) (string, error) {
	b, err := os.ReadFile(filepath.Join(l.Manager.Dir, "admin.token"))
	return strings.TrimSpace(string(b)), err
}
