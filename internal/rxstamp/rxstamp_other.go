//go:build !linux

package rxstamp

import (
	"syscall"
	"time"
)

// Enable does nothing here: there are no kernel time stamps to read.
func Enable(syscall.Conn) error { return nil }

// OOBSize is room enough for a time stamp's control message.
const OOBSize = 64

// Time reports no time stamp (ok false): callers use the clock.
func Time([]byte) (time.Time, bool) { return time.Time{}, false }
