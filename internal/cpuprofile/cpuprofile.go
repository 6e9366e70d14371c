// Package cpuprofile writes a CPU profile of the running process to a file,
// for `go tool pprof`: the manager, the bench and wgdev use it when asked
// to by their environment.
package cpuprofile

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// Start writes a CPU profile of this process to path until the function it
// returns is called.
func Start(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("creating the CPU profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting the CPU profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
