package plandelta

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestRadixSort: radixSort orders lists as slices.Sort does: short and
// long ones, with repeats, with bytes every key shares (a pass skipped),
// and at the extremes of uint32.
func TestRadixSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	gen := []func() uint32{
		rng.Uint32,
		func() uint32 { return 0x64600000 | rng.Uint32N(1<<16) }, // one transit /16
		func() uint32 { return rng.Uint32N(4) },                  // repeats
		func() uint32 { return []uint32{0, 1<<32 - 1, 1 << 31}[rng.IntN(3)] },
	}
	for round := range 200 {
		n := []int{0, 1, 63, 64, 65, 1000, rng.IntN(3000)}[round%7]
		g := gen[round%len(gen)]
		a := make([]uint32, n)
		for i := range a {
			a[i] = g()
		}
		want := slices.Clone(a)
		slices.Sort(want)
		radixSort(a)
		if !slices.Equal(a, want) {
			t.Fatalf("round %d (%d keys): radixSort disagrees with slices.Sort", round, n)
		}
	}
}
