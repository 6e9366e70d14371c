//go:build !linux

package udpbind

import "golang.zx2c4.com/wireguard/conn"

// New returns wireguard-go's default bind: this bind is Linux's.
func New() conn.Bind { return conn.NewDefaultBind() }

// ParseEndpoint is unused off Linux.
var _ = parseEndpoint
