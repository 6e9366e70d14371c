package manager

import (
	"os"
	"path/filepath"
	"testing"
)

// TestProfiles: with both variables set, the function startProfile
// returns writes a CPU profile and a heap profile where they say.
func TestProfiles(t *testing.T) {
	dir := t.TempDir()
	cpu, heap := filepath.Join(dir, "cpu.pprof"), filepath.Join(dir, "heap.pprof")
	t.Setenv(ProfileEnv, cpu)
	t.Setenv(HeapProfileEnv, heap)
	startProfile(t.Logf)()
	for _, path := range []string{cpu, heap} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		// A profile is a gzipped protocol buffer.
		if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
			t.Errorf("%s is not a gzipped profile (%d bytes)", path, len(b))
		}
	}
	t.Setenv(HeapProfileEnv, filepath.Join(dir, "no", "such", "dir", "heap.pprof"))
	t.Setenv(ProfileEnv, "")
	var logged []string
	startProfile(func(f string, a ...any) { logged = append(logged, f) })()
	if len(logged) != 1 {
		t.Errorf("a heap profile that cannot be written logged %d lines, want 1", len(logged))
	}
}
