package bench

// DefaultSettings are a full run's: a few minutes on a lab. Each TCP
// transfer runs three times on every path in turn and counts with its
// median: single 4-second transfers of the same path moved by ±10 % on
// the 2-core lab machine, as much as the differences measured
// (docs/bench.md, session 9).
func DefaultSettings() Settings {
	return Settings{
		PingCount:      200,
		PingIntervalMs: 10,
		TransferS:      4,
		Streams:        []int{1, 4},
		TCPRounds:      3,
		UDPRatesMbps:   []float64{100, 500, 1000},
		UDPLength:      udpLength,
		OverheadBytes:  200_000_000,
		DelaysMs:       []float64{0, 10, 20, 50, 100, 200},
	}
}

// QuickSettings are for tests and a first look: every measurement, each
// as short as still gives a figure.
func QuickSettings() Settings {
	return Settings{
		PingCount:      20,
		PingIntervalMs: 10,
		TransferS:      1,
		Streams:        []int{1, 4},
		UDPRatesMbps:   []float64{100},
		UDPLength:      udpLength,
		OverheadBytes:  10_000_000,
		DelaysMs:       []float64{0, 50},
	}
}
