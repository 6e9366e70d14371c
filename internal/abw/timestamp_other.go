//go:build !linux

package abw

import (
	"net"
	"time"
)

// enableTimestamps does nothing here: arrival times come from the clock
// when the responder reads a datagram.
func enableTimestamps(conn *net.UDPConn) error { return nil }

// growReadBuffer asks for a receive buffer of n bytes (see the Linux
// version).
func growReadBuffer(conn *net.UDPConn, n int) { _ = conn.SetReadBuffer(n) }

// rxTime returns now.
func rxTime(oob []byte) time.Time { return time.Now() }
