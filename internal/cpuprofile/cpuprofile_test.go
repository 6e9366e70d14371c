package cpuprofile

import (
	"os"
	"path/filepath"
	"testing"
)

func TestStartWritesAProfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu.pprof")
	stop, err := Start(path)
	if err != nil {
		t.Fatal(err)
	}
	stop()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// A profile is a gzipped protocol buffer.
	if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Fatalf("%s is not a gzipped profile (%d bytes)", path, len(b))
	}
	if _, err := Start(filepath.Join(t.TempDir(), "no", "such", "dir", "cpu.pprof")); err == nil {
		t.Fatal("Start into a missing directory succeeded")
	}
}
