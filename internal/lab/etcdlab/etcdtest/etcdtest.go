// Package etcdtest starts a real etcd for a test (etcdlab), stopped at the
// test's end.
package etcdtest

import (
	"context"
	"os"
	"testing"

	"github.com/fednet/fednet/internal/lab/etcdlab"
)

// Start starts a one-member etcd on loopback for t and stops it when t
// ends. Without an etcd binary it fails the test as root (CI is root, and
// make deps installs etcd) and skips it otherwise, saying so.
func Start(t testing.TB) *etcdlab.Cluster {
	t.Helper()
	if _, err := etcdlab.Binary(); err != nil {
		if os.Geteuid() == 0 {
			t.Fatal(err)
		}
		t.Skipf("not root and %v", err)
	}
	c, err := etcdlab.Start(context.Background(), etcdlab.Config{Members: []etcdlab.Member{{Name: "m0"}}, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
