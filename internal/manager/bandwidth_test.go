package manager

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/fednet/fednet/internal/api"
)

// TestBandwidthRelay: an operator's bandwidth request reaches the sending
// gateway's agent through its long poll, and the agent's result comes
// back as the answer; bad requests and other gateways' credentials are
// refused.
func TestBandwidthRelay(t *testing.T) {
	h := newHarness(t)
	h.putSpec(threeSites(t))
	aws, _ := h.enroll("aws-gw")
	azure, _ := h.enroll("azure-gw")
	bw := gwPath(api.PathBandwidth, "aws-gw")
	meas := gwPath(api.PathMeasurements, "aws-gw")

	// Nothing pending: the long poll times out with 204.
	if a := h.do(req{method: "GET", path: meas + "?timeout=0s", token: aws}); a.status != http.StatusNoContent {
		t.Fatalf("empty long poll: %d %+v", a.status, a.err)
	}
	// Another gateway may not read aws-gw's requests.
	if a := h.do(req{method: "GET", path: meas + "?timeout=0s", token: azure}); a.status != http.StatusForbidden {
		t.Errorf("azure-gw reading aws-gw's measurements: %d, want 403", a.status)
	}
	if a := h.do(req{method: "POST", path: bw, token: h.m.AdminToken(), body: api.BandwidthRequest{To: "nowhere"}}); a.status != http.StatusBadRequest || a.err.Field != "to" {
		t.Errorf("a link to an unknown gateway: %d %+v, want 400 on field to", a.status, a.err)
	}

	type result struct {
		a   answer
		err error
	}
	done := make(chan result, 1)
	go func() {
		a, err := h.try(req{method: "POST", path: bw, token: h.m.AdminToken(), body: api.BandwidthRequest{To: "azure-gw"}})
		done <- result{a, err}
	}()
	var m api.Measurement
	a := h.ok(req{method: "GET", path: meas + "?timeout=10s", token: aws}, &m)
	if a.status != http.StatusOK || m.Kind != api.MeasurementBandwidth || m.To != "azure-gw" || m.ID == "" {
		t.Fatalf("long poll answer %d %+v", a.status, m)
	}
	put := strings.Replace(gwPath(api.PathMeasurement, "aws-gw"), "{id}", m.ID, 1)
	h.ok(req{method: "PUT", path: put, token: aws, body: api.BandwidthResult{To: "azure-gw", LowBps: 90e6, HighBps: 100e6, EstimateBps: 95e6, Bytes: 1234, Converged: true}}, nil)
	r := <-done
	if r.err != nil || r.a.status != http.StatusOK {
		t.Fatalf("bandwidth request: %v %d %+v", r.err, r.a.status, r.a.err)
	}
	var res api.BandwidthResult
	if err := json.Unmarshal(r.a.body, &res); err != nil {
		t.Fatal(err)
	}
	if res.From != "aws-gw" || res.To != "azure-gw" || res.EstimateBps != 95e6 || res.Bytes != 1234 {
		t.Errorf("result %+v", res)
	}
	// The measurement is answered: a second answer finds nothing.
	if a := h.do(req{method: "PUT", path: put, token: aws, body: api.BandwidthResult{}}); a.status != http.StatusNotFound {
		t.Errorf("answering twice: %d, want 404", a.status)
	}

	// An agent that could not measure: the operator gets its reason.
	go func() {
		a, err := h.try(req{method: "POST", path: bw, token: h.m.AdminToken(), body: api.BandwidthRequest{To: "azure-gw"}})
		done <- result{a, err}
	}()
	h.ok(req{method: "GET", path: meas + "?timeout=10s", token: aws}, &m)
	put = strings.Replace(gwPath(api.PathMeasurement, "aws-gw"), "{id}", m.ID, 1)
	h.ok(req{method: "PUT", path: put, token: aws, body: api.BandwidthResult{Error: "no responder"}}, nil)
	if r := <-done; r.err != nil || r.a.status != http.StatusConflict || !strings.Contains(r.a.err.Message, "no responder") {
		t.Errorf("failed measurement: %v %d %+v", r.err, r.a.status, r.a.err)
	}
}
