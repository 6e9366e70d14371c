//go:build unix

package agent

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// LockFile is held (flock) by the agent that runs on a data directory.
const LockFile = "agent.lock"

// lock takes the data directory's lock, so that two agents never run on one
// directory (they would fight over the key, the credential and the data
// plane). The kernel drops the lock when the process ends, however it ends.
// unlock releases it.
func (d dataDir) lock() (unlock func(), err error) {
	f, err := os.OpenFile(d.path(LockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("locking the data directory: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("another fednet agent is running on %s; stop it first (one agent per data directory)", string(d))
		}
		return nil, fmt.Errorf("locking %s: %w", d.path(LockFile), err)
	}
	return func() { f.Close() }, nil
}
