//go:build !unix

package manager

import "os"

// profileSignals returns no channel: without SIGUSR1 the CPU profile is
// one file (see startProfile).
func profileSignals() (<-chan os.Signal, func()) { return nil, func() {} }
