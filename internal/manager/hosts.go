package manager

import (
	"maps"
	"net/http"
	"net/netip"
	"slices"
	"strings"

	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/manager/store"
	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/spec"
)

// Hosts join bridged networks through neighbor tunnels (docs/neighbors.md):
// an operator makes a host token for a site and a network (POST
// /v1/tokens with site and network), the host joins with it (POST
// /v1/hosts, its LAN address in the body) and gets a credential, a slot
// at its site (stable until it leaves; the tunnel's UDP port is 4790 +
// slot) and its tunnel; the planner puts the gateway's end in the plan of
// the site's first gateway. The host then watches its tunnel (GET
// /v1/hosts/{name}/tunnel, long poll) and leaves with DELETE
// /v1/hosts/{name}.

// hostTarget checks that hosts of site may join network (404 or 409
// naming the field otherwise).
func hostTarget(st *state, site, network string) error {
	if st.fed == nil {
		return fail(http.StatusNotFound, "site", "the manager has no spec yet; apply one with: fednet apply -f spec.yaml")
	}
	if err := plan.CheckSiteNetwork(st.fed, site, network); err != nil {
		return fail(http.StatusConflict, "site", "%v", err)
	}
	return nil
}

// hostGateway is the gateway at the far end of the tunnels of site's
// hosts: its first.
func hostGateway(st *state, site string) string {
	if st.fed != nil {
		for _, s := range st.fed.Sites {
			if s.Name == site && len(s.Gateways) > 0 {
				return s.Gateways[0].Name
			}
		}
	}
	return ""
}

func planHost(h store.Host) plan.Host {
	a, _ := netip.ParseAddr(h.Address) // stored from a netip.Addr
	return plan.Host{Name: h.Name, Site: h.Site, Network: h.Network, Address: a, Slot: h.Slot}
}

func (m *Manager) hostModel(st *state, h store.Host) api.Host {
	ph := planHost(h)
	return api.Host{Name: h.Name, Site: h.Site, Network: h.Network, Address: ph.Address, Slot: h.Slot,
		UDPPort: plan.NeighborPort(h.Slot), Gateway: hostGateway(st, h.Site), Joined: h.Joined}
}

// freeSlot returns the lowest slot no other host of site holds.
func freeSlot(st *state, site, name string) int {
	taken := map[int]bool{}
	for _, h := range st.hosts {
		if h.Site == site && h.Name != name {
			taken[h.Slot] = true
		}
	}
	slot := 0
	for taken[slot] {
		slot++
	}
	return slot
}

// postHost joins a host: its host token (the bearer) must be usable; the
// host is stored with a slot and a new credential, and the plans are
// recomputed (its gateway gets the tunnel's end). Its LAN address must be
// usable (checkHostAddress); a name that has joined already is refused
// (409) unless the token was made to replace that host (TokenRequest
// replaces), which keeps its slot.
func (m *Manager) postHost(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	tok, hash, err := m.joinToken(r, "fednet token create --site SITE --network NETWORK")
	if err != nil {
		return err
	}
	now := m.now()
	if err := tokenUsable(tok, now); err != nil {
		return err
	}
	if !tok.IsHost() {
		return fail(http.StatusForbidden, "Authorization", "join token %s is gateway %s's; a host joins with a host token: fednet token create --site SITE --network NETWORK", tok.ID, tok.Gateway)
	}
	var req api.HostJoinRequest
	if err := decode(w, r, &req, false, "name"); err != nil {
		return err
	}
	if !spec.ValidName(req.Name) {
		return fail(http.StatusBadRequest, "name", "field name %q is not a valid host name; want 1 to 63 lowercase letters, digits and '-', like web-1", req.Name)
	}
	if !req.Address.IsValid() {
		return fail(http.StatusBadRequest, "address", "field address is required: the host's address on its site's LAN, like 10.1.0.10")
	}
	cred, err := randomSecret()
	if err != nil {
		return err
	}
	addr := req.Address.Unmap()
	var h plan.Host
	res, u, err := m.change(r.Context(), func(u *update) error {
		st := u.next
		if err := hostTarget(st, tok.Site, tok.Network); err != nil {
			return err
		}
		if err := checkHostAddress(st, tok.Site, req.Name, addr); err != nil {
			return err
		}
		slot := freeSlot(st, tok.Site, req.Name)
		if old, ok := st.hosts[req.Name]; ok {
			if tok.Replaces != req.Name {
				return fail(http.StatusConflict, "name", "host %s has joined already (network %s at site %s, address %s); to replace it, "+
					"the operator makes a host token for that: fednet token create --site %s --network %s --replace %s; or choose another --name",
					req.Name, old.Network, old.Site, old.Address, tok.Site, tok.Network, req.Name)
			}
			if old.Site == tok.Site {
				slot = old.Slot // the replacement keeps the port
			}
		}
		h = plan.Host{Name: req.Name, Site: tok.Site, Network: tok.Network, Address: addr, Slot: slot}
		if err := plan.CheckHost(st.fed, h); err != nil {
			return fail(http.StatusConflict, "", "%v", err)
		}
		sh := store.Host{Name: h.Name, Site: h.Site, Network: h.Network, Address: h.Address.String(), Slot: slot,
			CredentialHash: store.HashSecret(cred), Joined: now}
		st.hosts[h.Name] = sh
		u.change.Hosts = []store.Host{sh}
		u.change.UseToken = &store.UseToken{SecretHash: hash, Now: now}
		return nil
	})
	if err != nil {
		if e := tokenError(tok, err); e != nil {
			return e
		}
		return err
	}
	p, _, err := u.next.entry(hostGateway(u.next, h.Site))
	if err != nil {
		return err
	}
	t, ok := plan.HostTunnelOf(p.held.Head, h.Name)
	if !ok {
		return fail(http.StatusInternalServerError, "", "host %s joined but its gateway's plan has no tunnel to it", h.Name)
	}
	m.cfg.Logf("host %s (%s) joined network %s at site %s with token %s, slot %d; plans changed for %s", h.Name, h.Address, h.Network, h.Site, tok.ID, h.Slot, short(res.affected))
	return writeJSON(w, http.StatusOK, api.HostJoinResponse{Host: h.Name, Credential: cred,
		HostTunnelResponse: api.HostTunnelResponse{Generation: p.Generation, Tunnel: t}})
}

// checkHostAddress checks the LAN address a of host name joining at site:
// inside one of the site's prefixes and neither its network nor (IPv4) its
// broadcast address (400), not a gateway's LAN address and not another
// host's (409). A host with such an address would break its gateway's plan.
func checkHostAddress(st *state, site, name string, a netip.Addr) error {
	var prefixes []string
	var in netip.Prefix
	si := slices.IndexFunc(st.fed.Sites, func(s spec.Site) bool { return s.Name == site })
	s := &st.fed.Sites[si] // hostTarget checked that it is there
	for _, p := range s.Prefixes {
		if p.Contains(a) {
			in = p.Masked()
			break
		}
		prefixes = append(prefixes, p.String())
	}
	if !in.IsValid() {
		return fail(http.StatusBadRequest, "address", "address %s is not on site %s's LAN (%s); give the host's own address there: the gateway sends the tunnel to it", a, site, strings.Join(prefixes, ", "))
	}
	if a == in.Addr() && in.Bits() < a.BitLen()-1 {
		return fail(http.StatusBadRequest, "address", "address %s is the network address of %s, not a host's; give the host's own address", a, in)
	}
	if a.Is4() && in.Bits() < 31 && a == lastAddr(in) {
		return fail(http.StatusBadRequest, "address", "address %s is the broadcast address of %s, not a host's; give the host's own address", a, in)
	}
	for _, g := range s.Gateways {
		if g.LANAddress.Unmap() == a {
			return fail(http.StatusConflict, "address", "address %s is the LAN address of gateway %s; give the host's own address", a, g.Name)
		}
	}
	for _, h := range st.hosts {
		if h.Name != name && h.Site == site && h.Address == a.String() {
			return fail(http.StatusConflict, "address", "address %s is taken by host %s at site %s; give this host's own address", a, h.Name, site)
		}
	}
	return nil
}

// lastAddr is the highest address of p.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := range b {
		host := p.Bits() - 8*i // bits of this byte that belong to the network
		switch {
		case host <= 0:
			b[i] = 0xff
		case host < 8:
			b[i] |= 0xff >> host
		}
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// hostAuth lets the admin token or host name's own credential through. To
// anyone else it answers the same 401 whether or not a host of that name
// has joined, so that the names cannot be found by trying; the admin gets
// 404 for a name that has not joined.
func (m *Manager) hostAuth(r *http.Request, st *state, name string, admin bool) error {
	tok, err := bearer(r)
	if err != nil {
		return err
	}
	hash := store.HashSecret(tok)
	h, joined := st.hosts[name]
	if own := hashEqual(h.CredentialHash, hash); own && joined {
		return nil
	}
	if hashEqual(hash, m.adminHash) {
		switch {
		case !admin:
			return fail(http.StatusForbidden, "Authorization", "only host %s itself may watch its tunnel, with its own credential", name)
		case !joined:
			return fail(http.StatusNotFound, "name", "no host %q has joined (or it left); see fednet host list", name)
		}
		return nil
	}
	return fail(http.StatusUnauthorized, "Authorization", "unknown credential for host %s; a host gets its credential by joining with a host token", name)
}

func (m *Manager) getHosts(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	st := m.snapshot()
	out := []api.Host{}
	for _, name := range slices.Sorted(maps.Keys(st.hosts)) {
		out = append(out, m.hostModel(st, st.hosts[name]))
	}
	return writeJSON(w, http.StatusOK, out)
}

func (m *Manager) getHost(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	name := r.PathValue("name")
	st := m.snapshot()
	if err := m.hostAuth(r, st, name, true); err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, m.hostModel(st, st.hosts[name]))
}

// deleteHost takes a host out (fednet host leave, or the operator): its
// gateway's plan loses the tunnel, its slot is free again and its
// credential is refused from now on. An unknown host is 404 (for the
// admin; 401 for anyone else) and changes nothing.
func (m *Manager) deleteHost(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	name := r.PathValue("name")
	var h store.Host
	res, u, err := m.change(r.Context(), func(u *update) error {
		if err := m.hostAuth(r, u.next, name, true); err != nil {
			return err
		}
		h = u.next.hosts[name]
		delete(u.next.hosts, name)
		u.change.DeleteHosts = []string{name}
		return nil
	})
	if err != nil {
		return err
	}
	m.cfg.Logf("host %s left network %s at site %s; plans changed for %s", name, h.Network, h.Site, short(res.affected))
	return writeJSON(w, http.StatusOK, m.hostModel(u.next, h))
}

// getHostTunnel answers the host's tunnel watch: at once without ?after or
// when its gateway's plan changed after it, else when it does (or 204 at
// the timeout). 409 when the spec no longer lets the host join (the
// message says why); the host keeps asking.
func (m *Manager) getHostTunnel(w http.ResponseWriter, r *http.Request) error {
	wp, err := parseWatch(r)
	if err != nil {
		return err
	}
	name := r.PathValue("name")
	return m.watch(w, r, wp, func(st *state) (int64, []string, func() error, error) {
		if err := m.hostAuth(r, st, name, false); err != nil {
			return 0, nil, nil, err
		}
		h := st.hosts[name]
		gw := hostGateway(st, h.Site)
		p, ok, err := st.entry(gw)
		if err != nil {
			return 0, nil, nil, err
		}
		t, inPlan := plan.HostTunnelOf(p.held.Head, name)
		if !ok || !inPlan {
			if err := plan.CheckHost(st.fed, planHost(h)); err != nil {
				return 0, nil, nil, fail(http.StatusConflict, "", "%v", err)
			}
			return 0, nil, nil, fail(http.StatusConflict, "", "host %s has no tunnel in the plan of gateway %s (removed?)", name, gw)
		}
		return p.Generation, []string{hostTopic(name), planTopic(gw)}, func() error {
			return writeJSON(w, http.StatusOK, api.HostTunnelResponse{Generation: p.Generation, Tunnel: t})
		}, nil
	})
}
