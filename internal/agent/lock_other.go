//go:build !unix

package agent

// LockFile is held by the agent that runs on a data directory (unix only).
const LockFile = "agent.lock"

// lock is a no-op where flock does not exist.
func (d dataDir) lock() (unlock func(), err error) { return func() {}, nil }
