package bench

import (
	"time"

	"github.com/fednet/fednet/internal/backend"
)

// Schema names the version of the results.json layout.
const Schema = "fednet-bench/v1"

// Path names, the same in every mode.
const (
	// Overlay is host to host across sites through the gateways' tunnel.
	Overlay = "overlay"
	// Underlay is gateway to gateway between public addresses, no tunnel.
	Underlay = "underlay"
	// Standalone is host to host through a plain wireguard-go tunnel that
	// fednet did not set up (a reference lab of the same two sites).
	Standalone = "standalone"
)

// Results is everything one bench run measured: results.json.
type Results struct {
	Schema    string    `json:"schema"`
	Started   time.Time `json:"started"`
	DurationS float64   `json:"duration_s"`
	Target    Target    `json:"target"`
	Settings  Settings  `json:"settings"`
	// Ratios are the headline figures: those of the routed mode.
	Ratios Ratios `json:"ratios"`
	// Comparison sets figures of the modes side by side: fednet against
	// the standalone tunnel, bridged against routed.
	Comparison Comparison   `json:"comparison"`
	Modes      []ModeResult `json:"modes"`
	// Notes say what was not measured and why, and how to read figures.
	Notes []string `json:"notes,omitempty"`
}

// Target says what was measured.
type Target struct {
	// Kind is "lab" or "live".
	Kind string `json:"kind"`
	Lab  string `json:"lab,omitempty"`
	// Reference is the lab holding the underlay and standalone paths.
	Reference string   `json:"reference_lab,omitempty"`
	Spec      string   `json:"spec,omitempty"`
	Sites     []string `json:"sites,omitempty"`
	WireGuard string   `json:"wireguard,omitempty"`
	Quick     bool     `json:"quick"`
}

// Settings are the run's parameters.
type Settings struct {
	PingCount      int     `json:"ping_count"`
	PingIntervalMs float64 `json:"ping_interval_ms"`
	TransferS      float64 `json:"transfer_s"`
	Streams        []int   `json:"streams"`
	// TCPRounds is how many times each TCP transfer runs on every path
	// in turn; the median of each path's rounds is its result (0 or 1:
	// once). The latency under load runs as many rounds, its pings
	// pooled.
	TCPRounds     int       `json:"tcp_rounds,omitempty"`
	UDPRatesMbps  []float64 `json:"udp_rates_mbps"`
	UDPLength     int       `json:"udp_length"`
	OverheadBytes int64     `json:"overhead_bytes"`
	DelaysMs      []float64 `json:"delays_ms"`
}

// PathInfo says where a path runs.
type PathInfo struct {
	Name    string `json:"name"`
	From    string `json:"from"`
	To      string `json:"to"`
	Address string `json:"address"`
}

// ModeResult holds the measurements of one network mode.
type ModeResult struct {
	// Mode is "routed", "bridged" or "tcp443" (routed with the second
	// site's UDP blocked, its link on the TCP fallback).
	Mode string `json:"mode"`
	// Backend and Transport are the tunnel backend and transport of the
	// link the mode's overlay path crosses (wireguard/udp,
	// wireguard/tcp443, ipsec); empty in results from before they were
	// recorded and in live runs.
	Backend   backend.Name      `json:"backend,omitempty"`
	Transport backend.Transport `json:"transport,omitempty"`
	// Network is the bridged network measured (bridged mode).
	Network  string           `json:"network,omitempty"`
	Paths    []PathInfo       `json:"paths"`
	RTT      []RTTResult      `json:"rtt"`
	TCP      []TCPResult      `json:"tcp"`
	UDP      []UDPResult      `json:"udp"`
	Overhead []OverheadResult `json:"overhead"`
	Loaded   []LoadedResult   `json:"latency_under_load"`
	Delay    []DelayResult    `json:"throughput_vs_delay"`
	Memory   []MemoryResult   `json:"wgdev_memory,omitempty"`
	Ratios   Ratios           `json:"ratios"`
	Errors   []string         `json:"errors,omitempty"`
}

// RTTResult is one path's ping series.
type RTTResult struct {
	Path     string  `json:"path"`
	Sent     int     `json:"sent"`
	Received int     `json:"received"`
	LossPct  float64 `json:"loss_percent"`
	Ms       Summary `json:"ms"`
	// SamplesMs are the round-trip times in arrival order (the time series).
	SamplesMs []float64 `json:"samples_ms"`
}

// TCPResult is one iperf3 TCP run.
type TCPResult struct {
	Path        string  `json:"path"`
	Streams     int     `json:"streams"`
	Mbps        float64 `json:"mbps"`
	Retransmits int     `json:"retransmits"`
	Seconds     float64 `json:"seconds"`
	// RoundsMbps, when the transfer ran in several rounds
	// (Settings.TCPRounds), holds every round's rate in the order they
	// ran; the result is the round with the median rate.
	RoundsMbps []float64 `json:"rounds_mbps,omitempty"`
	Cost
}

// Cost is what a transfer cost in CPU time, per gigabyte received; 0:
// not measured.
type Cost struct {
	// CPUSecondsPerGB is the busy time of all of the machine's CPUs
	// (kernel included, and whatever else ran meanwhile).
	CPUSecondsPerGB float64 `json:"cpu_s_per_gb,omitempty"`
	// WgdevCPUSecondsPerGB is the user and system time of the path's
	// userspace WireGuard processes (both ends; none on the underlay).
	WgdevCPUSecondsPerGB float64 `json:"wgdev_cpu_s_per_gb,omitempty"`
}

// MemoryResult is the peak resident memory (VmHWM) of a path's userspace
// WireGuard processes, the largest of them, at the end of the mode.
type MemoryResult struct {
	Path       string  `json:"path"`
	PeakRSSMiB float64 `json:"peak_rss_mib"`
	Processes  int     `json:"processes"`
}

// UDPResult is one iperf3 UDP run at an offered rate.
type UDPResult struct {
	Path        string  `json:"path"`
	OfferedMbps float64 `json:"offered_mbps"`
	SentMbps    float64 `json:"sent_mbps"`
	Mbps        float64 `json:"received_mbps"`
	LossPct     float64 `json:"loss_percent"`
	JitterMs    float64 `json:"jitter_ms"`
	Cost
}

// OverheadResult compares the bytes on the wire with the payload of a
// fixed-size TCP transfer (NetFed's Table 2).
type OverheadResult struct {
	Path         string `json:"path"`
	PayloadBytes int64  `json:"payload_bytes"`
	// WireBytes and WirePackets count Ethernet frames sent by both ends'
	// public interfaces during the transfer (data one way, ACKs back).
	WireBytes   int64   `json:"wire_bytes"`
	WirePackets int64   `json:"wire_packets"`
	Ratio       float64 `json:"ratio"`
	// Counted says where the counters were read.
	Counted string `json:"counted"`
}

// LoadedResult is the round-trip time during a bulk TCP transfer on the
// same path (NetFed's Table 3), beside the idle figures. Over several
// rounds (Settings.TCPRounds), LoadedMs, LossPct and SamplesMs are of
// every round's pings together, LoadMbps the rounds' median rate, and
// RoundsP99Ms each round's own p99 in the order they ran.
type LoadedResult struct {
	Path        string    `json:"path"`
	IdleMs      Summary   `json:"idle_ms"`
	LoadedMs    Summary   `json:"loaded_ms"`
	LoadMbps    float64   `json:"load_mbps"`
	LossPct     float64   `json:"loss_percent"`
	SamplesMs   []float64 `json:"samples_ms"`
	RoundsP99Ms []float64 `json:"rounds_p99_ms,omitempty"`

	// sent and received count the pings (for pooling rounds).
	sent, received int
}

// DelayResult is TCP throughput at one added round-trip delay (seed 002),
// added on the first site's internet link (half each way).
type DelayResult struct {
	Path    string  `json:"path"`
	DelayMs float64 `json:"delay_ms"`
	// RTTMs is the measured mean round-trip time at that delay (5 pings).
	RTTMs float64 `json:"rtt_ms"`
	Mbps  float64 `json:"mbps"`
}

// Ratios are overlay/underlay, fednet/standalone and wire/payload
// figures; 0 means "not measured".
type Ratios struct {
	// RTTP50 and RTTMean: overlay over underlay round-trip time (>1: the
	// overlay is slower).
	RTTP50  float64 `json:"rtt_p50_overlay_underlay"`
	RTTMean float64 `json:"rtt_mean_overlay_underlay"`
	// Throughput1 and Throughput4: overlay over underlay TCP throughput
	// with 1 and 4 streams (<1: the overlay is slower).
	Throughput1 float64 `json:"throughput_1_overlay_underlay"`
	Throughput4 float64 `json:"throughput_4_overlay_underlay"`
	// Standalone1 and Standalone4: fednet's overlay over a plain
	// wireguard-go tunnel on the same machine, 1 and 4 streams.
	Standalone1 float64 `json:"throughput_1_fednet_standalone"`
	Standalone4 float64 `json:"throughput_4_fednet_standalone"`
	// StandaloneRTT: fednet's overlay p50 RTT over the standalone tunnel's.
	StandaloneRTT float64 `json:"rtt_p50_fednet_standalone"`
	// Overhead is the overlay's wire bytes over payload bytes;
	// OverheadUnderlay the same for TCP directly between the gateways;
	// OverheadRelative is their quotient (what the tunnel adds).
	Overhead         float64 `json:"traffic_overhead_overlay"`
	OverheadUnderlay float64 `json:"traffic_overhead_underlay"`
	OverheadRelative float64 `json:"traffic_overhead_overlay_underlay"`
	// LoadedRTT is the overlay's p50 RTT under load over its idle p50.
	LoadedRTT float64 `json:"rtt_p50_loaded_idle_overlay"`
}
