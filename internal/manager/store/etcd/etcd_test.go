package etcd_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fednet/fednet/internal/lab/etcdlab"
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
	ctx := context.Background()
	stores := twoClients(t, etcdtest.Start(t), "/race/")
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

// twoClients opens two stores on cluster c under prefix, each with its
// own connection (as two managers have), closed at the end of the test.
func twoClients(t *testing.T, c *etcdlab.Cluster, prefix string) [2]*etcd.Store {
	t.Helper()
	var stores [2]*etcd.Store
	for i := range stores {
		s, err := etcd.Open(context.Background(), etcd.Config{Endpoints: c.Endpoints(), Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		stores[i] = s
	}
	return stores
}

func isConflict(err error) bool { return errors.Is(err, store.ErrConflict) }

// TestRelay: messages relayed through one connection reach a watcher on
// another, in order: the request, its result, and its end (RelayGone)
// when it is deleted; a result for a request that is over is refused
// with ErrNotFound; a request whose lease runs out ends by itself.
func TestRelay(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stores := twoClients(t, etcdtest.Start(t), "/relay-test/")
	got := make(chan store.RelayMessage, 16)
	ready := make(chan struct{})
	watched := make(chan error, 1)
	go func() { watched <- stores[1].WatchRelay(ctx, ready, func(m store.RelayMessage) { got <- m }) }()
	<-ready
	next := func() store.RelayMessage {
		t.Helper()
		select {
		case m := <-got:
			return m
		case <-time.After(20 * time.Second):
			t.Fatal("no relayed message within 20 s")
			return store.RelayMessage{}
		}
	}
	s := stores[0]
	if err := s.PutRelayRequest(ctx, store.RelayMessage{Kind: store.RelayRequest, ID: "r1", Gateway: "g", Data: []byte(`{"q":1}`)}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.PutRelayResult(ctx, store.RelayMessage{Kind: store.RelayResult, ID: "r1", Data: []byte(`{"a":2}`)}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRelay(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	want := []store.RelayMessage{
		{Kind: store.RelayRequest, ID: "r1", Gateway: "g", Data: []byte(`{"q":1}`)},
		{Kind: store.RelayResult, ID: "r1", Gateway: "g", Data: []byte(`{"a":2}`)},
		{Kind: store.RelayGone, ID: "r1", Gateway: "g"},
	}
	for _, w := range want {
		if m := next(); m.Kind != w.Kind || m.ID != w.ID || m.Gateway != w.Gateway || string(m.Data) != string(w.Data) {
			t.Fatalf("relayed %v %+v, want %v %+v", m.Kind, m, w.Kind, w)
		}
	}
	if err := s.PutRelayResult(ctx, store.RelayMessage{Kind: store.RelayResult, ID: "r1", Data: []byte(`{}`)}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a result for a request that is over: %v, want ErrNotFound", err)
	}
	if err := s.DeleteRelay(ctx, "r1"); err != nil {
		t.Errorf("deleting a request that is over: %v", err)
	}
	// A request whose lease runs out is gone without a delete.
	if err := s.PutRelayRequest(ctx, store.RelayMessage{Kind: store.RelayRequest, ID: "r2", Gateway: "g", Data: []byte(`{}`)}, time.Second); err != nil {
		t.Fatal(err)
	}
	if m := next(); m.Kind != store.RelayRequest || m.ID != "r2" {
		t.Fatalf("relayed %v %+v, want r2's request", m.Kind, m)
	}
	if m := next(); m.Kind != store.RelayGone || m.ID != "r2" {
		t.Fatalf("relayed %v %+v, want r2 gone when its lease ran out", m.Kind, m)
	}
	cancel()
	if err := <-watched; !errors.Is(err, context.Canceled) {
		t.Errorf("WatchRelay after its context ended: %v", err)
	}
}

// TestRevisionsStoredGzipped: a revision's YAML is stored gzipped (a
// spec of many sites is mostly repetition), comes back as it went in, and
// a record stored plain (as before) is read too.
func TestRevisionsStoredGzipped(t *testing.T) {
	ctx := context.Background()
	c := etcdtest.Start(t)
	stores := twoClients(t, c, "/gz/")
	var b strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&b, "  - {name: s%04d, provider: onprem, prefixes: [10.%d.%d.0/24]}\n", i, 64+i/256, i%256)
	}
	yaml := b.String()
	created := time.Unix(1700000000, 123)
	if err := stores[0].Commit(ctx, store.Change{Spec: &store.Revision{Number: 1, YAML: yaml, Created: created}, Generation: 1}); err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	resp, err := cli.Get(ctx, "/gz/revisions/", clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("the stored revision: %v, %d keys", err, len(resp.Kvs))
	}
	var raw map[string]any
	if err := json.Unmarshal(resp.Kvs[0].Value, &raw); err != nil {
		t.Fatal(err)
	}
	if _, plain := raw["yaml"]; plain || raw["yamlGzip"] == nil || len(resp.Kvs[0].Value) > len(yaml)/4 {
		t.Fatalf("revision stored as %d bytes for %d of YAML, fields %v; want it gzipped", len(resp.Kvs[0].Value), len(yaml), slices.Sorted(maps.Keys(raw)))
	}
	// As stored before revisions were gzipped.
	old, _ := json.Marshal(map[string]any{"number": 2, "yaml": "name: plain\n", "created": created.UnixNano()})
	if _, err := cli.Put(ctx, "/gz/revisions/00000000000000000002", string(old)); err != nil {
		t.Fatal(err)
	}
	revs, err := stores[1].Revisions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(revs) != 2 || revs[0].YAML != yaml || !revs[0].Created.Equal(created) || revs[1].Number != 2 || revs[1].YAML != "name: plain\n" {
		t.Fatalf("revisions read back: %d, first %d bytes (want %d), second %+v", len(revs), len(revs[0].YAML), len(yaml), revs[len(revs)-1])
	}
	cur, err := stores[1].Spec(ctx)
	if err != nil || cur.Number != 2 || cur.YAML != "name: plain\n" {
		t.Fatalf("current spec: %+v, %v", cur, err)
	}
	// A damaged gzip is an error naming the revision, not a panic.
	bad, _ := json.Marshal(map[string]any{"number": 3, "yamlGzip": []byte("not gzip"), "created": created.UnixNano()})
	if _, err := cli.Put(ctx, "/gz/revisions/00000000000000000003", string(bad)); err != nil {
		t.Fatal(err)
	}
	if _, err := stores[0].Revisions(ctx); err == nil || !strings.Contains(err.Error(), "revision 3") {
		t.Fatalf("a damaged revision read as %v; want an error naming revision 3", err)
	}
}
