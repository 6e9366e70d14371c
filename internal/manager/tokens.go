package manager

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/manager/store"
	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/spec"
)

// Join token lifetimes.
const (
	DefaultTokenTTL = time.Hour
	MaxTokenTTL     = 168 * time.Hour
)

func apiToken(t store.Token) api.Token {
	return api.Token{ID: t.ID, Gateway: t.Gateway, Site: t.Site, Network: t.Network, Replaces: t.Replaces, Created: t.Created, Expires: t.Expires, Used: !t.Used.IsZero(), Revoked: t.Revoked}
}

// postToken creates a join token for a gateway of the current spec, or a
// host token for hosts of a site to join a bridged network through
// neighbor tunnels.
func (m *Manager) postToken(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	var req api.TokenRequest
	if err := decode(w, r, &req, false, ""); err != nil {
		return err
	}
	host := req.Gateway == "" && (req.Site != "" || req.Network != "")
	switch {
	case req.Gateway == "" && !host:
		return fail(http.StatusBadRequest, "gateway", "field gateway is required: the name of the gateway (in the spec) this token enrolls; or, for a host token, fields site and network")
	case req.Gateway != "" && (req.Site != "" || req.Network != ""):
		return fail(http.StatusBadRequest, "gateway", "give gateway (a gateway's join token) or site and network (a host token), not both")
	case host && req.Site == "":
		return fail(http.StatusBadRequest, "site", "a host token needs field site: the site (fabric: dropsUnknownMACs) whose host joins")
	case host && req.Network == "":
		return fail(http.StatusBadRequest, "network", "a host token needs field network: the bridged network the host joins")
	case req.Replaces != "" && !host:
		return fail(http.StatusBadRequest, "replaces", "field replaces is for host tokens (with site and network): the joined host a join with the token may replace")
	case req.Replaces != "" && !spec.ValidName(req.Replaces):
		return fail(http.StatusBadRequest, "replaces", "field replaces %q is not a host name; want 1 to 63 lowercase letters, digits and '-'", req.Replaces)
	}
	ttl := DefaultTokenTTL
	if req.TTL != "" {
		d, err := time.ParseDuration(req.TTL)
		if err != nil {
			return fail(http.StatusBadRequest, "ttl", "field ttl %q is not a duration; want e.g. \"1h\" or \"30m\" (at most %s)", req.TTL, fmtDuration(MaxTokenTTL))
		}
		if d <= 0 || d > MaxTokenTTL {
			return fail(http.StatusBadRequest, "ttl", "field ttl %s is out of range; want more than 0 and at most %s", req.TTL, fmtDuration(MaxTokenTTL))
		}
		ttl = d
	}
	st := m.snapshot()
	if host {
		if err := hostTarget(st, req.Site, req.Network); err != nil {
			return err
		}
	} else if err := inSpec(st, req.Gateway, "gateway"); err != nil {
		return err
	}
	id, err := randomID()
	if err != nil {
		return err
	}
	secret, err := randomSecret()
	if err != nil {
		return err
	}
	now := m.now()
	t := store.Token{ID: id, Gateway: req.Gateway, Site: req.Site, Network: req.Network, Replaces: req.Replaces, SecretHash: store.HashSecret(secret), Created: now, Expires: now.Add(ttl)}
	if err := m.store.CreateToken(r.Context(), t); err != nil {
		return err
	}
	m.cfg.Logf("join token %s created for %s, expires %s", id, tokenFor(t), t.Expires.Format(time.RFC3339))
	out := apiToken(t)
	jt := api.JoinToken{Manager: m.url, CAFingerprint: m.CAFingerprint(), ID: id, Secret: secret}
	if len(m.joinURLs) > 1 {
		jt.Managers = m.joinURLs
	}
	out.Token = jt.String()
	return writeJSON(w, http.StatusCreated, out)
}

// inSpec checks that the current spec has a gateway called name (404
// naming field otherwise).
func inSpec(st *state, name, field string) error {
	if st.fed == nil {
		return fail(http.StatusNotFound, field, "gateway %s: the manager has no spec yet; apply one with: fednet apply -f spec.yaml", name)
	}
	if _, _, ok := st.fed.Gateway(name); !ok {
		return fail(http.StatusNotFound, field, "gateway %q is not in the spec (revision %d); its gateways are %s", name, st.rev.Number, strings.Join(specGateways(st), ", "))
	}
	return nil
}

func specGateways(st *state) []string {
	var out []string
	if st.fed != nil {
		for _, s := range st.fed.Sites {
			for _, g := range s.Gateways {
				out = append(out, g.Name)
			}
		}
	}
	return out
}

func (m *Manager) getTokens(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	toks, err := m.store.Tokens(r.Context())
	if err != nil {
		return err
	}
	out := make([]api.Token, 0, len(toks))
	for _, t := range toks {
		out = append(out, apiToken(t))
	}
	return writeJSON(w, http.StatusOK, out)
}

func (m *Manager) deleteToken(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	id := r.PathValue("id")
	t, err := m.store.RevokeToken(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		return fail(http.StatusNotFound, "id", "no join token %q; list them with: fednet token list", id)
	}
	if err != nil {
		return err
	}
	m.cfg.Logf("join token %s of gateway %s revoked", id, t.Gateway)
	return writeJSON(w, http.StatusOK, apiToken(t))
}

// postEnroll enrolls a gateway: its join token (the bearer) must be
// unused, unexpired and unrevoked; the gateway's key and observed address
// are stored, a new credential replaces any earlier one, and every plan is
// recomputed (peers learn the key).
func (m *Manager) postEnroll(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	tok, hash, err := m.joinToken(r, "fednet token create --gateway NAME")
	if err != nil {
		return err
	}
	now := m.now()
	if err := tokenUsable(tok, now); err != nil {
		return err
	}
	if tok.IsHost() {
		return fail(http.StatusForbidden, "Authorization", "join token %s is a host token (site %s, network %s): hosts join with fednet host join; a gateway needs a token from fednet token create --gateway NAME", tok.ID, tok.Site, tok.Network)
	}
	var req api.EnrollRequest
	if err := decode(w, r, &req, false, "publicKey"); err != nil {
		return err
	}
	if req.PublicKey.IsZero() {
		return fail(http.StatusBadRequest, "publicKey", "field publicKey is required: the gateway's WireGuard public key (base64, as wg pubkey prints it)")
	}
	if req.Endpoint != "" {
		if _, port, err := net.SplitHostPort(req.Endpoint); err != nil || port == "" {
			return fail(http.StatusBadRequest, "endpoint", "field endpoint %q is not host:port; want e.g. 198.51.100.10:51820, or leave it out", req.Endpoint)
		}
	}
	observed, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		observed = r.RemoteAddr
	}

	cred, err := randomSecret()
	if err != nil {
		return err
	}
	var g store.Gateway
	res, _, err := m.change(r.Context(), func(u *update) error {
		if err := inSpec(u.next, tok.Gateway, ""); err != nil {
			return err
		}
		if err := keyTaken(u.next, tok.Gateway, req.PublicKey); err != nil {
			return err
		}
		g = u.next.gateways[tok.Gateway]
		g.Name = tok.Gateway
		g.PublicKey = req.PublicKey
		g.CredentialHash = store.HashSecret(cred)
		g.RotateAnswered = g.RotateRequested // a fresh key answers every request so far
		g.Endpoint = req.Endpoint
		g.ObservedAddress = observed
		g.Enrolled = now
		g.Removed = false
		u.setGateway(g)
		u.change.UseToken = &store.UseToken{SecretHash: hash, Now: now}
		return nil
	})
	if err != nil {
		if e := tokenError(tok, err); e != nil {
			return e
		}
		return err
	}
	m.cfg.Logf("gateway %s enrolled from %s with token %s; plans changed for %s", g.Name, observed, tok.ID, short(res.affected))
	if st := m.snapshot(); g.Endpoint != "" && st.fed != nil {
		if sg, _, ok := st.fed.Gateway(g.Name); ok && sg.Endpoint != g.Endpoint {
			want := sg.Endpoint
			if want == "" {
				want = "none (behindNAT)"
			}
			m.cfg.Logf("warning: gateway %s announced the endpoint %s (fednet agent --endpoint) but the spec's is %s; plans use the spec's: change gateways[].endpoint to move it", g.Name, g.Endpoint, want)
		}
	}
	return writeJSON(w, http.StatusOK, api.EnrollResponse{Gateway: g.Name, Credential: cred, ObservedAddress: observed, RotateKey: g.RotateRequested})
}

// joinToken finds the join token the request carries as its bearer (the
// secret, or the whole token); create is the command that makes one, for
// the error.
func (m *Manager) joinToken(r *http.Request, create string) (store.Token, store.Hash, error) {
	secret, err := bearer(r)
	if err != nil {
		return store.Token{}, store.Hash{}, fail(http.StatusUnauthorized, "Authorization", "this call needs a join token: send Authorization: Bearer SECRET (the secret of a token made by %s)", create)
	}
	if strings.HasPrefix(secret, api.JoinTokenPrefix) { // the whole token works too
		jt, err := api.ParseJoinToken(secret)
		if err != nil {
			return store.Token{}, store.Hash{}, fail(http.StatusUnauthorized, "Authorization", "%v", err)
		}
		secret = jt.Secret
	}
	hash := store.HashSecret(secret)
	tok, err := m.store.TokenBySecret(r.Context(), hash)
	if errors.Is(err, store.ErrNotFound) {
		return store.Token{}, hash, fail(http.StatusUnauthorized, "Authorization", "unknown join token; create one with: %s", create)
	}
	return tok, hash, err
}

// tokenFor names what a token is for, for logs and errors.
func tokenFor(t store.Token) string {
	if t.IsHost() {
		return fmt.Sprintf("a host of site %s on network %s", t.Site, t.Network)
	}
	return "gateway " + t.Gateway
}

// tokenUsable says why tok cannot be used at now, or returns nil.
func tokenUsable(tok store.Token, now time.Time) error {
	switch {
	case tok.Revoked:
		return fail(http.StatusConflict, "Authorization", "join token %s (%s) was revoked; create a new one with: %s", tok.ID, tokenFor(tok), createCommand(tok))
	case !tok.Used.IsZero():
		return fail(http.StatusConflict, "Authorization", "join token %s (%s) was already used at %s; a token works once; create a new one with: %s", tok.ID, tokenFor(tok), tok.Used.Format(time.RFC3339), createCommand(tok))
	case !now.Before(tok.Expires):
		return fail(http.StatusConflict, "Authorization", "join token %s (%s) expired at %s; create a new one with: %s", tok.ID, tokenFor(tok), tok.Expires.Format(time.RFC3339), createCommand(tok))
	}
	return nil
}

// createCommand is the command that makes a token like tok.
func createCommand(tok store.Token) string {
	if tok.IsHost() {
		return fmt.Sprintf("fednet token create --site %s --network %s", tok.Site, tok.Network)
	}
	return "fednet token create --gateway " + tok.Gateway
}

// tokenError maps the store's token errors (a concurrent enrollment won
// the race) to 409.
func tokenError(tok store.Token, err error) error {
	for _, e := range []error{store.ErrTokenUsed, store.ErrTokenExpired, store.ErrTokenRevoked, store.ErrNotFound} {
		if errors.Is(err, e) {
			return fail(http.StatusConflict, "Authorization", "join token %s (%s): %v; create a new one with: %s", tok.ID, tokenFor(tok), e, createCommand(tok))
		}
	}
	return nil
}

// keyTaken refuses a public key another (not removed) gateway has:
// WireGuard tells peers apart by key.
func keyTaken(st *state, name string, key plan.Key) error {
	for other, g := range st.gateways {
		if other != name && !g.Removed && g.PublicKey == key {
			return fail(http.StatusConflict, "publicKey", "public key %s is already the key of gateway %s; every gateway needs its own key (fednet keygen)", key, other)
		}
	}
	return nil
}

func randomID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("reading random bytes: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// fmtDuration renders whole hours as "168h" rather than "168h0m0s".
func fmtDuration(d time.Duration) string {
	if d%time.Hour == 0 {
		return fmt.Sprintf("%dh", d/time.Hour)
	}
	return d.String()
}

func (m *Manager) now() time.Time { return m.cfg.Now().UTC() }
