package manager

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/backend"
	"github.com/fednet/fednet/internal/plan"
)

func TestFirstStart(t *testing.T) {
	h := newHarness(t)
	for _, f := range []string{AdminTokenFile, CAKeyFile, ServerKeyFile, "fednet.db"} {
		fi, err := os.Stat(filepath.Join(h.dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", f, fi.Mode().Perm())
		}
	}
	caPEM, err := os.ReadFile(filepath.Join(h.dir, CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(caPEM)
	sum := sha256.Sum256(block.Bytes)
	if fp := hex.EncodeToString(sum[:]); fp != h.m.CAFingerprint() {
		t.Errorf("CAFingerprint = %s, want sha256 of ca.crt %s", h.m.CAFingerprint(), fp)
	}
	tok, err := os.ReadFile(h.m.AdminTokenPath())
	if err != nil || strings.TrimSpace(string(tok)) != h.m.AdminToken() || len(h.m.AdminToken()) < 40 {
		t.Errorf("admin.token = %q, %v; AdminToken() = %q", tok, err, h.m.AdminToken())
	}

	// The server presents its leaf and the CA, over TLS 1.3 only.
	host := strings.TrimPrefix(h.url, "https://")
	conn, err := tls.Dial("tcp", host, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	cs := conn.ConnectionState()
	conn.Close()
	if cs.Version != tls.VersionTLS13 {
		t.Errorf("TLS version %x, want 1.3", cs.Version)
	}
	if len(cs.PeerCertificates) != 2 || !slices.Equal(cs.PeerCertificates[1].Raw, block.Bytes) {
		t.Errorf("server sent %d certificates, want the leaf and the CA", len(cs.PeerCertificates))
	}
	leaf := cs.PeerCertificates[0]
	for _, name := range []string{"localhost", "127.0.0.1"} {
		if err := leaf.VerifyHostname(name); err != nil {
			t.Errorf("server certificate: %v", err)
		}
	}
	if _, err := tls.Dial("tcp", host, &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS12}); err == nil {
		t.Error("a TLS 1.2 handshake succeeded")
	}

	// The API description is served without authentication.
	a := h.do(req{method: "GET", path: api.PathOpenAPI})
	if a.status != 200 || !strings.HasPrefix(string(a.body), "openapi: 3.0") {
		t.Errorf("GET /openapi.yaml: %d %.40q", a.status, a.body)
	}
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string // in the error
	}{
		{"no data dir", Config{Listen: "127.0.0.1:7443"}, "--data-dir"},
		{"wildcard without advertise", Config{Listen: ":7443"}, "--advertise"},
		{"default listen without advertise", Config{}, "--advertise"},
		{"any address without advertise", Config{Listen: "0.0.0.0:7443"}, "--advertise"},
		{"port 0 without advertise", Config{Listen: "127.0.0.1:0"}, "--advertise"},
		{"bad listen", Config{Listen: "7443"}, "--listen"},
		{"bad port", Config{Listen: "127.0.0.1:http-ish"}, "--listen"},
		{"http advertise", Config{Listen: ":7443", Advertise: "http://m.example.com:7443"}, "https"},
		{"advertise with path", Config{Listen: ":7443", Advertise: "https://m.example.com/x"}, "--advertise"},
		{"unspecified advertise", Config{Listen: ":7443", Advertise: "0.0.0.0"}, "--advertise"},
		{"bad san", Config{Listen: "127.0.0.1:7443", SANs: []string{"not a name"}}, "--san"},
		{"empty san", Config{Listen: "127.0.0.1:7443", SANs: []string{""}}, "--san"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.name != "no data dir" {
				tt.cfg.DataDir = t.TempDir()
				tt.cfg.Store = openStore(t, tt.cfg.DataDir)
			}
			tt.cfg.Logf = t.Logf
			m, err := New(tt.cfg)
			if err == nil {
				m.Close()
				t.Fatalf("New(%+v) succeeded", tt.cfg)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not name %q", err, tt.want)
			}
			// Operators see these errors: they name the flag, not the Go
			// field behind it.
			if f := goField.FindString(err.Error()); f != "" {
				t.Errorf("error %q names the Go field %q; name the flag only", err, f)
			}
		})
	}
}

// goField matches a Config field name the way errors once named them,
// "Advertise (--advertise)".
var goField = regexp.MustCompile(`\b(DataDir|Listen|Advertise|SANs|Limits\.[A-Za-z]+) \(--`)

func TestAdvertise(t *testing.T) {
	tests := []struct{ listen, advertise, want string }{
		{"127.0.0.1:7443", "", "https://127.0.0.1:7443"},
		{"[::1]:7443", "", "https://[::1]:7443"},
		{":7443", "manager.example.com", "https://manager.example.com:7443"},
		{":7443", "manager.example.com:443", "https://manager.example.com:443"},
		{"0.0.0.0:7443", "https://203.0.113.5:8443/", "https://203.0.113.5:8443"},
	}
	for _, tt := range tests {
		u, _, err := names(tt.listen, tt.advertise, nil)
		if err != nil || u != tt.want {
			t.Errorf("names(%q, %q) = %q, %v; want %q", tt.listen, tt.advertise, u, err, tt.want)
		}
	}
}

func TestSecondManagerRefused(t *testing.T) {
	h := newHarness(t)
	s, err := OpenStore(context.Background(), h.dir, false)
	if err == nil {
		s.Close()
		t.Fatal("a second manager opened the same data directory")
	}
	if !strings.Contains(err.Error(), "another fednet manager") {
		t.Errorf("error %q does not say another manager runs", err)
	}
}

func TestServerCertificateFollowsNames(t *testing.T) {
	dir := t.TempDir()
	open := func(sans ...string) (*Manager, []byte) {
		t.Helper()
		st, err := OpenStore(context.Background(), dir, false)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		m, err := New(Config{DataDir: dir, Store: st, Listen: "127.0.0.1:7443", SANs: sans, Logf: t.Logf})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		cert, err := m.certs.current(t.Logf)
		if err != nil {
			t.Fatal(err)
		}
		return m, cert.Leaf.Raw
	}
	m1, leaf1 := open("manager.example.com")
	m2, leaf2 := open("manager.example.com")
	m3, leaf3 := open("manager.example.com", "10.9.8.7")
	if m1.CAFingerprint() != m2.CAFingerprint() || m2.CAFingerprint() != m3.CAFingerprint() {
		t.Error("the CA changed between starts")
	}
	if !slices.Equal(leaf1, leaf2) {
		t.Error("the server certificate was reissued though its names did not change")
	}
	if slices.Equal(leaf2, leaf3) {
		t.Error("the server certificate was not reissued for a new SAN")
	}
	c, _ := m3.certs.current(t.Logf)
	if err := c.Leaf.VerifyHostname("10.9.8.7"); err != nil {
		t.Error(err)
	}
	if err := c.Leaf.VerifyHostname("manager.example.com"); err != nil {
		t.Error(err)
	}
}

func TestSpecRevisionsAndDryRun(t *testing.T) {
	h := newHarness(t)
	if a := h.do(req{method: "GET", path: api.PathSpec, token: h.m.AdminToken()}); a.status != 404 || !strings.Contains(a.err.Message, "fednet apply") {
		t.Errorf("GET spec before any: %d %+v", a.status, a.err)
	}
	doc := threeSites(t)
	r1 := h.putSpec(doc)
	if r1.Revision != 1 || !r1.Changed || r1.DryRun {
		t.Errorf("first put: %+v", r1)
	}
	if !slices.Equal(r1.Affected, []string{"aws-gw", "azure-gw", "onprem-gw"}) {
		t.Errorf("first put affected %v", r1.Affected)
	}
	// The same document again makes no revision.
	if r := h.putSpec(doc); r.Revision != 1 || r.Changed || len(r.Affected) != 0 {
		t.Errorf("same spec again: %+v", r)
	}
	// A dry run of a change names the affected gateways, diffs their plans
	// and stores nothing.
	changed := strings.Replace(doc, "underlayMTU: 1500", "underlayMTU: 1400", 1)
	gen := h.plan("aws-gw").Generation
	var dry api.SpecResponse
	h.ok(req{method: "PUT", path: api.PathSpec + "?dryRun=true", body: api.SpecRequest{YAML: changed}}, &dry)
	if !dry.DryRun || !dry.Changed || dry.Revision != 2 || len(dry.Affected) != 3 {
		t.Errorf("dry run: %+v", dry)
	}
	for _, want := range []string{"--- aws-gw (revision 1)", "+++ aws-gw (revision 2)", "-  interface fed0 (wireguard) address 10.255.", "mtu 1440", "mtu 1340", "azure-gw", "onprem-gw"} {
		if !strings.Contains(dry.Diff, want) {
			t.Errorf("dry-run diff lacks %q:\n%s", want, dry.Diff)
		}
	}
	var cur api.SpecResponse
	h.ok(req{method: "GET", path: api.PathSpec}, &cur)
	if cur.Revision != 1 || cur.YAML != doc {
		t.Errorf("after dry run the spec is revision %d", cur.Revision)
	}
	if g := h.plan("aws-gw").Generation; g != gen {
		t.Errorf("a dry run changed the plan generation %d -> %d", gen, g)
	}
	// A raw YAML body works too.
	var r2 api.SpecResponse
	h.ok(req{method: "PUT", path: api.PathSpec, body: changed, header: map[string]string{"Content-Type": "application/yaml"}}, &r2)
	if r2.Revision != 2 || !r2.Changed || r2.Diff != dry.Diff {
		t.Errorf("second put: revision %d changed %v, diff equal to the dry run's: %v", r2.Revision, r2.Changed, r2.Diff == dry.Diff)
	}
	if p := h.plan("aws-gw"); p.Revision != 2 || p.Plan.Tunnels[0].MTU != 1340 || p.Generation <= gen {
		t.Errorf("plan after put: revision %d mtu %d generation %d (was %d)", p.Revision, p.Plan.Tunnels[0].MTU, p.Generation, gen)
	}
	var revs []api.Revision
	h.ok(req{method: "GET", path: api.PathRevisions}, &revs)
	if len(revs) != 2 || revs[0].Revision != 1 || revs[1].Revision != 2 || revs[1].Sites != 3 || revs[1].Gateways != 3 || revs[1].Networks != 1 {
		t.Errorf("revisions: %+v", revs)
	}
	// A change that touches one gateway's plan only wakes that one.
	before := map[string]int64{}
	for _, g := range []string{"aws-gw", "azure-gw", "onprem-gw"} {
		before[g] = h.plan(g).Generation
	}
	lanOnly := strings.Replace(changed, "endpoint: 198.51.100.30:51820", "endpoint: 198.51.100.30:51820\n        lanAddress: 10.5.0.1", 1)
	r3 := h.putSpec(lanOnly)
	if r3.Revision != 3 || len(r3.Affected) != 0 {
		t.Logf("third put: %+v", r3)
	}
	for _, g := range []string{"aws-gw", "azure-gw", "onprem-gw"} {
		if got := h.plan(g).Generation; got != before[g] && !slices.Contains(r3.Affected, g) {
			t.Errorf("%s: generation %d -> %d though its plan did not change", g, before[g], got)
		}
	}
}

// TestSpecAnswerWithoutDiff: a change sent with Prefer: return=minimal
// (as fednet apply sends it, after its dry run) is stored and answered
// with its revision and affected gateways but no diff, and the answer
// says the preference was applied; a dry run with it still has its diff,
// and a change without it has the diff.
func TestSpecAnswerWithoutDiff(t *testing.T) {
	h := newHarness(t)
	doc := threeSites(t)
	h.putSpec(doc)
	put := func(yaml, query, prefer string) (api.SpecResponse, answer) {
		t.Helper()
		hdr := map[string]string{}
		if prefer != "" {
			hdr["Prefer"] = prefer
		}
		a := h.do(req{method: "PUT", path: api.PathSpec + query, token: h.m.AdminToken(), body: api.SpecRequest{YAML: yaml}, header: hdr})
		var out api.SpecResponse
		if a.status != 200 || json.Unmarshal(a.body, &out) != nil {
			t.Fatalf("PUT spec%s (Prefer %q): %d %s", query, prefer, a.status, a.body)
		}
		return out, a
	}
	mtu := strings.Replace(doc, "underlayMTU: 1500", "underlayMTU: 1400", 1)
	dry, a := put(mtu, "?dryRun=true", "return=minimal")
	if !dry.DryRun || !strings.Contains(dry.Diff, "mtu 1340") || a.header.Get("Preference-Applied") != "" {
		t.Errorf("dry run with Prefer: return=minimal: diff %q, Preference-Applied %q; want the diff, the preference not applied", dry.Diff, a.header.Get("Preference-Applied"))
	}
	for i, prefer := range []string{"return=minimal", `respond-async, Return="minimal"; x=1`} {
		doc := strings.Replace(mtu, "underlayMTU: 1400", fmt.Sprintf("underlayMTU: %d", 1420+i*10), 1)
		r, a := put(doc, "", prefer)
		if !r.Changed || r.Revision != 2+i || len(r.Affected) != 3 || r.Diff != "" || a.header.Get("Preference-Applied") != "return=minimal" {
			t.Errorf("change with Prefer %q: revision %d changed %v affected %v, diff %d bytes, Preference-Applied %q; want it stored, no diff, the preference applied",
				prefer, r.Revision, r.Changed, r.Affected, len(r.Diff), a.header.Get("Preference-Applied"))
		}
	}
	if p := h.plan("aws-gw"); p.Revision != 3 {
		t.Errorf("plan after the changes without diff: revision %d, want 3", p.Revision)
	}
	r, a := put(mtu, "", "return=representation")
	if r.Revision != 4 || !strings.Contains(r.Diff, "mtu 1340") || a.header.Get("Preference-Applied") != "" {
		t.Errorf("change without Prefer: return=minimal: revision %d, diff %q, Preference-Applied %q; want the diff", r.Revision, r.Diff, a.header.Get("Preference-Applied"))
	}
}

func TestLongPoll(t *testing.T) {
	h := newHarness(t)
	doc := threeSites(t)
	h.putSpec(doc)
	cred, _ := h.enroll("aws-gw")
	path := gwPath(api.PathPlan, "aws-gw")

	// Behind: at once.
	var first api.PlanResponse
	h.ok(req{method: "GET", path: path + "?after=0&timeout=60s", token: cred}, &first)
	if first.Generation == 0 || first.Plan.Name != "aws-gw" || first.Revision != 1 {
		t.Fatalf("first watch: %+v", first)
	}
	// No after: at once too.
	h.ok(req{method: "GET", path: path, token: cred}, nil)
	// Up to date: blocks for the timeout, then 204.
	start := time.Now()
	a := h.do(req{method: "GET", path: path + "?after=" + itoa(first.Generation) + "&timeout=200ms", token: cred})
	if a.status != http.StatusNoContent || len(a.body) != 0 {
		t.Errorf("watch when up to date: %d %q", a.status, a.body)
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("watch returned after %s, before its 200ms timeout", d)
	}
	// An after above the manager's generation (its state was reset) gets
	// the plan at once.
	h.ok(req{method: "GET", path: path + "?after=999999&timeout=60s", token: cred}, nil)

	// A change wakes a waiting watch at once.
	type got struct {
		a   answer
		err error
		at  time.Time
	}
	done := make(chan got, 1)
	go func() {
		a, err := h.try(req{method: "GET", path: path + "?after=" + itoa(first.Generation) + "&timeout=60s", token: cred})
		done <- got{a, err, time.Now()}
	}()
	// Wait until the watch is parked (a watcher holds the current channel).
	waitParked(t, h.m, 1)
	changed := time.Now()
	h.putSpec(strings.Replace(doc, "underlayMTU: 1500", "underlayMTU: 1400", 1))
	g := <-done
	if g.err != nil || g.a.status != 200 {
		t.Fatalf("woken watch: %v %d %s", g.err, g.a.status, g.a.body)
	}
	t.Logf("watch woke %s after the spec put started", g.at.Sub(changed))
	if g.at.Sub(changed) > 5*time.Second {
		t.Errorf("watch woke %s after the change", g.at.Sub(changed))
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// waitParked waits until at least n plan watches wait for a change.
func waitParked(t *testing.T, m *Manager, n int) {
	t.Helper()
	eventually(t, 5*time.Second, "watches parked", func() bool { return m.watchers.Load() >= int64(n) })
}

func TestEnrollmentKeysAndRemoval(t *testing.T) {
	h := newHarness(t)
	h.putSpec(threeSites(t))
	credA, keyA := h.enroll("aws-gw")
	genA := h.plan("aws-gw").Generation
	if _, ok := peerKey(h.plan("aws-gw").Plan, "azure-gw"); !ok {
		t.Fatal("azure-gw is not a peer of aws-gw")
	}
	// Enrolling azure-gw changes aws-gw's plan: the peer gets its key.
	credB, keyB := h.enroll("azure-gw")
	pa := h.plan("aws-gw")
	if k, _ := peerKey(pa.Plan, "azure-gw"); k != keyB {
		t.Errorf("aws-gw's plan has key %v for azure-gw, want %v", k, keyB)
	}
	if pa.Generation <= genA {
		t.Errorf("aws-gw's generation %d did not increase from %d", pa.Generation, genA)
	}
	if k, _ := peerKey(h.plan("azure-gw").Plan, "aws-gw"); k != keyA {
		t.Errorf("azure-gw's plan has key %v for aws-gw, want %v", k, keyA)
	}

	// Rotation: the admin asks, azure-gw's watch returns at once with the
	// request, its new key reaches aws-gw's plan.
	pb := h.plan("azure-gw")
	var gw api.Gateway
	h.ok(req{method: "POST", path: gwPath(api.PathRotate, "azure-gw")}, &gw)
	if gw.RotateKey != 1 || gw.KeyRotation != 0 {
		t.Errorf("after rotate: %+v", gw)
	}
	var w api.PlanResponse
	h.ok(req{method: "GET", path: gwPath(api.PathPlan, "azure-gw") + "?after=" + itoa(pb.Generation) + "&timeout=1s", token: credB}, &w)
	if w.RotateKey != 1 || w.Generation <= pb.Generation {
		t.Errorf("watch after rotate: rotateKey %d generation %d (was %d)", w.RotateKey, w.Generation, pb.Generation)
	}
	keyB2 := randomKey(t)
	h.ok(req{method: "PUT", path: gwPath(api.PathKey, "azure-gw"), token: credB, body: api.KeyRequest{PublicKey: keyB2, Rotation: 1}}, nil)
	if k, _ := peerKey(h.plan("aws-gw").Plan, "azure-gw"); k != keyB2 {
		t.Errorf("after the key update aws-gw has key %v for azure-gw, want %v", k, keyB2)
	}
	h.ok(req{method: "GET", path: gwPath(api.PathGateway, "azure-gw")}, &gw)
	if gw.RotateKey != 1 || gw.KeyRotation != 1 || gw.PublicKey != keyB2 {
		t.Errorf("after the key update: %+v", gw)
	}
	// A key another gateway has is refused.
	if a := h.do(req{method: "PUT", path: gwPath(api.PathKey, "azure-gw"), token: credB, body: api.KeyRequest{PublicKey: keyA, Rotation: 1}}); a.status != 409 || a.err.Field != "publicKey" {
		t.Errorf("duplicate key: %d %+v", a.status, a.err)
	}

	// Removal: gone from every plan; its credential is refused.
	h.ok(req{method: "DELETE", path: gwPath(api.PathGateway, "azure-gw")}, &gw)
	if !gw.Removed {
		t.Errorf("after removal: %+v", gw)
	}
	for _, other := range []string{"aws-gw", "onprem-gw"} {
		if _, ok := peerKey(h.plan(other).Plan, "azure-gw"); ok {
			t.Errorf("%s still has removed azure-gw as a peer", other)
		}
	}
	for _, r := range []req{
		{method: "GET", path: gwPath(api.PathPlan, "azure-gw")},
		{method: "PUT", path: gwPath(api.PathStatus, "azure-gw"), body: api.StatusReport{}},
		{method: "PUT", path: gwPath(api.PathKey, "azure-gw"), body: api.KeyRequest{PublicKey: randomKey(t)}},
	} {
		r.token = credB
		if a := h.do(r); a.status != 403 || !strings.Contains(a.err.Message, "removed") {
			t.Errorf("%s %s with a removed gateway's credential: %d %+v", r.method, r.path, a.status, a.err)
		}
	}
	// Removing again is no error; aws-gw still works.
	h.ok(req{method: "DELETE", path: gwPath(api.PathGateway, "azure-gw")}, nil)
	h.ok(req{method: "GET", path: gwPath(api.PathPlan, "aws-gw"), token: credA}, nil)

	// Enrolling again with a new token brings it back, with a new
	// credential; the old one stays refused... as unknown now.
	credB3, keyB3 := h.enroll("azure-gw")
	if k, _ := peerKey(h.plan("aws-gw").Plan, "azure-gw"); k != keyB3 {
		t.Errorf("re-enrolled azure-gw: aws-gw has key %v, want %v", k, keyB3)
	}
	h.ok(req{method: "GET", path: gwPath(api.PathPlan, "azure-gw"), token: credB3}, nil)
	if a := h.do(req{method: "GET", path: gwPath(api.PathPlan, "azure-gw"), token: credB}); a.status != 401 {
		t.Errorf("old credential after re-enrollment: %d %+v", a.status, a.err)
	}
}

func TestGatewayLeavesSpec(t *testing.T) {
	h := newHarness(t)
	doc := threeSites(t)
	h.putSpec(doc)
	cred, _ := h.enroll("onprem-gw")
	// Drop site "lab" (onprem-gw) from the spec.
	i := strings.Index(doc, "  - name: lab")
	j := strings.Index(doc, "networks:")
	smaller := doc[:i] + doc[j:]
	smaller = strings.Replace(smaller, "sites: [aws-eu, azure-we, lab]", "sites: [aws-eu, azure-we]", 1)
	r := h.putSpec(smaller)
	if !slices.Contains(r.Affected, "onprem-gw") || !strings.Contains(r.Diff, "onprem-gw (no plan") {
		t.Errorf("put without onprem-gw: affected %v diff:\n%s", r.Affected, r.Diff)
	}
	a := h.do(req{method: "GET", path: gwPath(api.PathPlan, "onprem-gw"), token: cred})
	if a.status != 403 || !strings.Contains(a.err.Message, "not in the federation's spec any more") {
		t.Errorf("plan of a gateway no longer in the spec: %d %+v", a.status, a.err)
	}
	// A watch parked when the gateway leaves returns 403 too.
	h.putSpec(doc)
	p := h.plan("onprem-gw")
	done := make(chan answer, 1)
	go func() {
		a, _ := h.try(req{method: "GET", path: gwPath(api.PathPlan, "onprem-gw") + "?after=" + itoa(p.Generation) + "&timeout=60s", token: cred})
		done <- a
	}()
	waitParked(t, h.m, 1)
	h.putSpec(smaller)
	if a := <-done; a.status != 403 {
		t.Errorf("parked watch of a gateway leaving the spec: %d %+v", a.status, a.err)
	}
}

func TestRestartKeepsState(t *testing.T) {
	h := newHarness(t)
	h.putSpec(threeSites(t))
	cred, _ := h.enroll("aws-gw")
	h.enroll("azure-gw")
	h.ok(req{method: "POST", path: gwPath(api.PathRotate, "azure-gw")}, nil)
	h.ok(req{method: "DELETE", path: gwPath(api.PathGateway, "onprem-gw")}, nil)
	var before api.Overview
	h.ok(req{method: "GET", path: api.PathFederation}, &before)
	plans := map[string]api.PlanResponse{}
	for _, g := range []string{"aws-gw", "azure-gw"} {
		plans[g] = h.plan(g)
	}
	fp, admin := h.m.CAFingerprint(), h.m.AdminToken()

	h.restart()
	if h.m.CAFingerprint() != fp || h.m.AdminToken() != admin {
		t.Error("CA fingerprint or admin token changed across a restart")
	}
	var after api.Overview
	h.ok(req{method: "GET", path: api.PathFederation}, &after)
	if after.Revision != before.Revision || after.Generation != before.Generation {
		t.Errorf("restart: revision %d generation %d, was %d and %d", after.Revision, after.Generation, before.Revision, before.Generation)
	}
	for g, want := range plans {
		got := h.plan(g)
		if got.Generation != want.Generation || got.Revision != want.Revision || got.RotateKey != want.RotateKey || got.Plan.String() != want.Plan.String() {
			t.Errorf("%s after restart: generation %d revision %d rotate %d, was %d %d %d; same plan: %v",
				g, got.Generation, got.Revision, got.RotateKey, want.Generation, want.Revision, want.RotateKey, got.Plan.String() == want.Plan.String())
		}
	}
	// Credentials survive; the removed gateway stays removed.
	h.ok(req{method: "GET", path: gwPath(api.PathPlan, "aws-gw") + "?after=0", token: cred}, nil)
	if a := h.do(req{method: "GET", path: gwPath(api.PathPlan, "onprem-gw"), token: admin}); a.status != 403 {
		t.Errorf("removed gateway's plan after restart: %d %+v", a.status, a.err)
	}
	for _, f := range []string{AdminTokenFile, CAKeyFile} {
		fi, err := os.Stat(filepath.Join(h.dir, f))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, mode %v", f, err, fi.Mode().Perm())
		}
	}
}

func TestReadModels(t *testing.T) {
	h := newHarness(t)
	var sites []api.Site
	h.ok(req{method: "GET", path: api.PathSites}, &sites)
	if len(sites) != 0 {
		t.Errorf("sites before any spec: %+v", sites)
	}
	h.putSpec(threeSites(t))
	credA, _ := h.enroll("aws-gw")
	h.ok(req{method: "GET", path: api.PathSites}, &sites)
	if len(sites) != 3 || sites[0].Name != "aws-eu" || sites[0].Provider != "aws" || sites[0].Prefixes[0].String() != "10.1.0.0/24" || !slices.Equal(sites[0].Gateways, []string{"aws-gw"}) {
		t.Errorf("sites: %+v", sites)
	}
	var nets []api.Network
	h.ok(req{method: "GET", path: api.PathNetworks}, &nets)
	if len(nets) != 1 || nets[0].Name != "apps" || nets[0].ID != 100 || nets[0].Mode != "routed" || len(nets[0].Sites) != 3 {
		t.Errorf("networks: %+v", nets)
	}
	p := h.plan("aws-gw")
	now := h.clock.Now()
	h.ok(req{method: "PUT", path: gwPath(api.PathStatus, "aws-gw"), token: credA, body: api.StatusReport{
		Generation: p.Generation, Revision: p.Revision,
		Links: []api.LinkStatus{
			{Peer: "azure-gw", Endpoint: "203.0.113.20:51820", LastHandshake: now.Add(-10 * time.Second), RxBytes: 5, TxBytes: 7},
			{Peer: "onprem-gw", HandshakeAge: 200 * time.Second},
		},
	}}, nil)
	var links []api.Link
	h.ok(req{method: "GET", path: api.PathLinks}, &links)
	if len(links) != 2 || links[0].To != "azure-gw" || !links[0].Up || links[0].RxBytes != 5 || links[1].To != "onprem-gw" || links[1].Up || links[1].LastHandshake.IsZero() {
		t.Errorf("links: %+v", links)
	}
	// Three minutes later the link is down.
	h.clock.Advance(3 * time.Minute)
	h.ok(req{method: "GET", path: api.PathLinks}, &links)
	if links[0].Up {
		t.Errorf("link with a handshake 190s ago is up: %+v", links[0])
	}
	var gws []api.Gateway
	h.ok(req{method: "GET", path: api.PathGateways}, &gws)
	if len(gws) != 3 || gws[0].Name != "aws-gw" || !gws[0].Enrolled || gws[0].AppliedGeneration != p.Generation || gws[0].PlanGeneration != p.Generation ||
		gws[0].ObservedAddress != "127.0.0.1" || gws[0].Site != "aws-eu" || !gws[0].TransitAddress.IsValid() || gws[1].Enrolled {
		t.Errorf("gateways: %+v", gws)
	}
	var ov api.Overview
	h.ok(req{method: "GET", path: api.PathFederation}, &ov)
	if ov.Revision != 1 || ov.Generation == 0 || len(ov.Gateways) != 3 || len(ov.Links) != 2 {
		t.Errorf("overview: %+v", ov)
	}
	var toks []api.Token
	h.ok(req{method: "GET", path: api.PathTokens}, &toks)
	if len(toks) != 1 || !toks[0].Used || toks[0].Token != "" || toks[0].Gateway != "aws-gw" {
		t.Errorf("tokens: %+v", toks)
	}
}

func TestServeEndsWatches(t *testing.T) {
	h := newHarness(t)
	h.putSpec(threeSites(t))
	p := h.plan("aws-gw")
	done := make(chan answer, 1)
	go func() {
		a, _ := h.try(req{method: "GET", path: gwPath(api.PathPlan, "aws-gw") + "?after=" + itoa(p.Generation) + "&timeout=120s", token: h.m.AdminToken()})
		done <- a
	}()
	waitParked(t, h.m, 1)
	start := time.Now()
	h.stop()
	if d := time.Since(start); d > shutdownGrace {
		t.Errorf("shutdown took %s with a watch open", d)
	}
	if a := <-done; a.status != http.StatusNoContent {
		t.Errorf("watch open at shutdown: %d", a.status)
	}
}

// TestConcurrentEnrollment: one token, 20 agents at once: one enrolls.
func TestConcurrentEnrollment(t *testing.T) {
	h := newHarness(t)
	h.putSpec(threeSites(t))
	_, secret := h.token("aws-gw")
	const n = 20
	status := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			a, err := h.try(req{method: "POST", path: api.PathEnroll, token: secret, body: api.EnrollRequest{PublicKey: plan.Key{byte(i + 1)}}})
			if err != nil {
				t.Error(err)
			}
			status[i] = a.status
		})
	}
	wg.Wait()
	ok := 0
	for _, s := range status {
		switch s {
		case 200:
			ok++
		case 409:
		default:
			t.Errorf("enrollment status %d", s)
		}
	}
	if ok != 1 {
		t.Errorf("%d enrollments succeeded with one token, want 1 (%v)", ok, status)
	}
}

func TestListenAndServe(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	log := &testLog{t: t}
	t.Cleanup(log.stop)
	dir := t.TempDir()
	m, err := New(Config{DataDir: dir, Store: openStore(t, dir), Listen: addr, Logf: log.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.ListenAndServe(ctx) }()
	hc := pinnedClient(t, m)
	eventually(t, 5*time.Second, "manager answers", func() bool {
		resp, err := hc.Get(m.URL() + api.PathOpenAPI)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	cancel()
	if err := <-done; err != nil {
		t.Errorf("ListenAndServe: %v", err)
	}
}

// TestLinkUpFromProbes: a reported probe verdict of down makes the link down
// despite a fresh handshake, and the figures reach the links view.
func TestLinkUpFromProbes(t *testing.T) {
	h := newHarness(t)
	h.putSpec(threeSites(t))
	credA, _ := h.enroll("aws-gw")
	p := h.plan("aws-gw")
	now := h.clock.Now()
	fig := &api.LinkProbe{Up: true, Window: time.Minute, Sent: 60, Lost: 0, RTTP50: 2 * time.Millisecond, RTTP99: 5 * time.Millisecond, Jitter: time.Millisecond}
	cut := &api.LinkProbe{Up: false, RecentLoss: 1, Window: time.Minute, Sent: 60, Lost: 3, Loss: 0.05}
	h.ok(req{method: "PUT", path: gwPath(api.PathStatus, "aws-gw"), token: credA, body: api.StatusReport{
		Generation: p.Generation, Revision: p.Revision,
		Links: []api.LinkStatus{
			{Peer: "azure-gw", LastHandshake: now.Add(-10 * time.Second), Probe: fig},
			{Peer: "onprem-gw", LastHandshake: now.Add(-10 * time.Second), Probe: cut},
		},
	}}, nil)
	var links []api.Link
	h.ok(req{method: "GET", path: api.PathLinks}, &links)
	if len(links) != 2 || !links[0].Up || links[0].Probe == nil || *links[0].Probe != *fig {
		t.Errorf("probed link with answers: %+v", links)
	}
	if len(links) == 2 && (links[1].Up || links[1].Probe == nil || links[1].Probe.RecentLoss != 1) {
		t.Errorf("link whose last 3 probes were lost: %+v", links[1])
	}
	// Probes alone do not keep a link up whose handshake is stale.
	h.clock.Advance(3 * time.Minute)
	h.ok(req{method: "GET", path: api.PathLinks}, &links)
	if links[0].Up {
		t.Errorf("link with answered probes but a handshake 190s ago is up: %+v", links[0])
	}
}

// TestLinkUpFromDriverVerdict: a report with a backend carries the tunnel
// driver's verdict: established links are up (whatever the handshake
// says), links not established are down (even with a fresh handshake),
// and the verdict holds three minutes on the manager's clock.
func TestLinkUpFromDriverVerdict(t *testing.T) {
	h := newHarness(t)
	h.putSpec(threeSites(t))
	credA, _ := h.enroll("aws-gw")
	p := h.plan("aws-gw")
	now := h.clock.Now()
	h.ok(req{method: "PUT", path: gwPath(api.PathStatus, "aws-gw"), token: credA, body: api.StatusReport{
		Generation: p.Generation, Revision: p.Revision,
		Links: []api.LinkStatus{
			{Peer: "azure-gw", Backend: backend.WireGuard, Established: true},
			{Peer: "onprem-gw", Backend: backend.WireGuard, Established: false, LastHandshake: now.Add(-time.Second)},
		},
	}}, nil)
	var links []api.Link
	h.ok(req{method: "GET", path: api.PathLinks}, &links)
	if len(links) != 2 || !links[0].Up || links[1].Up {
		t.Errorf("links: %+v; want azure-gw up (established), onprem-gw down (not established)", links)
	}
	h.clock.Advance(3 * time.Minute)
	h.ok(req{method: "GET", path: api.PathLinks}, &links)
	if len(links) != 2 || links[0].Up {
		t.Errorf("a verdict reported 3 minutes ago still holds: %+v", links)
	}
}

// TestLinkEgressCost: with a price table, a link carries the estimated cost
// of what its sending gateway sent, at its site's price (region row first,
// then the provider's); links of unpriced sites carry none.
func TestLinkEgressCost(t *testing.T) {
	h := newHarness(t)
	h.putSpec(threeSites(t) + `egressPrices:
  - {provider: aws, usdPerGB: 0.09}
  - {provider: aws, region: eu-west-1, usdPerGB: 0.02}
`)
	credA, _ := h.enroll("aws-gw")
	credZ, _ := h.enroll("azure-gw")
	now := h.clock.Now()
	for gw, cred := range map[string]string{"aws-gw": credA, "azure-gw": credZ} {
		p := h.plan(gw)
		h.ok(req{method: "PUT", path: gwPath(api.PathStatus, gw), token: cred, body: api.StatusReport{
			Generation: p.Generation, Revision: p.Revision,
			Links: []api.LinkStatus{{Peer: "onprem-gw", LastHandshake: now, TxBytes: 10 << 30}},
		}}, nil)
	}
	var links []api.Link
	h.ok(req{method: "GET", path: api.PathLinks}, &links)
	if len(links) != 2 {
		t.Fatalf("links: %+v", links)
	}
	if e := links[0].Egress; links[0].From != "aws-gw" || e == nil || e.USDPerGB != 0.02 || e.Bytes != 10<<30 || math.Abs(e.CostUSD-0.2) > 1e-9 {
		t.Errorf("aws-gw's link: egress %+v, want 10 GiB at the eu-west-1 price 0.02 = $0.20", e)
	}
	if links[1].From != "azure-gw" || links[1].Egress != nil {
		t.Errorf("azure-gw's link has a cost though azure has no price: %+v", links[1].Egress)
	}
}
