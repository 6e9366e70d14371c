package plan

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestSpliceChunksEqualsSpliceList splices random drops and adds into
// lists of random lengths, again and again from each result, as Chunks
// and as flat lists: the entries, gone entries and ok are the same,
// nil and empty lists stay apart, and the version spliced from is left
// as it was.
func TestSpliceChunksEqualsSpliceList(t *testing.T) {
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 1))
		var flat []int
		switch r.IntN(4) {
		case 0: // nil
		case 1:
			flat = []int{}
		default:
			for i := range r.IntN(5 * chunkSize) {
				if r.IntN(3) > 0 {
					flat = append(flat, 2*i)
				}
			}
		}
		chunks := ChunksOf(flat)
		for step := range 20 {
			var drop []int
			for i := range flat {
				if r.IntN(len(flat)/3+1) == 0 {
					drop = append(drop, i)
				}
			}
			var add []int
			for range r.IntN(3 * chunkSize / max(1, r.IntN(20))) {
				add = append(add, r.IntN(12*chunkSize))
			}
			if r.IntN(2) == 0 { // adds that replace a dropped entry's key
				for _, i := range drop {
					if r.IntN(2) == 0 {
						add = append(add, flat[i])
					}
				}
			}
			slices.Sort(add)
			if r.IntN(10) > 0 {
				add = slices.Compact(add)
			}
			before := slices.Clone(chunks.Slice())
			wantList, wantGone, wantOK := spliceList(flat, drop, add, cmp.Compare[int])
			got, gotGone, gotOK := spliceChunks(chunks, drop, add, cmp.Compare[int])
			if gotOK != wantOK {
				t.Fatalf("seed %d step %d: ok %v, want %v", seed, step, gotOK, wantOK)
			}
			if !slices.Equal(chunks.Slice(), before) {
				t.Fatalf("seed %d step %d: the version spliced from changed", seed, step)
			}
			if !wantOK {
				continue
			}
			gs := got.Slice()
			if !slices.Equal(gs, wantList) || (gs == nil) != (wantList == nil) || got.Len() != len(wantList) {
				t.Fatalf("seed %d step %d: got %v (nil %v), want %v (nil %v)", seed, step, gs, gs == nil, wantList, wantList == nil)
			}
			if !slices.Equal(gotGone, wantGone) {
				t.Fatalf("seed %d step %d: gone %v, want %v", seed, step, gotGone, wantGone)
			}
			for i, x := range wantList {
				if got.At(i) != x {
					t.Fatalf("seed %d step %d: At(%d) = %d, want %d", seed, step, i, got.At(i), x)
				}
			}
			if i := r.IntN(12 * chunkSize); true {
				wi, wf := slices.BinarySearch(wantList, i)
				gi, gf := SearchChunks(got, i, cmp.Compare[int])
				if wi != gi || wf != gf {
					t.Fatalf("seed %d step %d: search %d: %d %v, want %d %v", seed, step, i, gi, gf, wi, wf)
				}
			}
			for _, ch := range got.chunks {
				if len(ch) == 0 || len(ch) > 2*chunkSize {
					t.Fatalf("seed %d step %d: a chunk of %d entries", seed, step, len(ch))
				}
			}
			flat, chunks = wantList, got
		}
	}
}

// TestSpliceChunksShares checks that a splice copies only the chunks it
// changes.
func TestSpliceChunksShares(t *testing.T) {
	var flat []int
	for i := range 10 * chunkSize {
		flat = append(flat, 2*i)
	}
	c := ChunksOf(flat)
	got, _, ok := spliceChunks(c, nil, []int{2*5*chunkSize + 1}, cmp.Compare[int])
	if !ok {
		t.Fatal("not ok")
	}
	shared := 0
	for i := range got.chunks {
		if i < len(c.chunks) && &got.chunks[i][0] == &c.chunks[i][0] {
			shared++
		}
	}
	if shared != len(c.chunks)-1 {
		t.Errorf("%d of %d chunks shared, want all but one", shared, len(c.chunks))
	}
}

// spliceList is spliceChunks on a flat list (what Update did before
// plans were held in chunks), the reference the test compares with.
func spliceList[T any](old []T, drop []int, add []T, compare func(a, b T) int) (out, gone []T, ok bool) {
	if len(drop) == 0 && len(add) == 0 {
		return old, nil, true // unchanged: shared (plans are values)
	}
	for i := 1; i < len(add); i++ {
		if compare(add[i-1], add[i]) >= 0 {
			return nil, nil, false
		}
	}
	out = make([]T, 0, len(old)-len(drop)+len(add))
	d := 0 // drop[d] is the next index to skip
	// keep appends old[from:to] less the dropped entries.
	keep := func(from, to int) {
		for ; d < len(drop) && drop[d] < from; d++ {
		}
		for ; d < len(drop) && drop[d] < to; d++ {
			out = append(out, old[from:drop[d]]...)
			from = drop[d] + 1
		}
		out = append(out, old[from:to]...)
	}
	from := 0
	for _, x := range add {
		i, found := slices.BinarySearchFunc(old, x, compare)
		if _, dropped := slices.BinarySearch(drop, i); found && !dropped {
			return nil, nil, false
		}
		keep(from, i)
		from = i
		if found {
			from = i + 1
		}
		out = append(out, x)
	}
	keep(from, len(old))
	for _, i := range drop {
		if _, found := slices.BinarySearchFunc(add, old[i], compare); !found {
			gone = append(gone, old[i])
		}
	}
	return out, gone, true
}
