package store

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestReportBatcher: reports put at once are written in fewer batches
// than reports, each batch in the order put; every caller gets its
// batch's error; Latest keeps the last report of each gateway.
func TestReportBatcher(t *testing.T) {
	var mu sync.Mutex
	var batches [][]Report
	release := make(chan struct{})
	first := true
	b := NewReportBatcher(func(rs []Report) error {
		if first {
			first = false
			<-release // the others pile up meanwhile
		}
		mu.Lock()
		defer mu.Unlock()
		batches = append(batches, rs)
		if rs[0].Gateway == "fail" {
			return errors.New("boom")
		}
		return nil
	}, 0)
	ctx := context.Background()
	done := make(chan error)
	go func() { done <- b.Put(ctx, Report{Gateway: "gw-first"}) }()
	waitFor(t, "the first batch being written", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.writing && b.next == nil
	})
	const n = 50
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if err := b.Put(ctx, Report{Gateway: fmt.Sprintf("gw-%02d", i)}); err != nil {
				t.Error(err)
			}
		})
	}
	waitFor(t, "the reports put meanwhile in the next batch", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.next != nil && len(b.next.reports) == n
	})
	close(release)
	wg.Wait()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(batches) != 2 || len(batches[1]) != n {
		t.Errorf("%d batches (%v), want the first report alone, then the %d put meanwhile together", len(batches), batches, n)
	}
	if err := b.Put(ctx, Report{Gateway: "fail"}); err == nil {
		t.Error("a batch's error is not returned")
	}
	got := Latest([]Report{{Gateway: "a", JSON: []byte("1")}, {Gateway: "b"}, {Gateway: "a", JSON: []byte("2")}})
	if want := []Report{{Gateway: "b"}, {Gateway: "a", JSON: []byte("2")}}; !reflect.DeepEqual(got, want) {
		t.Errorf("Latest = %v, want %v", got, want)
	}
}

// TestReportBatcherLingers: reports put within the linger after the
// first are written in one batch, and each Put returns once it is.
func TestReportBatcherLingers(t *testing.T) {
	var mu sync.Mutex
	var sizes []int
	b := NewReportBatcher(func(rs []Report) error {
		mu.Lock()
		defer mu.Unlock()
		sizes = append(sizes, len(rs))
		return nil
	}, time.Second)
	ctx := context.Background()
	const n = 20
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if err := b.Put(ctx, Report{Gateway: fmt.Sprintf("gw-%02d", i)}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(sizes) != 1 || sizes[0] != n {
		t.Errorf("batches of %v, want one of %d", sizes, n)
	}
}

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestReportBatcherClose: Close returns only once the batch being written
// is written; reports put after it are refused with ErrClosed.
func TestReportBatcherClose(t *testing.T) {
	release := make(chan struct{})
	var written atomic.Int64
	b := NewReportBatcher(func(rs []Report) error {
		<-release
		written.Add(int64(len(rs)))
		return nil
	}, 0)
	put := make(chan error, 1)
	go func() { put <- b.Put(context.Background(), Report{Gateway: "gw-a"}) }()
	waitFor(t, "the writer started", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.writing && b.next == nil
	})
	closed := make(chan struct{})
	go func() { b.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close returned while a batch was being written")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	<-closed
	if err := <-put; err != nil || written.Load() != 1 {
		t.Fatalf("the report put before Close: %v, %d written; want it written", err, written.Load())
	}
	if err := b.Put(context.Background(), Report{Gateway: "gw-b"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Put after Close = %v, want ErrClosed", err)
	}
	b.Close() // again: returns at once
	var none *ReportBatcher
	none.Close()
}
