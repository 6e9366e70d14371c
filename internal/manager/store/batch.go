package store

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// ReportBatcher writes status reports in batches for a store: the reports
// put while one batch is written, or within a linger before it is taken,
// are written together, by one writer, so that a thousand agents
// reporting at once cost a few writes, not a thousand.
type ReportBatcher struct {
	write  func([]Report) error
	linger time.Duration

	mu      sync.Mutex
	next    *reportBatch  // the batch reports join; nil: none waiting
	writing bool          // a writer runs
	closed  bool          // Close was called: no more reports
	idle    chan struct{} // closed when the writer stops, once Close waits for it
}

// reportBatch is reports written together; done is closed once they are,
// err set before.
type reportBatch struct {
	reports []Report
	done    chan struct{}
	err     error
}

// ReportLinger is how long a store's batcher lets reports gather before
// it takes a batch: at 1000 agents reporting every 5 s, about 20 reports
// a write rather than one or two (on etcd each write is a transaction of
// the cluster, which costs far more than its puts), and after a change of
// every plan, the thousand reports that follow in a few writes. A report
// is answered that much later.
const ReportLinger = 100 * time.Millisecond

// NewReportBatcher returns a batcher writing with write, which gets the
// reports of a batch in the order they were put (a later report of a
// gateway replaces an earlier one); before taking each batch it waits
// linger (0: none) for more reports to join it.
func NewReportBatcher(write func([]Report) error, linger time.Duration) *ReportBatcher {
	return &ReportBatcher{write: write, linger: linger}
}

// Put adds r to the next batch and returns when that batch is written
// (with its error), or when ctx ends (r may then still be written).
func (b *ReportBatcher) Put(ctx context.Context, r Report) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return fmt.Errorf("storing the report of %s: %w", r.Gateway, ErrClosed)
	}
	if b.next == nil {
		b.next = &reportBatch{done: make(chan struct{})}
	}
	batch := b.next
	batch.reports = append(batch.reports, r)
	start := !b.writing
	b.writing = true
	b.mu.Unlock()
	if start {
		go b.run()
	}
	select {
	case <-batch.done:
		if batch.err != nil {
			return fmt.Errorf("storing the report of %s: %w", r.Gateway, batch.err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("storing the report of %s: %w", r.Gateway, ctx.Err())
	}
}

// run writes batches until none waits, each taken linger after the
// writer starts or wrote the one before.
func (b *ReportBatcher) run() {
	for {
		if b.linger > 0 {
			time.Sleep(b.linger)
		}
		batch := b.take()
		if batch == nil {
			return
		}
		batch.err = b.write(batch.reports)
		close(batch.done)
	}
}

// take returns the next batch, or nil (and the writer stops) when none
// waits.
func (b *ReportBatcher) take() *reportBatch {
	b.mu.Lock()
	defer b.mu.Unlock()
	batch := b.next
	b.next = nil
	if batch == nil {
		b.writing = false
		if b.idle != nil {
			close(b.idle)
			b.idle = nil
		}
	}
	return batch
}

// Close refuses further reports (ErrClosed) and returns once the writer
// has written the batches put before and stopped: a store closes its
// database after it, so that no write is still under way when the
// store's files go.
func (b *ReportBatcher) Close() {
	if b == nil {
		return
	}
	b.mu.Lock()
	b.closed = true
	if !b.writing {
		b.mu.Unlock()
		return
	}
	if b.idle == nil {
		b.idle = make(chan struct{})
	}
	idle := b.idle
	b.mu.Unlock()
	<-idle
}

// Latest returns reports less those a later report of the same gateway
// replaces, in the order of the last of each.
func Latest(reports []Report) []Report {
	last := make(map[string]int, len(reports))
	for i, r := range reports {
		last[r.Gateway] = i
	}
	out := make([]Report, 0, len(last))
	for i, r := range reports {
		if last[r.Gateway] == i {
			out = append(out, r)
		}
	}
	return out
}
