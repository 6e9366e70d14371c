package bench

import (
	"context"
	"fmt"
	"os/exec"
	"reflect"
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
// measurements before the next path's, with each round of a TCP transfer
// (and of the latency under load) on every path before the next round,
// and files each path's failures with that path.
func TestMeasurePathsInterleaves(t *testing.T) {
	for _, rounds := range []int{0, 1, 3} {
		t.Run(fmt.Sprintf("tcp rounds %d", rounds), func(t *testing.T) {
			var paths []*path
			names := []string{Underlay, Standalone, Overlay}
			for _, name := range names {
				paths = append(paths, &path{info: PathInfo{Name: name}, from: failingNode{name}})
			}
			s := Settings{PingCount: 2, PingIntervalMs: 10, Streams: []int{1, 4}, TCPRounds: rounds, UDPRatesMbps: []float64{100}, TransferS: 0.1}
			var order []string
			progress := func(format string, args ...any) {
				name, _, _ := strings.Cut(fmt.Sprintf(format, args...), ":")
				order = append(order, name)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res := measurePaths(ctx, s, paths, progress)
			// pings, each round of TCP with 1 and 4 streams, UDP, each
			// round of latency under load.
			steps := 1 + 2*max(rounds, 1) + 1 + max(rounds, 1)
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
		})
	}
}

// TestMedianTCP: of several rounds of a transfer, the result is the round
// with the median rate (the lower middle one of an even count), its own
// retransmits and cost with it, and every round's rate in the order they
// ran; one round is the result as it is.
func TestMedianTCP(t *testing.T) {
	tr := func(mbps float64, retr int) TCPResult {
		return TCPResult{Path: Overlay, Streams: 1, Mbps: mbps, Retransmits: retr, Seconds: 4, Cost: Cost{WgdevCPUSecondsPerGB: mbps / 100}}
	}
	for _, tc := range []struct {
		in   []TCPResult
		want TCPResult
	}{
		{[]TCPResult{tr(1200, 1)}, tr(1200, 1)},
		{[]TCPResult{tr(1500, 1), tr(1100, 2), tr(1300, 3)}, func() TCPResult { m := tr(1300, 3); m.RoundsMbps = []float64{1500, 1100, 1300}; return m }()},
		{[]TCPResult{tr(900, 1), tr(1400, 2), tr(1000, 3), tr(1300, 4)}, func() TCPResult { m := tr(1000, 3); m.RoundsMbps = []float64{900, 1400, 1000, 1300}; return m }()},
		{[]TCPResult{tr(800, 1), tr(800, 2)}, func() TCPResult { m := tr(800, 1); m.RoundsMbps = []float64{800, 800}; return m }()},
	} {
		in := slices.Clone(tc.in)
		got := medianTCP(tc.in)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("medianTCP(%v) = %+v, want %+v", in, got, tc.want)
		}
		if !reflect.DeepEqual(tc.in, in) {
			t.Errorf("medianTCP reordered its argument: %v, was %v", tc.in, in)
		}
	}
}

// TestPoolLoaded: rounds of the latency under load make one result over
// every round's pings (percentiles of them all, loss over all pings
// sent, not the mean of the rounds' loss), with the median round's load
// and each round's p99 in the order they ran; one round is the result as
// it is.
func TestPoolLoaded(t *testing.T) {
	idle := Summarize([]float64{0.5, 0.6})
	mk := func(load float64, sent int, samples ...float64) LoadedResult {
		return LoadedResult{Path: Overlay, IdleMs: idle, LoadedMs: Summarize(samples), LoadMbps: load,
			LossPct: round(100*float64(sent-len(samples))/float64(sent), 2), SamplesMs: samples, sent: sent, received: len(samples)}
	}
	one := mk(1200, 4, 3, 5, 9)
	if got := poolLoaded([]LoadedResult{one}); !reflect.DeepEqual(got, one) {
		t.Errorf("one round: %+v, want it as it is: %+v", got, one)
	}
	a, b, c := mk(1500, 4, 1, 2, 3, 4), mk(1100, 100, 10, 20), mk(1300, 4, 5, 6, 7, 8)
	got := poolLoaded([]LoadedResult{a, b, c})
	all := []float64{1, 2, 3, 4, 10, 20, 5, 6, 7, 8}
	if !reflect.DeepEqual(got.SamplesMs, all) {
		t.Errorf("samples %v, want every round's in order %v", got.SamplesMs, all)
	}
	if got.LoadedMs != Summarize(all) {
		t.Errorf("loaded %+v, want the summary of all samples %+v", got.LoadedMs, Summarize(all))
	}
	// 98 of 108 pings lost: not the rounds' mean loss (0, 98, 0 %).
	if want := round(100*98.0/108, 2); got.LossPct != want {
		t.Errorf("loss %v %%, want %v %% (over all pings)", got.LossPct, want)
	}
	if got.LoadMbps != 1300 {
		t.Errorf("load %v Mbit/s, want the median round's 1300", got.LoadMbps)
	}
	if want := []float64{a.LoadedMs.P99, b.LoadedMs.P99, c.LoadedMs.P99}; !reflect.DeepEqual(got.RoundsP99Ms, want) {
		t.Errorf("rounds' p99 %v, want %v", got.RoundsP99Ms, want)
	}
	if got.IdleMs != idle || got.Path != Overlay {
		t.Errorf("idle %+v path %q, want the rounds' %+v %q", got.IdleMs, got.Path, idle, Overlay)
	}
}
