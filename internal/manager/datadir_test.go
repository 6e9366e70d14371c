package manager

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/manager/store"
)

// usedDataDir returns the data directory of a manager that ran (a spec, an
// enrolled gateway) and stopped, and that gateway's credential.
func usedDataDir(t *testing.T) (dir, cred string) {
	t.Helper()
	h := newHarness(t)
	h.putSpec(threeSites(t))
	cred, _ = h.enroll("aws-gw")
	h.stop()
	return h.dir, cred
}

// TestDamagedDataDirectory: a manager does not start over a data
// directory that has a CA and admin token but a missing, empty or damaged
// database: the error names the file and what is wrong (and, when the
// database is missing or empty, --reinitialize), there is no panic, and
// nothing is created or changed.
func TestDamagedDataDirectory(t *testing.T) {
	tests := []struct {
		name   string
		damage func(t *testing.T, db string)
		want   []string
	}{
		{"missing", func(t *testing.T, db string) { os.Remove(db) }, []string{"does not exist", "--reinitialize", "holds the CA and admin token"}},
		{"empty", func(t *testing.T, db string) { os.Truncate(db, 0) }, []string{"is empty", "--reinitialize"}},
		{"half truncated", func(t *testing.T, db string) {
			fi, err := os.Stat(db)
			if err != nil {
				t.Fatal(err)
			}
			os.Truncate(db, fi.Size()/2)
		}, []string{"damaged", "restore"}},
		{"header overwritten", func(t *testing.T, db string) {
			f, err := os.OpenFile(db, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			f.WriteAt([]byte("garbage garbage garbage!"), 0)
		}, []string{"file is not a database", "restore"}},
		{"schema version 99", func(t *testing.T, db string) {
			d, err := sql.Open("sqlite", db)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			if _, err := d.Exec("PRAGMA user_version = 99"); err != nil {
				t.Fatal(err)
			}
		}, []string{"schema version 99 is newer than this fednet knows"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, _ := usedDataDir(t)
			db := filepath.Join(dir, store.FileName)
			// The database is whole in its file once the manager stopped.
			if _, err := os.Stat(db + "-wal"); err == nil {
				t.Fatalf("%s-wal is left after a clean stop", db)
			}
			tt.damage(t, db)
			before, _ := os.ReadFile(db)
			_, errBefore := os.Stat(db)
			s, err := OpenStore(context.Background(), dir, false)
			if err == nil {
				s.Close()
				t.Fatal("the manager's store opened")
			}
			if s != nil {
				t.Errorf("a failed OpenStore returned a non-nil store (%T)", s)
			}
			t.Logf("error: %v", err)
			for _, w := range append(tt.want, db) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			after, _ := os.ReadFile(db)
			_, errAfter := os.Stat(db)
			if string(after) != string(before) || (errBefore == nil) != (errAfter == nil) {
				t.Error("a refused start created or changed the database")
			}
		})
	}
}

// TestReinitialize: with reinitialize, a data directory whose database is
// gone starts with an empty state: same CA and admin token, no spec, and
// the old credentials unknown (401, which agents retry on), not removed.
func TestReinitialize(t *testing.T) {
	dir, cred := usedDataDir(t)
	os.Remove(filepath.Join(dir, store.FileName))
	h := &harness{t: t, dir: dir, clock: &clock{}, log: &testLog{t: t}}
	t.Cleanup(h.log.stop)
	s, err := OpenStore(context.Background(), dir, true)
	if err != nil {
		t.Fatal(err)
	}
	h.store, h.shared = s, true
	t.Cleanup(func() { s.Close() })
	h.start()
	if a := h.do(req{method: "GET", path: api.PathSpec, token: h.m.AdminToken()}); a.status != 404 {
		t.Errorf("spec after reinitializing: %d", a.status)
	}
	a := h.do(req{method: "GET", path: gwPath(api.PathPlan, "aws-gw"), token: cred})
	if a.status != 401 || a.err.Code != api.CodeUnauthenticated {
		t.Errorf("a credential from before: %d %+v, want 401 unauthenticated", a.status, a.err)
	}
}

// TestNewWithoutStore: no store is an error naming it, not a panic.
func TestNewWithoutStore(t *testing.T) {
	m, err := New(Config{DataDir: t.TempDir(), Listen: "127.0.0.1:7443", Logf: t.Logf})
	if err == nil {
		m.Close()
		t.Fatal("New without a store succeeded")
	}
	if !strings.Contains(err.Error(), "Store is required") {
		t.Errorf("error %q", err)
	}
}
