package manager

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/plan"
)

// neighborsSpec is examples/neighbors.yaml: site aws-eu (10.1.0.0/24,
// gateway aws-gw) drops unknown MACs; bridged network lan over all three
// sites; routed network apps.
func neighborsSpec(t *testing.T) string { return example(t, "neighbors.yaml") }

// hostToken makes a host token for site and network (that may replace
// the host named by replaces, if any) and returns its secret.
func (h *harness) hostToken(site, network string, replaces ...string) string {
	h.t.Helper()
	var tok api.Token
	req0 := api.TokenRequest{Site: site, Network: network}
	if len(replaces) > 0 {
		req0.Replaces = replaces[0]
	}
	h.ok(req{method: "POST", path: api.PathTokens, body: req0}, &tok)
	if tok.Site != site || tok.Network != network || tok.Gateway != "" || tok.Replaces != req0.Replaces {
		h.t.Fatalf("host token %+v", tok)
	}
	jt, err := api.ParseJoinToken(tok.Token)
	if err != nil {
		h.t.Fatal(err)
	}
	return jt.Secret
}

func (h *harness) join(name, address string) api.HostJoinResponse {
	h.t.Helper()
	var out api.HostJoinResponse
	h.ok(req{method: "POST", path: api.PathHosts, token: h.hostToken("aws-eu", "lan"),
		body: api.HostJoinRequest{Name: name, Address: netip.MustParseAddr(address)}}, &out)
	return out
}

// TestHostsJoinWatchLeave: joined hosts get distinct, stable slots and
// appear in their gateway's plan (tunnel and firewall); the tunnel watch
// answers at once, then on a change; leaving frees the slot and the
// credential stops working.
func TestHostsJoinWatchLeave(t *testing.T) {
	h := newHarness(t)
	h.putSpec(neighborsSpec(t))
	web := h.join("web1", "10.1.0.10")
	db := h.join("db1", "10.1.0.11")
	if web.Tunnel.UDPPort != 4790 || db.Tunnel.UDPPort != 4791 || web.Credential == "" {
		t.Fatalf("joins: %+v %+v; want ports 4790, 4791", web, db)
	}
	want := plan.HostTunnel{Host: "web1", Network: "lan", VNI: 200, Device: "fvx200", Local: netip.MustParseAddr("10.1.0.10"),
		Remote: netip.MustParseAddr("10.1.0.254"), Gateway: "aws-gw", UDPPort: 4790}
	got := web.Tunnel
	got.MTU, got.MTUReason = 0, ""
	if got != want || web.Tunnel.MTU != h.plan("aws-gw").Plan.Bridges[0].MTU {
		t.Errorf("web1's tunnel = %+v, want %+v with the network's MTU", web.Tunnel, want)
	}
	p := h.plan("aws-gw").Plan
	if n := p.Bridges[0].Ports(plan.ToHost); len(n) != 2 || n[0].To != "web1" || n[1].To != "db1" || len(p.Firewall.Neighbors) != 2 {
		t.Errorf("aws-gw's plan: neighbors %+v, firewall %+v", n, p.Firewall.Neighbors)
	}
	if n := h.plan("azure-gw").Plan.Bridges[0].Ports(plan.ToHost); len(n) != 0 {
		t.Errorf("azure-gw has neighbor tunnels %+v", n)
	}

	// The watch answers at once without ?after, and with the current
	// generation waits until the plan changes (db1 leaves).
	var w api.HostTunnelResponse
	tunnel := gwPath(api.PathHostTunnel, "web1")
	h.ok(req{method: "GET", path: tunnel, token: web.Credential}, &w)
	if w.Tunnel != web.Tunnel || w.Generation < web.Generation {
		t.Errorf("watch = %+v, want the join's tunnel", w)
	}
	if a := h.do(req{method: "GET", path: tunnel + "?after=" + itoa(w.Generation) + "&timeout=50ms", token: web.Credential}); a.status != 204 {
		t.Errorf("watch without change: %d", a.status)
	}
	waited := make(chan api.HostTunnelResponse, 1)
	go func() {
		var out api.HostTunnelResponse
		h.ok(req{method: "GET", path: tunnel + "?after=" + itoa(w.Generation) + "&timeout=10s", token: web.Credential}, &out)
		waited <- out
	}()
	waitParked(t, h.m, 1)
	h.ok(req{method: "DELETE", path: gwPath(api.PathHost, "db1"), token: db.Credential}, nil)
	select {
	case out := <-waited:
		if out.Generation <= w.Generation || out.Tunnel != web.Tunnel {
			t.Errorf("watch after db1 left = %+v", out)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not answer after db1 left")
	}
	if n := h.plan("aws-gw").Plan.Bridges[0].Ports(plan.ToHost); len(n) != 1 {
		t.Errorf("after db1 left aws-gw has %+v", n)
	}
	// db1's credential is gone (the same 401 as for a name that never
	// joined); web1 may not watch db1's tunnel.
	if a := h.do(req{method: "GET", path: gwPath(api.PathHostTunnel, "db1"), token: db.Credential}); a.status != 401 {
		t.Errorf("left host's watch: %d %+v", a.status, a.err)
	}
	if a := h.do(req{method: "GET", path: gwPath(api.PathHost, "web1"), token: db.Credential}); a.status != 401 {
		t.Errorf("another's credential: %d %+v", a.status, a.err)
	}
	// A new host takes the free slot; web1 replaced (with a token made for
	// that) keeps its own.
	if c := h.join("cache1", "10.1.0.12"); c.Tunnel.UDPPort != 4791 {
		t.Errorf("cache1 got port %d, want the free 4791", c.Tunnel.UDPPort)
	}
	var again api.HostJoinResponse
	h.ok(req{method: "POST", path: api.PathHosts, token: h.hostToken("aws-eu", "lan", "web1"),
		body: api.HostJoinRequest{Name: "web1", Address: netip.MustParseAddr("10.1.0.13")}}, &again)
	if again.Tunnel.UDPPort != 4790 || again.Tunnel.Local.String() != "10.1.0.13" {
		t.Errorf("web1 replaced: %+v, want port 4790 and the new address", again.Tunnel)
	}
	var hosts []api.Host
	h.ok(req{method: "GET", path: api.PathHosts}, &hosts)
	if len(hosts) != 2 || hosts[0].Name != "cache1" || hosts[1].Gateway != "aws-gw" {
		t.Errorf("hosts = %+v", hosts)
	}
	// Hosts survive a restart.
	h.restart()
	if n := h.plan("aws-gw").Plan.Bridges[0].Ports(plan.ToHost); len(n) != 2 {
		t.Errorf("after a restart aws-gw has %+v", n)
	}
}

func TestHostJoinRejected(t *testing.T) {
	h := newHarness(t)
	h.putSpec(neighborsSpec(t))
	_, gwSecret := h.token("aws-gw")
	hostSecret := h.hostToken("aws-eu", "lan")
	body := api.HostJoinRequest{Name: "web1", Address: netip.MustParseAddr("10.1.0.10")}
	tests := []struct {
		name   string
		r      req
		status int
		field  string
		msg    string
	}{
		{"gateway token", req{method: "POST", path: api.PathHosts, token: gwSecret, body: body}, 403, "Authorization", "a host joins with a host token"},
		{"no token", req{method: "POST", path: api.PathHosts, body: body}, 401, "Authorization", "needs a join token"},
		{"bad name", req{method: "POST", path: api.PathHosts, token: hostSecret, body: api.HostJoinRequest{Name: "Web_1", Address: body.Address}}, 400, "name", "not a valid host name"},
		{"off the LAN", req{method: "POST", path: api.PathHosts, token: hostSecret, body: api.HostJoinRequest{Name: "web1", Address: netip.MustParseAddr("10.2.0.10")}}, 400, "address", "not on site aws-eu's LAN (10.1.0.0/24)"},
		{"host token to enroll", req{method: "POST", path: api.PathEnroll, token: hostSecret, body: api.EnrollRequest{PublicKey: randomKey(t)}}, 403, "Authorization", "is a host token"},
		{"host token for a plain site", req{method: "POST", path: api.PathTokens, token: h.m.AdminToken(), body: api.TokenRequest{Site: "azure-we", Network: "lan"}}, 409, "site", "does not declare fabric: dropsUnknownMACs"},
		{"host token for a routed network", req{method: "POST", path: api.PathTokens, token: h.m.AdminToken(), body: api.TokenRequest{Site: "aws-eu", Network: "apps"}}, 409, "site", "not a bridged network"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := h.do(tt.r)
			if a.status != tt.status || a.err.Field != tt.field || !strings.Contains(a.err.Message, tt.msg) {
				t.Errorf("%d %+v; want %d, field %s, %q", a.status, a.err, tt.status, tt.field, tt.msg)
			}
		})
	}
	// The failed tries did not use the token up.
	h.ok(req{method: "POST", path: api.PathHosts, token: hostSecret, body: body}, nil)
	if a := h.do(req{method: "POST", path: api.PathHosts, token: hostSecret, body: body}); a.status != 409 || !strings.Contains(a.err.Message, "already used") {
		t.Errorf("token used twice: %d %+v", a.status, a.err)
	}
}

// TestHostJoinAddresses: a host token holder cannot register an address
// that would break the gateway's plan (the network or broadcast address of
// the site prefix, the gateway's own LAN address, another host's), nor
// move a host that has joined (409) unless the operator's token says so.
// Refused joins do not use the token or change the generation.
func TestHostJoinAddresses(t *testing.T) {
	h := newHarness(t)
	h.putSpec(neighborsSpec(t))
	h.join("web1", "10.1.0.10")
	gen := h.plan("aws-gw").Generation
	secret := h.hostToken("aws-eu", "lan")
	tests := []struct {
		name, host, address string
		status              int
		msg                 string
	}{
		{"network address", "db1", "10.1.0.0", 400, "network address of 10.1.0.0/24"},
		{"broadcast address", "db1", "10.1.0.255", 400, "broadcast address of 10.1.0.0/24"},
		{"gateway's address", "db1", "10.1.0.254", 409, "LAN address of gateway aws-gw"},
		{"another host's address", "db1", "10.1.0.10", 409, "taken by host web1"},
		{"off the LAN", "db1", "10.5.0.10", 400, "not on site aws-eu's LAN"},
		{"other family", "db1", "fd00::10", 400, "not on site aws-eu's LAN"},
		{"a name that joined", "web1", "10.1.0.20", 409, "--replace web1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := h.do(req{method: "POST", path: api.PathHosts, token: secret, body: api.HostJoinRequest{Name: tt.host, Address: netip.MustParseAddr(tt.address)}})
			if a.status != tt.status || !strings.Contains(a.err.Message, tt.msg) {
				t.Errorf("%d %+v; want %d with %q", a.status, a.err, tt.status, tt.msg)
			}
			if tt.status != 409 || tt.host != "web1" {
				if a.err.Field != "address" {
					t.Errorf("field %q, want address", a.err.Field)
				}
			}
		})
	}
	if g := h.plan("aws-gw").Generation; g != gen {
		t.Errorf("refused joins moved the plan's generation %d -> %d", gen, g)
	}
	// The token is still good for a proper join.
	var ok api.HostJoinResponse
	h.ok(req{method: "POST", path: api.PathHosts, token: secret, body: api.HostJoinRequest{Name: "db1", Address: netip.MustParseAddr("10.1.0.11")}}, &ok)
	// A replacement token made for another host does not replace web1.
	other := h.hostToken("aws-eu", "lan", "db1")
	if a := h.do(req{method: "POST", path: api.PathHosts, token: other, body: api.HostJoinRequest{Name: "web1", Address: netip.MustParseAddr("10.1.0.20")}}); a.status != 409 {
		t.Errorf("web1 with a token that replaces db1: %d %+v", a.status, a.err)
	}
	if a := h.do(req{method: "POST", path: api.PathTokens, token: h.m.AdminToken(), body: api.TokenRequest{Gateway: "aws-gw", Replaces: "web1"}}); a.status != 400 || a.err.Field != "replaces" {
		t.Errorf("a gateway token that replaces a host: %d %+v", a.status, a.err)
	}
}

// TestUnknownHosts: for the admin, GET and DELETE of a host that has not
// joined are 404 and change nothing; for anyone else the answer about a
// host that has joined and one that has not is the same 401, so names
// cannot be found by trying.
func TestUnknownHosts(t *testing.T) {
	h := newHarness(t)
	h.putSpec(neighborsSpec(t))
	web := h.join("web1", "10.1.0.10")
	gen := h.plan("aws-gw").Generation
	var before api.Overview
	h.ok(req{method: "GET", path: api.PathFederation}, &before)
	for _, m := range []string{"GET", "DELETE"} {
		if a := h.do(req{method: m, path: gwPath(api.PathHost, "nope"), token: h.m.AdminToken()}); a.status != 404 || a.err.Field != "name" {
			t.Errorf("admin %s of an unknown host: %d %+v, want 404", m, a.status, a.err)
		}
	}
	var after api.Overview
	h.ok(req{method: "GET", path: api.PathFederation}, &after)
	if after.Generation != before.Generation || h.plan("aws-gw").Generation != gen {
		t.Errorf("a DELETE of an unknown host moved the generation %d -> %d", before.Generation, after.Generation)
	}
	for _, tok := range []string{"", "guess", web.Credential + "x"} {
		for _, m := range []string{"GET", "DELETE"} {
			for _, path := range []string{api.PathHost, api.PathHostTunnel} {
				if path == api.PathHostTunnel && m == "DELETE" {
					continue
				}
				known := h.do(req{method: m, path: gwPath(path, "web1"), token: tok})
				unknown := h.do(req{method: m, path: gwPath(path, "nope"), token: tok})
				norm := strings.NewReplacer("web1", "NAME", "nope", "NAME")
				if known.status != 401 || unknown.status != known.status || norm.Replace(string(known.body)) != norm.Replace(string(unknown.body)) {
					t.Errorf("%s %s with token %q: joined host %d %s; unknown host %d %s", m, path, tok, known.status, known.body, unknown.status, unknown.body)
				}
			}
		}
	}
	// web1 is still there.
	h.ok(req{method: "GET", path: gwPath(api.PathHost, "web1"), token: web.Credential}, nil)
}
