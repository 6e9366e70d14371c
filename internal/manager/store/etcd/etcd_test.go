package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/lab/etcdlab/etcdtest"
	"github.com/fednet/fednet/internal/manager/store"
	"github.com/fednet/fednet/internal/manager/store/etcd"
	"github.com/fednet/fednet/internal/manager/store/storetest"
)

// TestConformance runs the store conformance suite on a real etcd, each
// test under a prefix of its own.
func TestConformance(t *testing.T) {
	c := etcdtest.Start(t)
	var n atomic.Int64
	storetest.Run(t, func(t *testing.T) store.Store {
		s, err := etcd.Open(context.Background(), etcd.Config{Endpoints: c.Endpoints(), Prefix: fmt.Sprintf("/conformance-%d/", n.Add(1))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

// TestConcurrentAppliesTwoClients: writers on two connections (as two
// managers would be) store revisions concurrently, each reading the
// current revision and storing the next; every revision number is stored
// exactly once, with no gap, and every acknowledged write is there.
func TestConcurrentAppliesTwoClients(t *testing.T) {
	c := etcdtest.Start(t)
	ctx := context.Background()
	var stores [2]*etcd.Store
	for i := range stores {
		s, err := etcd.Open(ctx, etcd.Config{Endpoints: c.Endpoints(), Prefix: "/race/"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		stores[i] = s
	}
	const writers, each = 6, 15
	var mu sync.Mutex
	acked := map[int]string{}
	var wg sync.WaitGroup
	for w := range writers {
		s := stores[w%2]
		wg.Go(func() {
			for k := 0; k < each; {
				cur, err := s.Spec(ctx)
				n := 0
				if err == nil {
					n = cur.Number
				}
				gen, _ := s.Generation(ctx)
				yaml := fmt.Sprintf("writer %d change %d", w, k)
				err = s.Commit(ctx, store.Change{Spec: &store.Revision{Number: n + 1, YAML: yaml, Created: time.Unix(0, 1)}, Generation: gen + 1})
				if err == nil {
					mu.Lock()
					acked[n+1] = yaml
					mu.Unlock()
					k++
				} else if !isConflict(err) {
					t.Errorf("writer %d: %v", w, err)
					return
				}
			}
		})
	}
	wg.Wait()
	revs, err := stores[0].Revisions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(revs) != writers*each || len(acked) != writers*each {
		t.Fatalf("%d revisions stored, %d acknowledged, want %d", len(revs), len(acked), writers*each)
	}
	for i, r := range revs {
		if r.Number != i+1 || acked[r.Number] != r.YAML {
			t.Errorf("revision %d: %+v, acknowledged %q", i+1, r, acked[r.Number])
		}
	}
}

func isConflict(err error) bool { return errors.Is(err, store.ErrConflict) }
