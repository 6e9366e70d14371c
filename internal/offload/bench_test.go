package offload

import (
	"math/rand/v2"
	"testing"
)

// Benchmarks of the per-byte work on the data path: cutting a 64 KiB
// super-packet into segments (read side) and merging a batch of segments
// back (write side). b.SetBytes makes `go test -bench` report MB/s: the
// CPU cost per gigabyte of each step is 1000/that s/GB.

func benchShapes() map[string]shape {
	return map[string]shape{
		"tcp4":       {df: true, flags: tcpACK, tcpOpts: 12},
		"vxlan-tcp4": {tunnel: true, df: true, flags: tcpACK, tcpOpts: 12, vni: 200},
	}
}

// benchSuper is a super-packet of s with 62000 bytes of payload cut at 1340.
func benchSuper(s shape) ([]byte, Header) {
	r := rand.New(rand.NewPCG(1, 2))
	return s.super(randomPayload(r, 62000), 1340)
}

func BenchmarkSplit(b *testing.B) {
	for name, s := range benchShapes() {
		b.Run(name, func(b *testing.B) {
			super, h := benchSuper(s)
			bufs, sizes := buffers(64, 1500, 32)
			b.SetBytes(int64(len(super)))
			for b.Loop() {
				if _, _, err := Split(super, h, 0, bufs, sizes, 32); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkCoalesce(b *testing.B) {
	for name, s := range benchShapes() {
		b.Run(name, func(b *testing.B) {
			super, h := benchSuper(s)
			bufs, sizes := buffers(64, 1500, 0)
			n, _, err := Split(super, h, 0, bufs, sizes, 0)
			if err != nil {
				b.Fatal(err)
			}
			var pkts [][]byte
			for i, buf := range bufs[:n] {
				pkts = append(pkts, buf[:sizes[i]])
			}
			c := NewCoalescer(allOffloads())
			b.SetBytes(int64(len(super)))
			for b.Loop() {
				if ws := c.Coalesce(pkts); len(ws) != 1 {
					b.Fatalf("%d writes, want 1", len(ws))
				}
			}
		})
	}
}
