package demo_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/agent"
	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/await"
	"github.com/fednet/fednet/internal/client"
	"github.com/fednet/fednet/internal/demo"
	"github.com/fednet/fednet/internal/lab"
	"github.com/fednet/fednet/internal/plan"
)

// managedLab builds a lab of n sites with a manager, applies the spec
// without the sites in without, enrolls those gateways and waits until
// their hosts reach each other.
func managedLab(t *testing.T, ctx context.Context, name string, n int, without ...string) (*lab.Lab, *demo.Managed) {
	t.Helper()
	needRoot(t)
	lab.Down(ctx, name)
	f, err := demo.GenerateSpec(n)
	if err != nil {
		t.Fatal(err)
	}
	l, err := lab.Up(ctx, lab.Config{Federation: f, Name: name, Manager: true})
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
	text, err := demo.GenerateSpecYAML(n, without...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Apply(ctx, text); err != nil {
		t.Fatal(err)
	}
	var sites []string
	for _, s := range l.Sites() {
		if !contains(without, s) {
			sites = append(sites, s)
			for _, gw := range l.SiteGateways(s) {
				if err := m.Enroll(ctx, gw.Name); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	took, err := demo.WaitReachable(wctx, demo.CrossSitePairs(l, sites), m.AgentsAlive)
	if err != nil {
		t.Fatalf("the managed federation did not converge: %v", err)
	}
	t.Logf("converged %v after enrolling %d sites", took.Round(time.Millisecond), len(sites))
	return l, m
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// pinger pings from one host to another every interval, a first round of
// 10 pings, then rounds of 100, until stop is called; stop returns the
// totals. A ping process that fails counts its whole round as lost.
// pinger returns once the first round is over, so the pings run before
// whatever the test does next.
func pinger(ctx context.Context, from *lab.Node, to *lab.Node, interval time.Duration) (stop func() lab.PingResult) {
	quit := make(chan struct{})
	done := make(chan lab.PingResult, 1)
	started := make(chan struct{})
	go func() {
		var total lab.PingResult
		for count := 10; ; count = 100 {
			select {
			case <-quit:
				done <- total
				return
			default:
			}
			r, err := lab.Ping(ctx, from, to.LAN.Addr(), count, interval)
			if err != nil {
				r = lab.PingResult{Sent: count}
			}
			if count == 10 {
				close(started)
			}
			total.Sent += r.Sent
			total.Received += r.Received
			total.RTTs = append(total.RTTs, r.RTTs...)
			if ctx.Err() != nil {
				done <- total
				return
			}
		}
	}()
	<-started
	return func() lab.PingResult {
		close(quit)
		return <-done
	}
}

// wgPeers returns the public keys a gateway's WireGuard device has as peers.
func wgPeers(t *testing.T, ctx context.Context, gw *lab.Node) []string {
	t.Helper()
	out, err := gw.Run(ctx, "wg", "show", "fed0", "peers")
	if err != nil {
		t.Fatalf("wg show on %s: %v", gw, err)
	}
	return strings.Fields(out)
}

func wgPublicKey(t *testing.T, ctx context.Context, gw *lab.Node) string {
	t.Helper()
	out, err := gw.Run(ctx, "wg", "show", "fed0", "public-key")
	if err != nil {
		t.Fatalf("wg show on %s: %v", gw, err)
	}
	return strings.TrimSpace(out)
}

// TestManagedAddRemoveSite adds a fourth site through the API and removes
// it again while hosts of two other sites ping each other every 10 ms: not
// one ping may be lost.
func TestManagedAddRemoveSite(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	l, m := managedLab(t, ctx, "e2eaddrm", 4, "gcp")
	awsH, azureH, gcpH := l.Hosts("aws")[0], l.Hosts("azure")[0], l.Hosts("gcp")[0]
	wait := pinger(ctx, awsH, azureH, 10*time.Millisecond)

	four, _ := demo.GenerateSpecYAML(4)
	actx, acancel := context.WithTimeout(ctx, 20*time.Second)
	defer acancel()
	took, resp, err := m.Propagate(actx, four)
	if err != nil {
		t.Fatalf("adding gcp: %v", err)
	}
	t.Logf("adding gcp: revision %d, affected %v, propagated in %v", resp.Revision, resp.Affected, took.Round(time.Millisecond))
	if err := m.Enroll(ctx, "gcp-gw"); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	joined, err := demo.WaitReachable(wctx, demo.CrossSitePairs(l, l.Sites()), nil)
	if err != nil {
		t.Fatalf("gcp did not join: %v", err)
	}
	t.Logf("gcp enrolled and reachable from every site in %v", joined.Round(time.Millisecond))

	three, _ := demo.GenerateSpecYAML(4, "gcp")
	pctx, pcancel := context.WithTimeout(ctx, 20*time.Second)
	defer pcancel()
	took, resp, err = m.Propagate(pctx, three)
	if err != nil {
		t.Fatalf("removing gcp: %v", err)
	}
	t.Logf("removing gcp: revision %d, affected %v, propagated in %v", resp.Revision, resp.Affected, took.Round(time.Millisecond))
	if !demo.Unreachable(ctx, awsH, gcpH.LAN.Addr(), 3) {
		t.Error("aws still reaches gcp after its removal")
	}
	r := wait()
	t.Logf("aws -> azure during the add and the removal: %d sent, %d received", r.Sent, r.Received)
	if r.Received != r.Sent || r.Sent < 100 {
		t.Errorf("lost %d of %d pings between aws and azure while gcp came and went", r.Sent-r.Received, r.Sent)
	}
}

// TestManagerDown: with the manager stopped every tunnel keeps working; an
// agent restarted on a wiped data plane restores it from its cache; the
// restarted manager serves the same revision and the agents come back to
// it by themselves.
func TestManagerDown(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	l, m := managedLab(t, ctx, "e2emgrdown", 3)
	before, err := m.Admin.GetSpec(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.StopManager(ctx); err != nil {
		t.Fatal(err)
	}
	pairs := demo.CrossSitePairs(l, l.Sites())
	for i, r := range demo.PingAll(ctx, pairs, 2, 100*time.Millisecond) {
		if r.Received == 0 {
			t.Errorf("manager down: %s -> %s unreachable", pairs[i].From, pairs[i].To)
		}
	}

	// A gateway "reboots" while the manager is away: agent gone, tunnel
	// interface and firewall gone.
	aws := l.Gateway("aws-gw")
	if err := m.StopAgent(ctx, "aws-gw"); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]string{{"ip", "link", "del", "fed0"}, {"nft", "delete", "table", "inet", "fednet"}} {
		if out, err := aws.Run(ctx, cmd[0], cmd[1:]...); err != nil {
			t.Fatalf("%v: %v %s", cmd, err, out)
		}
	}
	if !demo.Unreachable(ctx, l.Hosts("aws")[0], l.Hosts("azure")[0].LAN.Addr(), 2) {
		t.Fatal("aws still reaches azure with its tunnel deleted")
	}
	if err := m.StartAgent("aws-gw"); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	took, err := demo.WaitReachable(wctx, pairs, nil)
	if err != nil {
		t.Fatalf("the restarted agent did not restore its tunnels from its cache: %v\n%s", err, m.Agent("aws-gw").LogText())
	}
	t.Logf("agent restarted without the manager: tunnels back in %v", took.Round(time.Millisecond))

	restart := time.Now()
	if err := m.StartManager(ctx); err != nil {
		t.Fatal(err)
	}
	after, err := m.Admin.GetSpec(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.Revision != before.Revision || after.YAML != before.YAML {
		t.Errorf("restarted manager serves revision %d, want %d with the same spec", after.Revision, before.Revision)
	}
	await.Until(t, 30*time.Second, func() (bool, string) {
		gws, err := m.Admin.Gateways(ctx)
		if err != nil || len(gws) != 3 {
			return false, fmt.Sprintf("3 gateways from the restarted manager: %d, %v", len(gws), err)
		}
		for _, g := range gws {
			if g.LastReport.Before(restart) || g.AppliedGeneration < g.PlanGeneration {
				return false, fmt.Sprintf("%s: last report %v (manager restarted %v), applied generation %d of %d",
					g.Name, g.LastReport, restart, g.AppliedGeneration, g.PlanGeneration)
			}
		}
		return true, ""
	})
	if err := m.AgentsAlive(); err != nil {
		t.Error(err)
	}
}

// TestKeyRotation rolls one gateway's key through the manager while its
// hosts ping another site: the link comes back by itself, and the old key
// is gone from every peer.
func TestKeyRotation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	l, m := managedLab(t, ctx, "e2erotate", 3)
	aws := l.Gateway("aws-gw")
	old := wgPublicKey(t, ctx, aws)
	const interval = 10 * time.Millisecond
	wait := pinger(ctx, l.Hosts("aws")[0], l.Hosts("azure")[0], interval)
	if err := m.Admin.Rotate(ctx, "aws-gw"); err != nil {
		t.Fatal(err)
	}
	took := await.Until(t, 20*time.Second, func() (bool, string) {
		key := wgPublicKey(t, ctx, aws)
		if key == old {
			return false, "aws-gw still has its old key"
		}
		for _, peer := range []string{"azure-gw", "onprem-gw"} {
			keys := wgPeers(t, ctx, l.Gateway(peer))
			if contains(keys, old) || !contains(keys, key) {
				return false, fmt.Sprintf("%s has peers %v; want aws-gw's new key %s instead of %s", peer, keys, key, old)
			}
		}
		return true, ""
	})
	t.Logf("rotation reached every peer in %v", took.Round(time.Millisecond))
	// The links come back by themselves: wait for them (a correctness
	// deadline, not a figure), then count what the pinger lost.
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	back, err := demo.WaitReachable(wctx, demo.CrossSitePairs(l, l.Sites()), m.AgentsAlive)
	r := wait()
	if err != nil {
		t.Fatalf("links did not come back after the rotation: %v", err)
	}
	t.Logf("every pair reachable %v after the rotation reached the peers", back.Round(time.Millisecond))
	gap := time.Duration(r.Sent-r.Received) * interval
	t.Logf("key rotation gap: %d of %d pings lost = %v", r.Sent-r.Received, r.Sent, gap)
	g, err := m.Admin.Gateway(ctx, "aws-gw")
	if err != nil {
		t.Fatal(err)
	}
	if g.PublicKey.String() != wgPublicKey(t, ctx, aws) {
		t.Errorf("manager has key %s, device %s", g.PublicKey, wgPublicKey(t, ctx, aws))
	}
}

// TestRemoveGateway revokes a gateway: it leaves every peer's WireGuard
// configuration, and its credential is refused.
func TestRemoveGateway(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	l, m := managedLab(t, ctx, "e2eremovegw", 3)
	onprem := l.Gateway("onprem-gw")
	key := wgPublicKey(t, ctx, onprem)
	start := time.Now()
	if err := m.Admin.RemoveGateway(ctx, "onprem-gw"); err != nil {
		t.Fatal(err)
	}
	took := await.Until(t, 10*time.Second, func() (bool, string) {
		for _, peer := range []string{"aws-gw", "azure-gw"} {
			if contains(wgPeers(t, ctx, l.Gateway(peer)), key) {
				return false, peer + " still has onprem-gw as a peer"
			}
		}
		return true, ""
	})
	t.Logf("removed gateway gone from every peer's WireGuard config %v after the API call (%v poll)", time.Since(start).Round(time.Millisecond), took.Round(time.Millisecond))
	if !demo.Unreachable(ctx, l.Hosts("aws")[0], l.Hosts("onprem")[0].LAN.Addr(), 2) {
		t.Error("aws still reaches onprem")
	}

	// Its own credential, as its agent stored it, is refused.
	data, err := os.ReadFile(filepath.Join(demo.AgentDir(onprem), agent.CredentialFile))
	if err != nil {
		t.Fatal(err)
	}
	var cred agent.Credential
	if err := json.Unmarshal(data, &cred); err != nil {
		t.Fatal(err)
	}
	c, err := m.ClientAs(cred.Credential)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _, err = c.WatchPlan(ctx, "onprem-gw", 0, time.Second)
	if st := client.StatusOf(err); st != 401 && st != 403 {
		t.Errorf("removed gateway's credential: status %d (%v), want 401 or 403", st, err)
	}
	// And its agent stops, saying why.
	await.Until(t, 20*time.Second, func() (bool, string) {
		return m.Agent("onprem-gw").Exited(), "the removed gateway's agent is still running"
	})
	if log := m.Agent("onprem-gw").LogText(); !strings.Contains(strings.ToLower(log), "remov") {
		t.Errorf("the removed agent's log does not say it was removed:\n%s", log)
	}
}

// TestManagedAuth checks, over the lab internet against the running
// manager, that a gateway's credential opens only its own plan, that calls
// without or with a wrong token are refused, and that a join token works
// once.
func TestManagedAuth(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	l, m := managedLab(t, ctx, "e2eauth", 2)
	data, err := os.ReadFile(filepath.Join(demo.AgentDir(l.Gateway("aws-gw")), agent.CredentialFile))
	if err != nil {
		t.Fatal(err)
	}
	var cred agent.Credential
	if err := json.Unmarshal(data, &cred); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, token, gateway string
		want                 int
	}{
		{"own plan", cred.Credential, "aws-gw", 200},
		{"another gateway's plan", cred.Credential, "azure-gw", 403},
		{"no token", "", "aws-gw", 401},
		{"wrong token", "not-a-credential", "aws-gw", 401},
	} {
		c, err := m.ClientAs(tc.token)
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = c.WatchPlan(ctx, tc.gateway, 0, time.Second)
		c.Close()
		got := 200
		if err != nil {
			got = client.StatusOf(err)
		}
		if got != tc.want {
			t.Errorf("%s: status %d (%v), want %d", tc.name, got, err, tc.want)
		}
	}

	tok, err := m.Admin.CreateToken(ctx, "azure-gw", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	jt, err := api.ParseJoinToken(tok.Token)
	if err != nil {
		t.Fatal(err)
	}
	c, err := m.ClientAs("")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := api.EnrollRequest{PublicKey: plan.Key{1}}
	if _, err := c.Enroll(ctx, jt.Secret, req); err != nil {
		t.Fatalf("first use of a join token: %v", err)
	}
	if _, err := c.Enroll(ctx, jt.Secret, req); client.StatusOf(err) != 409 {
		t.Errorf("second use of a join token: %v, want 409", err)
	}
}
