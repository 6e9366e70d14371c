package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func openTest(t *testing.T, dir string) *SQLite {
	t.Helper()
	s, err := OpenSQLite(context.Background(), SQLiteConfig{Path: filepath.Join(dir, FileName), Create: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

var t0 = time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC)

// TestReopenKeepsEverything: what a commit stored, and the last reports,
// survive closing and opening the file again.
func TestReopenKeepsEverything(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openTest(t, dir)
	rev := Revision{Number: 1, YAML: "name: x\n", Created: t0}
	tok := Token{ID: "h1", SecretHash: HashSecret("host"), Created: t0, Expires: t0.Add(time.Hour), Site: "aws-eu", Network: "lan", Replaces: "web1"}
	gw := Gateway{Name: "gw-a", CredentialHash: HashSecret("cred"), RotateRequested: 2, Endpoint: "198.51.100.1:51820", Enrolled: t0}
	host := Host{Name: "web1", Site: "aws-eu", Network: "lan", Address: "10.1.0.10", Slot: 2, CredentialHash: HashSecret("c"), Joined: t0}
	pl := Plan{Gateway: "gw-a", Generation: 3, Revision: 1, JSON: []byte(`{"gateway":"gw-a"}`)}
	rep := Report{Gateway: "gw-a", JSON: []byte(`{"generation":3}`), Received: t0}
	if err := s.CreateToken(ctx, tok); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(ctx, Change{Spec: &rev, Gateways: []Gateway{gw}, Hosts: []Host{host}, Plans: []Plan{pl}, Generation: 3}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutReport(ctx, rep); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, dir)
	ev, err := s.Watch(ctx, -1)
	want := Event{Generation: 3, Reset: true, Spec: &rev, Gateways: []Gateway{gw}, Hosts: []Host{host}, Plans: []Plan{pl}}
	if err != nil || !reflect.DeepEqual(ev, want) {
		t.Errorf("state after reopening = %+v, %v\nwant %+v", ev, err, want)
	}
	if got, err := s.Token(ctx, "h1"); err != nil || got != tok {
		t.Errorf("Token = %+v, %v; want %+v", got, err, tok)
	}
	if got, err := s.Reports(ctx); err != nil || !reflect.DeepEqual(got, []Report{rep}) {
		t.Errorf("Reports = %+v, %v; want %+v", got, err, rep)
	}
	for _, f := range []string{FileName, FileName + LockSuffix} {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", f, fi.Mode().Perm())
		}
	}
}

// TestLock: a second open of a database in use is refused, naming the lock
// file, and works once the first is closed.
func TestLock(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	cfg := SQLiteConfig{Path: filepath.Join(dir, FileName), Create: true}
	if s2, err := OpenSQLite(context.Background(), cfg); err == nil {
		s2.Close()
		t.Fatal("a second store opened a database in use")
	} else if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), FileName+LockSuffix) || !strings.Contains(err.Error(), "another fednet manager") {
		t.Errorf("second open: %v; want ErrLocked naming the lock file", err)
	}
	s.Close()
	s2, err := OpenSQLite(context.Background(), cfg)
	if err != nil {
		t.Fatalf("open after Close: %v", err)
	}
	s2.Close()
}

// TestDamagedFiles: every kind of damage is refused at open with an error
// naming the file and saying what is wrong; nothing is created or changed
// by a refused open.
func TestDamagedFiles(t *testing.T) {
	ctx := context.Background()
	good := func(t *testing.T) string {
		dir := t.TempDir()
		s := openTest(t, dir)
		rev := Revision{Number: 1, YAML: strings.Repeat("# padding\n", 2000), Created: t0}
		var plans []Plan
		for i := range 50 {
			plans = append(plans, Plan{Gateway: fmt.Sprintf("gw-%02d", i), Generation: 1, JSON: []byte(strings.Repeat("x", 3000))})
		}
		if err := s.Commit(ctx, Change{Spec: &rev, Plans: plans, Generation: 1}); err != nil {
			t.Fatal(err)
		}
		s.Close()
		// Fold the WAL into the file, so that damage to the file is damage
		// to the data.
		db, err := sql.Open("sqlite", filepath.Join(dir, FileName))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec("PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
			t.Fatal(err)
		}
		db.Close()
		return filepath.Join(dir, FileName)
	}
	tests := []struct {
		name   string
		damage func(t *testing.T, path string)
		create bool
		want   []string
		is     error
	}{
		{"missing", func(t *testing.T, path string) { os.Remove(path) }, false, []string{"does not exist"}, ErrNoDatabase},
		{"empty", func(t *testing.T, path string) { os.Truncate(path, 0) }, false, []string{"is empty"}, ErrNoDatabase},
		{"half truncated", func(t *testing.T, path string) {
			fi, _ := os.Stat(path)
			os.Truncate(path, fi.Size()/2)
		}, false, []string{"damaged"}, nil},
		{"header overwritten", func(t *testing.T, path string) {
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.WriteAt([]byte("this is not sqlite at all"), 0)
			f.Close()
		}, true, []string{"file is not a database"}, nil},
		{"schema version 99", func(t *testing.T, path string) {
			db, err := sql.Open("sqlite", path)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if _, err := db.Exec("PRAGMA user_version = 99"); err != nil {
				t.Fatal(err)
			}
		}, true, []string{"schema version 99 is newer than this fednet knows"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := good(t)
			tt.damage(t, path)
			before, _ := os.ReadFile(path)
			s, err := OpenSQLite(ctx, SQLiteConfig{Path: path, Create: tt.create})
			if err == nil {
				s.Close()
				t.Fatal("a damaged database opened")
			}
			if s != nil {
				t.Error("a failed open returned a non-nil *SQLite")
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name %s", err, path)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %q is not %v", err, tt.is)
			}
			if after, _ := os.ReadFile(path); string(after) != string(before) {
				t.Error("a refused open changed the file")
			}
			// The lock is released: a fresh database can take the place.
			if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
			os.Remove(path + "-wal")
			os.Remove(path + "-shm")
			s, err = OpenSQLite(ctx, SQLiteConfig{Path: path, Create: true})
			if err != nil {
				t.Fatalf("opening a new database after a refused open: %v", err)
			}
			s.Close()
		})
	}
	// Create allows a missing or empty file.
	for _, prep := range []func(string){func(p string) {}, func(p string) { os.WriteFile(p, nil, 0o600) }} {
		path := filepath.Join(t.TempDir(), FileName)
		prep(path)
		s, err := OpenSQLite(ctx, SQLiteConfig{Path: path, Create: true})
		if err != nil {
			t.Fatalf("Create on a missing or empty file: %v", err)
		}
		s.Close()
	}
}

// TestWatchHistory: a watcher further behind than the kept history gets
// the whole state, flagged Reset.
func TestWatchHistory(t *testing.T) {
	defer func(h int64) { historyGenerations = h }(historyGenerations)
	historyGenerations = 4
	ctx := context.Background()
	s := openTest(t, t.TempDir())
	for g := int64(1); g <= 12; g++ {
		p := Plan{Gateway: fmt.Sprintf("gw-%d", g%3), Generation: g, JSON: []byte("{}")}
		if err := s.Commit(ctx, Change{Plans: []Plan{p}, Generation: g}); err != nil {
			t.Fatal(err)
		}
	}
	ev, err := s.Watch(ctx, 1)
	if err != nil || !ev.Reset || ev.Generation != 12 || len(ev.Plans) != 3 {
		t.Errorf("Watch(1) with history pruned = %+v, %v; want the whole state", ev, err)
	}
	ev, err = s.Watch(ctx, 11)
	if err != nil || ev.Reset || len(ev.Plans) != 1 || ev.Plans[0].Gateway != "gw-0" {
		t.Errorf("Watch(11) = %+v, %v; want gw-0's plan only", ev, err)
	}
}

// TestMigrationFromVersion2: a database of schema version 2 (before the
// change history) opens; a watcher from before its generation gets the
// whole state, one from its generation on gets changes.
func TestMigrationFromVersion2(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), FileName)
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range migrations[:2] {
		if _, err := db.Exec(m); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []string{
		"PRAGMA user_version = 2",
		"INSERT INTO meta (key, value) VALUES ('generation', 5)",
		"INSERT INTO tokens (id, gateway, secret_hash, created, expires) VALUES ('t1', 'gw-a', x'" + strings.Repeat("00", 32) + "', 1, 2)",
		"INSERT INTO plans (gateway, generation, revision, plan) VALUES ('gw-a', 5, 1, '{}')",
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	s, err := OpenSQLite(ctx, SQLiteConfig{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if tok, err := s.Token(ctx, "t1"); err != nil || tok.Replaces != "" || tok.Gateway != "gw-a" {
		t.Errorf("token after migration = %+v, %v", tok, err)
	}
	ev, err := s.Watch(ctx, 4)
	if err != nil || !ev.Reset || len(ev.Plans) != 1 {
		t.Errorf("Watch(4) = %+v, %v; want the whole state", ev, err)
	}
	if err := s.Commit(ctx, Change{DeletePlans: []string{"gw-a"}, Generation: 6}); err != nil {
		t.Fatal(err)
	}
	ev, err = s.Watch(ctx, 5)
	if err != nil || ev.Reset || !reflect.DeepEqual(ev.DeletedPlans, []string{"gw-a"}) {
		t.Errorf("Watch(5) = %+v, %v; want gw-a's plan deleted", ev, err)
	}
}

// BenchmarkPutReport measures a status report write: 1000 gateways
// reporting every 5 s make 200 a second.
func BenchmarkPutReport(b *testing.B) {
	s, err := OpenSQLite(context.Background(), SQLiteConfig{Path: filepath.Join(b.TempDir(), FileName), Create: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	rep := []byte(`{"generation":12,"revision":3,"links":[` + strings.Repeat(`{"peer":"gw-01","publicKey":"","rxBytes":123456,"txBytes":654321},`, 20) + `{"peer":"gw-99","publicKey":"","rxBytes":1,"txBytes":2}]}`)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if err := s.PutReport(context.Background(), Report{Gateway: fmt.Sprintf("gw-%04d", i%1000), JSON: rep, Received: t0}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWatchAfterSpecChange measures what a follower pays for a
// change of every plan of 1000 gateways (2 KiB each): the event Watch
// reads.
func BenchmarkWatchAfterSpecChange(b *testing.B) {
	ctx := context.Background()
	s, err := OpenSQLite(ctx, SQLiteConfig{Path: filepath.Join(b.TempDir(), FileName), Create: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	plans := make([]Plan, 1000)
	for i := range plans {
		plans[i] = Plan{Gateway: fmt.Sprintf("gw-%04d", i), Generation: 1, JSON: []byte(strings.Repeat("x", 2048))}
	}
	if err := s.Commit(ctx, Change{Plans: plans, Generation: 1}); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		ev, err := s.Watch(ctx, 0)
		if err != nil || len(ev.Plans) != len(plans) {
			b.Fatalf("%d plans, %v", len(ev.Plans), err)
		}
	}
}

// BenchmarkPutLargeReport is BenchmarkPutReport for a gateway of a full
// mesh of 1000 (999 links).
func BenchmarkPutLargeReport(b *testing.B) {
	s, err := OpenSQLite(context.Background(), SQLiteConfig{Path: filepath.Join(b.TempDir(), FileName), Create: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	link := `{"peer":"gw-0001","publicKey":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=","endpoint":"203.0.113.9:51820","lastHandshake":"2025-01-02T03:04:05Z","rxBytes":123456,"txBytes":654321}`
	rep := []byte(`{"generation":12,"revision":3,"links":[` + strings.TrimSuffix(strings.Repeat(link+",", 999), ",") + `]}`)
	b.SetBytes(int64(len(rep)))
	for i := 0; b.Loop(); i++ {
		if err := s.PutReport(context.Background(), Report{Gateway: fmt.Sprintf("gw-%04d", i%1000), JSON: rep, Received: t0}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestReportsInBatches: of reports put at once by many callers (written
// in batches) every one is stored, the last of each gateway winning;
// after Close a report is refused.
func TestReportsInBatches(t *testing.T) {
	s := openTest(t, t.TempDir())
	ctx := context.Background()
	const gateways, rounds = 50, 4
	errs := make(chan error, gateways*rounds)
	for round := range rounds {
		start := make(chan struct{})
		done := make(chan struct{}, gateways)
		for i := range gateways {
			go func() {
				<-start
				errs <- s.PutReport(ctx, Report{Gateway: fmt.Sprintf("gw-%02d", i), JSON: fmt.Appendf(nil, `{"round":%d}`, round), Received: t0.Add(time.Duration(round) * time.Second)})
				done <- struct{}{}
			}()
		}
		close(start)
		for range gateways {
			<-done
		}
	}
	for range gateways * rounds {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Reports(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != gateways {
		t.Fatalf("%d reports stored, want %d", len(got), gateways)
	}
	for _, r := range got {
		if want := fmt.Sprintf(`{"round":%d}`, rounds-1); string(r.JSON) != want || !r.Received.Equal(t0.Add((rounds-1)*time.Second)) {
			t.Errorf("%s: report %s received %v, want the last round's %s", r.Gateway, r.JSON, r.Received, want)
		}
	}
	s.Close()
	if err := s.PutReport(ctx, Report{Gateway: "gw-00", JSON: []byte(`{}`), Received: t0}); err == nil {
		t.Error("PutReport after Close succeeded")
	}
}
