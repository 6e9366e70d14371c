package bench

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"flag"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// fakeResults returns results as a lab run of two modes would produce
// them, with made-up but plausible figures.
func fakeResults() *Results {
	samples := func(base float64, n int) []float64 {
		out := make([]float64, n)
		for i := range out {
			out[i] = round(base*(1+0.2*math.Sin(float64(i))), 4)
		}
		return out
	}
	mode := func(name, network string, overlay float64) ModeResult {
		m := ModeResult{Mode: name, Network: network, Paths: []PathInfo{
			{Name: Overlay, From: "aws-h1", To: "azure-h1", Address: "10.2.0.1"},
			{Name: Underlay, From: "aws-gw", To: "azure-gw", Address: "203.0.113.11"},
			{Name: Standalone, From: "aws-h1", To: "azure-h1", Address: "10.2.0.1"},
		}}
		for _, p := range []struct {
			name     string
			rtt, bps float64
			over     float64
		}{{Overlay, 0.7, overlay, 1.12}, {Underlay, 0.08, 10000, 1.06}, {Standalone, 0.65, 1300, 1.11}} {
			s := samples(p.rtt, 50)
			m.RTT = append(m.RTT, RTTResult{Path: p.name, Sent: 50, Received: 50, Ms: Summarize(s), SamplesMs: s})
			m.TCP = append(m.TCP, TCPResult{Path: p.name, Streams: 1, Mbps: p.bps, Seconds: 4},
				TCPResult{Path: p.name, Streams: 4, Mbps: p.bps * 0.9, Seconds: 4})
			for _, rate := range []float64{100, 500, 1000} {
				m.UDP = append(m.UDP, UDPResult{Path: p.name, OfferedMbps: rate, SentMbps: rate, Mbps: math.Min(rate, p.bps*0.8), LossPct: 0.1})
			}
			m.Overhead = append(m.Overhead, OverheadResult{Path: p.name, PayloadBytes: 1000000, WireBytes: int64(p.over * 1e6), WirePackets: 800, Ratio: p.over, Counted: "tx of a and b"})
			l := samples(p.rtt*5, 30)
			m.Loaded = append(m.Loaded, LoadedResult{Path: p.name, IdleMs: Summarize(s), LoadedMs: Summarize(l), LoadMbps: p.bps, SamplesMs: l})
			if name == "routed" {
				for _, d := range []float64{0, 50, 200} {
					m.Delay = append(m.Delay, DelayResult{Path: p.name, DelayMs: d, RTTMs: d + p.rtt, Mbps: p.bps / (1 + d/10)})
				}
			}
		}
		m.Ratios = ratios(m)
		return m
	}
	r := &Results{Schema: Schema, Started: time.Date(2026, 11, 22, 15, 0, 0, 0, time.UTC), DurationS: 200,
		Target:   Target{Kind: "lab", Lab: "bench", Reference: "benchref", Spec: "examples/bridged.yaml", Sites: []string{"aws", "azure"}, WireGuard: "userspace (wireguard-go)"},
		Settings: DefaultSettings(), Notes: []string{"A note."},
		Modes: []ModeResult{mode("routed", "", 1000), mode("bridged", "lan", 300)}}
	r.Ratios = r.Modes[0].Ratios
	return r
}

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	r := fakeResults()
	if err := Write(dir, r); err != nil {
		t.Fatal(err)
	}

	// results.json: the schema's keys, and the ratios as figures.
	b, err := os.ReadFile(filepath.Join(dir, JSONFile))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"schema", "started", "duration_s", "target", "settings", "ratios", "modes"} {
		if _, ok := doc[k]; !ok {
			t.Errorf("results.json has no %q", k)
		}
	}
	ratios, _ := doc["ratios"].(map[string]any)
	for _, k := range []string{"rtt_p50_overlay_underlay", "throughput_1_overlay_underlay", "throughput_4_overlay_underlay",
		"throughput_1_fednet_standalone", "throughput_4_fednet_standalone", "traffic_overhead_overlay", "traffic_overhead_underlay"} {
		if v, ok := ratios[k].(float64); !ok || v <= 0 {
			t.Errorf("results.json ratios.%s = %v, want a positive figure", k, ratios[k])
		}
	}
	modes, _ := doc["modes"].([]any)
	if len(modes) != 2 {
		t.Fatalf("results.json has %d modes, want 2", len(modes))
	}
	for _, m := range modes {
		mm := m.(map[string]any)
		for _, k := range []string{"mode", "paths", "rtt", "tcp", "udp", "overhead", "latency_under_load", "throughput_vs_delay", "ratios"} {
			if _, ok := mm[k]; !ok {
				t.Errorf("mode %v has no %q", mm["mode"], k)
			}
		}
	}
	var back Results
	if err := json.Unmarshal(b, &back); err != nil || back.Ratios != r.Ratios || len(back.Modes[0].RTT[0].SamplesMs) != 50 {
		t.Errorf("results.json does not read back: %v", err)
	}

	// Plots: every kind for routed, all but the delay sweep for bridged;
	// each a valid PNG and a valid SVG; index.html shows every one.
	page, err := os.ReadFile(filepath.Join(dir, HTMLFile))
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, mode := range []string{"routed", "bridged-lan"} {
		for _, kind := range []string{"rtt-cdf", "rtt-series", "rtt-box", "throughput", "udp", "throughput-delay"} {
			if mode == "bridged-lan" && kind == "throughput-delay" {
				continue
			}
			want = append(want, mode+"-"+kind+".svg", mode+"-"+kind+".png")
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		if ext := filepath.Ext(e.Name()); ext == ".svg" || ext == ".png" {
			got = append(got, e.Name())
		}
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("plots written:\n%v\nwant\n%v", got, want)
	}
	for _, name := range got {
		checkImage(t, filepath.Join(dir, name))
		if !bytes.Contains(page, []byte(`"`+name+`"`)) {
			t.Errorf("index.html does not reference %s", name)
		}
	}
	for _, ref := range []string{JSONFile, MDFile, "<table>", "TCP 1 stream overlay / underlay"} {
		if !bytes.Contains(page, []byte(ref)) {
			t.Errorf("index.html lacks %q", ref)
		}
	}

	// results.md is golden.
	md, err := os.ReadFile(filepath.Join(dir, MDFile))
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "results.md")
	if *update {
		if err := os.WriteFile(golden, md, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	wantMD, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(md, wantMD) {
		t.Errorf("results.md differs from %s (run go test -update to accept):\n%s", golden, md)
	}
}

// checkImage fails unless path is a PNG that decodes to a non-empty image
// or an SVG document whose root element is svg.
func checkImage(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	switch filepath.Ext(path) {
	case ".png":
		img, err := png.Decode(f)
		if err != nil {
			t.Errorf("%s: %v", path, err)
			return
		}
		if b := img.Bounds(); b.Dx() < 100 || b.Dy() < 100 {
			t.Errorf("%s: %v is too small", path, b)
		}
	case ".svg":
		d := xml.NewDecoder(f)
		for {
			tok, err := d.Token()
			if err != nil {
				t.Errorf("%s: no svg element: %v", path, err)
				return
			}
			if se, ok := tok.(xml.StartElement); ok {
				if se.Name.Local != "svg" {
					t.Errorf("%s: root element %s, want svg", path, se.Name.Local)
				}
				break
			}
		}
		// The rest must be well-formed too.
		for {
			if _, err := d.Token(); err != nil {
				if err.Error() != "EOF" {
					t.Errorf("%s: %v", path, err)
				}
				return
			}
		}
	}
}

func TestHeadline(t *testing.T) {
	h := Headline(fakeResults())
	for _, want := range []string{"routed: RTT p50 overlay/underlay", "bridged (lan):", "traffic overhead 1.1200"} {
		if !strings.Contains(h, want) {
			t.Errorf("headline lacks %q:\n%s", want, h)
		}
	}
}

func TestReferenceName(t *testing.T) {
	for in, want := range map[string]string{"bench": "benchref", "demo": "demoref", "abcdefghijklmnop": "abcdefghijklmref"} {
		if got := referenceName(in); got != want || len(got) > 16 {
			t.Errorf("referenceName(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestRoundsColumns: results.md shows each round's TCP rate and each
// round's p99 of the latency under load when they ran in rounds, and no
// such columns when they ran once.
func TestRoundsColumns(t *testing.T) {
	for _, rounds := range []bool{false, true} {
		r := fakeResults()
		if rounds {
			for i := range r.Modes {
				for j := range r.Modes[i].Loaded {
					r.Modes[i].Loaded[j].RoundsP99Ms = []float64{12.34, 5.67, 8.9}
				}
				for j := range r.Modes[i].TCP {
					r.Modes[i].TCP[j].RoundsMbps = []float64{1520.4, 1834, 1513.6}
				}
			}
		}
		dir := t.TempDir()
		if err := Write(dir, r); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(dir, MDFile))
		if err != nil {
			t.Fatal(err)
		}
		md := string(b)
		loaded := strings.Contains(md, "| p99 of each round |") && strings.Contains(md, "| 12.3 / 5.7 / 8.9 |") &&
			strings.Contains(md, "latency under load (ms; ping during a bulk TCP transfer), every round's pings together")
		tcp := strings.Contains(md, "| Mbit/s of each round |") && strings.Contains(md, "| 1520 / 1834 / 1514 |") &&
			strings.Contains(md, "TCP throughput (iperf3), the median of each path's rounds")
		if loaded != rounds || tcp != rounds {
			t.Errorf("rounds %v: results.md shows the rounds' p99: %v, the rounds' TCP rates: %v\n%s", rounds, loaded, tcp, md)
		}
	}
}
