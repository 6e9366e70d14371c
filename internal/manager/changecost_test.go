package manager

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/bench/controlplane/cpspec"
	"github.com/fednet/fednet/internal/manager/store"
	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/plandelta"
	"github.com/fednet/fednet/internal/spec"
)

// TestChangesReachAgents makes the bench's four changes (cpspec) to the
// state of a manager of 30 gateways in process and has 30 simulated
// agents take each change as fednet's client does (the answer decoded,
// the delta applied and checked against its sum): every agent takes a
// delta for each change after its first plan, and ends each change with
// exactly the manager's plan.
func TestChangesReachAgents(t *testing.T) {
	changeCost(t, 30, true, true, "")
}

// BenchmarkChanges is the in-process measurement of what each of the
// bench's changes costs the manager (planning, preview, the deltas'
// encoding: CPU, GC, bytes allocated, live heap after) and, with
// FEDNET_CHANGE_AGENTS set, the agents (decoding and applying their
// answers, on one CPU) at FEDNET_CHANGE_COST gateways (1000 when unset);
// FEDNET_CHANGE_PROFILE=DIR writes a CPU profile of each part of each
// change and a heap profile at the end. Run it once:
//
//	FEDNET_CHANGE_AGENTS=1 go test -run '^$' -bench Changes -benchtime 1x ./internal/manager/
func BenchmarkChanges(b *testing.B) {
	n, _ := strconv.Atoi(os.Getenv("FEDNET_CHANGE_COST"))
	if n == 0 {
		n = 1000
	}
	for b.Loop() {
		changeCost(b, n, os.Getenv("FEDNET_CHANGE_AGENTS") != "", false, os.Getenv("FEDNET_CHANGE_PROFILE"))
	}
}

// changeCost makes the bench's changes to a state of n gateways and logs
// what each cost; with agents set, n simulated agents take them (see
// TestChangesReachAgents), checked against the manager's plans when check
// is set; dir, when set, is where CPU and heap profiles go.
func changeCost(t testing.TB, n int, withAgents, check bool, dir string) {
	keys := make([]plan.Key, n+1)
	for i := range keys {
		rand.Read(keys[i][:])
	}
	gws := map[string]store.Gateway{}
	for i := range n + 1 {
		name := fmt.Sprintf("g%04d", i)
		gws[name] = store.Gateway{Name: name, PublicKey: keys[i]}
	}
	var agents map[string]heldPlan
	if withAgents {
		agents = map[string]heldPlan{}
	}
	cur := &state{gateways: map[string]store.Gateway{}, hosts: map[string]store.Host{}, plans: map[string]planEntry{}}
	apply := func(what, doc string, removed string) {
		fed, err := spec.Parse([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		u := &update{next: cur.clone(), bump: map[string]bool{}, dirty: map[string]bool{}}
		if fed.Sites != nil && (cur.fed == nil || removed == "") {
			u.next.fed = fed
			u.next.rev = store.Revision{Number: cur.rev.Number + 1, YAML: doc}
		}
		for _, s := range u.next.fed.Sites {
			name := s.Gateways[0].Name
			if _, ok := u.next.gateways[name]; !ok {
				u.next.gateways[name] = gws[name]
			}
		}
		if removed != "" {
			g := u.next.gateways[removed]
			g.Removed = true
			u.next.gateways[removed] = g
		}
		var prof *os.File
		profile := func(name string) {
			if dir == "" {
				return
			}
			if prof != nil {
				pprof.StopCPUProfile()
				prof.Close()
				prof = nil
			}
			if name == "" {
				return
			}
			var err error
			if prof, err = os.Create(fmt.Sprintf("%s/%s.pprof", dir, strings.ReplaceAll(name, " ", "-"))); err != nil {
				t.Fatal(err)
			}
			pprof.StartCPUProfile(prof)
		}
		defer profile("")
		profile(what)
		var r0, r1 runtime.MemStats
		runtime.ReadMemStats(&r0)
		cpu0, gc0 := processCPU()
		start := time.Now()
		res, err := preview(u, cur)
		res.old = nil // as the API answer's diff is made, then dropped
		if err != nil {
			t.Fatal(err)
		}
		planned := time.Since(start)
		names := make([]string, 0, len(u.change.Plans))
		for _, p := range u.change.Plans {
			names = append(names, p.Gateway)
		}
		encodeDeltas(u.next, names)
		took := time.Since(start)
		cpu1, gc1 := processCPU()
		runtime.ReadMemStats(&r1)
		cur = u.next
		// The agents' side: each decodes its answer and rebuilds its plan
		// (as client.WatchPlan does, less HTTP and gzip).
		var agentCPU time.Duration
		if agents != nil {
			profile(what + " agents")
			t0 := time.Now()
			for _, name := range names {
				e := cur.plans[name]
				h, ok := agents[name]
				var body []byte
				if ok && e.prevGen == h.gen {
					parts, _ := e.answers.delta(e, 0, newest, cur.local)
					for _, p := range parts {
						body = append(body, p...)
					}
				}
				if body == nil {
					parts, _, err := e.answers.full(e, 0, newest, cur.local)
					if err != nil {
						t.Fatal(err)
					}
					for _, p := range parts {
						body = append(body, p...)
					}
				}
				var out api.PlanResponse
				if err := json.Unmarshal(body, &out); err != nil {
					t.Fatal(err)
				}
				if check && ok && out.Delta == nil {
					t.Errorf("%s: %s got its whole plan, not a delta", what, name)
				}
				if check && ok && what == "network added" && out.Delta != nil && !out.Delta.FromPeers() {
					t.Errorf("%s: %s got the new port's remotes in its head, not edited from its peers", what, name)
				}
				if l := out.Delta; check && ok && what == "network added" && l != nil && (l.Local == nil || l.Local.NetworkSitesFrom == nil || len(l.Local.Sites.Ops) != 1 || l.Local.Sites.Ops[0].Repeat == 0) {
					t.Errorf("%s: %s got a Local delta that is not compact (a repeat count, the new network's sites from another's)", what, name)
				}
				if out.Delta != nil {
					g, d, err := plandelta.ApplyDigest(h.plan, h.digest, *out.Delta)
					if err != nil {
						t.Fatalf("%s: %s: %v", what, name, err)
					}
					agents[name] = heldPlan{gen: out.Generation, plan: g, digest: d}
					continue
				}
				agents[name] = heldPlan{gen: out.Generation, plan: out.Plan, digest: plandelta.NewDigest(out.Plan)}
			}
			agentCPU = time.Since(t0)
			if check {
				for _, name := range names {
					if got, want := jsonOf(t, agents[name].plan), jsonOf(t, cur.plans[name].held.Gateway()); got != want {
						t.Fatalf("%s: agent %s holds another plan than the manager's:\n got %.300s\nwant %.300s", what, name, got, want)
					}
				}
			}
		}
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		cpu2, gc2 := processCPU()
		t.Logf("%s: %d affected, preview %.0f ms, with deltas %.0f ms (CPU %.2f s, GC %.2f s), allocated %.0f MB, live heap after %.0f MB; agents %.0f ms (CPU %.2f s, GC %.2f s)",
			what, len(res.affected), ms(planned), ms(took), cpu1-cpu0, gc1-gc0, float64(r1.TotalAlloc-r0.TotalAlloc)/1e6, float64(after.HeapAlloc)/1e6, ms(agentCPU), cpu2-cpu1, gc2-gc1)
	}
	apply("first", cpspec.Federation(keys, n, "", false), "")
	apply("site added", cpspec.Federation(keys, n+1, "", false), "")
	apply("prefix changed", cpspec.Federation(keys, n+1, "10.200.0.0/24", false), "")
	apply("network added", cpspec.Federation(keys, n+1, "10.200.0.0/24", true), "")
	apply("gateway removed", cpspec.Federation(keys, n+1, "10.200.0.0/24", true), fmt.Sprintf("g%04d", n/2))
	if dir != "" {
		f, err := os.Create(dir + "/heap.pprof")
		if err != nil {
			t.Fatal(err)
		}
		pprof.WriteHeapProfile(f)
		f.Close()
	}
}

// jsonOf returns v as JSON.
func jsonOf(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// heldPlan is what a simulated agent holds.
type heldPlan struct {
	gen    int64
	plan   plan.Gateway
	digest plandelta.Digest
}

// processCPU returns the CPU seconds this process used so far, and the
// garbage collector's part of them.
func processCPU() (total, gc float64) {
	s := []metrics.Sample{{Name: "/cpu/classes/total:cpu-seconds"}, {Name: "/cpu/classes/gc/total:cpu-seconds"}}
	metrics.Read(s)
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	total = float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
	return total, s[1].Value.Float64()
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
