//go:build !linux

package abw

import "net"

// growReadBuffer asks for a receive buffer of n bytes (see the Linux
// version).
func growReadBuffer(conn *net.UDPConn, n int) { _ = conn.SetReadBuffer(n) }
