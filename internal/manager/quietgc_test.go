package manager

import (
	"context"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/api"
)

func TestWorthCollecting(t *testing.T) {
	for _, c := range []struct {
		h    heapStats
		want bool
	}{
		{heapStats{live: 500, objects: 500, goal: 1500}, false}, // just collected
		{heapStats{live: 500, objects: 900, goal: 1500}, false}, // 40 % of the way
		{heapStats{live: 500, objects: 1001, goal: 1500}, true}, // past half way
		{heapStats{live: 500, objects: 1400, goal: 1500}, true},
		{heapStats{live: 500, objects: 400, goal: 1500}, false}, // less than live: nothing to gain
		{heapStats{live: 500, objects: 900, goal: 500}, false},  // no goal above live (collector off)
		{heapStats{}, false},
	} {
		if got := c.h.worthCollecting(); got != c.want {
			t.Errorf("%+v: worth collecting %v, want %v", c.h, got, c.want)
		}
	}
	// The process's own figures are read (live is known once collected).
	runtime.GC()
	if h := readHeapStats(); h.live == 0 || h.objects == 0 || h.goal < h.live {
		t.Errorf("readHeapStats: %+v; want live, objects and a goal at least live", h)
	}
}

// TestQuietCollector: the collector collects once after activity and
// quietFor without any, only when the heap is worth collecting, not
// again until there was activity again, and activity during the quiet
// wait starts it over.
func TestQuietCollector(t *testing.T) {
	var activity, collections int64
	worth := true
	q := &quietCollector{
		activity: func() int64 { return activity },
		heap: func() heapStats {
			return heapStats{live: 1, objects: map[bool]uint64{true: 3, false: 1}[worth], goal: 3}
		},
		collect:    func() { collections++ },
		ticksQuiet: 3,
	}
	ticks := func(n int) int64 {
		for range n {
			q.step()
		}
		return collections
	}
	if n := ticks(10); n != 0 {
		t.Fatalf("no activity yet: %d collections", n)
	}
	activity++
	if n := ticks(3); n != 0 { // the activity seen, then 2 quiet ticks
		t.Fatalf("quiet for 2 of 3 ticks: %d collections", n)
	}
	if n := ticks(1); n != 1 {
		t.Fatalf("quiet for 3 ticks after activity: %d collections, want 1", n)
	}
	if n := ticks(10); n != 1 {
		t.Fatalf("still quiet: %d collections, want still 1", n)
	}
	activity++
	ticks(3)
	activity++ // work again before quiet: start over
	if n := ticks(3); n != 1 {
		t.Fatalf("activity during the quiet wait: %d collections, want still 1", n)
	}
	if n := ticks(1); n != 2 {
		t.Fatalf("quiet after the second burst: %d collections, want 2", n)
	}
	worth = false
	activity++
	if n := ticks(10); n != 2 {
		t.Fatalf("a heap not worth collecting was collected: %d collections, want 2", n)
	}
}

// TestQuietCollectorRuns: run steps at each tick until its context ends.
func TestQuietCollectorRuns(t *testing.T) {
	var activity atomic.Int64
	collected := make(chan struct{}, 1)
	q := &quietCollector{
		activity:   activity.Load,
		heap:       func() heapStats { return heapStats{live: 1, objects: 3, goal: 3} },
		collect:    func() { collected <- struct{}{} },
		ticksQuiet: 2,
	}
	tick := make(chan time.Time)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { q.run(ctx, tick); close(done) }()
	defer func() { cancel(); <-done }()
	activity.Add(1)
	timeout := time.After(10 * time.Second)
	for i := range 100 {
		select {
		case <-collected:
			return
		case tick <- time.Time{}:
		case <-timeout:
			t.Fatalf("no collection after %d ticks", i)
		}
	}
	t.Fatal("no collection after 100 ticks")
}

// TestActivity: the activity the quiet collector watches moves when the
// manager publishes a change and when it answers a plan, not when a
// gateway reports its status.
func TestActivity(t *testing.T) {
	h := newHarness(t)
	a0 := h.m.activity()
	h.putSpec(threeSites(t))
	a1 := h.m.activity()
	if a1 <= a0 {
		t.Fatalf("a change published: activity %d, was %d", a1, a0)
	}
	cred, _ := h.enroll("aws-gw")
	a2 := h.m.activity()
	p := h.plan("aws-gw")
	a3 := h.m.activity()
	if a3 <= a2 {
		t.Fatalf("a plan answered: activity %d, was %d", a3, a2)
	}
	h.ok(req{method: "PUT", path: gwPath(api.PathStatus, "aws-gw"), token: cred, body: api.StatusReport{Generation: p.Generation, Revision: p.Revision}}, nil)
	if a4 := h.m.activity(); a4 != a3 {
		t.Fatalf("a status report: activity %d, was %d; want it unmoved", a4, a3)
	}
}

// TestCollectsWhenQuiet: a manager made with Config.CollectWhenQuiet (as
// fednet manager makes it) collects the process's heap once quiet after
// answering a plan, the heap having grown past half way to its goal.
func TestCollectsWhenQuiet(t *testing.T) {
	h := &harness{t: t, dir: filepath.Join(t.TempDir(), "data"), clock: &clock{}, log: &testLog{t: t}, limits: Limits{AuthFailureBurst: 1000}, collectWhenQuiet: true}
	t.Cleanup(h.log.stop)
	h.start()
	h.putSpec(threeSites(t))
	forced := func() uint64 {
		s := []metrics.Sample{{Name: "/gc/cycles/forced:gc-cycles"}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	// Room between the heap and the goal, so that the test's requests do
	// not reach the goal (a collection of another cause meanwhile leaves
	// nothing worth collecting: then it tries again, a few times).
	defer debug.SetGCPercent(debug.SetGCPercent(800))
	for range 3 {
		runtime.GC()
		before := forced()
		hs := readHeapStats()
		var held [][]byte // past half way to the goal, short of it
		for n := uint64(0); n < (hs.goal-hs.live)*6/10; n += 64 << 10 {
			held = append(held, make([]byte, 64<<10))
		}
		h.plan("aws-gw") // activity
		for deadline := time.Now().Add(quietFor + 3*time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if forced() > before {
				runtime.KeepAlive(held)
				return
			}
		}
		runtime.KeepAlive(held)
	}
	t.Fatalf("no collection within %v of quiet after a plan answered, three times", quietFor+3*time.Second)
}
