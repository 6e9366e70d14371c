//go:build !unix

package store

import (
	"fmt"
	"os"
)

// lockFile opens the lock file; without flock it cannot keep a second
// manager away, so do not start two on one database.
func lockFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening lock file: %w", err)
	}
	return f, nil
}
