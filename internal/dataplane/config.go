package dataplane

import (
	"fmt"

	"github.com/fednet/fednet/internal/backend"
	"github.com/fednet/fednet/internal/dataplane/ipsec"
	"github.com/fednet/fednet/internal/dataplane/tunnel"
	"github.com/fednet/fednet/internal/dataplane/wireguard"
	"github.com/fednet/fednet/internal/plan"
)

// Config configures the Linux dataplane (NewLinux).
type Config struct {
	// WireGuard configures the WireGuard driver: the gateway's private key
	// (needed to apply a plan, not to take one down) and kernel or
	// userspace WireGuard.
	WireGuard wireguard.Config
	// IPsec configures the IPsec driver: charon's vici socket.
	IPsec ipsec.Config
	// Drivers are tunnel drivers for further backends, or replacements
	// of built-in ones (tests); each backend must be in package backend's
	// table.
	Drivers []tunnel.Machine
	// Logf receives notices; nil discards them. Errors are returned, not
	// logged.
	Logf func(format string, args ...any)
}

// builtIn returns the drivers fednet ships, one line per backend: the
// registry of tunnel drivers.
func builtIn(cfg Config) ([]tunnel.Machine, error) {
	if cfg.WireGuard.Logf == nil {
		cfg.WireGuard.Logf = cfg.Logf
	}
	wg, err := wireguard.New(cfg.WireGuard)
	if err != nil {
		return nil, err
	}
	if cfg.IPsec.Logf == nil {
		cfg.IPsec.Logf = cfg.Logf
	}
	return []tunnel.Machine{wg, ipsec.New(cfg.IPsec)}, nil
}

// registry is the tunnel drivers of one data plane, by backend.
type registry map[backend.Name]tunnel.Driver

// newRegistry returns the registry of drivers; a later driver of a backend
// replaces an earlier one. Every driver's backend must be in package
// backend's table.
func newRegistry(drivers ...tunnel.Driver) (registry, error) {
	r := registry{}
	for _, d := range drivers {
		b := d.Backend()
		if _, ok := backend.Lookup(b); !ok {
			return nil, fmt.Errorf("dataplane: driver for backend %q, which package backend does not know (it has: %s)", b, backend.List())
		}
		r[b] = d
	}
	return r, nil
}

// Ready reports whether a data plane with the built-in drivers sets up the
// link to p now (WireGuard: once the peer's key is known); a peer of a
// backend without a built-in driver counts as ready. The agent probes only
// links that are ready.
func Ready(p plan.Peer) bool {
	for _, d := range readyDrivers {
		if d.Backend() == p.Backend {
			return d.Configured(p)
		}
	}
	return true
}

// readyDrivers are the built-in drivers without keys, for Ready.
var readyDrivers = func() []tunnel.Machine {
	ms, err := builtIn(Config{})
	if err != nil {
		panic(fmt.Sprintf("dataplane: the built-in drivers: %v", err))
	}
	return ms
}()
