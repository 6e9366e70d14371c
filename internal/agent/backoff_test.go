package agent

import (
	"testing"
	"time"
)

func TestBackoffFullJitter(t *testing.T) {
	b := &backoff{min: 200 * time.Millisecond, max: 5 * time.Second}
	for range 3 {
		for n := range 40 {
			ceil := min(b.max, b.min<<min(n, 30))
			d := b.next()
			if d <= 0 || d > ceil {
				t.Fatalf("wait %d is %v, want in (0, %v]", n, d, ceil)
			}
		}
		b.reset()
		if d := b.next(); d > b.min {
			t.Fatalf("after reset the first wait is %v, want at most %v", d, b.min)
		}
		b.reset()
	}
}
