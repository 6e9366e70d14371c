//go:build !linux

package client

import (
	"net"
	"time"
)

// setUserTimeout does nothing where TCP_USER_TIMEOUT is not known: the
// keepalives find a vanished peer of an idle connection all the same.
func setUserTimeout(*net.TCPConn, time.Duration) error { return nil }
