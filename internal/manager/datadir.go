package manager

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/fednet/fednet/internal/manager/store"
)

// OpenStore opens the SQLite store of fednet manager: the file
// store.FileName in dataDir (created, mode 0700, if missing), locked
// against a second manager until the store is closed.
//
// A data directory that already holds the CA or the admin token belonged
// to a manager before, so its database must be there: a missing or empty
// fednet.db is refused (the error names the file and --reinitialize)
// instead of silently starting over with no spec, no gateways and no
// credentials, which would make every agent's credential unknown. With
// reinitialize, such a directory starts with an empty database; every
// gateway must then enroll again. A damaged database (not a database, a
// newer schema, failing SQLite's check) is always refused, naming the file
// and what is wrong.
func OpenStore(ctx context.Context, dataDir string, reinitialize bool) (store.Store, error) {
	return openSQLiteAt(ctx, dataDir, filepath.Join(dataDir, store.FileName), reinitialize)
}

// openSQLiteAt is OpenStore for the database file path (--store
// sqlite://PATH), with the same refusal of a missing database in a data
// directory that held a manager.
func openSQLiteAt(ctx context.Context, dataDir, path string, reinitialize bool) (store.Store, error) {
	if dataDir == "" {
		return nil, errors.New("--data-dir is required: a directory for the manager's database, CA and admin token")
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating data directory (--data-dir): %w", err)
	}
	had, err := hadManager(dataDir)
	if err != nil {
		return nil, err
	}
	s, err := store.OpenSQLite(ctx, store.SQLiteConfig{Path: path, Create: !had || reinitialize})
	switch {
	case errors.Is(err, store.ErrNoDatabase):
		return nil, fmt.Errorf("%w, but %s holds the CA and admin token of a manager that ran there: its state is lost. "+
			"Restore %s from a backup (docs/manager.md, \"Backup and restore\"), or start with --reinitialize to begin again with an empty state "+
			"(no spec; every gateway must enroll again with a new join token)", err, dataDir, path)
	case errors.Is(err, store.ErrDamaged):
		return nil, fmt.Errorf("%w. Restore %s from a backup (docs/manager.md, \"Backup and restore\"), or move it away and start with --reinitialize", err, path)
	case err != nil:
		return nil, err
	}
	return s, nil
}

// hadManager reports whether dataDir holds the CA or the admin token of a
// manager that ran there.
func hadManager(dataDir string) (bool, error) {
	for _, f := range []string{CACertFile, CAKeyFile, AdminTokenFile} {
		_, err := os.Stat(filepath.Join(dataDir, f))
		switch {
		case err == nil:
			return true, nil
		case !errors.Is(err, fs.ErrNotExist):
			return false, fmt.Errorf("data directory (--data-dir): %w", err)
		}
	}
	return false, nil
}
