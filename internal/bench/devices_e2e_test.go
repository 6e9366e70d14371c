package bench_test

import (
	"context"
	"flag"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/bench"
)

var (
	devices = flag.String("bench.devices", "", "device variants to compare, separated by ';' (NAME: [KEY=VALUE ...] [FLAGS ...]); "+
		"empty: TestDevices does not run (make bench-wgdev)")
	deviceRounds  = flag.Int("bench.rounds", 3, "rounds of TestDevices")
	deviceSeconds = flag.Int("bench.seconds", 3, "length of each of TestDevices' TCP tests, in seconds")
	deviceStreams = flag.String("bench.streams", "1,4", "parallel TCP streams of TestDevices' tests, comma-separated")
	devicePings   = flag.Int("bench.pings", 100, "idle pings of TestDevices (10 ms apart)")
	deviceLoaded  = flag.Bool("bench.loaded", false, "TestDevices also pings under load")
	deviceDelay   = flag.Duration("bench.delay", 0, "TestDevices also measures TCP with this much added round-trip delay")
	devicePath    = flag.Duration("bench.pathdelay", 0, "TestDevices runs every measurement with this much added to the round trip (the lab's delay line, which passes datagrams on one by one)")
	deviceUDP     = flag.String("bench.udp", "", "offered rates (Mbit/s, comma-separated) at which TestDevices also measures UDP; empty: none")
)

// TestDevices is the A/B comparison of userspace WireGuard devices
// (bench.RunDevices), run by `make bench-wgdev`: it needs root and the
// variants in -bench.devices, and prints the table. It asserts only that
// every variant's tunnel carried every test: timings are not pass/fail.
func TestDevices(t *testing.T) {
	if *devices == "" {
		t.Skip("no -bench.devices: the device comparison runs on demand (make bench-wgdev)")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: the lab creates network namespaces")
	}
	var vs []bench.DeviceVariant
	for _, s := range strings.Split(*devices, ";") {
		v, err := bench.ParseDeviceVariant(s)
		if err != nil {
			t.Fatal(err)
		}
		vs = append(vs, v)
	}
	spec, err := os.ReadFile("../../examples/bridged.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var streams []int
	for _, f := range strings.Split(*deviceStreams, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			t.Fatalf("-bench.streams %q: want positive numbers, comma-separated", *deviceStreams)
		}
		streams = append(streams, n)
	}
	var rates []float64
	for _, f := range strings.Split(*deviceUDP, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		r, err := strconv.ParseFloat(f, 64)
		if err != nil || r <= 0 {
			t.Fatalf("-bench.udp %q: want positive rates in Mbit/s, comma-separated", *deviceUDP)
		}
		rates = append(rates, r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	res, err := bench.RunDevices(ctx, bench.DeviceConfig{SpecYAML: string(spec), Binary: binary, Variants: vs,
		Rounds: *deviceRounds, Transfer: time.Duration(*deviceSeconds) * time.Second, Streams: streams,
		Pings: *devicePings, Loaded: *deviceLoaded, Delay: *deviceDelay, PathDelay: *devicePath, UDPRatesMbps: rates, Progress: testWriter{t}})
	t.Logf("\n%s", bench.DeviceTable(res, streams))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if len(r.Errors) > 0 || len(r.TCP) != len(streams) || len(r.UDP) != len(rates) {
			t.Errorf("%s round %d: %d of %d TCP tests, %d of %d UDP tests, errors %v", r.Variant, r.Round, len(r.TCP), len(streams), len(r.UDP), len(rates), r.Errors)
		}
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
