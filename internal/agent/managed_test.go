package agent_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/fednet/fednet/internal/agent"
	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/backend"
	"github.com/fednet/fednet/internal/client"
	"github.com/fednet/fednet/internal/client/clienttest"
	"github.com/fednet/fednet/internal/dataplane"
	"github.com/fednet/fednet/internal/dataplane/wireguard"
	"github.com/fednet/fednet/internal/plan"
)

// controlPlane is a manager the tests run agents against: the real one
// (clienttest.Real), with faults injected where a test needs them.
type controlPlane interface {
	URL() string
	CAFingerprint() string
	AdminToken() string
	Down()
	Up()
}

// fed is a manager with the three-site spec applied and an admin client.
type fed struct {
	controlPlane
	t     *testing.T
	admin *client.Client
	yaml  string
}

// realFed runs the real manager in this process.
func realFed(t *testing.T) *fed { return newFed(t, clienttest.NewReal(t)) }

// fakeFed runs the real manager too, and returns it for injecting faults
// the real one does not make by itself.
func fakeFed(t *testing.T) (*fed, *clienttest.Real) {
	m := clienttest.NewReal(t)
	return newFed(t, m), m
}

func newFed(t *testing.T, cp controlPlane) *fed {
	t.Helper()
	admin, err := client.New(client.Config{URL: cp.URL(), Token: cp.AdminToken(), CAFingerprint: cp.CAFingerprint()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	data, err := os.ReadFile(filepath.Join("..", "..", "examples", "three-sites.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	f := &fed{controlPlane: cp, t: t, admin: admin, yaml: string(data)}
	if _, err := admin.PutSpec(context.Background(), f.yaml, false); err != nil {
		t.Fatal(err)
	}
	return f
}

// gateway returns the manager's view of a gateway.
func (f *fed) gateway(name string) api.Gateway {
	f.t.Helper()
	g, err := f.admin.Gateway(context.Background(), name)
	if err != nil {
		f.t.Fatal(err)
	}
	return *g
}

// applied reports whether gateway reported the generation of its current
// plan.
func (f *fed) applied(name string) bool {
	g := f.gateway(name)
	return g.PlanGeneration > 0 && g.AppliedGeneration == g.PlanGeneration
}

func (f *fed) token(t *testing.T, gateway string) string {
	t.Helper()
	tok, err := f.admin.CreateToken(context.Background(), gateway, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok.Token
}

// setMTU applies the spec with another underlay MTU; the tunnel MTU is
// 60 less.
func (f *fed) setMTU(t *testing.T, underlay string) {
	t.Helper()
	y := strings.Replace(f.yaml, "underlayMTU: 1500", "underlayMTU: "+underlay, 1)
	if _, err := f.admin.PutSpec(context.Background(), y, false); err != nil {
		t.Fatal(err)
	}
}

// enrollPeer enrolls gateway with a made-up key, as if its agent had.
func (f *fed) enrollPeer(t *testing.T, gateway string) plan.Key {
	t.Helper()
	jt, err := api.ParseJoinToken(f.token(t, gateway))
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(client.Config{URL: jt.Manager, CAFingerprint: jt.CAFingerprint})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	k, _ := wgtypes.GeneratePrivateKey()
	if _, err := c.Enroll(context.Background(), jt.Secret, api.EnrollRequest{PublicKey: plan.Key(k.PublicKey())}); err != nil {
		t.Fatal(err)
	}
	return plan.Key(k.PublicKey())
}

// dataplanes hands out fake dataplanes and remembers the keys they were
// made for.
type dataplanes struct {
	mu    sync.Mutex
	keys  []plan.Key
	fakes []*dataplane.Fake
	// fresh makes every call return a new fake (else the first is reused).
	fresh bool
	// status, when set, answers the dataplanes' Status.
	status *fakeStatus
}

// fakeStatus is a data plane's Status as a test sets it.
type fakeStatus struct {
	mu    sync.Mutex
	links []dataplane.LinkState
	err   error
}

func (f *fakeStatus) set(links []dataplane.LinkState, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.links, f.err = links, err
}

// withStatus is a fake whose Status is a fakeStatus's.
type withStatus struct {
	*dataplane.Fake
	st *fakeStatus
}

// Status lists the links set; with an error set, without their figures.
func (w withStatus) Status(context.Context, plan.Gateway) ([]dataplane.LinkState, error) {
	w.st.mu.Lock()
	defer w.st.mu.Unlock()
	out := slices.Clone(w.st.links)
	if w.st.err != nil {
		for i, l := range out {
			out[i] = dataplane.LinkState{Peer: l.Peer, Backend: l.Backend}
		}
	}
	return out, w.st.err
}

func (d *dataplanes) new(k plan.Key) (dataplane.Dataplane, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.keys = append(d.keys, k)
	if d.fresh || len(d.fakes) == 0 {
		d.fakes = append(d.fakes, dataplane.NewFake())
	}
	if d.status != nil {
		return withStatus{d.fakes[len(d.fakes)-1], d.status}, nil
	}
	return d.fakes[len(d.fakes)-1], nil
}

func (d *dataplanes) last() *dataplane.Fake {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.fakes) == 0 {
		return dataplane.NewFake()
	}
	return d.fakes[len(d.fakes)-1]
}

func (d *dataplanes) built() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.keys)
}

// running is an agent started by startAgent.
type running struct {
	done   chan struct{} // closed when Run returned
	err    error         // what Run returned, once done
	cancel context.CancelFunc
	logs   *logs
}

// stop cancels the agent and returns what Run returned.
func (r *running) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	return r.wait(t)
}

// wait returns what Run returned, within a deadline.
func (r *running) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-r.done:
		return r.err
	case <-time.After(10 * time.Second):
		t.Fatal("the agent did not end within 10s")
		return nil
	}
}

func startAgent(t *testing.T, cfg agent.ManagedConfig) *running {
	t.Helper()
	l := &logs{}
	cfg.Logf = l.logf
	if cfg.StatusInterval == 0 {
		cfg.StatusInterval = 50 * time.Millisecond
	}
	if cfg.BackoffMax == 0 {
		cfg.BackoffMin, cfg.BackoffMax = 10*time.Millisecond, 50*time.Millisecond
	}
	if cfg.WatchTimeout == 0 {
		cfg.WatchTimeout = 2 * time.Second
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = 2 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{done: make(chan struct{}), cancel: cancel, logs: l}
	go func() {
		defer close(r.done)
		r.err = agent.RunManaged(ctx, cfg)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(10 * time.Second):
			t.Error("the agent did not stop within 10s of cancel")
		}
	})
	return r
}

func readCredential(t *testing.T, dir string) agent.Credential {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, agent.CredentialFile))
	if err != nil {
		t.Fatal(err)
	}
	var c agent.Credential
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

func filePublicKey(t *testing.T, path string) plan.Key {
	t.Helper()
	return plan.Key(mustKey(t, path).PublicKey())
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode().Perm()
}

func TestManagedEnrollsAndApplies(t *testing.T) {
	f := realFed(t)
	dir := filepath.Join(t.TempDir(), "agent")
	dps := &dataplanes{}
	startAgent(t, agent.ManagedConfig{DataDir: dir, JoinToken: f.token(t, "aws-gw"), Endpoint: "198.51.100.10:51820", NewDataplane: dps.new})

	eventually(t, "the first plan applied", func() bool { return mtu(dps.last()) == 1440 })
	eventually(t, "a status report of the applied plan", func() bool {
		return f.applied("aws-gw")
	})
	if got := mode(t, dir); got != 0o700 {
		t.Errorf("data dir mode %v, want 0700", got)
	}
	for _, name := range []string{agent.KeyFile, agent.CredentialFile, agent.PlanFile} {
		if got := mode(t, filepath.Join(dir, name)); got != 0o600 {
			t.Errorf("%s mode %v, want 0600", name, got)
		}
	}
	pub := filePublicKey(t, filepath.Join(dir, agent.KeyFile))
	if got := f.gateway("aws-gw").PublicKey; got != pub {
		t.Errorf("manager has key %v, the agent's key file has public key %v", got, pub)
	}
	if dps.keys[0] != plan.Key(mustKey(t, filepath.Join(dir, agent.KeyFile))) {
		t.Error("the dataplane was not built with the key file's private key")
	}
	cred := readCredential(t, dir)
	if cred.Gateway != "aws-gw" || cred.Manager != f.URL() || cred.CAFingerprint != f.CAFingerprint() || cred.Credential == "" {
		t.Errorf("credential %+v", cred)
	}
	priv, _ := os.ReadFile(filepath.Join(dir, agent.KeyFile))
	cache, _ := os.ReadFile(filepath.Join(dir, agent.PlanFile))
	credData, _ := os.ReadFile(filepath.Join(dir, agent.CredentialFile))
	if strings.Contains(string(cache)+string(credData), strings.TrimSpace(string(priv))) {
		t.Error("the private key is in the credential or the plan cache")
	}
	gws, err := f.admin.Gateways(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range gws {
		if g.Name == "aws-gw" && (!g.Enrolled || g.AppliedGeneration != g.PlanGeneration) {
			t.Errorf("manager sees aws-gw as %+v", g)
		}
	}
}

func mustKey(t *testing.T, path string) wgtypes.Key {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	k, err := wgtypes.ParseKey(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestManagedFollowsSpecChanges(t *testing.T) {
	f := realFed(t)
	dps := &dataplanes{}
	dir := t.TempDir()
	startAgent(t, agent.ManagedConfig{DataDir: dir, JoinToken: f.token(t, "aws-gw"), NewDataplane: dps.new})
	eventually(t, "the first plan applied", func() bool { return mtu(dps.last()) == 1440 })

	// A peer enrolls: its key reaches this agent's device.
	key := f.enrollPeer(t, "azure-gw")
	eventually(t, "the new peer on the device", func() bool {
		t, ok := dps.last().State().Tunnel("fed0")
		dev, _ := t.Device.(*wireguard.Device)
		if !ok || dev == nil {
			return false
		}
		for _, p := range dev.Peers {
			if p.PublicKey == key {
				return true
			}
		}
		return false
	})
	f.setMTU(t, "1400")
	eventually(t, "the new MTU", func() bool { return mtu(dps.last()) == 1340 })
	eventually(t, "the cache holding the new plan", func() bool {
		p, err := agent.LoadCachedPlan(dir)
		return err == nil && p.Plan.Tunnels[0].MTU == 1340
	})
}

func TestManagedRestartWithoutManager(t *testing.T) {
	f := realFed(t)
	dir := t.TempDir()
	first := &dataplanes{}
	a := startAgent(t, agent.ManagedConfig{DataDir: dir, JoinToken: f.token(t, "aws-gw"), NewDataplane: first.new})
	eventually(t, "the first plan applied", func() bool { return mtu(first.last()) == 1440 })
	eventually(t, "the plan cached", func() bool { _, err := agent.LoadCachedPlan(dir); return err == nil })
	if err := a.stop(t); err != nil {
		t.Fatalf("Run returned %v after cancel", err)
	}
	if _, ok := first.last().State().Tunnel("fed0"); !ok {
		t.Fatal("stopping the agent removed the tunnel")
	}

	// The manager goes away; the gateway reboots (an empty machine) and its
	// agent starts again.
	f.Down()
	second := &dataplanes{}
	b := startAgent(t, agent.ManagedConfig{DataDir: dir, NewDataplane: second.new})
	eventually(t, "the cached plan applied without the manager", func() bool { return mtu(second.last()) == 1440 })
	want := first.last().State()
	if got := second.last().State(); got.String() != want.String() {
		t.Errorf("restored state\n%s\nwant\n%s", got, want)
	}
	eventually(t, "a logged outage", func() bool { return b.logs.has("watching the plan") })

	// The manager comes back: the agent finds it by itself and catches up.
	f.Up()
	back := time.Now().Add(-time.Second) // the manager's clock is this one; LastReport has second precision at worst
	eventually(t, "the agent reporting again", func() bool { return !f.gateway("aws-gw").LastReport.Before(back) })
	f.setMTU(t, "1420")
	eventually(t, "the change made while away", func() bool { return mtu(second.last()) == 1360 })
	eventually(t, "the recovery logged", func() bool { return b.logs.has("works again") })
}

// TestManagedTakesLocalOverABarePlan: the plans an agent gets carry their
// Local; an agent that starts with a cached plan without it (cached by an
// agent that predates Local) takes the whole plan again at once, Local
// included, rather than waiting for the next change.
func TestManagedTakesLocalOverABarePlan(t *testing.T) {
	f := realFed(t)
	dir := t.TempDir()
	first := &dataplanes{}
	a := startAgent(t, agent.ManagedConfig{DataDir: dir, JoinToken: f.token(t, "aws-gw"), NewDataplane: first.new})
	eventually(t, "the plan cached with its Local", func() bool {
		p, err := agent.LoadCachedPlan(dir)
		return err == nil && p.Plan.Local != nil
	})
	if err := a.stop(t); err != nil {
		t.Fatalf("Run returned %v after cancel", err)
	}
	p, err := agent.LoadCachedPlan(dir)
	if err != nil {
		t.Fatal(err)
	}
	p.Plan.Local = nil
	data, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, agent.PlanFile), data, 0o600); err != nil {
		t.Fatal(err)
	}
	second := &dataplanes{}
	startAgent(t, agent.ManagedConfig{DataDir: dir, NewDataplane: second.new})
	eventually(t, "the plan taken again with its Local", func() bool {
		c, err := agent.LoadCachedPlan(dir)
		return err == nil && c.Plan.Local != nil && c.Generation == p.Generation
	})
}

func TestManagedRemovedGatewayStops(t *testing.T) {
	f := realFed(t)
	dps := &dataplanes{}
	a := startAgent(t, agent.ManagedConfig{DataDir: t.TempDir(), JoinToken: f.token(t, "aws-gw"), NewDataplane: dps.new})
	eventually(t, "the first plan applied", func() bool { return mtu(dps.last()) == 1440 })
	before := dps.last().State()
	if err := f.admin.RemoveGateway(context.Background(), "aws-gw"); err != nil {
		t.Fatal(err)
	}
	err := a.wait(t)
	if err == nil || !strings.Contains(err.Error(), "aws-gw was removed") || client.StatusOf(err) != 403 {
		t.Fatalf("Run returned %v, want an error naming the removal with status 403", err)
	}
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Code != api.CodeGatewayRemoved {
		t.Errorf("Run returned %v, want the manager's answer with code %s in its chain", err, api.CodeGatewayRemoved)
	}
	if !a.logs.has("removed or its credential revoked") {
		t.Error("the removal was not logged")
	}
	if got := dps.last().State(); got.String() != before.String() {
		t.Errorf("the data plane changed after removal:\n%s\nwant\n%s", got, before)
	}
}

func TestManagedKeyRotation(t *testing.T) {
	f := realFed(t)
	dir := t.TempDir()
	dps := &dataplanes{fresh: true}
	a := startAgent(t, agent.ManagedConfig{DataDir: dir, JoinToken: f.token(t, "aws-gw"), NewDataplane: dps.new})
	eventually(t, "the first plan applied", func() bool { return mtu(dps.last()) == 1440 })
	keyFile := filepath.Join(dir, agent.KeyFile)
	old := filePublicKey(t, keyFile)

	if err := f.admin.Rotate(context.Background(), "aws-gw"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the manager holding a new key", func() bool { return f.gateway("aws-gw").PublicKey != old })
	eventually(t, "the key file replaced", func() bool { return filePublicKey(t, keyFile) == f.gateway("aws-gw").PublicKey })
	eventually(t, "the plan applied with the new key", func() bool { return dps.built() == 2 && mtu(dps.last()) == 1440 })
	if dps.keys[1] != plan.Key(mustKey(t, keyFile)) {
		t.Error("the new dataplane was not built with the new private key")
	}
	if _, err := os.Stat(filepath.Join(dir, agent.NewKeyFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s left behind: %v", agent.NewKeyFile, err)
	}
	if got := mode(t, keyFile); got != 0o600 {
		t.Errorf("new key file mode %v", got)
	}
	eventually(t, "the rotation counter saved", func() bool { return readCredential(t, dir).Rotation == 1 })
	if !a.logs.has(old.String()) || !a.logs.has(f.gateway("aws-gw").PublicKey.String()) {
		t.Error("the rotation log line lacks the old or the new public key")
	}

	// The agent keeps working with its new key after a restart.
	if err := a.stop(t); err != nil {
		t.Fatal(err)
	}
	again := &dataplanes{}
	startAgent(t, agent.ManagedConfig{DataDir: dir, NewDataplane: again.new})
	eventually(t, "the restarted agent applying", func() bool { return mtu(again.last()) == 1440 })
	f.setMTU(t, "1400")
	eventually(t, "a change after rotation", func() bool { return mtu(again.last()) == 1340 })
	if again.keys[0] != dps.keys[1] {
		t.Error("the restarted agent does not use the rotated key")
	}
}

func TestManagedJoinTokenErrors(t *testing.T) {
	f := realFed(t)
	tok := f.token(t, "aws-gw")
	dps := &dataplanes{}
	startAgent(t, agent.ManagedConfig{DataDir: t.TempDir(), JoinToken: tok, NewDataplane: dps.new})
	eventually(t, "the first agent enrolled", func() bool { return f.gateway("aws-gw").Enrolled })

	tests := []struct {
		name  string
		token string
		want  string
	}{
		{"reused", tok, "409 conflict: join token"},
		{"none", "", "fednet token create --gateway NAME"},
		{"garbage", "hello", "not a join token"},
		{"damaged", api.JoinTokenPrefix + "!!", "damaged"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			err := agent.RunManaged(context.Background(), agent.ManagedConfig{DataDir: dir, JoinToken: tt.token, NewDataplane: (&dataplanes{}).new})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err %v, want one containing %q", err, tt.want)
			}
			if _, err := os.Stat(filepath.Join(dir, agent.CredentialFile)); err == nil {
				t.Error("a failed enrollment wrote a credential")
			}
		})
	}
}

func TestManagedTokenIgnoredOnceEnrolled(t *testing.T) {
	f := realFed(t)
	dir := t.TempDir()
	tok := f.token(t, "aws-gw")
	a := startAgent(t, agent.ManagedConfig{DataDir: dir, JoinToken: tok, NewDataplane: (&dataplanes{}).new})
	eventually(t, "enrolled", func() bool { _, err := os.Stat(filepath.Join(dir, agent.CredentialFile)); return err == nil })
	a.stop(t)
	b := startAgent(t, agent.ManagedConfig{DataDir: dir, JoinToken: tok, NewDataplane: (&dataplanes{}).new})
	eventually(t, "the log line", func() bool { return b.logs.has("ignoring --token") })
	eventually(t, "still reporting", func() bool { return b.logs.has("gateway aws-gw: public key") })
}

func TestManagedMissingKeyWithCredential(t *testing.T) {
	f := realFed(t)
	dir := t.TempDir()
	a := startAgent(t, agent.ManagedConfig{DataDir: dir, JoinToken: f.token(t, "aws-gw"), NewDataplane: (&dataplanes{}).new})
	eventually(t, "enrolled", func() bool { _, err := os.Stat(filepath.Join(dir, agent.CredentialFile)); return err == nil })
	a.stop(t)
	os.Remove(filepath.Join(dir, agent.KeyFile))
	err := agent.RunManaged(context.Background(), agent.ManagedConfig{DataDir: dir, NewDataplane: (&dataplanes{}).new})
	if err == nil || !strings.Contains(err.Error(), "private.key is missing") || !strings.Contains(err.Error(), "new join token") {
		t.Fatalf("err %v, want one naming the missing key and the fix", err)
	}
}

func TestManagedStatusReport(t *testing.T) {
	f, fake := fakeFed(t)
	azure := f.enrollPeer(t, "azure-gw")
	st := &fakeStatus{}
	hs := time.Now().Add(-7 * time.Second)
	st.set([]dataplane.LinkState{{Peer: "azure-gw", Backend: backend.WireGuard, Established: true, Endpoint: "203.0.113.99:51820", LastHandshake: hs, RxBytes: 1000, TxBytes: 2000}}, nil)
	dps := &dataplanes{status: st}
	startAgent(t, agent.ManagedConfig{DataDir: t.TempDir(), JoinToken: f.token(t, "aws-gw"), NewDataplane: dps.new})
	eventually(t, "a report with the link", func() bool {
		r, _ := fake.Report("aws-gw")
		return len(r.Links) == 1 && r.Links[0].RxBytes == 1000
	})
	r, _ := fake.Report("aws-gw")
	l := r.Links[0]
	if l.Peer != "azure-gw" || l.PublicKey != azure || l.Backend != backend.WireGuard || !l.Established || l.Endpoint != "203.0.113.99:51820" || l.TxBytes != 2000 ||
		!l.LastHandshake.Equal(hs) || l.HandshakeAge < 7*time.Second || l.HandshakeAge > time.Minute {
		t.Errorf("link %+v", l)
	}
	if r.Revision != 1 || r.ApplyError != "" {
		t.Errorf("report %+v", r)
	}
	links, err := f.admin.Links(context.Background())
	if err != nil || len(links) != 1 || !links[0].Up {
		t.Errorf("links %+v (%v)", links, err)
	}

	// An apply error is reported; a status error only loses counters.
	dps.last().SetFault(func(c dataplane.Change) error {
		if strings.Contains(string(c), "mtu") {
			return errors.New("boom")
		}
		return nil
	})
	st.set([]dataplane.LinkState{{Peer: "azure-gw", Backend: backend.WireGuard}}, errors.New("no device"))
	f.setMTU(t, "1400")
	eventually(t, "the apply error reported", func() bool {
		r, _ := fake.Report("aws-gw")
		return strings.Contains(r.ApplyError, "boom") && r.Revision == 2 && len(r.Links) == 1 && r.Links[0].RxBytes == 0
	})
}

func TestManagedStatusFailureIsNotFatal(t *testing.T) {
	f, fake := fakeFed(t)
	fake.Fail("PUT /v1/gateways/aws-gw/status", 500)
	dps := &dataplanes{}
	a := startAgent(t, agent.ManagedConfig{DataDir: t.TempDir(), JoinToken: f.token(t, "aws-gw"), NewDataplane: dps.new})
	eventually(t, "the first plan applied", func() bool { return mtu(dps.last()) == 1440 })
	eventually(t, "the failure logged", func() bool { return a.logs.has("reporting status") })
	f.setMTU(t, "1400")
	eventually(t, "a change applied", func() bool { return mtu(dps.last()) == 1340 })
	fake.Fail("PUT /v1/gateways/aws-gw/status", 0)
	eventually(t, "reports again", func() bool { return f.applied("aws-gw") })
}

func TestManagedRefusedKeyIsNotRetried(t *testing.T) {
	f, fake := fakeFed(t)
	fake.Fail("PUT /v1/gateways/aws-gw/key", 409)
	dir := t.TempDir()
	dps := &dataplanes{}
	a := startAgent(t, agent.ManagedConfig{DataDir: dir, JoinToken: f.token(t, "aws-gw"), NewDataplane: dps.new})
	eventually(t, "the first plan applied", func() bool { return mtu(dps.last()) == 1440 })
	old := filePublicKey(t, filepath.Join(dir, agent.KeyFile))
	if err := f.admin.Rotate(context.Background(), "aws-gw"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the refusal logged", func() bool { return a.logs.has("refused our new key") })
	f.setMTU(t, "1400")
	eventually(t, "later plans applied", func() bool { return mtu(dps.last()) == 1340 })
	if n := fake.Requests("PUT /v1/gateways/aws-gw/key"); n != 1 {
		t.Errorf("the refused key was sent %d times, want once", n)
	}
	if filePublicKey(t, filepath.Join(dir, agent.KeyFile)) != old || dps.built() != 1 {
		t.Error("a refused key replaced the old one")
	}
}

func TestManagedRotationResumesAfterACrash(t *testing.T) {
	f := realFed(t)
	dir := t.TempDir()
	a := startAgent(t, agent.ManagedConfig{DataDir: dir, JoinToken: f.token(t, "aws-gw"), NewDataplane: (&dataplanes{}).new})
	eventually(t, "applied", func() bool { return f.applied("aws-gw") })
	if err := a.stop(t); err != nil {
		t.Fatal(err)
	}
	// The agent died after writing its next key, maybe after sending it:
	// on restart it must send that same key, not make another.
	next, _ := wgtypes.GeneratePrivateKey()
	if err := os.WriteFile(filepath.Join(dir, agent.NewKeyFile), []byte(next.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := f.admin.Rotate(context.Background(), "aws-gw"); err != nil {
		t.Fatal(err)
	}
	dps := &dataplanes{}
	startAgent(t, agent.ManagedConfig{DataDir: dir, NewDataplane: dps.new})
	want := plan.Key(next.PublicKey())
	eventually(t, "the manager holding the pending key", func() bool { return f.gateway("aws-gw").PublicKey == want })
	eventually(t, "the pending key in place", func() bool { return filePublicKey(t, filepath.Join(dir, agent.KeyFile)) == want })
	eventually(t, "the rotation answered", func() bool { return readCredential(t, dir).Rotation == 1 })
}

func TestManagedManagerURLOverride(t *testing.T) {
	f := realFed(t)
	dir := t.TempDir()
	a := startAgent(t, agent.ManagedConfig{DataDir: dir, JoinToken: f.token(t, "aws-gw"), NewDataplane: (&dataplanes{}).new})
	eventually(t, "applied", func() bool { return f.applied("aws-gw") })
	a.stop(t)
	// The same manager by another name its certificate carries.
	other := strings.Replace(f.URL(), "127.0.0.1", "localhost", 1)
	dps := &dataplanes{}
	b := startAgent(t, agent.ManagedConfig{DataDir: dir, Manager: other, NewDataplane: dps.new})
	eventually(t, "the new URL saved", func() bool { return readCredential(t, dir).Manager == other })
	f.setMTU(t, "1400")
	eventually(t, "a change through the new URL", func() bool { return mtu(dps.last()) == 1340 })
	if !b.logs.has("manager URL changed") {
		t.Error("the URL change was not logged")
	}
}

func TestManagedEnrollmentWaitsForTheManager(t *testing.T) {
	f := realFed(t)
	tok := f.token(t, "aws-gw")
	f.Down()
	dps := &dataplanes{}
	a := startAgent(t, agent.ManagedConfig{DataDir: t.TempDir(), JoinToken: tok, NewDataplane: dps.new})
	eventually(t, "a logged enrollment failure", func() bool { return a.logs.has("enrolling: cannot reach the manager at " + f.URL()) })
	f.Up()
	eventually(t, "the first plan applied", func() bool { return mtu(dps.last()) == 1440 })
}

func TestManagedRetriesServerErrors(t *testing.T) {
	f, fake := fakeFed(t)
	fake.Fail("POST /v1/enroll", 503)
	dps := &dataplanes{}
	a := startAgent(t, agent.ManagedConfig{DataDir: t.TempDir(), JoinToken: f.token(t, "aws-gw"), NewDataplane: dps.new})
	eventually(t, "a logged 503", func() bool { return a.logs.has("503") })
	fake.Fail("POST /v1/enroll", 0)
	eventually(t, "the first plan applied", func() bool { return mtu(dps.last()) == 1440 })
	fake.Fail("GET /v1/gateways/aws-gw/plan", 500)
	f.setMTU(t, "1400")
	eventually(t, "a logged 500", func() bool { return a.logs.has("watching the plan: manager: 500") })
	fake.Fail("GET /v1/gateways/aws-gw/plan", 0)
	eventually(t, "the change applied", func() bool { return mtu(dps.last()) == 1340 })
}

// TestManagedOneAgentPerDataDir: a second agent on the same data directory
// refuses to start, and starts once the first has stopped.
func TestManagedOneAgentPerDataDir(t *testing.T) {
	f := realFed(t)
	dir := t.TempDir()
	a := startAgent(t, agent.ManagedConfig{DataDir: dir, JoinToken: f.token(t, "aws-gw"), NewDataplane: (&dataplanes{}).new})
	eventually(t, "enrolled", func() bool { _, err := os.Stat(filepath.Join(dir, agent.CredentialFile)); return err == nil })
	err := agent.RunManaged(context.Background(), agent.ManagedConfig{DataDir: dir, NewDataplane: (&dataplanes{}).new})
	if err == nil || !strings.Contains(err.Error(), "another fednet agent is running on "+dir) {
		t.Fatalf("second agent: %v, want a refusal naming the directory", err)
	}
	a.stop(t)
	b := startAgent(t, agent.ManagedConfig{DataDir: dir, NewDataplane: (&dataplanes{}).new})
	eventually(t, "the second agent running", func() bool { return b.logs.has("gateway aws-gw") })
}

// exited reports whether the agent's Run returned.
func (r *running) exited() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// count returns how many lines contain s.
func (l *logs) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			n++
		}
	}
	return n
}

// managerDB copies the real manager's database files (it must be down):
// a backup to put back with restoreDB.
func managerDB(t *testing.T, r *clienttest.Real) map[string][]byte {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(r.DataDir(), "fednet.db*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no database in %s (%v)", r.DataDir(), err)
	}
	out := map[string][]byte{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(f)] = data
	}
	return out
}

// restoreDB puts a backup of managerDB back (the manager must be down).
func restoreDB(t *testing.T, r *clienttest.Real, backup map[string][]byte) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(r.DataDir(), "fednet.db*"))
	for _, f := range files {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	for name, data := range backup {
		if err := os.WriteFile(filepath.Join(r.DataDir(), name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// TestManagedUnknownCredentialKeepsDataPlane: the manager's state comes
// back from a backup made before the gateway enrolled, so it answers the
// agent's credential with 401. The agent keeps its data plane, says so
// once, and keeps asking; when the manager's state is right again it
// follows the manager again by itself.
func TestManagedUnknownCredentialKeepsDataPlane(t *testing.T) {
	real := clienttest.NewReal(t)
	f := newFed(t, real)
	f.Down()
	beforeEnrollment := managerDB(t, real)
	f.Up()
	dps := &dataplanes{}
	a := startAgent(t, agent.ManagedConfig{DataDir: t.TempDir(), JoinToken: f.token(t, "aws-gw"), NewDataplane: dps.new})
	eventually(t, "the first plan applied", func() bool { return mtu(dps.last()) == 1440 })
	eventually(t, "the applied plan reported", func() bool { return f.applied("aws-gw") })
	applied := dps.last().State().String()

	f.Down()
	enrolled := managerDB(t, real)
	restoreDB(t, real, beforeEnrollment)
	f.Up()
	const unknown = "the manager does not know gateway aws-gw's credential (manager: 401 unauthenticated"
	eventually(t, "the unknown credential logged", func() bool { return a.logs.has(unknown) })
	if a.exited() {
		t.Fatalf("the agent stopped on a 401: %v", a.err)
	}
	if !a.logs.has("the data plane stays as it is") {
		t.Error("the 401 log line does not say that the data plane stays")
	}
	if got := dps.last().State().String(); got != applied {
		t.Errorf("the data plane changed on a 401:\n%s\nwant\n%s", got, applied)
	}

	// The manager's state is put right: the agent follows it again.
	f.Down()
	restoreDB(t, real, enrolled)
	f.Up()
	f.setMTU(t, "1400")
	eventually(t, "a change applied once the manager knows the gateway again", func() bool { return mtu(dps.last()) == 1340 })
	eventually(t, "the recovery logged", func() bool { return a.logs.has("watching the plan: works again") })
	if n := a.logs.count(unknown); n != 1 {
		t.Errorf("the 401 was logged %d times, want once (then at most once a minute)", n)
	}
	if a.exited() {
		t.Fatalf("the agent stopped: %v", a.err)
	}
}

// withoutLab is the three-site spec without the site of onprem-gw.
func withoutLab(t *testing.T, yaml string) string {
	t.Helper()
	start, end := strings.Index(yaml, "  - name: lab\n"), strings.Index(yaml, "networks:")
	if start < 0 || end < start {
		t.Fatal("the three-site example changed; fix withoutLab")
	}
	out := yaml[:start] + yaml[end:]
	return strings.Replace(out, "sites: [aws-eu, azure-we, lab]", "sites: [aws-eu, azure-we]", 1)
}

// TestManagedNoPlanWaits: the spec stops listing the gateway (it is not
// removed), so the manager has no plan for it (403 forbidden). The agent
// keeps its data plane, says why, and waits; when the spec lists the
// gateway again it applies its plan.
func TestManagedNoPlanWaits(t *testing.T) {
	f := realFed(t)
	dps := &dataplanes{}
	a := startAgent(t, agent.ManagedConfig{DataDir: t.TempDir(), JoinToken: f.token(t, "onprem-gw"), NewDataplane: dps.new})
	eventually(t, "the first plan applied", func() bool { return mtu(dps.last()) == 1440 })
	applied := dps.last().State().String()

	if _, err := f.admin.PutSpec(context.Background(), withoutLab(t, f.yaml), false); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the missing plan logged", func() bool {
		return a.logs.has("the manager has no plan for gateway onprem-gw (manager: 403 forbidden: gateway onprem-gw is not in the federation's spec any more")
	})
	if a.exited() {
		t.Fatalf("the agent stopped when the spec dropped its gateway: %v", a.err)
	}
	if got := dps.last().State().String(); got != applied {
		t.Errorf("the data plane changed while the manager had no plan:\n%s\nwant\n%s", got, applied)
	}

	f.setMTU(t, "1400") // the full spec again, with another MTU
	eventually(t, "the plan of the spec that lists the gateway again", func() bool { return mtu(dps.last()) == 1340 })
	eventually(t, "the end of the wait logged", func() bool { return a.logs.has("watching the plan: works again") })
}

// front serves the real manager's API (its handler and certificate) on
// another address; while newer is set, it rewrites the plan in the plan
// watch's answers to a plan format newer than this fednet's.
type front struct {
	url   string
	newer atomic.Bool
	// plans counts the plan answers rewritten.
	plans atomic.Int64
}

func newFront(t *testing.T, r *clienttest.Real) *front {
	t.Helper()
	m := r.Manager()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", m.TLSConfig())
	if err != nil {
		t.Fatal(err)
	}
	fr := &front{url: "https://" + ln.Addr().String()}
	version := regexp.MustCompile(`"version":\s*` + strconv.Itoa(plan.Version) + `\b`)
	h := m.Handler()
	srv := &http.Server{
		ErrorLog: log.New(io.Discard, "", 0),
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodGet || !strings.HasSuffix(r.URL.Path, "/plan") {
				h.ServeHTTP(w, r)
				return
			}
			rec := httptest.NewRecorder()
			r.Header.Del("Accept-Encoding") // plain JSON, to rewrite
			h.ServeHTTP(rec, r)
			body := rec.Body.Bytes()
			// Decided when the answer is ready: a watch waits for it.
			if rec.Code == http.StatusOK && fr.newer.Load() {
				body = version.ReplaceAll(body, []byte(`"version": `+strconv.Itoa(plan.Version+1)))
				fr.plans.Add(1)
			}
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.Header().Del("Content-Length") // the body may have changed
			w.WriteHeader(rec.Code)
			w.Write(body)
		}),
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return fr
}

// TestManagedRefusesANewerPlanFormat: the manager answers with a plan of a
// newer format than this agent reads. The client's decode error reaches
// the loop: the plan in force stays, the refusal is logged once and
// reported (the manager sees applyError), and the watch goes on, so the
// next plan this agent can read is applied.
func TestManagedRefusesANewerPlanFormat(t *testing.T) {
	real := clienttest.NewReal(t)
	f := newFed(t, real)
	fr := newFront(t, real)
	dps := &dataplanes{}
	dir := t.TempDir()
	a := startAgent(t, agent.ManagedConfig{DataDir: dir, JoinToken: f.token(t, "aws-gw"), Manager: fr.url, NewDataplane: dps.new})
	eventually(t, "the first plan applied", func() bool { return mtu(dps.last()) == 1440 && f.applied("aws-gw") })

	fr.newer.Store(true)
	f.setMTU(t, "1400")
	eventually(t, "the refusal reported to the manager", func() bool {
		return strings.Contains(f.gateway("aws-gw").ApplyError, "upgrade fednet")
	})
	if !a.logs.has("refusing the plan (plan watch)") || !a.logs.has("newer than the 2 this fednet understands") {
		t.Errorf("no clear refusal in the log:\n%s", strings.Join(a.logs.lines, "\n"))
	}
	// The watch goes on (the manager keeps answering with that plan) and
	// the refusal is not logged again.
	seen := fr.plans.Load()
	eventually(t, "more plan answers", func() bool { return fr.plans.Load() >= seen+3 })
	if n := a.logs.count("refusing the plan"); n != 1 {
		t.Errorf("the refusal was logged %d times, want once", n)
	}
	if mtu(dps.last()) != 1440 || a.exited() {
		t.Fatalf("after the refusal: mtu %d (want the plan in force, 1440), agent stopped %v", mtu(dps.last()), a.exited())
	}
	if p, err := agent.LoadCachedPlan(dir); err != nil || p.Plan.Tunnels[0].MTU != 1440 {
		t.Errorf("the cache after a refusal: %v, %v", p, err)
	}

	fr.newer.Store(false)
	eventually(t, "the plan applied once it can be read", func() bool { return mtu(dps.last()) == 1340 })
	eventually(t, "the refusal cleared at the manager", func() bool {
		g := f.gateway("aws-gw")
		return g.ApplyError == "" && g.AppliedGeneration == g.PlanGeneration
	})
}

// TestManagedSeveralManagers: with several manager URLs (a federation of
// managers on one store), the first unreachable, the agent enrolls through
// the next, keeps every URL in its credential, and applies its plan.
func TestManagedSeveralManagers(t *testing.T) {
	f := realFed(t)
	dir := t.TempDir()
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "https://" + dead.Addr().String()
	dead.Close() // nothing listens there: connections are refused
	urls := down + "," + f.URL()
	dps := &dataplanes{}
	startAgent(t, agent.ManagedConfig{DataDir: dir, JoinToken: f.token(t, "aws-gw"), Manager: urls, NewDataplane: dps.new})
	eventually(t, "applied through the second manager", func() bool { return f.applied("aws-gw") })
	if c := readCredential(t, dir); !slices.Equal(c.URLs(), []string{down, f.URL()}) {
		t.Errorf("credential managers %v, want both", c.URLs())
	}
}
