package manager

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fednet/fednet/internal/api"
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
// that took d; how says how many plans were edited and how many computed
// whole, and why (computePlans). fednet bench control-plane reads the log
// line.
func (m *Manager) planned(d time.Duration, n int, gen int64, how string) {
	m.stats.plannings.Add(1)
	m.stats.lastPlanning.Store(int64(d))
	m.cfg.Logf("planned %d gateways in %.1f ms (generation %d): %s", n, float64(d.Microseconds())/1000, gen, how)
}

// gzipAbove is the size from which plan answers are also kept gzipped.
const gzipAbove = 1 << 10

// variant is the form of a plan a watch takes: bare (without the plan's
// Local) unless the request announces api.PlanFeatureLocal; with it, the
// Local's deltas patch changed entries by field only when the request
// also announces api.PlanFeaturePatch, deltas edit the remotes of the
// head's VXLAN ports when it announces api.PlanFeatureRemotes too, those
// of new ports from the peers' transit addresses when it announces
// api.PlanFeaturePeerRemotes as well, and the Local's deltas are compact
// (plandelta.DiffLocalCompact) when it also announces
// api.PlanFeatureCompact.
type variant int

const (
	bare            variant = iota
	withLocal               // the Local; its deltas send changed entries whole
	withPatches             // the Local; its deltas patch changed entries
	withRemotes             // withPatches, and deltas edit the head's VXLAN remotes
	withPeerRemotes         // withRemotes, and new ports' remotes from the peers
	withCompact             // withPeerRemotes, and compact Local deltas
	variants                // the number of variants
)

// newest is the variant fednet's agent takes, whose deltas a manager
// encodes ahead.
const newest = withCompact

// local reports whether v carries the plan's Local.
func (v variant) local() bool { return v != bare }

// localForm is the form of v's Local deltas: compact from withCompact,
// patched from withPatches, else changed entries whole.
func (v variant) localForm() localForm {
	switch {
	case v >= withCompact:
		return compactLocal
	case v >= withPatches:
		return patchedLocal
	}
	return wholeLocal
}

// variantOf returns the variant r announces it takes of a plan p.
func variantOf(r *http.Request, p plan.Gateway) variant {
	if p.Local == nil {
		return bare
	}
	var local, patch, remotes, peerRemotes, compact bool
	for _, v := range r.Header.Values(api.HeaderPlanFeatures) {
		for _, f := range strings.Split(v, ",") {
			switch f = strings.TrimSpace(f); {
			case strings.EqualFold(f, api.PlanFeatureLocal):
				local = true
			case strings.EqualFold(f, api.PlanFeaturePatch):
				patch = true
			case strings.EqualFold(f, api.PlanFeatureRemotes):
				remotes = true
			case strings.EqualFold(f, api.PlanFeaturePeerRemotes):
				peerRemotes = true
			case strings.EqualFold(f, api.PlanFeatureCompact):
				compact = true
			}
		}
	}
	switch {
	case local && patch && remotes && peerRemotes && compact:
		return withCompact
	case local && patch && remotes && peerRemotes:
		return withPeerRemotes
	case local && patch && remotes:
		return withRemotes
	case local && patch:
		return withPatches
	case local:
		return withLocal
	}
	return bare
}

// localVersion is the Local every plan of one planning carries
// (plan.AttachLocal), encoded once for all of them, and the deltas to it
// from the Locals of the plans before, each made once for all the plans
// that move between the same two Locals. Safe for concurrent use.
type localVersion struct {
	local *plan.Local
	json  []byte // the Local as JSON
	gz    []byte // json gzipped, one gzip member
	sum   [sha256.Size]byte
	// digest is the Local's in sums of version 2, which every plan's
	// digest of this version shares.
	digest *plandelta.LocalDigest

	mu     sync.Mutex
	deltas map[localBase]*localDelta // nil: none can be made
}

// localBase names a delta to a Local: the Local it is from, and its form.
type localBase struct {
	from *plan.Local
	form localForm
}

// localForm is the form of a Local delta: entries changed sent whole
// (plandelta.DiffLocalWhole), patched (plandelta.DiffLocal), or patched
// and compact (plandelta.DiffLocalCompact).
type localForm int

const (
	wholeLocal localForm = iota
	patchedLocal
	compactLocal
)

// localDelta is the delta from one Local to another, with its JSON and
// that gzipped as one gzip member, encoded once for every plan's answer
// that carries it (a thousand answers splice the same pieces).
type localDelta struct {
	delta    *plandelta.LocalDelta
	json, gz []byte
}

// newLocalVersion encodes l.
func newLocalVersion(l *plan.Local) (*localVersion, error) {
	js, sum, err := plandelta.EncodeLocal(l)
	if err != nil {
		return nil, err
	}
	return &localVersion{local: l, json: js, gz: gzipMember(js), sum: sum, digest: plandelta.NewLocalDigest(l)}, nil
}

// deltaFrom returns the delta from base to lv's Local in form, made and
// encoded at the first call for base and form; nil when none can be made.
func (lv *localVersion) deltaFrom(base *plan.Local, form localForm) *localDelta {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	key := localBase{base, form}
	if d, ok := lv.deltas[key]; ok {
		return d
	}
	diff := plandelta.DiffLocalWhole
	switch form {
	case patchedLocal:
		diff = plandelta.DiffLocal
	case compactLocal:
		diff = plandelta.DiffLocalCompact
	}
	var out *localDelta
	if d, ok := diff(base, lv.local); ok {
		if js, err := json.Marshal(d); err == nil {
			out = &localDelta{delta: d, json: js, gz: gzipMember(js)}
		}
	}
	if lv.deltas == nil {
		lv.deltas = map[localBase]*localDelta{}
	}
	lv.deltas[key] = out
	return out
}

// forgetBases drops the deltas made (each plan's answers keep what they
// took) and with them the base Locals they hold on to.
func (lv *localVersion) forgetBases() {
	lv.mu.Lock()
	lv.deltas = nil
	lv.mu.Unlock()
}

// answers are the encoded answers to the plan watches of one plan version
// (see writePlan): the whole plan and the delta from the version before,
// each bare and with Local, each also gzipped, made at the first watch
// that needs them. The whole plan with Local is sent in pieces, the
// plan's and the Local's that every plan of the version shares, so that a
// thousand gateways do not hold a thousand copies of the federation. The
// rotateKey they carry is part of the version (a rotation request makes a
// new version), but is kept to be safe. Safe for concurrent use.
type answers struct {
	mu sync.Mutex
	// prev is the version before, until the delta from it is made;
	// prevAnswers that version's answers (which know whether it is
	// keyed).
	prev        *plan.Held
	prevAnswers *answers
	// made is the delta from prev (without Local and sum) when the
	// planning made it from plan.Update's edit.
	made *plandelta.Delta
	// head is this version's plan head as JSON (plandelta.HeadJSON),
	// encoded at the first answer that needs it (headJSON).
	head      []byte
	keyedOnce sync.Once
	keyedPlan bool // plandelta.Keyed of this version
	rotate    int
	// fullBody is the whole bare answer, planEnd the offset just past the
	// plan's JSON in it; fullZ it gzipped (nil when small); headZ and
	// tailZ gzip the pieces before and after the Local of the answer with
	// Local.
	fullBody, fullZ []byte
	planEnd         int
	headZ, tailZ    []byte
	// planDelta is the delta from prev without Local and sum (nil when no
	// delta can be made); localDeltas the Local's, by variant, made at the
	// first watch of the variant from prevLocal (nil: none).
	deltaDone bool
	planDelta *plandelta.Delta
	// remotesDelta is planDelta with the remotes of its head's VXLAN
	// ports edited from prev's (withRemotes); nil when it edits none.
	// peerRemotesDelta likewise, with those of new ports edited from the
	// transit addresses of the peers (withPeerRemotes).
	remotesDelta     *plandelta.Delta
	peerRemotesDelta *plandelta.Delta
	prevLocal        *plan.Local
	localDeltas      [variants]*localDelta
	localDone        [variants]bool
	// deltaBody and deltaZ are the pieces of the delta answer (and of it
	// gzipped), by variant: with Local, the Local's delta is a piece of
	// its own, shared by every answer.
	deltaBody [variants][][]byte
	deltaZ    [variants][][]byte
}

// remotesFor returns the delta with remotes edited that variant v takes,
// nil for none.
func (a *answers) remotesFor(v variant) *plandelta.Delta {
	switch v {
	case withRemotes:
		return a.remotesDelta
	case withPeerRemotes, withCompact:
		return a.peerRemotesDelta
	}
	return nil
}

// full returns the pieces of the whole plan's answer in variant v and the
// pieces of its gzipped form (nil when small). lv is the Local of the
// plan's version, used for the variants with Local.
func (a *answers) full(p planEntry, rotate int, v variant, lv *localVersion) ([][]byte, [][]byte, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.reset(rotate)
	if a.fullBody == nil {
		g := p.held.Gateway()
		g.Local = nil
		js, err := json.Marshal(g)
		if err != nil {
			return nil, nil, fmt.Errorf("encoding the plan of %s: %w", p.Gateway, err)
		}
		a.fullBody = fmt.Appendf(nil, `{"generation":%d,"revision":%d,"plan":`, p.Generation, p.Revision)
		a.fullBody = append(a.fullBody, js...)
		a.planEnd = len(a.fullBody)
		a.fullBody = appendRotateKey(a.fullBody, rotate)
	}
	if v == bare {
		if a.fullZ == nil {
			a.fullZ = gzipped(a.fullBody)
		}
		return [][]byte{a.fullBody}, pieces(a.fullZ), nil
	}
	// The plan's JSON ends with its closing brace: the Local goes before.
	head, tail := a.fullBody[:a.planEnd-1], a.fullBody[a.planEnd-1:]
	field := []byte(`,"local":`)
	if head[len(head)-1] == '{' {
		field = field[1:]
	}
	if a.headZ == nil {
		a.headZ = gzipMember(append(head[:len(head):len(head)], field...))
		a.tailZ = gzipMember(tail)
	}
	return [][]byte{head, field, lv.json, tail}, [][]byte{a.headZ, lv.gz, a.tailZ}, nil
}

// pieces returns b as the one piece of an answer, or nil when b is nil.
func pieces(b []byte) [][]byte {
	if b == nil {
		return nil
	}
	return [][]byte{b}
}

// delta returns the pieces of the answer in variant v with the delta from
// p.prev, and of its gzipped form (nil when small); nil when no delta can
// be made (the caller sends the whole plan). lv is the Local of p's
// version (its deltas from the Locals before, encoded once, are shared by
// every plan).
func (a *answers) delta(p planEntry, rotate int, v variant, lv *localVersion) ([][]byte, [][]byte) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.reset(rotate)
	if !a.deltaDone && a.prev != nil {
		a.deltaDone = true
		prev, before, made := a.prev, a.prevAnswers, a.made
		a.prev, a.prevAnswers, a.made = nil, nil, nil // the delta is all that is needed of them
		switch {
		case made != nil:
			// From what plan.Update changed: no need to compare the lists.
			a.planDelta = made
		default:
			// Each version's lists are checked once: as the new plan of
			// one delta and, remembered, as the base of the next.
			old, new := prev.Gateway(), p.held.Gateway()
			prevKeyed := before != nil && before.keyed(old) || before == nil && plandelta.Keyed(old)
			if prevKeyed && a.keyed(new) {
				d := plandelta.DiffKeyed(old, new, [sha256.Size]byte{}, nil)
				a.planDelta = &d
			}
		}
		if a.planDelta != nil && p.held.Head.Local != nil {
			a.prevLocal = prev.Head.Local
		}
		if a.planDelta != nil && len(p.held.Head.Bridges) > 0 {
			transits := func() []netip.Addr {
				return plandelta.PeerTransits(p.held.Head.Firewall.Transit, p.held.Peers.Parts(), p.held.Peers.Len())
			}
			if d := a.planDelta.WithRemotesEdits(prev.Head, sync.OnceValue(transits)); d.RemotesEdits != nil {
				a.peerRemotesDelta = &d
			}
			a.remotesDelta = a.peerRemotesDelta
			if a.peerRemotesDelta != nil && a.peerRemotesDelta.FromPeers() {
				a.remotesDelta = nil
				if d := a.planDelta.WithRemotesEdits(prev.Head, nil); d.RemotesEdits != nil {
					a.remotesDelta = &d
				}
			}
		}
	}
	if a.planDelta == nil {
		return nil, nil
	}
	if v.local() && !a.localDone[v] {
		a.localDone[v] = true
		if a.prevLocal != nil && lv != nil {
			a.localDeltas[v] = lv.deltaFrom(a.prevLocal, v.localForm())
		}
	}
	if v.local() && a.localDeltas[v] == nil {
		return nil, nil
	}
	if a.deltaBody[v] == nil {
		// The plan's digest is the stored sum; without Local it is made
		// from the digest without hashing the lists.
		var d plandelta.Delta
		var headJSON []byte
		if r := a.remotesFor(v); r != nil {
			d = *r // a head without its long remotes: encoded here
		} else {
			d, headJSON = *a.planDelta, a.headJSON(p)
		}
		d.SumVersion = plandelta.SumVersion
		if v.local() {
			d.Sum = hex.EncodeToString(p.Sum[:])
		} else {
			bare := p.digest.BareHeld(p.held)
			d.Sum = hex.EncodeToString(bare[:])
		}
		js, err := d.MarshalWithHead(headJSON)
		if err != nil {
			return nil, nil
		}
		head := fmt.Appendf(nil, `{"generation":%d,"revision":%d,"base":%d,"delta":`, p.Generation, p.Revision, p.prevGen)
		if v == bare {
			body := appendRotateKey(append(head, js...), rotate)
			a.deltaBody[v], a.deltaZ[v] = [][]byte{body}, pieces(gzipped(body))
		} else {
			// The delta's JSON ends with its closing brace: the Local's
			// delta goes before, as a piece of its own.
			head = append(append(head, js[:len(js)-1]...), `,"local":`...)
			a.deltaBody[v] = [][]byte{head, a.localDeltas[v].json, localTail(rotate)}
			a.deltaZ[v] = [][]byte{gzipPiece(head), a.localDeltas[v].gz, localTailMember(rotate)}
		}
	}
	return a.deltaBody[v], a.deltaZ[v]
}

// dropBase lets go of the version before (no delta is made from it: a
// watch gets the whole plan).
func (a *answers) dropBase() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.deltaDone {
		a.deltaDone = true
		a.prev, a.prevAnswers, a.made = nil, nil, nil
	}
}

// headJSON returns the JSON of p's head (p is this version's entry),
// encoded at the first call; nil when it does not encode (the delta is
// then encoded whole, and fails likewise). a.mu must be held.
func (a *answers) headJSON(p planEntry) []byte {
	if a.head == nil {
		a.head, _ = plandelta.HeadJSON(p.held.Head)
	}
	return a.head
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
		// The deltas are encoded again from what they were made of.
		a.deltaBody, a.deltaZ = [variants][][]byte{}, [variants][][]byte{}
		a.fullBody, a.fullZ, a.headZ, a.tailZ = nil, nil, nil, nil
	}
}

// appendRotateKey appends the end of every plan answer to b: its
// rotateKey, the closing brace and a newline.
func appendRotateKey(b []byte, rotate int) []byte {
	return fmt.Appendf(b, `,"rotateKey":%d}`+"\n", rotate)
}

// localTail is the end of a delta answer with Local, after the Local's
// delta (which the delta's closing brace follows): the same for every plan
// but for rotateKey.
func localTail(rotate int) []byte {
	return appendRotateKey([]byte{'}'}, rotate)
}

// localTailZero is localTail(0) gzipped, once: the tail of nearly every
// delta answer with Local (gzipping it took half the gzip work of a
// change of every plan).
var localTailZero = sync.OnceValue(func() []byte { return gzipPiece(localTail(0)) })

// localTailMember returns localTail(rotate) gzipped.
func localTailMember(rotate int) []byte {
	if rotate == 0 {
		return localTailZero()
	}
	return gzipPiece(localTail(rotate))
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
	return gzipMember(b)
}

// gzipMember returns b gzipped, whatever its size. Gzip members
// concatenated are one gzip stream of their contents concatenated (RFC
// 1952), which every gzip reader (Go's, curl's) takes.
func gzipMember(b []byte) []byte {
	return writeMember(&gzipWriters, b)
}

// storeBelow is the size under which a piece of one gateway's answer
// (the head of its delta) is put in the gzipped answer stored, not
// compressed: compressing a delta's head of 1.2 kB to 0.7 kB took the
// manager 18 µs alone and about 65 µs amid a change of every plan (cold
// tables), a thousand times per change, and the agent a Huffman table
// to build to inflate it; half a kilobyte more in an answer costs next
// to nothing. Pieces every answer shares (the Local's delta) are gzipped
// once, so they are compressed whatever their size.
const storeBelow = 2 << 10

// storedWriters keeps gzip writers that store (deflate level 0).
var storedWriters = sync.Pool{New: func() any {
	zw, _ := gzip.NewWriterLevel(nil, gzip.NoCompression) // a valid level: no error
	return zw
}}

// gzipPiece returns b as a gzip member: stored when it is smaller than
// storeBelow, compressed otherwise.
func gzipPiece(b []byte) []byte {
	if len(b) < storeBelow {
		return writeMember(&storedWriters, b)
	}
	return gzipMember(b)
}

// writeMember returns b as a gzip member written by a writer of pool.
func writeMember(pool *sync.Pool, b []byte) []byte {
	var out bytes.Buffer
	zw := pool.Get().(*gzip.Writer)
	zw.Reset(&out)
	zw.Write(b)
	zw.Close()
	pool.Put(zw)
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
