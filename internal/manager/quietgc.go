package manager

import (
	"context"
	"runtime"
	"runtime/metrics"
	"time"
)

// A manager allocates in bursts: a change of every plan of a thousand
// gateways allocates 100 to 300 MB in under a second (plans, deltas,
// answers), and next to nothing between changes. Go's collector starts
// when the heap reaches its goal, which is reached by allocating, so
// nearly every collection fell inside a change, where its 0.2 to 0.9
// CPU-seconds (marking half a gigabyte of plans) took the cores the
// change's propagation needed (docs/manager.md, "Sizing"). The quiet
// collector collects instead once the manager has been quiet for
// quietFor after such a burst, when the heap has grown more than half way
// to its goal: the next change then starts with room for its
// allocations.

// Quiet collection timing: how often activity is looked at, and how long
// without a change published or a plan answered counts as quiet. Longer
// than a change takes to reach every agent of a thousand (the manager
// that made it goes quiet once its own agents have it, while the other
// managers' still wait: at half a second its collection fell in the
// change), far shorter than the time between an operator's changes.
const (
	quietTick = 100 * time.Millisecond
	quietFor  = 2 * time.Second
)

// heapStats is what the quiet collector decides from (runtime/metrics).
type heapStats struct {
	live    uint64 // heap marked live by the last collection
	objects uint64 // heap occupied now, live and not yet collected
	goal    uint64 // heap size at which the next collection starts
}

// worthCollecting reports whether the heap has grown more than half way
// from what the last collection left to the goal of the next.
func (h heapStats) worthCollecting() bool {
	return h.goal > h.live && h.objects > h.live && h.objects-h.live > (h.goal-h.live)/2
}

// readHeapStats reads the process's heapStats.
func readHeapStats() heapStats {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/memory/classes/heap/objects:bytes"}, {Name: "/gc/heap/goal:bytes"}}
	metrics.Read(s)
	var v [3]uint64
	for i := range s {
		if s[i].Value.Kind() == metrics.KindUint64 {
			v[i] = s[i].Value.Uint64()
		}
	}
	return heapStats{live: v[0], objects: v[1], goal: v[2]}
}

// activity is a counter that moves whenever the manager publishes a
// change or answers a plan: the work that allocates. Status reports and
// long polls waiting do not move it (a thousand agents report all the
// time, and allocate little).
func (m *Manager) activity() int64 {
	return m.stats.plans.Load() + m.stats.deltas.Load() + m.snapshot().gen
}

// quietCollector collects the heap when the manager goes quiet after
// work (see above).
type quietCollector struct {
	activity func() int64     // moves whenever the manager works
	heap     func() heapStats // readHeapStats
	collect  func()           // runtime.GC
	// ticksQuiet is how many ticks without activity count as quiet.
	ticksQuiet int

	last    int64 // the activity at the last tick
	quiet   int   // ticks without activity since
	pending bool  // activity since the last look at the heap
}

// newQuietCollector returns the quiet collector of the process for a
// manager whose activity counter is activity.
func newQuietCollector(activity func() int64) *quietCollector {
	return &quietCollector{activity: activity, heap: readHeapStats, collect: runtime.GC, ticksQuiet: int(quietFor / quietTick), last: activity()}
}

// run calls step at every tick until ctx ends.
func (q *quietCollector) run(ctx context.Context, tick <-chan time.Time) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
			q.step()
		}
	}
}

// step looks at the activity: after activity, once ticksQuiet ticks
// passed without any, it collects if the heap is worth collecting; then
// it waits for activity again.
func (q *quietCollector) step() {
	if a := q.activity(); a != q.last {
		q.last, q.quiet, q.pending = a, 0, true
		return
	}
	if !q.pending {
		return
	}
	if q.quiet++; q.quiet >= q.ticksQuiet {
		q.pending = false
		if q.heap().worthCollecting() {
			q.collect()
		}
	}
}
