package manager

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/client"
	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/plandelta"
)

// sitesSpec is a spec of n one-gateway sites (s000 ...) with one routed
// network over all.
func sitesSpec(n int) string {
	var b strings.Builder
	b.WriteString("apiVersion: fednet/v1\nkind: Federation\nname: wide\nsites:\n")
	var names []string
	for i := range n {
		names = append(names, fmt.Sprintf("s%03d", i))
		fmt.Fprintf(&b, "  - {name: s%03d, provider: edge, prefixes: [10.%d.%d.0/24], gateways: [{name: g%03d, endpoint: '100.%d.%d.1:51820'}]}\n",
			i, 64+i/256, i%256, i, 64+i/256, i%256)
	}
	fmt.Fprintf(&b, "networks:\n  - {name: apps, id: 100, mode: routed, sites: [%s]}\n", strings.Join(names, ", "))
	return b.String()
}

var withLocalHeader = map[string]string{api.HeaderPlanFeatures: api.PlanFeatureLocal, plandelta.SumHeader: sumVersion}

// sumVersion announces the sums the manager sends.
var sumVersion = strconv.Itoa(plandelta.SumVersion)

// sum2Header announces sums alone (deltas without Local).
var sum2Header = map[string]string{plandelta.SumHeader: sumVersion}

// planAnswer decodes a 200 plan answer.
func planAnswer(t *testing.T, a answer) api.PlanResponse {
	t.Helper()
	var out api.PlanResponse
	if a.status != 200 {
		t.Fatalf("plan watch: %d %.300s", a.status, a.body)
	}
	if err := json.Unmarshal(a.body, &out); err != nil {
		t.Fatalf("plan answer: %v: %.300s", err, a.body)
	}
	return out
}

func jsonSize(t *testing.T, v any) int {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return len(b)
}

// TestPlanLocal: a plan watch that announces api.PlanFeatureLocal gets
// the plan with its Local, and then deltas whose Local part is as small as
// the change (300 sites, one added: under 5 % of the Local), one delta
// shared by every gateway's answer; the whole answer gzipped in pieces
// decodes to the same. A watch that does not announce it (an older
// agent) gets neither Local nor Local deltas, and deltas it can check.
func TestPlanLocal(t *testing.T) {
	h := newHarness(t)
	h.putSpec(sitesSpec(300))
	cred, _ := h.enroll("g000")
	path := gwPath(api.PathPlan, "g000")

	first := planAnswer(t, h.do(req{method: "GET", path: path, token: cred, header: withLocalHeader}))
	if first.Plan.Local == nil || len(first.Plan.Local.Federation.Sites) != 300 {
		t.Fatalf("a watch announcing local got no Local (or not the federation's)")
	}
	firstBare := planAnswer(t, h.do(req{method: "GET", path: path, token: cred}))
	if firstBare.Plan.Local != nil {
		t.Fatalf("a watch not announcing local got the plan's Local")
	}
	if !plan.Equal(first.Plan, firstBare.Plan) || first.Generation != firstBare.Generation {
		t.Fatalf("the plans with and without Local differ beyond it")
	}

	// Every gateway's agent counts as served here, so that the change
	// encodes every delta ahead (those of agents served elsewhere are
	// not: see TestDeltasAheadOnlyForServed).
	for name := range h.m.snapshot().plans {
		h.m.attach(name)
	}
	h.putSpec(sitesSpec(301))
	now := planAnswer(t, h.do(req{method: "GET", path: path, token: cred, header: withLocalHeader}))
	if now.Generation <= first.Generation {
		t.Fatalf("the new site did not change g000's plan")
	}
	query := fmt.Sprintf("?after=%d&delta=true", first.Generation)

	// With Local: a delta whose Local part is small, rebuilding the plan
	// with its Local exactly.
	d := planAnswer(t, h.do(req{method: "GET", path: path + query, token: cred, header: withLocalHeader}))
	if d.Delta == nil || d.Delta.Local == nil {
		t.Fatalf("a delta watch announcing local got no Local delta: delta %v", d.Delta != nil)
	}
	localPart, whole := jsonSize(t, d.Delta.Local), jsonSize(t, now.Plan.Local)
	t.Logf("one site added to 300: the answer's Local part is %d bytes, the whole Local %d (%.1f %%)", localPart, whole, 100*float64(localPart)/float64(whole))
	if localPart*20 > whole {
		t.Errorf("the Local part of the delta is %d bytes for a Local of %d: want under 5 %%", localPart, whole)
	}
	got, err := plandelta.Apply(first.Plan, *d.Delta)
	if err != nil {
		t.Fatalf("applying the delta with Local: %v", err)
	}
	if a, b := got.JSON(), now.Plan.JSON(); !bytes.Equal(a, b) {
		t.Errorf("the plan rebuilt with its Local differs from the manager's")
	}

	// Without: the delta an agent that does not take Local checks.
	bd := planAnswer(t, h.do(req{method: "GET", path: path + query, token: cred, header: sum2Header}))
	if bd.Delta == nil || bd.Delta.Local != nil || bytes.Contains(h.do(req{method: "GET", path: path + query, token: cred, header: sum2Header}).body, []byte(`"networkSites"`)) {
		t.Fatalf("a delta watch not announcing local: delta %v, with Local %v", bd.Delta != nil, bd.Delta != nil && bd.Delta.Local != nil)
	}
	gotBare, err := plandelta.Apply(firstBare.Plan, *bd.Delta)
	if err != nil {
		t.Fatalf("applying the delta without Local: %v", err)
	}
	if gotBare.Local != nil || !plan.Equal(gotBare, now.Plan) {
		t.Errorf("the plan rebuilt without Local differs from the manager's")
	}

	// One Local delta for every gateway that had a plan before.
	st := h.m.snapshot()
	shared := st.plans["g000"].answers.localDeltas[newest]
	if shared == nil {
		t.Fatal("g000's answers hold no Local delta")
	}
	for name, e := range st.plans {
		if name != "g300" && e.answers.localDeltas[newest] != shared {
			t.Fatalf("gateway %s's answer has its own Local delta, not the one shared", name)
		}
	}

	// Gzipped whole answer with Local (three gzip members) is the same.
	plain := h.do(req{method: "GET", path: path, token: cred, header: withLocalHeader})
	zipped := h.do(req{method: "GET", path: path, token: cred, header: map[string]string{api.HeaderPlanFeatures: "other, Local", "Accept-Encoding": "gzip"}})
	if zipped.header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("a plan with Accept-Encoding gzip came as %q", zipped.header.Get("Content-Encoding"))
	}
	zr, err := gzip.NewReader(bytes.NewReader(zipped.body))
	if err != nil {
		t.Fatal(err)
	}
	unzipped, err := io.ReadAll(zr)
	if err != nil || !bytes.Equal(unzipped, plain.body) || len(zipped.body)*3 > len(plain.body) {
		t.Errorf("gzipped plan with Local: %d bytes for %d, same content %v (%v)", len(zipped.body), len(plain.body), bytes.Equal(unzipped, plain.body), err)
	}
	if v := plain.header.Get("Vary"); !strings.Contains(v, api.HeaderPlanFeatures) {
		t.Errorf("Vary: %q does not name %s", v, api.HeaderPlanFeatures)
	}
}

// TestClientPlanLocal: the client announces Local unless NoLocal, and
// rebuilds the plan with its Local from deltas; with NoLocal (as an agent
// that predates Local) it gets plans and deltas without, as before.
func TestClientPlanLocal(t *testing.T) {
	h := newHarness(t)
	h.putSpec(sitesSpec(20))
	cred, _ := h.enroll("g000")
	ctx := context.Background()
	for _, noLocal := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoLocal=%v", noLocal), func(t *testing.T) {
			cl, err := client.New(client.Config{URL: h.url, Token: cred, CAFingerprint: h.m.CAFingerprint(), NoLocal: noLocal})
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			p1, _, err := cl.WatchPlan(ctx, "g000", 0, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			before := h.m.Stats()
			h.putSpec(sitesSpec(21 + map[bool]int{false: 0, true: 1}[noLocal]))
			p2, changed, err := cl.WatchPlan(ctx, "g000", p1.Generation, 10*time.Second)
			if err != nil || !changed {
				t.Fatalf("second watch: %v %v", changed, err)
			}
			if after := h.m.Stats(); after.Deltas != before.Deltas+1 || after.Plans != before.Plans {
				t.Errorf("the second watch was not answered with one delta: %+v then %+v", before, after)
			}
			want := h.m.snapshot().plans["g000"]
			if got := p2.Plan.Local != nil; got == noLocal {
				t.Fatalf("plan with Local: %v", got)
			}
			if !noLocal && plandelta.NewDigest(p2.Plan).Sum != want.Sum {
				t.Errorf("the client's plan with Local does not have the manager's sum")
			}
			if !plan.Equal(p2.Plan, want.held.Gateway()) {
				t.Errorf("the client's plan differs from the manager's")
			}
		})
	}
}

// TestPlanPatchesOnlyWhenAnnounced: a region given to every site changes
// a field of every site of the Local. A delta watch that
// announces local and patch gets the Local's delta patching those fields;
// one that announces local alone (an agent that predates patches, which
// would ignore them and fail its sum) gets every site whole, with no
// patch; both rebuild the manager's plan exactly, and the one with
// patches is the smaller.
func TestPlanPatchesOnlyWhenAnnounced(t *testing.T) {
	const n = 40
	h, cred, path, first, now := watchChange(t, sitesSpec(n), strings.ReplaceAll(sitesSpec(n), "provider: edge,", "provider: edge, region: eu-1,"))
	query := fmt.Sprintf("?after=%d&delta=true", first.Generation)

	withPatch := map[string]string{api.HeaderPlanFeatures: "local, patch", plandelta.SumHeader: sumVersion}
	sizes := map[string]int{}
	for _, c := range []struct {
		name    string
		header  map[string]string
		patches bool
	}{
		{"local,patch", withPatch, true},
		{"local", withLocalHeader, false},
	} {
		a := h.do(req{method: "GET", path: path + query, token: cred, header: c.header})
		d := planAnswer(t, a)
		if d.Delta == nil || d.Delta.Local == nil {
			t.Fatalf("%s: no delta with a Local delta", c.name)
		}
		if got := bytes.Contains(a.body, []byte(`"patch"`)); got != c.patches {
			t.Fatalf("%s: the answer carries patches: %v, want %v", c.name, got, c.patches)
		}
		got, err := plandelta.Apply(first.Plan, *d.Delta)
		if err != nil {
			t.Fatalf("%s: applying the delta: %v", c.name, err)
		}
		if !bytes.Equal(got.JSON(), now.Plan.JSON()) {
			t.Fatalf("%s: the plan rebuilt differs from the manager's", c.name)
		}
		sizes[c.name] = len(a.body)
	}
	if sizes["local,patch"] >= sizes["local"] {
		t.Errorf("the delta with patches is %d bytes, without %d: want it smaller", sizes["local,patch"], sizes["local"])
	}
}

// bridgedSitesSpec is sitesSpec(n) with a bridged network over every
// site, each gateway's bridge port on eth1.
func bridgedSitesSpec(n int) string {
	var names []string
	for i := range n {
		names = append(names, fmt.Sprintf("s%03d", i))
	}
	s := strings.ReplaceAll(sitesSpec(n), ":51820'}", ":51820', bridgePorts: {lan: eth1}}")
	return s + fmt.Sprintf("  - {name: lan, id: 200, mode: bridged, subnet: 192.168.0.0/16, sites: [%s]}\n", strings.Join(names, ", "))
}

// TestPlanPeerRemotesOnlyWhenAnnounced: a bridged network added over
// every site gives each gateway a VXLAN port of a remote per other site.
// A watch that announces peer-remotes gets a delta whose head leaves
// those remotes out, edited from the transit addresses of the peers; one
// that announces remotes alone (an agent that predates them) gets them
// in the head. Both rebuild the manager's plan exactly.
func TestPlanPeerRemotesOnlyWhenAnnounced(t *testing.T) {
	const n = 40
	h, cred, path, first, now := watchChange(t, sitesSpec(n), bridgedSitesSpec(n))
	if len(now.Plan.Bridges) != 1 || len(now.Plan.Bridges[0].VXLANs) != 1 || len(now.Plan.Bridges[0].VXLANs[0].Remotes) != n-1 {
		t.Fatalf("the plan after the bridged network was added: bridges %+v; want one port of %d remotes", now.Plan.Bridges, n-1)
	}
	query := fmt.Sprintf("?after=%d&delta=true", first.Generation)
	features := func(f ...string) map[string]string {
		return map[string]string{api.HeaderPlanFeatures: strings.Join(f, ", "), plandelta.SumHeader: sumVersion}
	}
	sizes := map[bool]int{}
	for _, c := range []struct {
		header    map[string]string
		fromPeers bool
	}{
		{features(api.PlanFeatureLocal, api.PlanFeaturePatch, api.PlanFeatureRemotes), false},
		{features(api.PlanFeatureLocal, api.PlanFeaturePatch, api.PlanFeatureRemotes, api.PlanFeaturePeerRemotes), true},
	} {
		a := h.do(req{method: "GET", path: path + query, token: cred, header: c.header})
		d := planAnswer(t, a)
		if d.Delta == nil {
			t.Fatalf("%s: no delta", c.header[api.HeaderPlanFeatures])
		}
		if got := d.Delta.FromPeers(); got != c.fromPeers {
			t.Fatalf("%s: remotes edited from the peers %v, want %v", c.header[api.HeaderPlanFeatures], got, c.fromPeers)
		}
		inHead := len(d.Delta.Head.Bridges) == 1 && len(d.Delta.Head.Bridges[0].VXLANs[0].Remotes) == n-1
		if inHead == c.fromPeers {
			t.Fatalf("%s: the head carries the remotes %v, want %v", c.header[api.HeaderPlanFeatures], inHead, !c.fromPeers)
		}
		got, err := plandelta.Apply(first.Plan, *d.Delta)
		if err != nil {
			t.Fatalf("%s: applying the delta: %v", c.header[api.HeaderPlanFeatures], err)
		}
		if !bytes.Equal(got.JSON(), now.Plan.JSON()) {
			t.Fatalf("%s: the plan rebuilt differs from the manager's", c.header[api.HeaderPlanFeatures])
		}
		sizes[c.fromPeers] = len(a.body)
	}
	if sizes[true] >= sizes[false] {
		t.Errorf("the delta with remotes from the peers is %d bytes, without %d: want it smaller", sizes[true], sizes[false])
	}
}

// watchChange puts spec from, enrolls g000 and takes its plan with its
// Local, puts spec to and takes the plan again: it returns the harness,
// g000's credential and plan path, and the two answers.
func watchChange(t *testing.T, from, to string) (*harness, string, string, api.PlanResponse, api.PlanResponse) {
	t.Helper()
	h := newHarness(t)
	h.putSpec(from)
	cred, _ := h.enroll("g000")
	path := gwPath(api.PathPlan, "g000")
	first := planAnswer(t, h.do(req{method: "GET", path: path, token: cred, header: withLocalHeader}))
	h.putSpec(to)
	now := planAnswer(t, h.do(req{method: "GET", path: path, token: cred, header: withLocalHeader}))
	return h, cred, path, first, now
}

// TestPlanCompactOnlyWhenAnnounced: a bridged network added over every
// site patches every site's ports and names every site for the new
// network. A watch that announces compact (with the rest of fednet's
// features) gets that as a repeat count and a copy of another network's
// sites, in a smaller answer; one that does not gets a null per site and
// the sites' names, as before compact deltas existed. Both rebuild the
// manager's plan; the compact Local delta is shorter by a site's null
// and name per site.
func TestPlanCompactOnlyWhenAnnounced(t *testing.T) {
	const n = 40
	h, cred, path, first, now := watchChange(t, sitesSpec(n), bridgedSitesSpec(n))
	query := fmt.Sprintf("?after=%d&delta=true", first.Generation)
	older := []string{api.PlanFeatureLocal, api.PlanFeaturePatch, api.PlanFeatureRemotes, api.PlanFeaturePeerRemotes}
	sizes := map[bool]int{}
	for _, compact := range []bool{false, true} {
		f := older
		if compact {
			f = append(slices.Clone(older), api.PlanFeatureCompact)
		}
		header := map[string]string{api.HeaderPlanFeatures: strings.Join(f, ", "), plandelta.SumHeader: sumVersion}
		a := h.do(req{method: "GET", path: path + query, token: cred, header: header})
		d := planAnswer(t, a)
		if d.Delta == nil || d.Delta.Local == nil {
			t.Fatalf("compact %v: no delta with a Local", compact)
		}
		l := d.Delta.Local
		isCompact := l.NetworkSitesFrom["lan"] == "apps" && len(l.Sites.Ops) == 1 && l.Sites.Ops[0].Repeat == n-1
		if isCompact != compact || compact == bytes.Contains(a.body, []byte(`null,null`)) {
			t.Fatalf("announcing compact %v: a compact Local delta %v: %.400s", compact, isCompact, a.body)
		}
		got, err := plandelta.Apply(first.Plan, *d.Delta)
		if err != nil || !bytes.Equal(got.JSON(), now.Plan.JSON()) {
			t.Fatalf("compact %v: the plan rebuilt from the delta: %v (same plan %v)", compact, err, err == nil && bytes.Equal(got.JSON(), now.Plan.JSON()))
		}
		js, err := json.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		sizes[compact] = len(js)
	}
	if sizes[false]-sizes[true] < 8*n {
		t.Errorf("the compact Local delta is %d bytes, the other %d: want it at least 8 bytes a site shorter (a null and a name)", sizes[true], sizes[false])
	}
}
