// Package store persists the manager's state: spec revisions, the
// generation counter, join tokens, enrolled gateways, hosts joined through
// neighbor tunnels and every gateway's current plan. Store is the interface the manager uses; SQLite is the
// embedded implementation (a file in the manager's data directory), and a
// second backend (etcd, for several managers) can implement the same
// contracts later.
//
// The store holds data, not policy: it never parses specs or computes plans.
// It stores only hashes of secrets (join token secrets, gateway credentials).
package store

import (
	"context"
	"crypto/sha256"
	"errors"
	"time"

	"github.com/fednet/fednet/internal/plan"
)

// Errors returned by a Store. Callers test them with errors.Is; a Store may
// wrap them with context.
var (
	// ErrNotFound: no such revision, token or gateway.
	ErrNotFound = errors.New("not found")
	// ErrExists: a token with that id or secret hash is already stored.
	ErrExists = errors.New("already exists")
	// ErrConflict: a Change's precondition failed (its revision number is
	// not the next one, or its generation does not increase).
	ErrConflict = errors.New("conflicting change")
	// ErrTokenUsed, ErrTokenExpired and ErrTokenRevoked: a Change's UseToken
	// named a token that may not be used any more.
	ErrTokenUsed    = errors.New("join token already used")
	ErrTokenExpired = errors.New("join token expired")
	ErrTokenRevoked = errors.New("join token revoked")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("store closed")
)

// Hash is the SHA-256 of a secret. The store never sees secrets themselves.
type Hash [sha256.Size]byte

// HashSecret returns the SHA-256 of secret.
func HashSecret(secret string) Hash { return sha256.Sum256([]byte(secret)) }

// Revision is one accepted spec, numbered from 1 without gaps.
type Revision struct {
	Number  int
	YAML    string
	Created time.Time
}

// Token is a join token. Its secret is held only as SecretHash.
type Token struct {
	ID         string
	Gateway    string
	SecretHash Hash
	Created    time.Time
	Expires    time.Time
	// Used is when the token was used for enrollment; zero while unused.
	Used    time.Time
	Revoked bool
	// Site and Network are set on a host token (Gateway empty): it lets
	// one host join that bridged network through a neighbor tunnel.
	Site, Network string
}

// IsHost reports whether t is a host token.
func (t Token) IsHost() bool { return t.Site != "" }

// Host is a host that joined a bridged network through a neighbor tunnel
// (fednet host join).
type Host struct {
	Name    string
	Site    string
	Network string
	// Address is the host's LAN address.
	Address string
	// Slot is the host's slot at its site (see plan.Host), stable until it
	// leaves.
	Slot int
	// CredentialHash is the SHA-256 of the host's bearer credential.
	CredentialHash Hash
	Joined         time.Time
}

// Gateway is what the manager knows about an enrolled (or removed) gateway
// beyond the spec.
type Gateway struct {
	Name      string
	PublicKey plan.Key
	// CredentialHash is the SHA-256 of the gateway's bearer credential.
	CredentialHash Hash
	// RotateRequested counts the key rotations an operator asked for;
	// RotateAnswered is the request the current key answers.
	RotateRequested int
	RotateAnswered  int
	// Endpoint is the agent's own idea of its public endpoint (may be "").
	Endpoint string
	// ObservedAddress is the source address enrollment came from.
	ObservedAddress string
	Enrolled        time.Time
	// Removed gateways get no plan, appear in no peer's plan, and their
	// credential is refused until they enroll again.
	Removed bool
}

// Plan is a gateway's current plan.
type Plan struct {
	Gateway string
	// Generation is the value of the generation counter when the plan (or
	// what the agent must act on with it, such as a key rotation request)
	// last changed.
	Generation int64
	// Revision is the spec revision the plan was computed from when it
	// last changed.
	Revision int
	// JSON is the plan.Gateway in JSON (plan.Decode reads it).
	JSON []byte
}

// UseToken asks a Change to consume a join token.
type UseToken struct {
	SecretHash Hash
	// Now decides expiry: the token must expire after Now.
	Now time.Time
}

// Change is a set of writes that Commit applies atomically: all of them or
// none.
type Change struct {
	// Spec, when set, is stored as the next revision. Its Number must be
	// one more than the current revision's (1 for the first), else Commit
	// fails with ErrConflict.
	Spec *Revision
	// UseToken, when set, marks the token with that secret hash as used at
	// Now, provided it exists, is unused, unrevoked and expires after Now;
	// otherwise Commit writes nothing and fails with ErrNotFound,
	// ErrTokenUsed, ErrTokenRevoked or ErrTokenExpired. Of any number of
	// concurrent Commits using the same token, exactly one succeeds.
	UseToken *UseToken
	// RevokeTokensOf names gateways whose unused tokens are revoked.
	RevokeTokensOf []string
	// Gateways are stored whole, replacing any gateway of the same name.
	Gateways []Gateway
	// Hosts are stored whole, replacing any host of the same name;
	// DeleteHosts names hosts that left (no error when there is none).
	Hosts       []Host
	DeleteHosts []string
	// Plans are stored whole, replacing the gateway's previous plan.
	Plans []Plan
	// DeletePlans names gateways whose plan is dropped (no error when there
	// is none).
	DeletePlans []string
	// Generation, when not 0, is the new value of the generation counter;
	// it must be greater than the current value, else ErrConflict.
	Generation int64
}

// Store persists the manager's state.
//
// Every method is safe for concurrent use. Reads see every Commit that
// returned before they started, and never half of one. Returned values are
// copies the caller may keep and modify. After Close every method returns
// ErrClosed.
type Store interface {
	// Spec returns the current (highest) revision, or ErrNotFound when no
	// spec was ever stored.
	Spec(ctx context.Context) (Revision, error)
	// Revisions returns every revision, oldest first.
	Revisions(ctx context.Context) ([]Revision, error)
	// Generation returns the generation counter: 0 until a Change sets it.
	Generation(ctx context.Context) (int64, error)

	// CreateToken stores a new token; ErrExists when its ID or secret hash
	// is taken.
	CreateToken(ctx context.Context, t Token) error
	// Token returns the token with that ID, or ErrNotFound.
	Token(ctx context.Context, id string) (Token, error)
	// TokenBySecret returns the token with that secret hash, or
	// ErrNotFound. It does not check or change its state; use a Change's
	// UseToken to consume it.
	TokenBySecret(ctx context.Context, h Hash) (Token, error)
	// Tokens returns every token, by creation time then ID.
	Tokens(ctx context.Context) ([]Token, error)
	// RevokeToken marks a token revoked (again: no error) and returns it;
	// ErrNotFound when there is no such token.
	RevokeToken(ctx context.Context, id string) (Token, error)

	// Gateways returns every stored gateway, by name.
	Gateways(ctx context.Context) ([]Gateway, error)
	// Hosts returns every joined host, by name.
	Hosts(ctx context.Context) ([]Host, error)
	// Plans returns every stored plan, by gateway name.
	Plans(ctx context.Context) ([]Plan, error)

	// Commit applies c atomically (see Change for its preconditions).
	// Concurrent Commits are serialized.
	Commit(ctx context.Context, c Change) error

	// Close releases the store. It is safe to call more than once.
	Close() error
}
