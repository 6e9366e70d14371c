package manager

import (
	"os"

	"github.com/fednet/fednet/internal/cpuprofile"
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
	stop, err := cpuprofile.Start(path)
	if err != nil {
		logf("%s: %v", ProfileEnv, err)
		return func() {}
	}
	return stop
}
