package manager

import (
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
// recomputed (its gateway gets the tunnel's end).
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

	u := m.begin()
	defer m.writeMu.Unlock()
	st := u.next
	if err := hostTarget(st, tok.Site, tok.Network); err != nil {
		return err
	}
	if err := onSiteLAN(st, tok.Site, req.Address); err != nil {
		return err
	}
	if old, ok := st.hosts[req.Name]; ok && (old.Site != tok.Site || old.Network != tok.Network) {
		return fail(http.StatusConflict, "name", "host %s has joined network %s at site %s already; leave first (fednet host leave) or choose another --name", req.Name, old.Network, old.Site)
	}
	slot := freeSlot(st, tok.Site, req.Name)
	if old, ok := st.hosts[req.Name]; ok {
		slot = old.Slot // joining again keeps the port
	}
	h := plan.Host{Name: req.Name, Site: tok.Site, Network: tok.Network, Address: req.Address.Unmap(), Slot: slot}
	if err := plan.CheckHost(st.fed, h); err != nil {
		return fail(http.StatusConflict, "", "%v", err)
	}
	cred, err := randomSecret()
	if err != nil {
		return err
	}
	sh := store.Host{Name: h.Name, Site: h.Site, Network: h.Network, Address: h.Address.String(), Slot: slot,
		CredentialHash: store.HashSecret(cred), Joined: now}
	st.hosts[h.Name] = sh
	u.change.Hosts = []store.Host{sh}
	u.change.UseToken = &store.UseToken{SecretHash: hash, Now: now}
	res, err := m.commit(r.Context(), u)
	if err != nil {
		if e := tokenError(tok, err); e != nil {
			return e
		}
		return err
	}
	p := u.next.plans[hostGateway(u.next, h.Site)]
	t, ok := plan.HostTunnelOf(p.plan, h.Name)
	if !ok {
		return fail(http.StatusInternalServerError, "", "host %s joined but its gateway's plan has no tunnel to it", h.Name)
	}
	m.cfg.Logf("host %s (%s) joined network %s at site %s with token %s, slot %d; plans changed for %v", h.Name, h.Address, h.Network, h.Site, tok.ID, slot, res.affected)
	return writeJSON(w, http.StatusOK, api.HostJoinResponse{Host: h.Name, Credential: cred,
		HostTunnelResponse: api.HostTunnelResponse{Generation: p.Generation, Tunnel: t}})
}

// onSiteLAN checks that a is inside one of site's prefixes.
func onSiteLAN(st *state, site string, a netip.Addr) error {
	var prefixes []string
	for _, s := range st.fed.Sites {
		if s.Name != site {
			continue
		}
		for _, p := range s.Prefixes {
			if p.Contains(a.Unmap()) {
				return nil
			}
			prefixes = append(prefixes, p.String())
		}
	}
	return fail(http.StatusBadRequest, "address", "address %s is not on site %s's LAN (%s); give the host's own address there: the gateway sends the tunnel to it", a, site, strings.Join(prefixes, ", "))
}

// hostAuth lets the admin token or host name's own credential through.
func (m *Manager) hostAuth(r *http.Request, st *state, name string, admin bool) error {
	tok, err := bearer(r)
	if err != nil {
		return err
	}
	hash := store.HashSecret(tok)
	if h, ok := st.hosts[name]; ok && hashEqual(h.CredentialHash, hash) {
		return nil
	}
	if hashEqual(hash, m.adminHash) {
		if admin {
			return nil
		}
		return fail(http.StatusForbidden, "Authorization", "only host %s itself may watch its tunnel, with its own credential", name)
	}
	if _, ok := st.hosts[name]; !ok {
		return fail(http.StatusNotFound, "name", "no host %q has joined (or it left); join with: fednet host join", name)
	}
	return fail(http.StatusUnauthorized, "Authorization", "unknown credential for host %s; a host gets its credential by joining with a host token", name)
}

func (m *Manager) getHosts(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	st, _ := m.snapshot()
	out := []api.Host{}
	for _, name := range sortedHostNames(st) {
		out = append(out, m.hostModel(st, st.hosts[name]))
	}
	return writeJSON(w, http.StatusOK, out)
}

func sortedHostNames(st *state) []string {
	var names []string
	for n := range st.hosts {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func (m *Manager) getHost(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	name := r.PathValue("name")
	st, _ := m.snapshot()
	if err := m.hostAuth(r, st, name, true); err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, m.hostModel(st, st.hosts[name]))
}

// deleteHost takes a host out (fednet host leave, or the operator): its
// gateway's plan loses the tunnel, its slot is free again and its
// credential is refused from now on.
func (m *Manager) deleteHost(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	name := r.PathValue("name")
	u := m.begin()
	defer m.writeMu.Unlock()
	if err := m.hostAuth(r, u.next, name, true); err != nil {
		return err
	}
	h := u.next.hosts[name]
	delete(u.next.hosts, name)
	u.change.DeleteHosts = []string{name}
	res, err := m.commit(r.Context(), u)
	if err != nil {
		return err
	}
	m.cfg.Logf("host %s left network %s at site %s; plans changed for %v", name, h.Network, h.Site, res.affected)
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
	return m.watch(w, r, wp, func(st *state) (int64, func() error, error) {
		if err := m.hostAuth(r, st, name, false); err != nil {
			return 0, nil, err
		}
		h := st.hosts[name]
		p, ok := st.plans[hostGateway(st, h.Site)]
		t, inPlan := plan.HostTunnelOf(p.plan, name)
		if !ok || !inPlan {
			if err := plan.CheckHost(st.fed, planHost(h)); err != nil {
				return 0, nil, fail(http.StatusConflict, "", "%v", err)
			}
			return 0, nil, fail(http.StatusConflict, "", "host %s has no tunnel in the plan of gateway %s (removed?)", name, hostGateway(st, h.Site))
		}
		return p.Generation, func() error {
			return writeJSON(w, http.StatusOK, api.HostTunnelResponse{Generation: p.Generation, Tunnel: t})
		}, nil
	})
}
