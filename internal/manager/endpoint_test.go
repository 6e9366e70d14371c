package manager

import (
	"slices"
	"strings"
	"testing"

	"github.com/fednet/fednet/internal/api"
)

// TestAnnouncedEndpoint: the endpoint an agent announces at enrollment
// (fednet agent --endpoint) is kept and shown, but plans use the spec's;
// when the two differ the manager says so in its log.
func TestAnnouncedEndpoint(t *testing.T) {
	h := newHarness(t)
	h.putSpec(threeSites(t))
	_, secret := h.token("aws-gw")
	h.ok(req{method: "POST", path: api.PathEnroll, token: secret, body: api.EnrollRequest{PublicKey: randomKey(t), Endpoint: "192.0.2.99:51820"}}, nil)
	_, secret = h.token("azure-gw")
	h.ok(req{method: "POST", path: api.PathEnroll, token: secret, body: api.EnrollRequest{PublicKey: randomKey(t), Endpoint: "203.0.113.20:51820"}}, nil)

	h.log.mu.Lock()
	lines := slices.Clone(h.log.lines)
	h.log.mu.Unlock()
	warned := func(gw string) bool {
		return slices.ContainsFunc(lines, func(l string) bool {
			return strings.HasPrefix(l, "warning: gateway "+gw+" announced the endpoint") && strings.Contains(l, "plans use the spec's")
		})
	}
	if !warned("aws-gw") {
		t.Errorf("no warning for aws-gw, which announced another endpoint than the spec's; log:\n%s", strings.Join(lines, "\n"))
	}
	if warned("azure-gw") {
		t.Error("a warning for azure-gw, which announced the spec's endpoint")
	}
	// The peers' plans carry the spec's endpoint.
	p := h.plan("azure-gw")
	for _, peer := range p.Plan.Peers {
		if peer.Gateway == "aws-gw" && peer.Endpoint != "198.51.100.10:51820" {
			t.Errorf("azure-gw reaches aws-gw at %q, want the spec's 198.51.100.10:51820", peer.Endpoint)
		}
	}
}
