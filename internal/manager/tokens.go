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
)

// Join token lifetimes.
const (
	DefaultTokenTTL = time.Hour
	MaxTokenTTL     = 168 * time.Hour
)

func apiToken(t store.Token) api.Token {
	return api.Token{ID: t.ID, Gateway: t.Gateway, Created: t.Created, Expires: t.Expires, Used: !t.Used.IsZero(), Revoked: t.Revoked}
}

// postToken creates a join token for a gateway of the current spec.
func (m *Manager) postToken(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	var req api.TokenRequest
	if err := decode(w, r, &req, false, ""); err != nil {
		return err
	}
	if req.Gateway == "" {
		return fail(http.StatusBadRequest, "gateway", "field gateway is required: the name of the gateway (in the spec) this token enrolls")
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
	st, _ := m.snapshot()
	if err := inSpec(st, req.Gateway, "gateway"); err != nil {
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
	t := store.Token{ID: id, Gateway: req.Gateway, SecretHash: store.HashSecret(secret), Created: now, Expires: now.Add(ttl)}
	if err := m.store.CreateToken(r.Context(), t); err != nil {
		return err
	}
	m.cfg.Logf("join token %s created for gateway %s, expires %s", id, req.Gateway, t.Expires.Format(time.RFC3339))
	out := apiToken(t)
	out.Token = api.JoinToken{Manager: m.url, CAFingerprint: m.CAFingerprint(), ID: id, Secret: secret}.String()
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
	secret, err := bearer(r)
	if err != nil {
		return fail(http.StatusUnauthorized, "Authorization", "enrollment needs the join token: send Authorization: Bearer SECRET (the secret of a token made by fednet token create)")
	}
	if strings.HasPrefix(secret, api.JoinTokenPrefix) { // the whole token works too
		jt, err := api.ParseJoinToken(secret)
		if err != nil {
			return fail(http.StatusUnauthorized, "Authorization", "%v", err)
		}
		secret = jt.Secret
	}
	hash := store.HashSecret(secret)
	tok, err := m.store.TokenBySecret(r.Context(), hash)
	if errors.Is(err, store.ErrNotFound) {
		return fail(http.StatusUnauthorized, "Authorization", "unknown join token; create one with: fednet token create --gateway NAME")
	}
	if err != nil {
		return err
	}
	now := m.now()
	if err := tokenUsable(tok, now); err != nil {
		return err
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

	u := m.begin()
	defer m.writeMu.Unlock()
	if err := inSpec(u.next, tok.Gateway, ""); err != nil {
		return err
	}
	if err := keyTaken(u.next, tok.Gateway, req.PublicKey); err != nil {
		return err
	}
	cred, err := randomSecret()
	if err != nil {
		return err
	}
	g := u.next.gateways[tok.Gateway]
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
	res, err := m.commit(r.Context(), u)
	if err != nil {
		if e := tokenError(tok, err); e != nil {
			return e
		}
		return err
	}
	m.cfg.Logf("gateway %s enrolled from %s with token %s; plans changed for %v", g.Name, observed, tok.ID, res.affected)
	return writeJSON(w, http.StatusOK, api.EnrollResponse{Gateway: g.Name, Credential: cred, ObservedAddress: observed, RotateKey: g.RotateRequested})
}

// tokenUsable says why tok cannot be used at now, or returns nil.
func tokenUsable(tok store.Token, now time.Time) error {
	switch {
	case tok.Revoked:
		return fail(http.StatusConflict, "Authorization", "join token %s (gateway %s) was revoked; create a new one with: fednet token create --gateway %s", tok.ID, tok.Gateway, tok.Gateway)
	case !tok.Used.IsZero():
		return fail(http.StatusConflict, "Authorization", "join token %s (gateway %s) was already used at %s; a token works once; create a new one with: fednet token create --gateway %s", tok.ID, tok.Gateway, tok.Used.Format(time.RFC3339), tok.Gateway)
	case !now.Before(tok.Expires):
		return fail(http.StatusConflict, "Authorization", "join token %s (gateway %s) expired at %s; create a new one with: fednet token create --gateway %s", tok.ID, tok.Gateway, tok.Expires.Format(time.RFC3339), tok.Gateway)
	}
	return nil
}

// tokenError maps the store's token errors (a concurrent enrollment won
// the race) to 409.
func tokenError(tok store.Token, err error) error {
	for _, e := range []error{store.ErrTokenUsed, store.ErrTokenExpired, store.ErrTokenRevoked, store.ErrNotFound} {
		if errors.Is(err, e) {
			return fail(http.StatusConflict, "Authorization", "join token %s (gateway %s): %v; create a new one with: fednet token create --gateway %s", tok.ID, tok.Gateway, e, tok.Gateway)
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
