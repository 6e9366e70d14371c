package api

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// JoinTokenPrefix starts every join token, so one is recognisable in a
// terminal or a log (and can be redacted).
const JoinTokenPrefix = "fednetjoin1."

// JoinToken is what a join token carries: where the managers are, how to
// pin their certificates, and a one-time secret.
type JoinToken struct {
	// Manager is the base URL (https://host:port) of the manager that made
	// the token; every token has it (tokens of older fednet have only it).
	Manager string `json:"m"`
	// Managers are the base URLs of every manager of the federation
	// (several on one store), Manager first; absent when there is one.
	Managers []string `json:"ms,omitempty"`
	// CAFingerprint is the hex SHA-256 of the manager CA certificate's DER
	// bytes; the agent trusts only that CA.
	CAFingerprint string `json:"ca"`
	// ID names the token on the manager (for listing and revoking).
	ID string `json:"id"`
	// Secret proves the bearer may enroll, once, before expiry.
	Secret string `json:"s"`
}

// String encodes t as one copy-pasteable word.
func (t JoinToken) String() string {
	b, _ := json.Marshal(t) // only strings: cannot fail
	return JoinTokenPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// ParseJoinToken decodes a token made by JoinToken.String.
func ParseJoinToken(s string) (JoinToken, error) {
	var t JoinToken
	rest, ok := strings.CutPrefix(strings.TrimSpace(s), JoinTokenPrefix)
	if !ok {
		return t, fmt.Errorf("not a join token: it should start with %q (create one with: fednet token create --gateway NAME)", JoinTokenPrefix)
	}
	b, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil {
		return t, errors.New("join token is damaged (not base64url); copy it again whole")
	}
	if err := json.Unmarshal(b, &t); err != nil {
		return t, errors.New("join token is damaged (bad content); copy it again whole")
	}
	if t.Manager == "" || t.CAFingerprint == "" || t.ID == "" || t.Secret == "" {
		return t, errors.New("join token is incomplete (manager, CA fingerprint, id and secret are all needed)")
	}
	if len(t.Managers) == 0 {
		t.Managers = nil // "ms": [] is no list
	}
	if slices.Contains(t.Managers, "") {
		return t, errors.New("join token is damaged (an empty manager URL); copy it again whole")
	}
	return t, nil
}

// URLs returns the managers' URLs: Manager, then the other Managers.
func (t JoinToken) URLs() []string {
	out := []string{t.Manager}
	for _, u := range t.Managers {
		if !slices.Contains(out, u) {
			out = append(out, u)
		}
	}
	return out
}
