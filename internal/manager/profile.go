package manager

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"

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
// is logged). While it runs, each SIGUSR1 (on Unix) ends the profile
// being written and starts the next, PATH with ".N" before its
// extension for the N-th signal: the control-plane bench signals before
// each change, so that each change's profile holds its own work.
func startProfile(logf func(string, ...any)) func() {
	stopCPU := func() {}
	if path := os.Getenv(ProfileEnv); path != "" {
		p := &rotatingProfile{logf: logf}
		p.start(path)
		sig, release := profileSignals()
		done := make(chan struct{})
		go func() {
			for n := 1; ; n++ {
				select {
				case <-done:
					return
				case <-sig:
				}
				ext := filepath.Ext(path)
				p.start(fmt.Sprintf("%s.%d%s", strings.TrimSuffix(path, ext), n, ext))
			}
		}()
		stopCPU = func() {
			release()
			close(done)
			p.start("")
		}
	}
	return func() {
		stopCPU()
		if path := os.Getenv(HeapProfileEnv); path != "" {
			if err := writeHeapProfile(path); err != nil {
				logf("%s: %v", HeapProfileEnv, err)
			}
		}
	}
}

// rotatingProfile is the CPU profile being written, which start ends to
// begin the next.
type rotatingProfile struct {
	logf func(string, ...any)

	mu   sync.Mutex
	stop func() // ends the profile being written; nil when none
}

// start ends the profile being written, if any, and starts writing one
// to path (none for "").
func (p *rotatingProfile) start(path string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stop != nil {
		p.stop()
		p.stop = nil
	}
	if path == "" {
		return
	}
	stop, err := cpuprofile.Start(path)
	if err != nil {
		p.logf("%s: %v", ProfileEnv, err)
		return
	}
	p.stop = stop
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
