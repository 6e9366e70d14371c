//go:build !linux

package lab

import (
	"errors"
	"net"
	"time"
)

func rxTimestamps(*net.IPConn) error { return errors.ErrUnsupported }

func rxTime([]byte) (time.Time, bool) { return time.Time{}, false }
