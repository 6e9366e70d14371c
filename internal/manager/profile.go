package manager

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"

	"github.com/fednet/fednet/internal/cpuprofile"
)

// ProfileEnv, when set in a manager's environment, names a file Serve
// writes a CPU profile of the process to (for `go tool pprof`), from the
// start of serving to its end. `fednet bench control-plane` sets it for
// its managers when FEDNET_BENCH_CPUPROFILE names a directory.
const ProfileEnv = "FEDNET_MANAGER_CPUPROFILE"

// HeapProfileEnv, when set in a manager's environment, names a file Serve
// writes a heap profile to when serving ends (after a collection, so that
// it shows what the manager holds at rest: `go tool pprof
// -sample_index=inuse_space`). `fednet bench control-plane` sets it with
// ProfileEnv.
const HeapProfileEnv = "FEDNET_MANAGER_HEAPPROFILE"

// startProfile starts the CPU profile ProfileEnv asks for and returns
// what stops it and writes the heap profile HeapProfileEnv asks for (a
// no-op when the variables are unset; a profile that cannot be written
// is logged).
func startProfile(logf func(string, ...any)) func() {
	stop := func() {}
	if path := os.Getenv(ProfileEnv); path != "" {
		var err error
		if stop, err = cpuprofile.Start(path); err != nil {
			logf("%s: %v", ProfileEnv, err)
			stop = func() {}
		}
	}
	return func() {
		stop()
		if path := os.Getenv(HeapProfileEnv); path != "" {
			if err := writeHeapProfile(path); err != nil {
				logf("%s: %v", HeapProfileEnv, err)
			}
		}
	}
}

// writeHeapProfile writes a heap profile of this process to path, after
// a collection.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("creating the heap profile: %w", err)
	}
	runtime.GC()
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return fmt.Errorf("writing the heap profile: %w", err)
	}
	return f.Close()
}
