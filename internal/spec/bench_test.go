package spec_test

import (
	"crypto/rand"
	"testing"

	"github.com/fednet/fednet/internal/bench/controlplane/cpspec"
	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/spec"
)

// BenchmarkParse1000 parses the control-plane bench's spec of 1001 sites
// with a bridged network over all of them (what every manager parses on
// each change at 1000 gateways).
func BenchmarkParse1000(b *testing.B) {
	keys := make([]plan.Key, 1001)
	for i := range keys {
		rand.Read(keys[i][:])
	}
	doc := []byte(cpspec.Federation(keys, 1001, "", true))
	b.SetBytes(int64(len(doc)))
	for b.Loop() {
		if _, err := spec.Parse(doc); err != nil {
			b.Fatal(err)
		}
	}
}
