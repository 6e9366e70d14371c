package manager

import (
	"net/http"
	"strings"

	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/manager/store"
)

// bearer returns the request's bearer token.
func bearer(r *http.Request) (string, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return "", fail(http.StatusUnauthorized, "Authorization", "no credential: send the header Authorization: Bearer TOKEN with the admin token (file %s in the manager's data directory) or the gateway's credential", AdminTokenFile)
	}
	scheme, tok, ok := strings.Cut(h, " ")
	tok = strings.TrimSpace(tok)
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return "", fail(http.StatusUnauthorized, "Authorization", "the Authorization header must be \"Bearer TOKEN\"")
	}
	return tok, nil
}

// authenticate checks the caller's bearer token against what a route
// needs: 401 for a missing or unknown token, 403 for a known one that may
// not do this; 403 with code api.CodeGatewayRemoved for the credential of
// a removed gateway (its agent stops; on 401 an agent keeps retrying).
func (m *Manager) authenticate(r *http.Request, a auth) error {
	if a == authNone {
		return nil
	}
	tok, err := bearer(r)
	if err != nil {
		return err
	}
	h := store.HashSecret(tok)
	admin := hashEqual(h, m.adminHash)
	st := m.snapshot()
	name := r.PathValue("name")
	if a != authAdmin && name != "" {
		// The common case, an agent on its own gateway's routes: its
		// credential is checked against that gateway's alone (in constant
		// time), not against every gateway's (a thousand per request at
		// 1000 gateways); the others are searched only to say whose it is.
		if g, ok := st.gateways[name]; ok && g.CredentialHash != (store.Hash{}) && hashEqual(g.CredentialHash, h) {
			if g.Removed {
				return removedError(name)
			}
			return nil
		}
	}
	owner := ""
	if !admin {
		owner = credentialOwner(st, h)
	}
	if a == authAdmin {
		switch {
		case admin:
			return nil
		case owner != "":
			return fail(http.StatusForbidden, "Authorization", "this call needs the admin token; the credential of gateway %s may only read that gateway's plan and send its status and key", owner)
		}
		return fail(http.StatusUnauthorized, "Authorization", "unknown token; use the admin token (file %s in the manager's data directory)", AdminTokenFile)
	}
	switch {
	case owner == name:
		if st.gateways[name].Removed {
			return removedError(name)
		}
		return nil
	case admin && a == authEither:
		return nil
	case admin:
		return fail(http.StatusForbidden, "Authorization", "only gateway %s itself may do this, with its own credential; the admin token may not", name)
	case owner != "":
		return fail(http.StatusForbidden, "Authorization", "this credential belongs to gateway %s, not %s; a gateway may only use its own endpoints", owner, name)
	}
	return fail(http.StatusUnauthorized, "Authorization", "unknown credential; a gateway gets its credential by enrolling with a join token")
}

// removedError is the answer to a removed gateway's credential.
func removedError(name string) error {
	return failCode(http.StatusForbidden, api.CodeGatewayRemoved, "Authorization",
		"gateway %s was removed from the federation and its credential is refused; to bring it back, create a join token (fednet token create --gateway %s) and enroll it again", name, name)
}

// credentialOwner returns the gateway whose credential hashes to h, or "".
// It compares every gateway in constant time.
func credentialOwner(st *state, h store.Hash) string {
	owner := ""
	var zero store.Hash
	for name, g := range st.gateways {
		if g.CredentialHash != zero && hashEqual(g.CredentialHash, h) {
			owner = name
		}
	}
	return owner
}
