package plan_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/spec"
)

// scaleSpec is a federation of n sites (up to 16384) in one routed network.
func scaleSpec(n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: fednet/v1\nkind: Federation\nname: many\nsites:\n")
	var names []string
	for i := range n {
		name := fmt.Sprintf("s%04d", i)
		names = append(names, name)
		fmt.Fprintf(&b, "  - name: %s\n    provider: edge\n    prefixes: [10.%d.%d.0/24]\n    gateways:\n      - name: gw%04d\n        endpoint: 100.%d.%d.1:51820\n", name, 64+i/256, i%256, i, 64+i/256, i%256)
	}
	fmt.Fprintf(&b, "networks:\n  - name: apps\n    id: 100\n    mode: routed\n    sites: [%s]\n", strings.Join(names, ", "))
	return b.String()
}

// BenchmarkCompute plans full meshes of n sites, one gateway each, all in
// one routed network: every plan lists every other gateway.
func BenchmarkCompute(b *testing.B) {
	for _, n := range []int{100, 300, 1000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			f, err := spec.Parse([]byte(scaleSpec(n)))
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := plan.Compute(f, plan.Inputs{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
