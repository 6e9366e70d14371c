package bench

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestCompare(t *testing.T) {
	routed := ModeResult{Mode: "routed",
		TCP:    []TCPResult{{Path: Overlay, Streams: 1, Mbps: 2000}, {Path: Overlay, Streams: 4, Mbps: 2200}, {Path: Standalone, Streams: 1, Mbps: 1600}},
		UDP:    []UDPResult{{Path: Overlay, OfferedMbps: 500, Mbps: 490, LossPct: 2}, {Path: Standalone, OfferedMbps: 500, Mbps: 245, LossPct: 51}, {Path: Underlay, OfferedMbps: 500, Mbps: 500}},
		Loaded: []LoadedResult{{Path: Overlay, LoadedMs: Summary{P50: 1, P99: 3}, LossPct: 0}, {Path: Standalone, LoadedMs: Summary{P50: 2, P99: 6}, LossPct: 1}},
		Delay:  []DelayResult{{Path: Overlay, DelayMs: 50, Mbps: 300}, {Path: Standalone, DelayMs: 50, Mbps: 400}, {Path: Overlay, DelayMs: 100, Mbps: 100}},
	}
	routed.Ratios = ratios(routed)
	bridged := ModeResult{Mode: "bridged", Network: "lan", TCP: []TCPResult{{Path: Overlay, Streams: 1, Mbps: 1800}, {Path: Overlay, Streams: 4, Mbps: 1100}}}
	c := compare([]ModeResult{routed, bridged, {Mode: "bridged", Network: "other", TCP: []TCPResult{{Path: Overlay, Streams: 1, Mbps: 1}}}})
	if c.BridgedRouted1 != 0.9 || c.BridgedRouted4 != 0.5 {
		t.Errorf("bridged/routed = %v, %v; want 0.9, 0.5 (the first bridged network)", c.BridgedRouted1, c.BridgedRouted4)
	}
	if c.Standalone1 != 1.25 || c.Standalone4 != 0 {
		t.Errorf("fednet/standalone = %v, %v; want 1.25, 0 (not measured)", c.Standalone1, c.Standalone4)
	}
	if len(c.Loaded) != 1 || c.Loaded[0].P99Ratio != 0.5 || c.Loaded[0].StandaloneLossPct != 1 || c.Loaded[0].Mode != "routed" {
		t.Errorf("loaded = %+v", c.Loaded)
	}
	if len(c.UDP) != 1 || c.UDP[0].Ratio != 2 || c.UDP[0].OfferedMbps != 500 {
		t.Errorf("UDP = %+v", c.UDP)
	}
	if len(c.Delay) != 1 || c.Delay[0].Ratio != 0.75 {
		t.Errorf("delay = %+v, want one point at 50 ms, ratio 0.75 (100 ms has no standalone point)", c.Delay)
	}

	r := fakeResults()
	r.Comparison = c
	dir := t.TempDir()
	if err := Write(dir, r); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, MDFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## comparison", "| TCP 1 stream bridged / routed | 0.900 |", "| routed | 500 | 490.0 | 245.0 | 2.000 |"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("results.md lacks %q", want)
		}
	}
	if h := Headline(r); !strings.Contains(h, "bridged/routed TCP 0.900 (1 stream) 0.500 (4)") {
		t.Errorf("headline lacks bridged/routed: %s", h)
	}
}

func TestCostReadings(t *testing.T) {
	a, err := machineBusy()
	if err != nil {
		t.Fatal(err)
	}
	// Burn some CPU so both clocks move.
	deadline := time.Now().Add(50 * time.Millisecond)
	for x := 0; time.Now().Before(deadline); x++ {
		_ = x * x
	}
	b, err := machineBusy()
	if err != nil {
		t.Fatal(err)
	}
	if a <= 0 || b < a {
		t.Errorf("machine busy time %v then %v", a, b)
	}
	self, err := processCPU(os.Getpid())
	if err != nil || self <= 0 {
		t.Errorf("processCPU(self) = %v, %v", self, err)
	}
	rss, err := peakRSS(os.Getpid())
	if err != nil || rss < 1<<20 {
		t.Errorf("peakRSS(self) = %v, %v", rss, err)
	}
	if _, err := processCPU(1 << 30); err == nil {
		t.Error("processCPU of no process = nil error")
	}
	m := costMeter{pids: func() []int { return []int{os.Getpid()} }}
	mach, procs := m.perGB(cpuSample{machine: 10, procs: 1}, cpuSample{machine: 12, procs: 1.5}, 4e9)
	if mach != 0.5 || procs != 0.125 {
		t.Errorf("perGB = %v, %v; want 0.5, 0.125", mach, procs)
	}
	if mach, procs := (costMeter{}).perGB(cpuSample{}, cpuSample{machine: 1, procs: 1}, 1e9); mach != 1 || procs != 0 {
		t.Errorf("perGB without processes = %v, %v; want 1, 0", mach, procs)
	}
	mem, err := memoryOf("x", []int{os.Getpid(), os.Getpid()})
	if err != nil || mem.Processes != 2 || mem.PeakRSSMiB < 1 {
		t.Errorf("memoryOf = %+v, %v", mem, err)
	}
}

func TestSocketOwner(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "wg0.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	if pid, err := socketOwner(sock); err != nil || pid != os.Getpid() {
		t.Errorf("socketOwner = %d, %v; want %d", pid, err, os.Getpid())
	}
	if _, err := socketOwner(filepath.Join(t.TempDir(), "none.sock")); err == nil {
		t.Error("socketOwner of no socket = nil error")
	}
}
