package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"modernc.org/sqlite" // also registers the "sqlite" driver (pure Go)

	"github.com/fednet/fednet/internal/plan"
)

// FileName is the SQLite database file in the manager's data directory.
const FileName = "fednet.db"

// LockSuffix names the lock file next to the database (fednet.db.lock):
// OpenSQLite holds an exclusive lock on it until Close.
const LockSuffix = ".lock"

// busyTimeout is how long a statement waits for another connection's lock
// before failing with SQLITE_BUSY.
const busyTimeout = 10 * time.Second

// historyGenerations is how many generations of change history the store
// keeps for Watch (at least; it prunes when it holds twice as many); a
// watcher further behind gets the whole state (Reset). A variable for
// tests.
var historyGenerations int64 = 1024

// SQLiteConfig says which database OpenSQLite opens.
type SQLiteConfig struct {
	// Path is the database file. Required.
	Path string
	// Create allows starting a new, empty database when the file is
	// missing or empty (0 bytes). Without it such a file is refused with
	// ErrNoDatabase, so that a lost database is never silently replaced
	// by an empty one.
	Create bool
}

// SQLite is a Store in one SQLite database file (WAL mode, pure-Go driver).
// Create it with OpenSQLite. Commits are fsynced (synchronous=FULL);
// status reports are written through a second connection pool with
// synchronous=NORMAL, which does not fsync each report: a power loss may
// lose the last reports, never a commit, and never corrupts the file.
type SQLite struct {
	db   *sql.DB // state: revisions, tokens, gateways, hosts, plans
	rdb  *sql.DB // status reports
	lock *os.File

	reports *ReportBatcher // writes reports (putReports)

	mu      sync.Mutex    // guards closed and changed
	closed  bool          // set by Close
	done    chan struct{} // closed by Close
	changed chan struct{} // closed (and replaced) by every Commit that writes state
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
	// Watch's change history (every change with a generation above
	// meta.history_floor is in it; a database from before has no history
	// below its current generation), status reports and host tokens that
	// may replace a joined host.
	`ALTER TABLE tokens ADD COLUMN replaces TEXT NOT NULL DEFAULT '';
	CREATE TABLE changes (
		generation INTEGER NOT NULL,
		kind       TEXT    NOT NULL, -- spec, gateway, host, plan
		name       TEXT    NOT NULL
	);
	CREATE INDEX changes_generation ON changes (generation);
	CREATE TABLE reports (
		gateway  TEXT    PRIMARY KEY,
		report   TEXT    NOT NULL,
		received INTEGER NOT NULL
	);
	INSERT INTO meta (key, value) VALUES ('history_floor', COALESCE((SELECT value FROM meta WHERE key = 'generation'), 0));`,
	// Plan sums (the plans' JSON becomes optional) and the federation's
	// identity, shared by the managers of a store.
	`ALTER TABLE plans ADD COLUMN sum BLOB NOT NULL DEFAULT x'';
	CREATE TABLE identity (
		id               INTEGER PRIMARY KEY CHECK (id = 1),
		ca_cert          BLOB NOT NULL,
		admin_token_hash BLOB NOT NULL
	);`,
	// When an operator last made a gateway its site's active one.
	`ALTER TABLE gateways ADD COLUMN activated INTEGER NOT NULL DEFAULT 0;`,
}

// OpenSQLite opens the database file cfg.Path, creating it when missing or
// empty only if cfg.Create allows, takes an exclusive lock on
// cfg.Path+LockSuffix (held until Close), and brings the schema up to date.
// The caller must Close it. Errors name the file and say what is wrong with
// it: ErrNoDatabase (missing or empty), ErrLocked (another manager holds
// it), "file is not a database" (damaged), or a schema version newer than
// this fednet knows.
func OpenSQLite(ctx context.Context, cfg SQLiteConfig) (*SQLite, error) {
	path := cfg.Path
	if path == "" {
		return nil, errors.New("database path is empty")
	}
	if strings.ContainsAny(path, "?#") {
		return nil, fmt.Errorf("database path %q: must not contain ? or #", path)
	}
	lock, err := lockFile(path + LockSuffix)
	if err != nil {
		return nil, err
	}
	s, err := openLocked(ctx, path, cfg.Create)
	if err != nil {
		lock.Close()
		return nil, err
	}
	s.lock = lock
	return s, nil
}

// openLocked opens the database once its lock is held.
func openLocked(ctx context.Context, path string, create bool) (*SQLite, error) {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist) && !create:
		return nil, fmt.Errorf("%w: %s does not exist", ErrNoDatabase, path)
	case err == nil && fi.Size() == 0 && !create:
		return nil, fmt.Errorf("%w: %s is empty (0 bytes)", ErrNoDatabase, path)
	case err == nil && !fi.Mode().IsRegular():
		return nil, fmt.Errorf("database %s is not a regular file", path)
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("database %s: %w", path, err)
	}
	// SQLite creates its -wal and -shm files with the database's mode.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening database %s: %w", path, err)
	}
	f.Close()
	// _txlock=immediate takes the write lock when a transaction begins, so
	// two writers never deadlock upgrading read locks; busy_timeout makes
	// them wait for each other instead of failing.
	dsn := func(sync string) string {
		return fmt.Sprintf("file:%s?_txlock=immediate&_pragma=busy_timeout(%d)&_pragma=journal_mode(WAL)&_pragma=synchronous(%s)&_pragma=foreign_keys(1)",
			path, busyTimeout.Milliseconds(), sync)
	}
	db, err := sql.Open("sqlite", dsn("FULL"))
	if err != nil {
		return nil, fmt.Errorf("opening database %s: %w", path, err)
	}
	s := &SQLite{db: db, done: make(chan struct{}), changed: make(chan struct{})}
	s.reports = NewReportBatcher(s.putReports, ReportLinger)
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("opening database %s: %w", path, err)
	}
	if s.rdb, err = sql.Open("sqlite", dsn("NORMAL")); err != nil {
		db.Close()
		return nil, fmt.Errorf("opening database %s: %w", path, err)
	}
	// Reports come in hundreds a second at a thousand gateways, and SQLite
	// writes one at a time: a few connections kept open serve them all,
	// where database/sql's default (any number open, two kept) opened and
	// closed a connection per report beyond two at once.
	s.rdb.SetMaxOpenConns(reportConns)
	s.rdb.SetMaxIdleConns(reportConns)
	return s, nil
}

// reportConns is how many connections the reports' handle holds.
const reportConns = 4

// migrate applies the migrations the database has not seen yet, each in its
// own transaction.
func (s *SQLite) migrate(ctx context.Context) error {
	var mode string
	if err := s.db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return fmt.Errorf("reading journal mode: %w", sqliteError(err))
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
		return false, fmt.Errorf("starting migration: %w", sqliteError(err))
	}
	defer tx.Rollback()
	var v int
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return false, fmt.Errorf("reading schema version: %w", sqliteError(err))
	}
	switch {
	case v == len(migrations):
		if err := checkIntegrity(ctx, tx); err != nil {
			return false, err
		}
		return true, nil
	case v > len(migrations):
		return false, fmt.Errorf("schema version %d is newer than this fednet knows (%d); run a newer fednet", v, len(migrations))
	}
	if _, err := tx.ExecContext(ctx, migrations[v]); err != nil {
		return false, fmt.Errorf("migrating schema to version %d: %w", v+1, sqliteError(err))
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", v+1)); err != nil {
		return false, fmt.Errorf("migrating schema to version %d: %w", v+1, sqliteError(err))
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("migrating schema to version %d: %w", v+1, sqliteError(err))
	}
	return false, nil
}

// checkIntegrity runs SQLite's quick check, which reads every page: a
// truncated or partly overwritten file fails here, at start, rather than
// at the first read of a damaged table.
func checkIntegrity(ctx context.Context, tx *sql.Tx) error {
	rows, err := tx.QueryContext(ctx, "PRAGMA quick_check")
	if err != nil {
		return fmt.Errorf("checking the database: %w", sqliteError(err))
	}
	defer rows.Close()
	var problems []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return fmt.Errorf("checking the database: %w", sqliteError(err))
		}
		if line != "ok" && len(problems) < 3 {
			problems = append(problems, line)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("checking the database: %w", sqliteError(err))
	}
	if len(problems) > 0 {
		return &damagedError{msg: "the database is damaged", err: errors.New(strings.Join(problems, "; "))}
	}
	return nil
}

// sqliteError makes SQLite's errors about damaged files say so plainly.
func sqliteError(err error) error {
	const (
		sqliteCorrupt = 11
		sqliteNotADB  = 26
	)
	var e *sqlite.Error
	if errors.As(err, &e) {
		switch e.Code() & 0xff {
		case sqliteNotADB:
			return &damagedError{msg: "the file is damaged or not a fednet database", err: err}
		case sqliteCorrupt:
			return &damagedError{msg: "the database is damaged", err: err}
		}
	}
	return err
}

// damagedError is ErrDamaged with what SQLite said.
type damagedError struct {
	msg string
	err error
}

func (e *damagedError) Error() string   { return e.msg + ": " + e.err.Error() }
func (e *damagedError) Unwrap() []error { return []error{ErrDamaged, e.err} }

// Close closes the database and releases its lock. Watch calls waiting
// return ErrClosed. It is safe to call more than once, and on nil.
func (s *SQLite) Close() error {
	if s == nil {
		return nil
	}
	// The reports' writer first, without s.mu (its writes may take it):
	// no write is under way once the database is closed.
	s.reports.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	close(s.done)
	errs := []error{s.db.Close(), s.rdb.Close()}
	if s.lock != nil {
		errs = append(errs, s.lock.Close())
	}
	return errors.Join(errs...)
}

func (s *SQLite) check() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	return nil
}

// nanos and fromNanos are how stores keep times: unix nanoseconds, 0 for
// the zero time, read back in UTC.
func nanos(t time.Time) int64 { return UnixNano(t) }

func fromNanos(n int64) time.Time { return FromUnixNano(n) }

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// scanner is *sql.Row or *sql.Rows.
type scanner interface{ Scan(dest ...any) error }

// querier is *sql.DB or *sql.Tx.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Spec implements Store.
func (s *SQLite) Spec(ctx context.Context) (Revision, error) {
	if err := s.check(); err != nil {
		return Revision{}, err
	}
	return currentSpec(ctx, s.db)
}

func currentSpec(ctx context.Context, q querier) (Revision, error) {
	var r Revision
	var created int64
	err := q.QueryRowContext(ctx, "SELECT number, yaml, created FROM revisions ORDER BY number DESC LIMIT 1").Scan(&r.Number, &r.YAML, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return Revision{}, fmt.Errorf("current spec: %w", ErrNotFound)
	}
	if err != nil {
		return Revision{}, fmt.Errorf("reading current spec: %w", sqliteError(err))
	}
	r.Created = fromNanos(created)
	return r, nil
}

// Revisions implements Store.
func (s *SQLite) Revisions(ctx context.Context) ([]Revision, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	return list(ctx, s.db, "listing revisions", "SELECT number, yaml, created FROM revisions ORDER BY number", nil, func(sc scanner) (Revision, error) {
		var r Revision
		var created int64
		err := sc.Scan(&r.Number, &r.YAML, &created)
		r.Created = fromNanos(created)
		return r, err
	})
}

// list runs query and scans every row with scan; what names the listing in
// errors.
func list[T any](ctx context.Context, q querier, what, query string, args []any, scan func(scanner) (T, error)) ([]T, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, sqliteError(err))
	}
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, sqliteError(err))
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, sqliteError(err))
	}
	return out, nil
}

// Generation implements Store.
func (s *SQLite) Generation(ctx context.Context) (int64, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	return metaValue(ctx, s.db, "generation")
}

// metaValue reads a meta row; 0 when there is none.
func metaValue(ctx context.Context, q querier, key string) (int64, error) {
	var v int64
	err := q.QueryRowContext(ctx, "SELECT value FROM meta WHERE key = ?", key).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", key, sqliteError(err))
	}
	return v, nil
}

func setMeta(ctx context.Context, tx *sql.Tx, key string, v int64) error {
	if _, err := tx.ExecContext(ctx, "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value", key, v); err != nil {
		return fmt.Errorf("setting %s: %w", key, err)
	}
	return nil
}

const tokenColumns = "id, gateway, secret_hash, created, expires, used, revoked, site, network, replaces"

func scanToken(sc scanner) (Token, error) {
	var t Token
	var hash []byte
	var created, expires, used int64
	var revoked int
	if err := sc.Scan(&t.ID, &t.Gateway, &hash, &created, &expires, &used, &revoked, &t.Site, &t.Network, &t.Replaces); err != nil {
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
	_, err := s.db.ExecContext(ctx, "INSERT INTO tokens ("+tokenColumns+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
		t.ID, t.Gateway, t.SecretHash[:], nanos(t.Created), nanos(t.Expires), nanos(t.Used), boolInt(t.Revoked), t.Site, t.Network, t.Replaces)
	if isConstraint(err) {
		return fmt.Errorf("storing token %s: %w", t.ID, ErrExists)
	}
	if err != nil {
		return fmt.Errorf("storing token %s: %w", t.ID, sqliteError(err))
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
		return Token{}, fmt.Errorf("reading token %s: %w", id, sqliteError(err))
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
		return Token{}, fmt.Errorf("reading token: %w", sqliteError(err))
	}
	return t, nil
}

// Tokens implements Store.
func (s *SQLite) Tokens(ctx context.Context) ([]Token, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	return list(ctx, s.db, "listing tokens", "SELECT "+tokenColumns+" FROM tokens ORDER BY created, id", nil, scanToken)
}

// RevokeToken implements Store.
func (s *SQLite) RevokeToken(ctx context.Context, id string) (Token, error) {
	if err := s.check(); err != nil {
		return Token{}, err
	}
	res, err := s.db.ExecContext(ctx, "UPDATE tokens SET revoked = 1 WHERE id = ?", id)
	if err != nil {
		return Token{}, fmt.Errorf("revoking token %s: %w", id, sqliteError(err))
	}
	if n, err := res.RowsAffected(); err != nil {
		return Token{}, fmt.Errorf("revoking token %s: %w", id, err)
	} else if n == 0 {
		return Token{}, fmt.Errorf("token %s: %w", id, ErrNotFound)
	}
	return s.Token(ctx, id)
}

const gatewayColumns = "name, public_key, credential_hash, rotate_requested, rotate_answered, endpoint, observed_address, enrolled, removed, activated"

func scanGateway(sc scanner) (Gateway, error) {
	var g Gateway
	var key, cred []byte
	var enrolled int64
	var removed int
	var activated int64
	if err := sc.Scan(&g.Name, &key, &cred, &g.RotateRequested, &g.RotateAnswered, &g.Endpoint, &g.ObservedAddress, &enrolled, &removed, &activated); err != nil {
		return Gateway{}, err
	}
	if len(key) != len(g.PublicKey) || len(cred) != len(g.CredentialHash) {
		return Gateway{}, fmt.Errorf("gateway %s: damaged key or credential hash", g.Name)
	}
	g.PublicKey = plan.Key(key)
	g.CredentialHash = Hash(cred)
	g.Enrolled = fromNanos(enrolled)
	g.Removed = removed != 0
	g.Activated = fromNanos(activated)
	return g, nil
}

// Gateways implements Store.
func (s *SQLite) Gateways(ctx context.Context) ([]Gateway, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	return list(ctx, s.db, "listing gateways", "SELECT "+gatewayColumns+" FROM gateways ORDER BY name", nil, scanGateway)
}

const hostColumns = "name, site, network, address, slot, credential_hash, joined"

func scanHost(sc scanner) (Host, error) {
	var h Host
	var cred []byte
	var joined int64
	if err := sc.Scan(&h.Name, &h.Site, &h.Network, &h.Address, &h.Slot, &cred, &joined); err != nil {
		return Host{}, err
	}
	if len(cred) != len(h.CredentialHash) {
		return Host{}, fmt.Errorf("host %s: damaged credential hash", h.Name)
	}
	h.CredentialHash = Hash(cred)
	h.Joined = fromNanos(joined)
	return h, nil
}

// Hosts implements Store.
func (s *SQLite) Hosts(ctx context.Context) ([]Host, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	return list(ctx, s.db, "listing hosts", "SELECT "+hostColumns+" FROM hosts ORDER BY name", nil, scanHost)
}

const planColumns = "gateway, generation, revision, sum, plan"

func scanPlan(sc scanner) (Plan, error) {
	var p Plan
	var js string
	var sum []byte
	if err := sc.Scan(&p.Gateway, &p.Generation, &p.Revision, &sum, &js); err != nil {
		return Plan{}, err
	}
	if len(sum) == len(p.Sum) {
		copy(p.Sum[:], sum)
	} else if len(sum) != 0 {
		return Plan{}, fmt.Errorf("plan of %s: damaged sum", p.Gateway)
	}
	if js != "" {
		p.JSON = []byte(js)
	}
	return p, nil
}

// Plans implements Store.
func (s *SQLite) Plans(ctx context.Context) ([]Plan, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	return list(ctx, s.db, "listing plans", "SELECT "+planColumns+" FROM plans ORDER BY gateway", nil, scanPlan)
}

// Commit implements Store.
func (s *SQLite) Commit(ctx context.Context, c Change) error {
	if err := s.check(); err != nil {
		return err
	}
	if c.Generation == 0 && c.writesState() {
		return errors.New("commit: a Change that writes a revision, gateway, host or plan must set Generation")
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("starting commit: %w", sqliteError(err))
	}
	defer tx.Rollback()
	if err := commitTx(ctx, tx, c); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("committing: %w", sqliteError(err))
	}
	if c.Generation != 0 {
		s.mu.Lock()
		close(s.changed)
		s.changed = make(chan struct{})
		s.mu.Unlock()
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
		cur, err := metaValue(ctx, tx, "generation")
		if err != nil {
			return err
		}
		if c.Generation <= cur {
			return fmt.Errorf("setting generation %d: it is already %d: %w", c.Generation, cur, ErrConflict)
		}
		if err := setMeta(ctx, tx, "generation", c.Generation); err != nil {
			return err
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
		_, err := tx.ExecContext(ctx, "INSERT OR REPLACE INTO gateways ("+gatewayColumns+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
			g.Name, g.PublicKey[:], g.CredentialHash[:], g.RotateRequested, g.RotateAnswered, g.Endpoint, g.ObservedAddress, nanos(g.Enrolled), boolInt(g.Removed), nanos(g.Activated))
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
		_, err := tx.ExecContext(ctx, "INSERT OR REPLACE INTO plans ("+planColumns+") VALUES (?, ?, ?, ?, ?)",
			p.Gateway, p.Generation, p.Revision, sumBytes(p.Sum), string(p.JSON))
		if err != nil {
			return fmt.Errorf("storing plan of %s: %w", p.Gateway, err)
		}
	}
	for _, name := range c.DeletePlans {
		if _, err := tx.ExecContext(ctx, "DELETE FROM plans WHERE gateway = ?", name); err != nil {
			return fmt.Errorf("deleting plan of %s: %w", name, err)
		}
	}
	for _, name := range c.DeleteReports {
		if _, err := tx.ExecContext(ctx, "DELETE FROM reports WHERE gateway = ?", name); err != nil {
			return fmt.Errorf("deleting the report of %s: %w", name, err)
		}
	}
	if c.Generation != 0 {
		return logChanges(ctx, tx, c)
	}
	return nil
}

// logChanges records what c changed under its generation, for Watch, and
// drops history older than historyGenerations.
func logChanges(ctx context.Context, tx *sql.Tx, c Change) error {
	type entry struct{ kind, name string }
	var log []entry
	if c.Spec != nil {
		log = append(log, entry{"spec", ""})
	}
	for _, g := range c.Gateways {
		log = append(log, entry{"gateway", g.Name})
	}
	for _, h := range c.Hosts {
		log = append(log, entry{"host", h.Name})
	}
	for _, n := range c.DeleteHosts {
		log = append(log, entry{"host", n})
	}
	for _, p := range c.Plans {
		log = append(log, entry{"plan", p.Gateway})
	}
	for _, n := range c.DeletePlans {
		log = append(log, entry{"plan", n})
	}
	for _, e := range log {
		if _, err := tx.ExecContext(ctx, "INSERT INTO changes (generation, kind, name) VALUES (?, ?, ?)", c.Generation, e.kind, e.name); err != nil {
			return fmt.Errorf("recording changes: %w", err)
		}
	}
	floor, err := metaValue(ctx, tx, "history_floor")
	if err != nil {
		return err
	}
	if c.Generation-floor > 2*historyGenerations {
		floor = c.Generation - historyGenerations
		if _, err := tx.ExecContext(ctx, "DELETE FROM changes WHERE generation <= ?", floor); err != nil {
			return fmt.Errorf("dropping old changes: %w", err)
		}
		return setMeta(ctx, tx, "history_floor", floor)
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

// Watch implements Store. Commits through this SQLite value wake it; the
// file lock keeps every other writer away.
func (s *SQLite) Watch(ctx context.Context, after int64) (Event, error) {
	for {
		s.mu.Lock()
		closed, changed := s.closed, s.changed
		s.mu.Unlock()
		if closed {
			return Event{}, ErrClosed
		}
		ev, ok, err := s.event(ctx, after)
		if err != nil && s.check() != nil {
			return Event{}, ErrClosed // closed while reading
		}
		if err != nil || ok {
			return ev, err
		}
		select {
		case <-changed:
		case <-s.done:
			return Event{}, ErrClosed
		case <-ctx.Done():
			return Event{}, ctx.Err()
		}
	}
}

// event reads, in one read transaction, what changed after generation
// after; ok is false when the generation is not above after yet.
func (s *SQLite) event(ctx context.Context, after int64) (ev Event, ok bool, err error) {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return Event{}, false, fmt.Errorf("watching: %w", sqliteError(err))
	}
	defer tx.Rollback()
	if ev.Generation, err = metaValue(ctx, tx, "generation"); err != nil {
		return Event{}, false, err
	}
	if after >= 0 && ev.Generation <= after {
		return Event{}, false, nil
	}
	floor, err := metaValue(ctx, tx, "history_floor")
	if err != nil {
		return Event{}, false, err
	}
	if ev.Reset = after < floor; ev.Reset {
		err = readAll(ctx, tx, &ev)
	} else {
		err = readChanged(ctx, tx, after, &ev)
	}
	if err != nil {
		return Event{}, false, err
	}
	return ev, true, nil
}

// readAll fills ev with the whole state.
func readAll(ctx context.Context, q querier, ev *Event) error {
	spec, err := currentSpec(ctx, q)
	switch {
	case err == nil:
		ev.Spec = &spec
	case !errors.Is(err, ErrNotFound):
		return err
	}
	if ev.Gateways, err = list(ctx, q, "reading gateways", "SELECT "+gatewayColumns+" FROM gateways ORDER BY name", nil, scanGateway); err != nil {
		return err
	}
	if ev.Hosts, err = list(ctx, q, "reading hosts", "SELECT "+hostColumns+" FROM hosts ORDER BY name", nil, scanHost); err != nil {
		return err
	}
	ev.Plans, err = list(ctx, q, "reading plans", "SELECT "+planColumns+" FROM plans ORDER BY gateway", nil, scanPlan)
	return err
}

// readChanged fills ev with the current values of what the history says
// changed after generation after.
func readChanged(ctx context.Context, q querier, after int64, ev *Event) error {
	type entry struct{ kind, name string }
	changed, err := list(ctx, q, "reading changes", "SELECT DISTINCT kind, name FROM changes WHERE generation > ? ORDER BY kind, name", []any{after}, func(sc scanner) (entry, error) {
		var e entry
		err := sc.Scan(&e.kind, &e.name)
		return e, err
	})
	if err != nil {
		return err
	}
	names := map[string][]string{}
	for _, e := range changed {
		names[e.kind] = append(names[e.kind], e.name)
	}
	if len(names["spec"]) > 0 {
		spec, err := currentSpec(ctx, q)
		if err != nil {
			return err
		}
		ev.Spec = &spec
	}
	if ev.Gateways, err = byNames(ctx, q, "gateways", "SELECT "+gatewayColumns+" FROM gateways WHERE name IN (%s) ORDER BY name", names["gateway"], scanGateway); err != nil {
		return err
	}
	if ev.Hosts, err = byNames(ctx, q, "hosts", "SELECT "+hostColumns+" FROM hosts WHERE name IN (%s) ORDER BY name", names["host"], scanHost); err != nil {
		return err
	}
	ev.DeletedHosts = missing(names["host"], ev.Hosts, func(h Host) string { return h.Name })
	if ev.Plans, err = byNames(ctx, q, "plans", "SELECT "+planColumns+" FROM plans WHERE gateway IN (%s) ORDER BY gateway", names["plan"], scanPlan); err != nil {
		return err
	}
	ev.DeletedPlans = missing(names["plan"], ev.Plans, func(p Plan) string { return p.Gateway })
	return nil
}

// byNames reads the rows whose name is in names, a batch of names at a
// time; query has one %s for the placeholders.
func byNames[T any](ctx context.Context, q querier, what, query string, names []string, scan func(scanner) (T, error)) ([]T, error) {
	const batch = 500
	var out []T
	for chunk := range slices.Chunk(names, batch) {
		args := make([]any, len(chunk))
		for i, n := range chunk {
			args[i] = n
		}
		marks := strings.TrimSuffix(strings.Repeat("?, ", len(chunk)), ", ")
		got, err := list(ctx, q, "reading "+what, fmt.Sprintf(query, marks), args, scan)
		if err != nil {
			return nil, err
		}
		out = append(out, got...)
	}
	return out, nil
}

// missing returns the sorted names that no value in have carries.
func missing[T any](names []string, have []T, name func(T) string) []string {
	found := map[string]bool{}
	for _, v := range have {
		found[name(v)] = true
	}
	var out []string
	for _, n := range names {
		if !found[n] {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// PutReport implements Store. It writes through the connection pool
// without fsync (see SQLite), in batches (ReportBatcher): a thousand
// gateways report a couple of hundred times a second, and each change of
// every plan makes every agent report at once.
func (s *SQLite) PutReport(ctx context.Context, r Report) error {
	if err := s.check(); err != nil {
		return err
	}
	return s.reports.Put(ctx, r)
}

// putReports writes reports in one transaction (a later report of a
// gateway replaces an earlier one).
func (s *SQLite) putReports(reports []Report) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tx, err := s.rdb.BeginTx(ctx, nil)
	if err != nil {
		return sqliteError(err)
	}
	defer tx.Rollback()
	stmt, err := tx.PrepareContext(ctx, "INSERT INTO reports (gateway, report, received) VALUES (?, ?, ?) ON CONFLICT (gateway) DO UPDATE SET report = excluded.report, received = excluded.received")
	if err != nil {
		return sqliteError(err)
	}
	defer stmt.Close()
	for _, r := range reports {
		if _, err := stmt.ExecContext(ctx, r.Gateway, string(r.JSON), nanos(r.Received)); err != nil {
			return sqliteError(err)
		}
	}
	return sqliteError(tx.Commit())
}

// sumBytes stores the zero sum as no bytes (plans stored before sums).
func sumBytes(h Hash) []byte {
	if h == (Hash{}) {
		return []byte{}
	}
	return h[:]
}

// Identity implements Store.
func (s *SQLite) Identity(ctx context.Context) (Identity, error) {
	if err := s.check(); err != nil {
		return Identity{}, err
	}
	return readIdentity(ctx, s.db)
}

func readIdentity(ctx context.Context, q querier) (Identity, error) {
	var id Identity
	var hash []byte
	err := q.QueryRowContext(ctx, "SELECT ca_cert, admin_token_hash FROM identity WHERE id = 1").Scan(&id.CACert, &hash)
	if errors.Is(err, sql.ErrNoRows) {
		return Identity{}, fmt.Errorf("identity: %w", ErrNotFound)
	}
	if err != nil {
		return Identity{}, fmt.Errorf("reading the identity: %w", sqliteError(err))
	}
	if len(hash) != len(id.AdminTokenHash) {
		return Identity{}, errors.New("identity: damaged admin token hash")
	}
	copy(id.AdminTokenHash[:], hash)
	return id, nil
}

// InitIdentity implements Store.
func (s *SQLite) InitIdentity(ctx context.Context, id Identity) (Identity, error) {
	if err := s.check(); err != nil {
		return Identity{}, err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return Identity{}, fmt.Errorf("storing the identity: %w", sqliteError(err))
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "INSERT OR IGNORE INTO identity (id, ca_cert, admin_token_hash) VALUES (1, ?, ?)", id.CACert, id.AdminTokenHash[:]); err != nil {
		return Identity{}, fmt.Errorf("storing the identity: %w", sqliteError(err))
	}
	got, err := readIdentity(ctx, tx)
	if err != nil {
		return Identity{}, err
	}
	if err := tx.Commit(); err != nil {
		return Identity{}, fmt.Errorf("storing the identity: %w", sqliteError(err))
	}
	return got, nil
}

// Reports implements Store.
func (s *SQLite) Reports(ctx context.Context) ([]Report, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	return list(ctx, s.rdb, "listing reports", "SELECT gateway, report, received FROM reports ORDER BY gateway", nil, func(sc scanner) (Report, error) {
		var r Report
		var js string
		var received int64
		err := sc.Scan(&r.Gateway, &js, &received)
		r.JSON, r.Received = []byte(js), fromNanos(received)
		return r, err
	})
}
