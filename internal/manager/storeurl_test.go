package manager

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOpenStoreURL: --store forms open what they name, and bad forms are
// refused naming the flag and what would be valid.
func TestOpenStoreURL(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db := filepath.Join(t.TempDir(), "elsewhere.db")
	s, err := OpenStoreURL(ctx, StoreConfig{URL: "sqlite://" + db, DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := os.Stat(db); err != nil {
		t.Errorf("sqlite://%s did not make that file: %v", db, err)
	}
	s, err = OpenStoreURL(ctx, StoreConfig{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := os.Stat(filepath.Join(dir, "fednet.db")); err != nil {
		t.Errorf("no --store did not open the data directory's database: %v", err)
	}
	for _, c := range []struct {
		cfg  StoreConfig
		want string
	}{
		{StoreConfig{URL: "mysql://x"}, `unknown store "mysql"`},
		{StoreConfig{URL: "just-a-path"}, "want sqlite://PATH or etcd://"},
		{StoreConfig{URL: "sqlite://"}, "no file"},
		{StoreConfig{URL: "etcd://h1:2379,,h2:2379"}, "is not HOST:PORT"},
		{StoreConfig{URL: "sqlite:///x.db", EtcdCA: "ca.pem"}, "are for an etcd store"},
		{StoreConfig{URL: "etcd://h1:2379", EtcdCert: "c.pem"}, "--etcd-cert and --etcd-key go together"},
		{StoreConfig{URL: "etcd://h1:2379", EtcdCA: filepath.Join(dir, "none.pem")}, "--etcd-ca"},
	} {
		c.cfg.DataDir = dir
		_, err := OpenStoreURL(ctx, c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error with %q", c.cfg, err, c.want)
		}
	}
}
