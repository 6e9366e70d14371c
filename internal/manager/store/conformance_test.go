package store_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/fednet/fednet/internal/manager/store"
	"github.com/fednet/fednet/internal/manager/store/storetest"
)

// TestSQLiteConformance runs the store conformance suite on SQLite.
func TestSQLiteConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s, err := store.OpenSQLite(context.Background(), store.SQLiteConfig{Path: filepath.Join(t.TempDir(), store.FileName), Create: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}
