package manager

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// ProfileEnv, when set in a manager's environment, names a file Serve
// writes a CPU profile of the process to (for `go tool pprof`), from the
// start of serving to its end. `fednet bench control-plane` sets it for
// its managers when FEDNET_BENCH_CPUPROFILE names a directory.
const ProfileEnv = "FEDNET_MANAGER_CPUPROFILE"

// startProfile starts the CPU profile ProfileEnv asks for and returns
// what stops it (a no-op when the variable is unset or the profile
// cannot start, which it logs).
func startProfile(logf func(string, ...any)) func() {
	path := os.Getenv(ProfileEnv)
	if path == "" {
		return func() {}
	}
	stop, err := StartCPUProfile(path)
	if err != nil {
		logf("%s: %v", ProfileEnv, err)
		return func() {}
	}
	return stop
}

// StartCPUProfile writes a CPU profile of this process to path until the
// function it returns is called.
func StartCPUProfile(path string) (stop func(), err error) {
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
