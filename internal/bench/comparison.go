package bench

// Comparison sets figures of different modes and paths of one run side by
// side: fednet's overlay against the standalone wireguard-go tunnel, and
// the bridged network against the routed one. 0 means "not measured".
type Comparison struct {
	// BridgedRouted1 and BridgedRouted4: the first bridged network's TCP
	// throughput over the routed network's, 1 and 4 streams.
	BridgedRouted1 float64 `json:"tcp_1_bridged_routed"`
	BridgedRouted4 float64 `json:"tcp_4_bridged_routed"`
	// Standalone1 and Standalone4: the routed overlay's TCP throughput
	// over the standalone tunnel's.
	Standalone1 float64 `json:"tcp_1_fednet_standalone"`
	Standalone4 float64 `json:"tcp_4_fednet_standalone"`
	// RTTP50: the routed overlay's idle p50 RTT over the standalone's.
	RTTP50 float64 `json:"rtt_p50_fednet_standalone"`
	// Loaded: RTT under load per mode, fednet against standalone.
	Loaded []LoadedComparison `json:"latency_under_load"`
	// UDP: received rates per mode and offered rate.
	UDP []UDPComparison `json:"udp"`
	// Delay: routed TCP throughput per added delay.
	Delay []DelayComparison `json:"throughput_vs_delay"`
}

// LoadedComparison is one mode's RTT under load.
type LoadedComparison struct {
	Mode               string  `json:"mode"`
	FednetP99Ms        float64 `json:"fednet_p99_ms"`
	StandaloneP99Ms    float64 `json:"standalone_p99_ms"`
	P99Ratio           float64 `json:"p99_fednet_standalone"`
	FednetP50Ms        float64 `json:"fednet_p50_ms"`
	StandaloneP50Ms    float64 `json:"standalone_p50_ms"`
	FednetLossPct      float64 `json:"fednet_loss_percent"`
	StandaloneLossPct  float64 `json:"standalone_loss_percent"`
	FednetLoadMbps     float64 `json:"fednet_load_mbps"`
	StandaloneLoadMbps float64 `json:"standalone_load_mbps"`
}

// UDPComparison is one mode's UDP test at one offered rate.
type UDPComparison struct {
	Mode              string  `json:"mode"`
	OfferedMbps       float64 `json:"offered_mbps"`
	FednetMbps        float64 `json:"fednet_received_mbps"`
	StandaloneMbps    float64 `json:"standalone_received_mbps"`
	Ratio             float64 `json:"received_fednet_standalone"`
	FednetLossPct     float64 `json:"fednet_loss_percent"`
	StandaloneLossPct float64 `json:"standalone_loss_percent"`
}

// DelayComparison is routed TCP throughput at one added delay.
type DelayComparison struct {
	DelayMs        float64 `json:"delay_ms"`
	FednetMbps     float64 `json:"fednet_mbps"`
	StandaloneMbps float64 `json:"standalone_mbps"`
	Ratio          float64 `json:"fednet_standalone"`
}

// compare computes the comparison of a run's modes; the routed mode is
// the first, the first bridged one is used for bridged figures.
func compare(modes []ModeResult) Comparison {
	var c Comparison
	var routed, bridged *ModeResult
	for i := range modes {
		switch m := &modes[i]; {
		case m.Mode == "routed" && routed == nil:
			routed = m
		case m.Mode == "bridged" && bridged == nil:
			bridged = m
		}
	}
	tcp := func(m *ModeResult, path string, streams int) float64 {
		if m == nil {
			return 0
		}
		for _, t := range m.TCP {
			if t.Path == path && t.Streams == streams {
				return t.Mbps
			}
		}
		return 0
	}
	c.BridgedRouted1 = round(Ratio(tcp(bridged, Overlay, 1), tcp(routed, Overlay, 1)), 4)
	c.BridgedRouted4 = round(Ratio(tcp(bridged, Overlay, 4), tcp(routed, Overlay, 4)), 4)
	if routed != nil {
		c.Standalone1, c.Standalone4, c.RTTP50 = routed.Ratios.Standalone1, routed.Ratios.Standalone4, routed.Ratios.StandaloneRTT
		c.Delay = compareDelay(routed.Delay)
	}
	for _, m := range []*ModeResult{routed, bridged} {
		if m == nil {
			continue
		}
		name := modeTitle(*m)
		var fed, std *LoadedResult
		for i := range m.Loaded {
			switch m.Loaded[i].Path {
			case Overlay:
				fed = &m.Loaded[i]
			case Standalone:
				std = &m.Loaded[i]
			}
		}
		if fed != nil && std != nil {
			c.Loaded = append(c.Loaded, LoadedComparison{Mode: name,
				FednetP99Ms: fed.LoadedMs.P99, StandaloneP99Ms: std.LoadedMs.P99, P99Ratio: round(Ratio(fed.LoadedMs.P99, std.LoadedMs.P99), 4),
				FednetP50Ms: fed.LoadedMs.P50, StandaloneP50Ms: std.LoadedMs.P50,
				FednetLossPct: fed.LossPct, StandaloneLossPct: std.LossPct, FednetLoadMbps: fed.LoadMbps, StandaloneLoadMbps: std.LoadMbps})
		}
		for _, u := range m.UDP {
			if u.Path != Overlay {
				continue
			}
			for _, s := range m.UDP {
				if s.Path == Standalone && s.OfferedMbps == u.OfferedMbps {
					c.UDP = append(c.UDP, UDPComparison{Mode: name, OfferedMbps: u.OfferedMbps, FednetMbps: u.Mbps, StandaloneMbps: s.Mbps,
						Ratio: round(Ratio(u.Mbps, s.Mbps), 4), FednetLossPct: u.LossPct, StandaloneLossPct: s.LossPct})
				}
			}
		}
	}
	return c
}

func compareDelay(pts []DelayResult) []DelayComparison {
	var out []DelayComparison
	for _, p := range pts {
		if p.Path != Overlay {
			continue
		}
		for _, s := range pts {
			if s.Path == Standalone && s.DelayMs == p.DelayMs {
				out = append(out, DelayComparison{DelayMs: p.DelayMs, FednetMbps: p.Mbps, StandaloneMbps: s.Mbps, Ratio: round(Ratio(p.Mbps, s.Mbps), 4)})
			}
		}
	}
	return out
}
