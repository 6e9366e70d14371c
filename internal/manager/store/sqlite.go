package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"modernc.org/sqlite" // also registers the "sqlite" driver (pure Go)

	"github.com/fednet/fednet/internal/plan"
)

// FileName is the SQLite database file in the manager's data directory.
const FileName = "fednet.db"

// busyTimeout is how long a statement waits for another connection's lock
// before failing with SQLITE_BUSY.
const busyTimeout = 10 * time.Second

// SQLite is a Store in one SQLite database file (WAL mode, pure-Go driver).
// Create it with OpenSQLite.
type SQLite struct {
	db *sql.DB

	mu     sync.Mutex // guards closed
	closed bool
}

var _ Store = (*SQLite)(nil)

// migrations turn schema version i into i+1; PRAGMA user_version holds the
// version a database is at. Append only: never edit a released migration.
var migrations = []string{
	`CREATE TABLE meta (
		key   TEXT PRIMARY KEY,
		value INTEGER NOT NULL
	);
	CREATE TABLE revisions (
		number  INTEGER PRIMARY KEY,
		yaml    TEXT    NOT NULL,
		created INTEGER NOT NULL -- unix nanoseconds
	);
	CREATE TABLE tokens (
		id          TEXT    PRIMARY KEY,
		gateway     TEXT    NOT NULL,
		secret_hash BLOB    NOT NULL UNIQUE,
		created     INTEGER NOT NULL,
		expires     INTEGER NOT NULL,
		used        INTEGER NOT NULL DEFAULT 0, -- unix nanoseconds, 0 = unused
		revoked     INTEGER NOT NULL DEFAULT 0
	);
	CREATE TABLE gateways (
		name             TEXT    PRIMARY KEY,
		public_key       BLOB    NOT NULL,
		credential_hash  BLOB    NOT NULL,
		rotate_requested INTEGER NOT NULL,
		rotate_answered  INTEGER NOT NULL,
		endpoint         TEXT    NOT NULL,
		observed_address TEXT    NOT NULL,
		enrolled         INTEGER NOT NULL,
		removed          INTEGER NOT NULL
	);
	CREATE TABLE plans (
		gateway    TEXT    PRIMARY KEY,
		generation INTEGER NOT NULL,
		revision   INTEGER NOT NULL,
		plan       TEXT    NOT NULL
	);`,
	`ALTER TABLE tokens ADD COLUMN site    TEXT NOT NULL DEFAULT '';
	ALTER TABLE tokens ADD COLUMN network TEXT NOT NULL DEFAULT '';
	CREATE TABLE hosts (
		name            TEXT    PRIMARY KEY,
		site            TEXT    NOT NULL,
		network         TEXT    NOT NULL,
		address         TEXT    NOT NULL,
		slot            INTEGER NOT NULL,
		credential_hash BLOB    NOT NULL,
		joined          INTEGER NOT NULL
	);`,
}

// OpenSQLite opens (creating if needed) the database file at path and
// brings its schema up to date. The caller must Close it.
func OpenSQLite(ctx context.Context, path string) (*SQLite, error) {
	if strings.ContainsAny(path, "?#") {
		return nil, fmt.Errorf("database path %q: must not contain ? or #", path)
	}
	// _txlock=immediate takes the write lock when a transaction begins, so
	// two writers never deadlock upgrading read locks; busy_timeout makes
	// them wait for each other instead of failing.
	dsn := fmt.Sprintf("file:%s?_txlock=immediate&_pragma=busy_timeout(%d)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=foreign_keys(1)",
		path, busyTimeout.Milliseconds())
	// SQLite creates its -wal and -shm files with the database's mode.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening database: %w", err)
	}
	f.Close()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	s := &SQLite{db: db}
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	return s, nil
}

// migrate applies the migrations the database has not seen yet, each in its
// own transaction.
func (s *SQLite) migrate(ctx context.Context) error {
	var mode string
	if err := s.db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return fmt.Errorf("reading journal mode: %w", err)
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("journal mode is %q, want wal (is the file on a file system without shared memory support?)", mode)
	}
	for {
		done, err := s.migrateOne(ctx)
		if err != nil || done {
			return err
		}
	}
}

func (s *SQLite) migrateOne(ctx context.Context) (done bool, err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("starting migration: %w", err)
	}
	defer tx.Rollback()
	var v int
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return false, fmt.Errorf("reading schema version: %w", err)
	}
	switch {
	case v == len(migrations):
		return true, nil
	case v > len(migrations):
		return false, fmt.Errorf("schema version %d is newer than this fednet knows (%d); run a newer fednet", v, len(migrations))
	}
	if _, err := tx.ExecContext(ctx, migrations[v]); err != nil {
		return false, fmt.Errorf("migrating schema to version %d: %w", v+1, err)
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", v+1)); err != nil {
		return false, fmt.Errorf("migrating schema to version %d: %w", v+1, err)
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("migrating schema to version %d: %w", v+1, err)
	}
	return false, nil
}

// Close closes the database. It is safe to call more than once.
func (s *SQLite) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	return s.db.Close()
}

func (s *SQLite) check() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	return nil
}

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// scanner is *sql.Row or *sql.Rows.
type scanner interface{ Scan(dest ...any) error }

// Spec implements Store.
func (s *SQLite) Spec(ctx context.Context) (Revision, error) {
	if err := s.check(); err != nil {
		return Revision{}, err
	}
	var r Revision
	var created int64
	err := s.db.QueryRowContext(ctx, "SELECT number, yaml, created FROM revisions ORDER BY number DESC LIMIT 1").Scan(&r.Number, &r.YAML, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return Revision{}, fmt.Errorf("current spec: %w", ErrNotFound)
	}
	if err != nil {
		return Revision{}, fmt.Errorf("reading current spec: %w", err)
	}
	r.Created = fromNanos(created)
	return r, nil
}

// Revisions implements Store.
func (s *SQLite) Revisions(ctx context.Context) ([]Revision, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, "SELECT number, yaml, created FROM revisions ORDER BY number")
	if err != nil {
		return nil, fmt.Errorf("listing revisions: %w", err)
	}
	defer rows.Close()
	out := []Revision{}
	for rows.Next() {
		var r Revision
		var created int64
		if err := rows.Scan(&r.Number, &r.YAML, &created); err != nil {
			return nil, fmt.Errorf("listing revisions: %w", err)
		}
		r.Created = fromNanos(created)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing revisions: %w", err)
	}
	return out, nil
}

// Generation implements Store.
func (s *SQLite) Generation(ctx context.Context) (int64, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	return generation(ctx, s.db)
}

// querier is *sql.DB or *sql.Tx.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func generation(ctx context.Context, q querier) (int64, error) {
	var g int64
	err := q.QueryRowContext(ctx, "SELECT value FROM meta WHERE key = 'generation'").Scan(&g)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading generation: %w", err)
	}
	return g, nil
}

const tokenColumns = "id, gateway, secret_hash, created, expires, used, revoked, site, network"

func scanToken(sc scanner) (Token, error) {
	var t Token
	var hash []byte
	var created, expires, used int64
	var revoked int
	if err := sc.Scan(&t.ID, &t.Gateway, &hash, &created, &expires, &used, &revoked, &t.Site, &t.Network); err != nil {
		return Token{}, err
	}
	if len(hash) != len(t.SecretHash) {
		return Token{}, fmt.Errorf("token %s: secret hash has %d bytes, want %d", t.ID, len(hash), len(t.SecretHash))
	}
	copy(t.SecretHash[:], hash)
	t.Created, t.Expires, t.Used = fromNanos(created), fromNanos(expires), fromNanos(used)
	t.Revoked = revoked != 0
	return t, nil
}

// CreateToken implements Store.
func (s *SQLite) CreateToken(ctx context.Context, t Token) error {
	if err := s.check(); err != nil {
		return err
	}
	_, err := s.db.ExecContext(ctx, "INSERT INTO tokens ("+tokenColumns+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
		t.ID, t.Gateway, t.SecretHash[:], nanos(t.Created), nanos(t.Expires), nanos(t.Used), boolInt(t.Revoked), t.Site, t.Network)
	if isConstraint(err) {
		return fmt.Errorf("storing token %s: %w", t.ID, ErrExists)
	}
	if err != nil {
		return fmt.Errorf("storing token %s: %w", t.ID, err)
	}
	return nil
}

// isConstraint reports whether err is SQLite's SQLITE_CONSTRAINT (a
// duplicate key, here).
func isConstraint(err error) bool {
	const sqliteConstraint = 19 // primary result code; extended codes keep it in the low byte
	var e *sqlite.Error
	return errors.As(err, &e) && e.Code()&0xff == sqliteConstraint
}

// Token implements Store.
func (s *SQLite) Token(ctx context.Context, id string) (Token, error) {
	if err := s.check(); err != nil {
		return Token{}, err
	}
	t, err := scanToken(s.db.QueryRowContext(ctx, "SELECT "+tokenColumns+" FROM tokens WHERE id = ?", id))
	if errors.Is(err, sql.ErrNoRows) {
		return Token{}, fmt.Errorf("token %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Token{}, fmt.Errorf("reading token %s: %w", id, err)
	}
	return t, nil
}

// TokenBySecret implements Store.
func (s *SQLite) TokenBySecret(ctx context.Context, h Hash) (Token, error) {
	if err := s.check(); err != nil {
		return Token{}, err
	}
	t, err := scanToken(s.db.QueryRowContext(ctx, "SELECT "+tokenColumns+" FROM tokens WHERE secret_hash = ?", h[:]))
	if errors.Is(err, sql.ErrNoRows) {
		return Token{}, fmt.Errorf("token: %w", ErrNotFound)
	}
	if err != nil {
		return Token{}, fmt.Errorf("reading token: %w", err)
	}
	return t, nil
}

// Tokens implements Store.
func (s *SQLite) Tokens(ctx context.Context) ([]Token, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, "SELECT "+tokenColumns+" FROM tokens ORDER BY created, id")
	if err != nil {
		return nil, fmt.Errorf("listing tokens: %w", err)
	}
	defer rows.Close()
	out := []Token{}
	for rows.Next() {
		t, err := scanToken(rows)
		if err != nil {
			return nil, fmt.Errorf("listing tokens: %w", err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing tokens: %w", err)
	}
	return out, nil
}

// RevokeToken implements Store.
func (s *SQLite) RevokeToken(ctx context.Context, id string) (Token, error) {
	if err := s.check(); err != nil {
		return Token{}, err
	}
	res, err := s.db.ExecContext(ctx, "UPDATE tokens SET revoked = 1 WHERE id = ?", id)
	if err != nil {
		return Token{}, fmt.Errorf("revoking token %s: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return Token{}, fmt.Errorf("revoking token %s: %w", id, err)
	} else if n == 0 {
		return Token{}, fmt.Errorf("token %s: %w", id, ErrNotFound)
	}
	return s.Token(ctx, id)
}

const gatewayColumns = "name, public_key, credential_hash, rotate_requested, rotate_answered, endpoint, observed_address, enrolled, removed"

// Gateways implements Store.
func (s *SQLite) Gateways(ctx context.Context) ([]Gateway, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, "SELECT "+gatewayColumns+" FROM gateways ORDER BY name")
	if err != nil {
		return nil, fmt.Errorf("listing gateways: %w", err)
	}
	defer rows.Close()
	out := []Gateway{}
	for rows.Next() {
		var g Gateway
		var key, cred []byte
		var enrolled int64
		var removed int
		if err := rows.Scan(&g.Name, &key, &cred, &g.RotateRequested, &g.RotateAnswered, &g.Endpoint, &g.ObservedAddress, &enrolled, &removed); err != nil {
			return nil, fmt.Errorf("listing gateways: %w", err)
		}
		if len(key) != len(g.PublicKey) || len(cred) != len(g.CredentialHash) {
			return nil, fmt.Errorf("listing gateways: gateway %s: damaged key or credential hash", g.Name)
		}
		g.PublicKey = plan.Key(key)
		g.CredentialHash = Hash(cred)
		g.Enrolled = fromNanos(enrolled)
		g.Removed = removed != 0
		out = append(out, g)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing gateways: %w", err)
	}
	return out, nil
}

const hostColumns = "name, site, network, address, slot, credential_hash, joined"

// Hosts implements Store.
func (s *SQLite) Hosts(ctx context.Context) ([]Host, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, "SELECT "+hostColumns+" FROM hosts ORDER BY name")
	if err != nil {
		return nil, fmt.Errorf("listing hosts: %w", err)
	}
	defer rows.Close()
	out := []Host{}
	for rows.Next() {
		var h Host
		var cred []byte
		var joined int64
		if err := rows.Scan(&h.Name, &h.Site, &h.Network, &h.Address, &h.Slot, &cred, &joined); err != nil {
			return nil, fmt.Errorf("listing hosts: %w", err)
		}
		if len(cred) != len(h.CredentialHash) {
			return nil, fmt.Errorf("listing hosts: host %s: damaged credential hash", h.Name)
		}
		h.CredentialHash = Hash(cred)
		h.Joined = fromNanos(joined)
		out = append(out, h)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing hosts: %w", err)
	}
	return out, nil
}

// Plans implements Store.
func (s *SQLite) Plans(ctx context.Context) ([]Plan, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, "SELECT gateway, generation, revision, plan FROM plans ORDER BY gateway")
	if err != nil {
		return nil, fmt.Errorf("listing plans: %w", err)
	}
	defer rows.Close()
	out := []Plan{}
	for rows.Next() {
		var p Plan
		var js string
		if err := rows.Scan(&p.Gateway, &p.Generation, &p.Revision, &js); err != nil {
			return nil, fmt.Errorf("listing plans: %w", err)
		}
		p.JSON = []byte(js)
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing plans: %w", err)
	}
	return out, nil
}

// Commit implements Store.
func (s *SQLite) Commit(ctx context.Context, c Change) error {
	if err := s.check(); err != nil {
		return err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("starting commit: %w", err)
	}
	defer tx.Rollback()
	if err := commitTx(ctx, tx, c); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("committing: %w", err)
	}
	return nil
}

func commitTx(ctx context.Context, tx *sql.Tx, c Change) error {
	if c.UseToken != nil {
		if err := useToken(ctx, tx, *c.UseToken); err != nil {
			return err
		}
	}
	if c.Generation != 0 {
		cur, err := generation(ctx, tx)
		if err != nil {
			return err
		}
		if c.Generation <= cur {
			return fmt.Errorf("setting generation %d: it is already %d: %w", c.Generation, cur, ErrConflict)
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO meta (key, value) VALUES ('generation', ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value", c.Generation); err != nil {
			return fmt.Errorf("setting generation: %w", err)
		}
	}
	if r := c.Spec; r != nil {
		var cur int
		if err := tx.QueryRowContext(ctx, "SELECT COALESCE(MAX(number), 0) FROM revisions").Scan(&cur); err != nil {
			return fmt.Errorf("reading current revision: %w", err)
		}
		if r.Number != cur+1 {
			return fmt.Errorf("storing revision %d: current is %d: %w", r.Number, cur, ErrConflict)
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO revisions (number, yaml, created) VALUES (?, ?, ?)", r.Number, r.YAML, nanos(r.Created)); err != nil {
			return fmt.Errorf("storing revision %d: %w", r.Number, err)
		}
	}
	for _, name := range c.RevokeTokensOf {
		if _, err := tx.ExecContext(ctx, "UPDATE tokens SET revoked = 1 WHERE gateway = ? AND used = 0", name); err != nil {
			return fmt.Errorf("revoking tokens of %s: %w", name, err)
		}
	}
	for _, g := range c.Gateways {
		_, err := tx.ExecContext(ctx, "INSERT OR REPLACE INTO gateways ("+gatewayColumns+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
			g.Name, g.PublicKey[:], g.CredentialHash[:], g.RotateRequested, g.RotateAnswered, g.Endpoint, g.ObservedAddress, nanos(g.Enrolled), boolInt(g.Removed))
		if err != nil {
			return fmt.Errorf("storing gateway %s: %w", g.Name, err)
		}
	}
	for _, h := range c.Hosts {
		_, err := tx.ExecContext(ctx, "INSERT OR REPLACE INTO hosts ("+hostColumns+") VALUES (?, ?, ?, ?, ?, ?, ?)",
			h.Name, h.Site, h.Network, h.Address, h.Slot, h.CredentialHash[:], nanos(h.Joined))
		if err != nil {
			return fmt.Errorf("storing host %s: %w", h.Name, err)
		}
	}
	for _, name := range c.DeleteHosts {
		if _, err := tx.ExecContext(ctx, "DELETE FROM hosts WHERE name = ?", name); err != nil {
			return fmt.Errorf("deleting host %s: %w", name, err)
		}
	}
	for _, p := range c.Plans {
		_, err := tx.ExecContext(ctx, "INSERT OR REPLACE INTO plans (gateway, generation, revision, plan) VALUES (?, ?, ?, ?)",
			p.Gateway, p.Generation, p.Revision, string(p.JSON))
		if err != nil {
			return fmt.Errorf("storing plan of %s: %w", p.Gateway, err)
		}
	}
	for _, name := range c.DeletePlans {
		if _, err := tx.ExecContext(ctx, "DELETE FROM plans WHERE gateway = ?", name); err != nil {
			return fmt.Errorf("deleting plan of %s: %w", name, err)
		}
	}
	return nil
}

// useToken consumes a token with one conditional update; when no row
// qualifies it reads the token to say why.
func useToken(ctx context.Context, tx *sql.Tx, u UseToken) error {
	if u.Now.IsZero() {
		return errors.New("using token: UseToken.Now is not set")
	}
	now := nanos(u.Now)
	res, err := tx.ExecContext(ctx, "UPDATE tokens SET used = ? WHERE secret_hash = ? AND used = 0 AND revoked = 0 AND expires > ?", now, u.SecretHash[:], now)
	if err != nil {
		return fmt.Errorf("using token: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("using token: %w", err)
	}
	if n == 1 {
		return nil
	}
	t, err := scanToken(tx.QueryRowContext(ctx, "SELECT "+tokenColumns+" FROM tokens WHERE secret_hash = ?", u.SecretHash[:]))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("using token: %w", ErrNotFound)
	case err != nil:
		return fmt.Errorf("using token: %w", err)
	case t.Revoked:
		return fmt.Errorf("using token %s: %w", t.ID, ErrTokenRevoked)
	case !t.Used.IsZero():
		return fmt.Errorf("using token %s: %w", t.ID, ErrTokenUsed)
	default:
		return fmt.Errorf("using token %s: %w", t.ID, ErrTokenExpired)
	}
}
