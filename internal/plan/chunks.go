package plan

import (
	"iter"
	"slices"
)

// chunkSize is how many entries a chunk of a Chunks holds when it is
// made; a chunk that grows past twice as many is split. (A variable for
// the tests, which make small plans span several chunks.)
var chunkSize = 64

// Chunks is a list sorted by key held in chunks that versions of it
// share: a version that changes a few entries copies the chunks they
// fall in, not the list. A manager holds a thousand plans of a thousand
// peers; a change that concerns one site so copies a chunk of each plan
// rather than every plan's lists. It is a value: nobody writes into its
// chunks, so copies share them.
type Chunks[T any] struct {
	chunks [][]T
	// starts[i] is the index in the list of chunks[i]'s first entry.
	starts []int
	n      int
	// empty is set on a list of no entries that is not nil (JSON [], not
	// null).
	empty bool
}

// ChunksOf returns the list s as Chunks. It shares s (which nobody may
// write into after).
func ChunksOf[T any](s []T) Chunks[T] {
	c := Chunks[T]{empty: s != nil && len(s) == 0}
	for i := 0; i < len(s); i += chunkSize {
		c.chunks = append(c.chunks, slices.Clip(s[i:min(i+chunkSize, len(s))]))
	}
	c.index()
	return c
}

// index sets starts and n from chunks.
func (c *Chunks[T]) index() {
	c.starts = make([]int, len(c.chunks))
	c.n = 0
	for i, ch := range c.chunks {
		c.starts[i] = c.n
		c.n += len(ch)
	}
}

// Len returns the number of entries.
func (c Chunks[T]) Len() int { return c.n }

// At returns the entry at index i (0 <= i < Len).
func (c Chunks[T]) At(i int) T {
	k := c.chunkOf(i)
	return c.chunks[k][i-c.starts[k]]
}

// chunkOf returns the chunk holding index i.
func (c Chunks[T]) chunkOf(i int) int {
	k, found := slices.BinarySearch(c.starts, i)
	if !found {
		k--
	}
	return k
}

// Parts returns the chunks in order, for a caller that reads the entries
// in place rather than copied one by one (All); they are not to be
// written into.
func (c Chunks[T]) Parts() iter.Seq[[]T] {
	return func(yield func([]T) bool) {
		for _, ch := range c.chunks {
			if !yield(ch) {
				return
			}
		}
	}
}

// All returns the entries in order.
func (c Chunks[T]) All() iter.Seq[T] {
	return func(yield func(T) bool) {
		for _, ch := range c.chunks {
			for _, x := range ch {
				if !yield(x) {
					return
				}
			}
		}
	}
}

// Slice returns the entries as one list (a list of one chunk is that
// chunk, shared); with no entries, nil or empty as the list was.
func (c Chunks[T]) Slice() []T {
	switch len(c.chunks) {
	case 0:
		if c.empty {
			return []T{}
		}
		return nil
	case 1:
		return c.chunks[0]
	}
	out := make([]T, 0, c.n)
	for _, ch := range c.chunks {
		out = append(out, ch...)
	}
	return out
}

// SearchChunks returns the index of the first entry of c for which
// compare(entry, k) >= 0, and whether it compares equal (c sorted by
// compare), as slices.BinarySearchFunc does on a slice.
func SearchChunks[T, K any](c Chunks[T], k K, compare func(T, K) int) (int, bool) {
	// The first chunk whose last entry is not below k holds it.
	ci, _ := slices.BinarySearchFunc(c.chunks, k, func(ch []T, k K) int {
		if compare(ch[len(ch)-1], k) < 0 {
			return -1
		}
		return 1
	})
	if ci == len(c.chunks) {
		return c.n, false
	}
	i, found := slices.BinarySearchFunc(c.chunks[ci], k, compare)
	return c.starts[ci] + i, found
}

// spliceChunks returns old, sorted by key (compare), less the entries at
// the indexes drop (sorted), with add (sorted) merged in (an empty list
// not nil; old itself when nothing changes); the chunks no entry of drop
// or add falls in are shared with old. gone are the
// dropped entries whose key add lacks; ok is false when a key would be
// twice.
func spliceChunks[T any](old Chunks[T], drop []int, add []T, compare func(a, b T) int) (out Chunks[T], gone []T, ok bool) {
	if len(drop) == 0 && len(add) == 0 {
		return old, nil, true
	}
	for i := 1; i < len(add); i++ {
		if compare(add[i-1], add[i]) >= 0 {
			return Chunks[T]{}, nil, false
		}
	}
	// Where each entry of add goes: before the entry of old at its index
	// (old's length: at the end).
	at := make([]int, len(add))
	for j, x := range add {
		i, found := SearchChunks(old, x, compare)
		if _, dropped := slices.BinarySearch(drop, i); found && !dropped {
			return Chunks[T]{}, nil, false
		}
		at[j] = i
	}
	out.chunks = make([][]T, 0, len(old.chunks)+1)
	d, a := 0, 0 // the next of drop and of add
	for k, ch := range old.chunks {
		from, to := old.starts[k], old.starts[k]+len(ch)
		last := k == len(old.chunks)-1
		// The entries of add placed in this chunk: before one of its
		// entries, or after the last one of the whole list.
		a1 := a
		for a1 < len(add) && (at[a1] < to || last) {
			a1++
		}
		d1 := d
		for d1 < len(drop) && drop[d1] < to {
			d1++
		}
		if a1 == a && d1 == d {
			out.chunks = append(out.chunks, ch)
			continue
		}
		merged := make([]T, 0, len(ch)-(d1-d)+(a1-a))
		for i := from; i < to; i++ {
			for ; a < a1 && at[a] == i; a++ {
				merged = append(merged, add[a])
			}
			if d < d1 && drop[d] == i {
				d++
				continue
			}
			merged = append(merged, ch[i-from])
		}
		merged = append(merged, add[a:a1]...) // after the list's last entry
		a, d = a1, d1
		for len(merged) > 2*chunkSize {
			out.chunks = append(out.chunks, merged[:chunkSize:chunkSize])
			merged = merged[chunkSize:]
		}
		if len(merged) > 0 {
			out.chunks = append(out.chunks, merged)
		}
	}
	if len(old.chunks) == 0 && len(add) > 0 {
		out = ChunksOf(slices.Clone(add))
	} else {
		out.index()
	}
	out.empty = out.n == 0
	for _, i := range drop {
		x := old.At(i)
		if _, found := slices.BinarySearchFunc(add, x, compare); !found {
			gone = append(gone, x)
		}
	}
	return out, gone, true
}
