package lab

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// charonPlugins names each missing plugin with its Debian package, and
// is satisfied by a directory holding them all.
func TestCharonPlugins(t *testing.T) {
	dir := t.TempDir()
	err := charonPlugins(dir)
	if err == nil || !strings.Contains(err.Error(), "openssl (libstrongswan-standard-plugins)") || !strings.Contains(err.Error(), "make deps") {
		t.Fatalf("charonPlugins(empty dir) = %v; want the openssl plugin named with its package and make deps", err)
	}
	for plugin := range charonPackages {
		if err := os.WriteFile(filepath.Join(dir, "libstrongswan-"+plugin+".so"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := charonPlugins(dir); err != nil {
		t.Errorf("charonPlugins(every plugin) = %v; want nil", err)
	}
	// The machine's own, where the IPsec lab runs (make deps installs them).
	if _, err := os.Stat(CharonPath); err == nil {
		if err := charonPlugins(charonPluginDir); err != nil {
			t.Errorf("this machine: %v", err)
		}
	}
}
