package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/plandelta"
)

// GetSpec returns the current spec and its revision.
func (c *Client) GetSpec(ctx context.Context) (*api.SpecResponse, error) {
	var out api.SpecResponse
	if _, err := c.do(ctx, request{method: http.MethodGet, path: api.PathSpec}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// PutSpec sends a spec document. With dryRun the manager validates it and
// returns the diff without storing anything; otherwise a changed spec
// becomes a new revision (SpecResponse.Changed says whether it did). A
// spec that fails validation is a *Error with status 422 and every
// problem.
func (c *Client) PutSpec(ctx context.Context, yaml string, dryRun bool) (*api.SpecResponse, error) {
	var q url.Values
	if dryRun {
		q = url.Values{"dryRun": {"true"}}
	}
	var out api.SpecResponse
	r := request{method: http.MethodPut, path: api.PathSpec, query: q, body: api.SpecRequest{YAML: yaml}}
	if _, err := c.do(ctx, r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// PutSpecIf stores a spec document as the next revision only if revision
// base is still the current one (If-Match; 0: no spec yet), the revision a
// dry run's diff was computed from (SpecResponse.BaseRevision). When the
// spec moved on meanwhile it stores nothing and returns a *Error with
// status 412 (api.CodePreconditionFailed) whose Revision is the current
// revision. A spec equal to the current one is no change (Changed false)
// whatever base is. The answer has no diff (Prefer: return=minimal): the
// dry run's is the one to show.
func (c *Client) PutSpecIf(ctx context.Context, yaml string, base int) (*api.SpecResponse, error) {
	var out api.SpecResponse
	r := request{method: http.MethodPut, path: api.PathSpec, body: api.SpecRequest{YAML: yaml},
		header: http.Header{"If-Match": {strconv.Quote(strconv.Itoa(base))}, api.HeaderPrefer: {api.PreferMinimal}}}
	if _, err := c.do(ctx, r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Revisions lists the stored spec revisions.
func (c *Client) Revisions(ctx context.Context) ([]api.Revision, error) {
	var out []api.Revision
	_, err := c.do(ctx, request{method: http.MethodGet, path: api.PathRevisions}, &out)
	return out, err
}

// CreateToken creates a one-time join token for gateway; ttl 0 takes the
// manager's default. The returned Token.Token is the only copy of the
// secret-carrying string.
func (c *Client) CreateToken(ctx context.Context, gateway string, ttl time.Duration) (*api.Token, error) {
	req := api.TokenRequest{Gateway: gateway}
	if ttl > 0 {
		req.TTL = ttl.String()
	}
	var out api.Token
	if _, err := c.do(ctx, request{method: http.MethodPost, path: api.PathTokens, body: req}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// CreateHostToken creates a one-time host token: it lets one host of site
// join the bridged network through a neighbor tunnel (JoinHost).
func (c *Client) CreateHostToken(ctx context.Context, site, network string, ttl time.Duration) (*api.Token, error) {
	return c.CreateHostTokenReplacing(ctx, site, network, "", ttl)
}

// CreateHostTokenReplacing is CreateHostToken for a token that may also
// replace the joined host named replaces (a join under a name that has
// joined is refused otherwise); "" makes a plain host token.
func (c *Client) CreateHostTokenReplacing(ctx context.Context, site, network, replaces string, ttl time.Duration) (*api.Token, error) {
	req := api.TokenRequest{Site: site, Network: network, Replaces: replaces}
	if ttl > 0 {
		req.TTL = ttl.String()
	}
	var out api.Token
	if _, err := c.do(ctx, request{method: http.MethodPost, path: api.PathTokens, body: req}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Tokens lists the join tokens (without their secrets).
func (c *Client) Tokens(ctx context.Context) ([]api.Token, error) {
	var out []api.Token
	_, err := c.do(ctx, request{method: http.MethodGet, path: api.PathTokens}, &out)
	return out, err
}

// RevokeToken revokes the join token with the given id.
func (c *Client) RevokeToken(ctx context.Context, id string) error {
	p := strings.Replace(api.PathToken, "{id}", url.PathEscape(id), 1)
	_, err := c.do(ctx, request{method: http.MethodDelete, path: p}, nil)
	return err
}

// Enroll enrolls a gateway with a join token's secret (not the client's
// token) and returns its credential. A used, expired or revoked token is a
// *Error (409 or 401).
func (c *Client) Enroll(ctx context.Context, secret string, req api.EnrollRequest) (*api.EnrollResponse, error) {
	if secret == "" {
		return nil, errors.New("enrolling: the join token secret is empty")
	}
	var out api.EnrollResponse
	if _, err := c.do(ctx, request{method: http.MethodPost, path: api.PathEnroll, body: req, token: secret}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// WatchPlan long-polls the plan of gateway. It returns the plan and
// changed=true as soon as the gateway's plan generation is above after,
// or changed=false (and a nil plan) when timeout passes first (the manager
// answers 204). timeout 0 takes the manager's default. The request is
// bounded by timeout plus the client's timeout.
//
// When the client returned the plan of generation after before (to this
// caller or another), it asks for a delta from it (unless Config.NoDeltas)
// and returns the whole plan it rebuilds; if that does not match the
// manager's sum it asks again for the whole plan. Plans come with their
// Local (plan.Gateway.Local) unless Config.NoLocal; a manager that
// predates Local sends none.
func (c *Client) WatchPlan(ctx context.Context, gateway string, after int64, timeout time.Duration) (resp *api.PlanResponse, changed bool, err error) {
	c.mu.Lock()
	held, ok := c.plans[gateway]
	c.mu.Unlock()
	delta := ok && held.generation == after && !c.noDeltas
	var out api.PlanResponse
	// Deltas with sums of version 2 to 4 (plandelta.SumVersion), which
	// are checked in the size of the delta: "2" first, the value a
	// manager that predates version 3 reads; a manager sends those of the
	// version it stores when named here; one that does not know the
	// header sends sums of version 1.
	features := http.Header{plandelta.SumHeader: sumVersions()}
	if !c.noLocal {
		features.Set(api.HeaderPlanFeatures, strings.Join([]string{api.PlanFeatureLocal, api.PlanFeaturePatch, api.PlanFeatureRemotes, api.PlanFeaturePeerRemotes, api.PlanFeatureCompact}, ","))
	}
	changed, err = c.watch(ctx, gatewayPath(api.PathPlan, gateway), after, timeout, delta, features, &out)
	if !changed || err != nil {
		return nil, false, err
	}
	if out.Delta != nil {
		if !delta || out.Base != after {
			return nil, false, fmt.Errorf("plan of %s: the manager sent a delta from generation %d, not from the plan of generation %d held here", gateway, out.Base, after)
		}
		var digest *plandelta.Digest
		var g plan.Gateway
		var err error
		if plandelta.KnownSumVersion(out.Delta.SumVersion) {
			if held.digest == nil && plandelta.Keyed(held.plan) {
				d := plandelta.NewDigest(held.plan) // a plan rebuilt from a delta of version 1
				held.digest = &d
			}
			if held.digest == nil {
				err = fmt.Errorf("%w: the plan held is not sorted by key", plandelta.ErrMismatch)
			} else {
				var d plandelta.Digest
				g, d, err = plandelta.ApplyDigest(held.plan, *held.digest, *out.Delta)
				digest = &d
			}
		} else {
			g, err = plandelta.Apply(held.plan, *out.Delta)
		}
		if err != nil {
			// Not the base the manager meant: take the whole plan.
			c.forget(gateway)
			return c.WatchPlan(ctx, gateway, after, timeout)
		}
		out.Plan, out.Delta, out.Base = g, nil, 0
		held.digest = digest
	} else {
		held.digest = nil
		if !c.noDeltas && plandelta.Keyed(out.Plan) {
			// The digest the next delta is checked against, made now
			// rather than when that delta comes: hashing a whole plan
			// (every site of its Local) is the size of the plan, and the
			// agent just took one; the next change then costs the size of
			// its delta.
			d := plandelta.NewDigest(out.Plan)
			held.digest = &d
		}
	}
	c.mu.Lock()
	c.plans[gateway] = heldPlan{generation: out.Generation, plan: out.Plan, digest: held.digest}
	c.mu.Unlock()
	return &out, true, nil
}

// forget drops the plan held for gateway.
func (c *Client) forget(gateway string) {
	c.mu.Lock()
	delete(c.plans, gateway)
	c.mu.Unlock()
}

// watch long-polls path with ?after and ?timeout and the request header
// given, decoding a 200 answer into out; changed is false when the manager
// answered 204.
func (c *Client) watch(ctx context.Context, path string, after int64, timeout time.Duration, delta bool, header http.Header, out any) (changed bool, err error) {
	q := url.Values{"after": {strconv.FormatInt(after, 10)}}
	if delta {
		q.Set("delta", "true")
	}
	if timeout > 0 {
		q.Set("timeout", formatDuration(timeout))
	}
	r := request{method: http.MethodGet, path: path, query: q, header: header}
	r.timeout = c.timeout + max(timeout, 30*time.Second)
	status, err := c.do(ctx, r, out)
	if err != nil {
		return false, err
	}
	return status != http.StatusNoContent, nil
}

// PutStatus sends a gateway's status report.
func (c *Client) PutStatus(ctx context.Context, gateway string, report api.StatusReport) error {
	_, err := c.do(ctx, request{method: http.MethodPut, path: gatewayPath(api.PathStatus, gateway), body: report}, nil)
	return err
}

// PutKey sends a gateway's new public key, answering rotation request
// req.Rotation.
func (c *Client) PutKey(ctx context.Context, gateway string, req api.KeyRequest) error {
	_, err := c.do(ctx, request{method: http.MethodPut, path: gatewayPath(api.PathKey, gateway), body: req}, nil)
	return err
}

// Rotate asks gateway's agent to roll its WireGuard key.
func (c *Client) Rotate(ctx context.Context, gateway string) error {
	_, err := c.do(ctx, request{method: http.MethodPost, path: gatewayPath(api.PathRotate, gateway)}, nil)
	return err
}

// Activate makes gateway its site's active gateway (the operator's
// choice, fednet gateway activate) and returns it as the manager has it.
func (c *Client) Activate(ctx context.Context, gateway string) (api.Gateway, error) {
	var out api.Gateway
	_, err := c.do(ctx, request{method: http.MethodPost, path: gatewayPath(api.PathActivate, gateway)}, &out)
	return out, err
}

// RemoveGateway revokes gateway: it leaves every plan and its credential
// is refused from then on.
func (c *Client) RemoveGateway(ctx context.Context, gateway string) error {
	_, err := c.do(ctx, request{method: http.MethodDelete, path: gatewayPath(api.PathGateway, gateway)}, nil)
	return err
}

// Gateways lists the gateways.
func (c *Client) Gateways(ctx context.Context) ([]api.Gateway, error) {
	var out []api.Gateway
	_, err := c.do(ctx, request{method: http.MethodGet, path: api.PathGateways}, &out)
	return out, err
}

// Gateway returns one gateway.
func (c *Client) Gateway(ctx context.Context, name string) (*api.Gateway, error) {
	var out api.Gateway
	if _, err := c.do(ctx, request{method: http.MethodGet, path: gatewayPath(api.PathGateway, name)}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Sites lists the sites of the current spec.
func (c *Client) Sites(ctx context.Context) ([]api.Site, error) {
	var out []api.Site
	_, err := c.do(ctx, request{method: http.MethodGet, path: api.PathSites}, &out)
	return out, err
}

// Links lists the links as their gateways report them.
func (c *Client) Links(ctx context.Context) ([]api.Link, error) {
	var out []api.Link
	_, err := c.do(ctx, request{method: http.MethodGet, path: api.PathLinks}, &out)
	return out, err
}

// Networks lists the networks of the current spec.
func (c *Client) Networks(ctx context.Context) ([]api.Network, error) {
	var out []api.Network
	_, err := c.do(ctx, request{method: http.MethodGet, path: api.PathNetworks}, &out)
	return out, err
}

// Overview returns the one-screen status of the federation.
func (c *Client) Overview(ctx context.Context) (*api.Overview, error) {
	var out api.Overview
	if _, err := c.do(ctx, request{method: http.MethodGet, path: api.PathFederation}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// JoinHost joins a host with a host token's secret (not the client's
// token): it returns the host's credential and its tunnel.
func (c *Client) JoinHost(ctx context.Context, secret string, req api.HostJoinRequest) (*api.HostJoinResponse, error) {
	if secret == "" {
		return nil, errors.New("joining: the host token secret is empty")
	}
	var out api.HostJoinResponse
	if _, err := c.do(ctx, request{method: http.MethodPost, path: api.PathHosts, body: req, token: secret}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// WatchHostTunnel long-polls the tunnel of host (with the host's
// credential), like WatchPlan.
func (c *Client) WatchHostTunnel(ctx context.Context, host string, after int64, timeout time.Duration) (resp *api.HostTunnelResponse, changed bool, err error) {
	var out api.HostTunnelResponse
	if changed, err = c.watch(ctx, gatewayPath(api.PathHostTunnel, host), after, timeout, false, nil, &out); !changed {
		return nil, false, err
	}
	return &out, true, nil
}

// LeaveHost takes host out (its own credential or the admin token).
func (c *Client) LeaveHost(ctx context.Context, host string) error {
	_, err := c.do(ctx, request{method: http.MethodDelete, path: gatewayPath(api.PathHost, host)}, nil)
	return err
}

// Hosts lists the joined hosts (admin).
func (c *Client) Hosts(ctx context.Context) ([]api.Host, error) {
	var out []api.Host
	_, err := c.do(ctx, request{method: http.MethodGet, path: api.PathHosts}, &out)
	return out, err
}

// sumVersions are the sum versions a plan watch says it checks: 2 to
// plandelta.SumVersion.
func sumVersions() []string {
	var out []string
	for v := 2; plandelta.KnownSumVersion(v); v++ {
		out = append(out, strconv.Itoa(v))
	}
	return out
}
