package client

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/fednet/fednet/internal/api"
)

// ProbeBandwidth asks the manager for an available-bandwidth estimate of
// the link from gateway from to gateway to; the manager relays it to
// from's agent and answers when the agent does (within about a minute).
func (c *Client) ProbeBandwidth(ctx context.Context, from, to string) (*api.BandwidthResult, error) {
	var out api.BandwidthResult
	r := request{method: http.MethodPost, path: gatewayPath(api.PathBandwidth, from), body: api.BandwidthRequest{To: to}}
	r.timeout = c.timeout + 90*time.Second
	if _, err := c.do(ctx, r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// NextMeasurement long-polls for a measurement the manager relays to
// gateway; nil without error when none came within timeout.
func (c *Client) NextMeasurement(ctx context.Context, gateway string, timeout time.Duration) (*api.Measurement, error) {
	var out api.Measurement
	q := url.Values{}
	if timeout > 0 {
		q.Set("timeout", formatDuration(timeout))
	}
	r := request{method: http.MethodGet, path: gatewayPath(api.PathMeasurements, gateway), query: q}
	r.timeout = c.timeout + max(timeout, 30*time.Second)
	status, err := c.do(ctx, r, &out)
	if err != nil || status == http.StatusNoContent {
		return nil, err
	}
	return &out, nil
}

// PutMeasurement sends the result of measurement id of gateway.
func (c *Client) PutMeasurement(ctx context.Context, gateway, id string, res api.BandwidthResult) error {
	path := strings.Replace(gatewayPath(api.PathMeasurement, gateway), "{id}", url.PathEscape(id), 1)
	_, err := c.do(ctx, request{method: http.MethodPut, path: path, body: res}, nil)
	return err
}
