package bench

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// failingNode is a lab.Commander whose every command fails at once.
type failingNode struct{ name string }

func (n failingNode) Command(ctx context.Context, _ string, _ ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "false")
}
func (n failingNode) String() string { return n.name }

// TestMeasurePathsInterleaves: measurePaths runs each measurement on every
// path in turn (the paths' order, again and again), not all of one path's
// measurements before the next path's, and files each path's failures
// with that path.
func TestMeasurePathsInterleaves(t *testing.T) {
	var paths []*path
	names := []string{Underlay, Standalone, Overlay}
	for _, name := range names {
		paths = append(paths, &path{info: PathInfo{Name: name}, from: failingNode{name}})
	}
	s := Settings{PingCount: 2, PingIntervalMs: 10, Streams: []int{1, 4}, UDPRatesMbps: []float64{100}, TransferS: 0.1}
	var order []string
	progress := func(format string, args ...any) {
		name, _, _ := strings.Cut(fmt.Sprintf(format, args...), ":")
		order = append(order, name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res := measurePaths(ctx, s, paths, progress)
	// pings, TCP 1 and 4 streams, UDP, latency under load.
	const steps = 5
	var want []string
	for range steps {
		want = append(want, names...)
	}
	if !slices.Equal(order, want) {
		t.Errorf("measured in the order\n%v\nwant\n%v", order, want)
	}
	for i, r := range res {
		if len(r.errs) != steps {
			t.Errorf("%s: %d errors, want one per measurement (%d): %q", names[i], len(r.errs), steps, r.errs)
		}
	}
}
