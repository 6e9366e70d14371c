package wgdev

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"golang.zx2c4.com/wireguard/conn"

	"github.com/fednet/fednet/internal/wgdev/fallback"
	"github.com/fednet/fednet/internal/wgdev/udpbind"
)

// Option changes how Run sets up the device.
type Option func(*options)

type options struct {
	fallbackPort uint16
}

// WithFallback gives the device the UDP-blocked fallback on TCP port
// (package fallback): it accepts TLS streams on port and moves a peer whose
// UDP handshake goes unanswered to a stream it dials to the peer's port.
// Port 0 leaves the fallback off (plain UDP), the default.
func WithFallback(port uint16) Option { return func(o *options) { o.fallbackPort = port } }

// FallbackStatusPath returns the file a device with the fallback writes
// its fallback.Status to, next to its UAPI socket. A device without the
// fallback has none.
func FallbackStatusPath(name string) string { return SocketDir + "/" + name + ".fallback.json" }

// newBind returns the device's bind (the UDP bind kind, with the TCP
// fallback when o has a port) and a function that removes what the bind
// left behind.
func newBind(name string, kind Bind, o options, logf func(string, ...any)) (conn.Bind, func(), error) {
	status := FallbackStatusPath(name)
	cleanup := func() {
		if err := os.Remove(status); err != nil && !errors.Is(err, fs.ErrNotExist) {
			logf("wgdev %s: %v", name, err)
		}
	}
	// A status file left by an earlier device of this name is stale.
	cleanup()
	var udp conn.Bind
	switch kind {
	case BindWireGuardGo:
		udp = conn.NewDefaultBind()
		logf("wgdev %s: UDP bind: wireguard-go's", name)
	case BindBatch, "":
		udp = udpbind.New()
	default:
		return nil, nil, fmt.Errorf("bind %q unknown", kind)
	}
	if o.fallbackPort == 0 {
		return udp, func() {}, nil
	}
	b, err := fallback.New(fallback.Config{
		UDP:        udp,
		ListenPort: o.fallbackPort,
		DialPort:   o.fallbackPort,
		StatusPath: status,
		Logf: func(format string, args ...any) {
			logf("wgdev %s: "+format, append([]any{name}, args...)...)
		},
	})
	if err != nil {
		return nil, nil, fmt.Errorf("setting up the TCP fallback of %s: %w", name, err)
	}
	return b, cleanup, nil
}
