package manager

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/client"
	"github.com/fednet/fednet/internal/lab/etcdlab"
	"github.com/fednet/fednet/internal/lab/etcdlab/etcdtest"
	"github.com/fednet/fednet/internal/manager/store"
)

// onEtcd starts a manager on data directory dir and the etcd store of c
// (--store etcd://...), with its own connection.
func onEtcd(t *testing.T, c *etcdlab.Cluster, dir string, shared *harness) *harness {
	t.Helper()
	h := &harness{t: t, dir: dir, clock: &clock{}, log: &testLog{t: t}, limits: Limits{AuthFailureBurst: 1000}}
	if shared != nil {
		h.clock, h.log = shared.clock, shared.log
	} else {
		t.Cleanup(h.log.stop)
	}
	h.open = func() (store.Store, error) {
		return OpenStoreURL(context.Background(), StoreConfig{URL: c.StoreURL(), DataDir: dir})
	}
	h.start()
	return h
}

// copyIdentity copies the CA (and, with admin, the admin token) of data
// directory from into to, as an operator setting up another manager does.
func copyIdentity(t *testing.T, from, to string, admin bool) {
	t.Helper()
	files := []string{CACertFile, CAKeyFile}
	if admin {
		files = append(files, AdminTokenFile)
	}
	if err := os.MkdirAll(to, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(from, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, f), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// TestThreeManagersOnEtcd: three managers, each with its own data
// directory and connection, on one real etcd. The second and third refuse
// to start without the federation's CA, and with another admin token;
// with the CA copied they serve the same CA and take the same admin token
// (the third without the token file). A spec applied through one reaches
// an agent long-polling another; enrollment through the third works; join
// tokens carry every manager's URL; a client given the three URLs fails
// over when the one it used stops.
func TestThreeManagersOnEtcd(t *testing.T) {
	c := etcdtest.Start(t)
	root := t.TempDir()
	a := onEtcd(t, c, filepath.Join(root, "a"), nil)

	// Without the CA: refused, naming the files to copy.
	_, err := New(Config{DataDir: filepath.Join(root, "lost"), Store: a.store, Listen: "127.0.0.1:7443", Logf: t.Logf})
	if err == nil || !strings.Contains(err.Error(), CAKeyFile) || !strings.Contains(err.Error(), "copy") {
		t.Fatalf("a manager without the federation's CA: %v", err)
	}
	// Another admin token: refused.
	copyIdentity(t, a.dir, filepath.Join(root, "wrong"), false)
	if err := os.WriteFile(filepath.Join(root, "wrong", AdminTokenFile), []byte("another-admin-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{DataDir: filepath.Join(root, "wrong"), Store: a.store, Listen: "127.0.0.1:7443", Logf: t.Logf}); err == nil || !strings.Contains(err.Error(), "admin token") {
		t.Fatalf("a manager with another admin token: %v", err)
	}

	copyIdentity(t, a.dir, filepath.Join(root, "b"), true)
	copyIdentity(t, a.dir, filepath.Join(root, "c"), false)
	b := onEtcd(t, c, filepath.Join(root, "b"), a)
	cm := onEtcdJoined(t, c, filepath.Join(root, "c"), a, a, b)
	if cm.m.CAFingerprint() != a.m.CAFingerprint() || b.m.CAFingerprint() != a.m.CAFingerprint() {
		t.Fatal("the managers serve different CAs")
	}
	if cm.m.AdminToken() != "" {
		t.Errorf("the third manager has an admin token without the file")
	}

	a.putSpec(threeSites(t))
	// The third manager takes the admin token it has only the hash of.
	eventually(t, 10*time.Second, "the spec through the third manager", func() bool {
		return cm.do(req{method: "GET", path: api.PathSpec, token: a.m.AdminToken()}).status == 200
	})
	// Join tokens carry every manager; enrollment through the third.
	tok, secret := cm.token("aws-gw")
	jt, err := api.ParseJoinToken(tok.Token)
	if err != nil || len(jt.URLs()) != 3 || jt.URLs()[0] != cm.url {
		t.Fatalf("join token URLs %v (%v), want the third manager's first of three", jt.URLs(), err)
	}
	var enrolled api.EnrollResponse
	cm.ok(req{method: "POST", path: api.PathEnroll, token: secret, body: api.EnrollRequest{PublicKey: randomKey(t)}}, &enrolled)

	// An agent's client with every URL, watching on b: a spec change
	// through a reaches it.
	cl, err := client.New(client.Config{URLs: []string{b.url, a.url, cm.url}, Token: enrolled.Credential, CAFingerprint: a.m.CAFingerprint()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	eventually(t, 10*time.Second, "aws-gw's plan on b", func() bool {
		_, ok, err := cl.WatchPlan(ctx, "aws-gw", 0, 0)
		return err == nil && ok
	})
	p0, _, err := cl.WatchPlan(ctx, "aws-gw", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var p1 *api.PlanResponse
	var werr error
	wg.Go(func() { p1, _, werr = cl.WatchPlan(ctx, "aws-gw", p0.Generation, 30*time.Second) })
	waitParked(t, b.m, 1)
	a.putSpec(strings.Replace(threeSites(t), "index: 0 ", "index: 3 ", 1))
	wg.Wait()
	if werr != nil || p1 == nil || p1.Generation <= p0.Generation || !strings.Contains(p1.Plan.String(), "10.1.3.0/24") {
		t.Fatalf("the watch on b after a change through a: %+v %v", p1, werr)
	}
	if cl.URL() != b.url {
		t.Errorf("the client used %s, want b (%s)", cl.URL(), b.url)
	}
	// b stops: the client's next call goes to a, then c.
	b.stop()
	if _, _, err := cl.WatchPlan(ctx, "aws-gw", 0, 0); err != nil {
		t.Fatalf("a watch with b down: %v", err)
	}
	if cl.URL() != a.url {
		t.Errorf("with b down the client used %s, want a (%s)", cl.URL(), a.url)
	}
}

// onEtcdJoined is onEtcd with the join URLs of hs after its own.
func onEtcdJoined(t *testing.T, c *etcdlab.Cluster, dir string, shared *harness, hs ...*harness) *harness {
	h := &harness{t: t, dir: dir, clock: shared.clock, log: shared.log, limits: Limits{AuthFailureBurst: 1000}, admin: shared.m.AdminToken()}
	for _, o := range hs {
		h.joinURLs = append(h.joinURLs, o.url)
	}
	h.open = func() (store.Store, error) {
		return OpenStoreURL(context.Background(), StoreConfig{URL: c.StoreURL(), DataDir: dir})
	}
	h.start()
	return h
}

// TestBandwidthRelayAcrossManagers: on etcd, an operator's bandwidth
// request made through one manager reaches the agent long-polling another,
// and the agent's result, given to that other manager, comes back as the
// operator's answer; the request is then over everywhere.
func TestBandwidthRelayAcrossManagers(t *testing.T) {
	c := etcdtest.Start(t)
	root := t.TempDir()
	a := onEtcd(t, c, filepath.Join(root, "a"), nil)
	copyIdentity(t, a.dir, filepath.Join(root, "b"), true)
	b := onEtcd(t, c, filepath.Join(root, "b"), a)
	a.putSpec(threeSites(t))
	aws, _ := a.enroll("aws-gw")
	a.enroll("azure-gw")
	eventually(t, 10*time.Second, "aws-gw's plan on b", func() bool {
		return b.do(req{method: "GET", path: gwPath(api.PathPlan, "aws-gw") + "?timeout=0s", token: aws}).status == 200
	})

	type result struct {
		a   answer
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := a.try(req{method: "POST", path: gwPath(api.PathBandwidth, "aws-gw"), token: a.m.AdminToken(), body: api.BandwidthRequest{To: "azure-gw"}})
		done <- result{r, err}
	}()
	var m api.Measurement
	got := b.ok(req{method: "GET", path: gwPath(api.PathMeasurements, "aws-gw") + "?timeout=20s", token: aws}, &m)
	if got.status != 200 || m.To != "azure-gw" || m.ID == "" {
		t.Fatalf("the long poll on b: %d %+v", got.status, m)
	}
	put := strings.Replace(gwPath(api.PathMeasurement, "aws-gw"), "{id}", m.ID, 1)
	b.ok(req{method: "PUT", path: put, token: aws, body: api.BandwidthResult{To: "azure-gw", EstimateBps: 42e6, Bytes: 77, Converged: true}}, nil)
	var r result
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the operator's request through a got no answer")
	}
	if r.err != nil || r.a.status != 200 {
		t.Fatalf("the operator's request through a: %v %d %+v", r.err, r.a.status, r.a.err)
	}
	var res api.BandwidthResult
	if err := json.Unmarshal(r.a.body, &res); err != nil || res.From != "aws-gw" || res.EstimateBps != 42e6 || res.Bytes != 77 {
		t.Fatalf("the operator's answer %+v (%v)", res, err)
	}
	// Over everywhere: another answer finds nothing on either manager,
	// and nothing is pending for the agent on a.
	for _, h := range []*harness{a, b} {
		eventually(t, 10*time.Second, "the request gone from "+h.url, func() bool {
			return h.do(req{method: "PUT", path: put, token: aws, body: api.BandwidthResult{}}).status == 404
		})
	}
	if got := a.do(req{method: "GET", path: gwPath(api.PathMeasurements, "aws-gw") + "?timeout=0s", token: aws}); got.status != 204 {
		t.Errorf("a still hands the request out: %d", got.status)
	}
}
