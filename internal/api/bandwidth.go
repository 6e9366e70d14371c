package api

// Available-bandwidth estimates through the manager (docs/bandwidth.md):
// an operator POSTs a BandwidthRequest to PathBandwidth of the sending
// gateway; the manager hands a Measurement to that gateway's agent, which
// long-polls PathMeasurements, runs the estimate and PUTs a
// BandwidthResult to PathMeasurement; the manager answers the operator's
// POST with it.
const (
	PathBandwidth    = "/v1/gateways/{name}/bandwidth"         // POST (admin): estimate the link from {name}; waits for the result
	PathMeasurements = "/v1/gateways/{name}/measurements"      // GET ?timeout=30s (the gateway): long poll for a Measurement
	PathMeasurement  = "/v1/gateways/{name}/measurements/{id}" // PUT (the gateway): the result of a measurement
)

// MeasurementBandwidth is the only Measurement kind so far.
const MeasurementBandwidth = "bandwidth"

// BandwidthRequest asks for an estimate of the link from the gateway in
// the path to gateway To.
type BandwidthRequest struct {
	To string `json:"to"`
}

// Measurement is a request the manager relays to an agent.
type Measurement struct {
	ID   string `json:"id"`
	Kind string `json:"kind"`
	// To is the peer gateway at the other end of the link.
	To string `json:"to"`
}

// BandwidthResult is an available-bandwidth estimate of the link From →
// To. Rates are bit/s of the frames the tunnel puts on the underlay.
type BandwidthResult struct {
	From string `json:"from"`
	To   string `json:"to"`
	// LowBps and HighBps bound the available bandwidth; EstimateBps is the
	// middle of the range.
	LowBps      float64 `json:"lowBps"`
	HighBps     float64 `json:"highBps"`
	EstimateBps float64 `json:"estimateBps"`
	// ADRBps is the dispersion rate of the initial packet train.
	ADRBps    float64 `json:"adrBps"`
	Converged bool    `json:"converged"`
	// Bytes and Packets count the probes sent; Seconds is how long the
	// estimate took; Fleets how many rates it tried.
	Bytes   int64   `json:"bytes"`
	Packets int     `json:"packets"`
	Seconds float64 `json:"seconds"`
	Fleets  int     `json:"fleets"`
	// Error, set by the agent instead of the figures, says why it could
	// not estimate.
	Error string `json:"error,omitempty"`
}
