package manager

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/plandelta"
)

// Stats count what the manager's plan watches were answered with, and how
// long its last planning took.
type Stats struct {
	// Plans and Deltas count answers with a whole plan and with a delta;
	// Gzipped those of them sent gzipped; Bytes their bodies' bytes as
	// sent.
	Plans, Deltas, Gzipped, Bytes int64
	// Plannings counts the times every plan was computed (a change made
	// here, or one followed from the store); LastPlanning is how long the
	// last one took (plan.Compute and the plans' sums).
	Plannings    int64
	LastPlanning time.Duration
}

type stats struct {
	plans, deltas, gzipped, bytes atomic.Int64
	plannings                     atomic.Int64
	lastPlanning                  atomic.Int64 // nanoseconds
}

// Stats returns the counts so far.
func (m *Manager) Stats() Stats {
	return Stats{
		Plans: m.stats.plans.Load(), Deltas: m.stats.deltas.Load(), Gzipped: m.stats.gzipped.Load(), Bytes: m.stats.bytes.Load(),
		Plannings: m.stats.plannings.Load(), LastPlanning: time.Duration(m.stats.lastPlanning.Load()),
	}
}

// planned records and logs a planning of n plans, for generation gen,
// that took d. fednet bench control-plane reads the log line.
func (m *Manager) planned(d time.Duration, n int, gen int64) {
	m.stats.plannings.Add(1)
	m.stats.lastPlanning.Store(int64(d))
	m.cfg.Logf("planned %d gateways in %.1f ms (generation %d)", n, float64(d.Microseconds())/1000, gen)
}

// gzipAbove is the size from which plan answers are also kept gzipped.
const gzipAbove = 1 << 10

// answers are the encoded answers to the plan watches of one plan version
// (see writePlan): the whole plan and the delta from the version before,
// each also gzipped, made at the first watch that needs them. The
// rotateKey they carry is part of the version (a rotation request makes a
// new version), but is kept to be safe. Safe for concurrent use.
type answers struct {
	mu sync.Mutex
	// prev is the version before, until the delta from it is made;
	// prevAnswers that version's answers (which know whether it is
	// keyed).
	prev            *plan.Gateway
	prevAnswers     *answers
	made            *plandelta.Delta // the delta from prev, when the planning made it (plan.Update)
	keyedOnce       sync.Once
	keyedPlan       bool // plandelta.Keyed of this version
	rotate          int
	fullBody, fullZ []byte
	deltaDone       bool
	deltaBody       []byte
	deltaZ          []byte
}

// full returns the whole plan's answer and its gzipped form (nil when
// small).
func (a *answers) full(p planEntry, rotate int) ([]byte, []byte, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.reset(rotate)
	if a.fullBody == nil {
		js, err := json.Marshal(p.plan)
		if err != nil {
			return nil, nil, fmt.Errorf("encoding the plan of %s: %w", p.Gateway, err)
		}
		a.fullBody = fmt.Appendf(nil, `{"generation":%d,"revision":%d,"plan":%s,"rotateKey":%d}`+"\n", p.Generation, p.Revision, js, rotate)
		a.fullZ = gzipped(a.fullBody)
	}
	return a.fullBody, a.fullZ, nil
}

// delta returns the answer with the delta from p.prev, and its gzipped
// form; nil when no delta can be made (the caller sends the whole plan).
func (a *answers) delta(p planEntry, rotate int) ([]byte, []byte) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.reset(rotate)
	if !a.deltaDone && a.prev != nil {
		a.deltaDone = true
		prev, before, made := a.prev, a.prevAnswers, a.made
		a.prev, a.prevAnswers, a.made = nil, nil, nil // the delta is all that is needed of them
		var d plandelta.Delta
		ok := true
		switch {
		case made != nil:
			// From what plan.Update changed: no need to compare the lists.
			d = *made
		default:
			// Each version's lists are checked once: as the new plan of
			// one delta and, remembered, as the base of the next.
			prevKeyed := before != nil && before.keyed(*prev) || before == nil && plandelta.Keyed(*prev)
			if ok = prevKeyed && a.keyed(p.plan); ok {
				d = plandelta.DiffKeyed(*prev, p.plan, p.Sum)
				d.SumVersion = plandelta.SumVersion // the manager's sums are Digest's
			}
		}
		if ok {
			if js, err := json.Marshal(d); err == nil {
				a.deltaBody = fmt.Appendf(nil, `{"generation":%d,"revision":%d,"base":%d,"delta":%s,"rotateKey":%d}`+"\n", p.Generation, p.Revision, p.prevGen, js, rotate)
				a.deltaZ = gzipped(a.deltaBody)
			}
		}
	}
	return a.deltaBody, a.deltaZ
}

// keyed reports (once for the version, whoever asks first) whether g,
// this version's plan, is plandelta.Keyed. It does not take a.mu.
func (a *answers) keyed(g plan.Gateway) bool {
	a.keyedOnce.Do(func() { a.keyedPlan = plandelta.Keyed(g) })
	return a.keyedPlan
}

// reset drops what was encoded with another rotateKey. a.mu must be held.
func (a *answers) reset(rotate int) {
	if a.rotate != rotate {
		// Encoded for another rotateKey (the entry's first answer may be
		// encoded before the gateway's record is final): encode again.
		a.rotate = rotate
		if a.deltaDone && a.deltaBody != nil {
			a.deltaBody = rotateAgain(a.deltaBody, rotate)
			a.deltaZ = gzipped(a.deltaBody)
		}
		a.fullBody, a.fullZ = nil, nil
	}
}

// rotateAgain replaces the rotateKey at the end of an encoded answer.
func rotateAgain(body []byte, rotate int) []byte {
	i := bytes.LastIndex(body, []byte(`,"rotateKey":`))
	if i < 0 {
		return body
	}
	return fmt.Appendf(body[:i:i], `,"rotateKey":%d}`+"\n", rotate)
}

// gzipWriters keeps gzip writers for reuse: each holds about a megabyte of
// tables, and a change of every plan gzips a thousand answers.
var gzipWriters = sync.Pool{New: func() any {
	zw, _ := gzip.NewWriterLevel(nil, gzip.BestSpeed) // a valid level: no error
	return zw
}}

// gzipped returns b gzipped, or nil when b is small.
func gzipped(b []byte) []byte {
	if len(b) < gzipAbove {
		return nil
	}
	var out bytes.Buffer
	zw := gzipWriters.Get().(*gzip.Writer)
	zw.Reset(&out)
	zw.Write(b)
	zw.Close()
	gzipWriters.Put(zw)
	return out.Bytes()
}

// acceptsGzip reports whether the request's Accept-Encoding takes gzip.
func acceptsGzip(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept-Encoding") {
		for _, part := range strings.Split(v, ",") {
			enc, q, _ := strings.Cut(strings.TrimSpace(part), ";")
			if strings.EqualFold(strings.TrimSpace(enc), "gzip") && strings.ReplaceAll(strings.TrimSpace(q), " ", "") != "q=0" {
				return true
			}
		}
	}
	return false
}
