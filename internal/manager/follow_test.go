package manager

import (
	"testing"

	"github.com/fednet/fednet/internal/manager/store"
)

// BenchmarkFollow is a manager's part of a bridged network added over
// 1000 sites by another manager on the store: the event applied, the
// plans of the third of the gateways it serves computed, their deltas
// encoded.
func BenchmarkFollow(b *testing.B) {
	cur, next, c := benchStates(b, 1000)
	ev := store.Event{Generation: next.gen, Spec: &next.rev, Plans: c.Plans}
	served := func(name string) bool { return name[len(name)-1]%3 == 0 }
	names := make([]string, len(c.Plans))
	for i, p := range c.Plans {
		names[i] = p.Gateway
	}
	for b.Loop() {
		st, _, _, err := applyEvent(cur, ev, nil, served)
		if err != nil {
			b.Fatal(err)
		}
		encodeDeltas(st, names)
	}
}
