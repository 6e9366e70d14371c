package plandelta

import (
	"testing"

	"github.com/cespare/xxhash/v2"

	"github.com/fednet/fednet/internal/spec"
)

// TestSiteHashIsOfJSON: siteHash, which encodes into a reused buffer, is
// the hash of the site's JSON as json.Marshal gives it (HTML escaped, no
// newline), which sums of version 2 are defined with.
func TestSiteHashIsOfJSON(t *testing.T) {
	s := spec.Site{Name: "s<0001>&", Provider: "onprem", Gateways: []spec.Gateway{{Name: "g0001", Endpoint: "100.64.1.1:51820", BridgePorts: map[string]string{"lan": "eth1"}}}}
	for range 3 {
		if siteHash(s) != xxhash.Sum64String(encode(s)) {
			t.Fatal("siteHash is not the hash of the site's JSON")
		}
	}
}

func BenchmarkSiteHash(b *testing.B) {
	s := spec.Site{Name: "s0001", Provider: "onprem", Gateways: []spec.Gateway{{Name: "g0001", Endpoint: "100.64.1.1:51820", BridgePorts: map[string]string{"lan": "eth1"}}}}
	for b.Loop() {
		siteHash(s)
	}
}
