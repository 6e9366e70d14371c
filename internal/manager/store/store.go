// Package store persists the manager's state: spec revisions, the
// generation counter, join tokens, enrolled gateways, hosts joined through
// neighbor tunnels, every gateway's current plan (its generation and sum),
// the gateways' last status reports and the federation's identity (CA
// certificate, admin token hash). Store is the interface the manager uses;
// SQLite is the embedded implementation (a file in the manager's data
// directory), package etcd the one several managers share. The contracts
// are written for several managers sharing one store: every change is
// announced through Watch to every manager on the store, not only to the
// one that made it.
//
// The store holds data, not policy: it never parses specs or computes plans.
// It stores only hashes of secrets (join token secrets, gateway and host
// credentials). Package storetest is the conformance suite every
// implementation must pass.
package store

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
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
	// not the next one, or its generation does not increase): another
	// writer got there first. Read the state again (Watch) and retry.
	ErrConflict = errors.New("conflicting change")
	// ErrTokenUsed, ErrTokenExpired and ErrTokenRevoked: a Change's UseToken
	// named a token that may not be used any more.
	ErrTokenUsed    = errors.New("join token already used")
	ErrTokenExpired = errors.New("join token expired")
	ErrTokenRevoked = errors.New("join token revoked")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("store closed")
	// ErrNoDatabase: an opener was asked not to create a new database and
	// the file is missing or empty (see SQLiteConfig.Create).
	ErrNoDatabase = errors.New("no database")
	// ErrLocked: another process (or another open in this one) holds the
	// database.
	ErrLocked = errors.New("database in use")
	// ErrDamaged: the database file is damaged (not a database, or failing
	// the store's check).
	ErrDamaged = errors.New("damaged database")
)

// UnixNano is t in unix nanoseconds, 0 for the zero time: how stores keep
// times, so that they come back with their nanoseconds.
func UnixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// FromUnixNano is the time UnixNano(t) gave, in UTC; the zero time for 0.
func FromUnixNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

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
	// Replaces, on a host token, names a joined host that a join with this
	// token may replace (the operator's explicit consent); empty: the
	// joining host's name must be new.
	Replaces string
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
	// Activated is when an operator last made the gateway its site's
	// active gateway (fednet gateway activate); zero if never. The
	// gateway of a site activated last is the site's preferred one.
	Activated time.Time
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
	// Sum is the plan's digest (the manager's choice of function). The
	// manager computes plans from the stored spec and inputs and stores
	// only their sums: with a thousand gateways the plans themselves are
	// hundreds of megabytes, the sums tens of kilobytes.
	Sum Hash
	// JSON is the plan.Gateway in JSON, optional (stores written by
	// fednet before plan sums hold it; the manager no longer writes it).
	JSON []byte
}

// Identity is what every manager on a store shares beyond the state: the
// federation's CA certificate (agents pin its fingerprint; its private key
// is never in the store) and the SHA-256 of the admin token.
type Identity struct {
	// CACert is the CA certificate, PEM.
	CACert []byte
	// AdminTokenHash is HashSecret of the admin token.
	AdminTokenHash Hash
}

// Report is a gateway's last status report, kept as the agent sent it.
type Report struct {
	Gateway string
	// JSON is the api.StatusReport the manager accepted.
	JSON []byte
	// Received is when the manager got it (its clock).
	Received time.Time
}

// UseToken asks a Change to consume a join token.
type UseToken struct {
	SecretHash Hash
	// Now decides expiry: the token must expire after Now.
	Now time.Time
}

// Change is a set of writes that Commit applies atomically: all of them or
// none. A Change that writes a revision, gateway, host or plan (or deletes
// one) must set Generation, so that watchers learn about it; Commit
// refuses one that does not.
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
	// DeleteReports names gateways whose status report is dropped (no
	// error when there is none).
	DeleteReports []string
	// Generation, when not 0, is the new value of the generation counter;
	// it must be greater than the current value, else ErrConflict.
	Generation int64
}

// writesState reports whether c changes what Watch announces.
func (c Change) writesState() bool {
	return c.Spec != nil || len(c.Gateways) > 0 || len(c.Hosts) > 0 || len(c.DeleteHosts) > 0 || len(c.Plans) > 0 || len(c.DeletePlans) > 0
}

// Event is what Watch returns: the state that the Commits after a
// generation changed, as it is at Generation.
type Event struct {
	// Generation is the generation counter the event brings the watcher
	// to: every Commit up to it is in the event.
	Generation int64
	// Reset says the event holds the whole state (Watch with after < 0, or
	// a store whose history no longer reaches back to after): Gateways,
	// Hosts and Plans list everything there is, and whatever they do not
	// list is gone. Deleted lists are then empty.
	Reset bool
	// Spec is the current revision when a revision was stored after
	// after (with Reset: whenever there is one); nil otherwise.
	Spec *Revision
	// Gateways, Hosts and Plans are the current values of those stored
	// after after, by name.
	Gateways []Gateway
	Hosts    []Host
	Plans    []Plan
	// DeletedHosts and DeletedPlans name those deleted after after (and
	// not stored again since), sorted.
	DeletedHosts []string
	DeletedPlans []string
}

// Store persists the manager's state.
//
// Every method is safe for concurrent use, also by several managers on one
// store. Reads see every Commit that returned before they started, and
// never half of one. Returned values are copies the caller may keep and
// modify. After Close every method returns ErrClosed, and Watch calls
// waiting at the time return it too.
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

	// Watch returns what changed after generation after, as soon as the
	// generation counter is above it: at once when it already is, else
	// when a Commit (by any writer on the store) raises it, or ctx's error
	// when ctx ends first. With after < 0 it returns the whole state at
	// once (Event.Reset), read consistently at one generation.
	Watch(ctx context.Context, after int64) (Event, error)

	// Identity returns the federation's identity, or ErrNotFound while
	// none was stored.
	Identity(ctx context.Context) (Identity, error)
	// InitIdentity stores id as the federation's identity unless one is
	// stored already, and returns the stored one: id, or the earlier one
	// (of any number of concurrent calls, exactly one stores its id).
	InitIdentity(ctx context.Context, id Identity) (Identity, error)

	// PutReport stores a gateway's status report, replacing its previous
	// one. Reports are frequent (every few seconds per gateway) and
	// ephemeral: a store may trade durability for speed here (a crash may
	// lose the last seconds of reports), never for atomicity.
	PutReport(ctx context.Context, r Report) error
	// Reports returns every stored report, by gateway.
	Reports(ctx context.Context) ([]Report, error)

	// Close releases the store (and, for SQLite, its lock on the file).
	// It is safe to call more than once.
	Close() error
}

// RelayKind says what a RelayMessage carries.
type RelayKind int

// Relay message kinds.
const (
	// RelayRequest is a request for a gateway's agent, put by the
	// manager its operator asked.
	RelayRequest RelayKind = iota + 1
	// RelayResult is the agent's answer to request ID, put by the
	// manager the agent answered.
	RelayResult
	// RelayGone says request ID is over (its operator's manager got the
	// result or gave up, or it expired): forget it.
	RelayGone
)

func (k RelayKind) String() string {
	switch k {
	case RelayRequest:
		return "request"
	case RelayResult:
		return "result"
	case RelayGone:
		return "gone"
	}
	return fmt.Sprintf("RelayKind(%d)", int(k))
}

// RelayMessage is one message between the managers of a store.
type RelayMessage struct {
	Kind RelayKind
	// ID names the request (the manager's choice, unique).
	ID string
	// Gateway is the gateway whose agent the request is for.
	Gateway string
	// Data is the request or the result (the manager's encoding); empty
	// for RelayGone.
	Data []byte
}

// Relay passes short-lived messages between the managers of one store:
// requests an operator makes through one manager for an agent that may
// be watching another (a bandwidth measurement), and the agents' results.
// A Store that several managers share implements it (etcd); one that a
// single manager owns (SQLite) need not, since its manager relays in
// memory. Nothing relayed is durable: a request lives at most its TTL.
type Relay interface {
	// PutRelayRequest announces request m (Kind RelayRequest) to every
	// manager watching, for at most ttl; then it is gone.
	PutRelayRequest(ctx context.Context, m RelayMessage, ttl time.Duration) error
	// PutRelayResult announces the result of request m.ID (Kind
	// RelayResult); ErrNotFound when the request is gone.
	PutRelayResult(ctx context.Context, m RelayMessage) error
	// DeleteRelay ends request id (announced as RelayGone); no error
	// when it is gone already.
	DeleteRelay(ctx context.Context, id string) error
	// WatchRelay calls f with every message put after it started
	// (requests, results, and RelayGone for requests deleted or
	// expired), in order, until ctx ends or the store is closed; then it
	// returns the reason. ready, when not nil, is closed once messages
	// put from then on are sure to be seen.
	WatchRelay(ctx context.Context, ready chan<- struct{}, f func(RelayMessage)) error
}
