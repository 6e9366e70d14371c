// Package neighbor is the host side of neighbor tunnels (fednet host join
// and fednet host leave): a host of a site whose fabric drops unknown MACs
// joins a bridged network through a unicast VXLAN tunnel to its site's
// gateway. Join enrolls the host with a host token, Run keeps the tunnel
// set up as the manager says (long poll), recreating the device when it
// disappears, and Leave takes the host out. The kernel part is
// dataplane.ApplyHost and dataplane.RemoveHost; see docs/neighbors.md.
package neighbor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/atomicfile"
	"github.com/fednet/fednet/internal/client"
	"github.com/fednet/fednet/internal/dataplane"
	"github.com/fednet/fednet/internal/plan"
)

// Files of a host's data directory.
const (
	// IdentityFile holds the Identity, mode 0600.
	IdentityFile = "host.json"
	// TunnelFile holds the last tunnel applied, so that a restarted host
	// sets it up again without the manager.
	TunnelFile = "tunnel.json"
)

// DefaultDataDir is the data directory when none is given.
const DefaultDataDir = "/var/lib/fednet-host"

// Defaults of Config.
const (
	DefaultResync       = 5 * time.Second
	DefaultWatchTimeout = 30 * time.Second
	backoffMin          = 200 * time.Millisecond
	backoffMax          = 10 * time.Second
)

// Identity is what a host keeps after joining (host.json).
type Identity struct {
	// Manager is the manager's base URL, CAFingerprint pins its CA (both
	// from the host token).
	Manager       string `json:"manager"`
	CAFingerprint string `json:"caFingerprint"`
	Host          string `json:"host"`
	Network       string `json:"network"`
	// Credential is the bearer token of the host's calls.
	Credential string `json:"credential"`
	// Address is the host's address on the bridged network, set on the
	// device; empty for none.
	Address string    `json:"address,omitempty"`
	Joined  time.Time `json:"joined"`
}

// Config configures Run and Leave.
type Config struct {
	// DataDir holds host.json and tunnel.json (mode 0700). Required.
	DataDir string
	// Token is the host token (fednetjoin1....); needed to join, ignored
	// once joined.
	Token string
	// Network is the bridged network to join; it must be the host
	// token's (and, once joined, the joined one). Required.
	Network string
	// Name is the host's name; default the machine's host name, lowercase.
	Name string
	// LANAddress is the host's address on its site's LAN; default the first
	// global IPv4 address of the machine's interfaces.
	LANAddress netip.Addr
	// Address, when valid, is the host's address on the bridged network,
	// set on the tunnel device (an operator's choice; the network's subnet
	// is stretched, so any free address of it).
	Address netip.Prefix
	// Resync is how often the tunnel is checked and set up again (a device
	// deleted by someone comes back within it); DefaultResync when 0.
	Resync time.Duration
	// WatchTimeout is the long poll's timeout; DefaultWatchTimeout when 0.
	WatchTimeout time.Duration
	// DialContext, when set, opens the connections to the manager.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
	// Logf logs; log.Printf when nil.
	Logf func(format string, args ...any)
}

func (cfg *Config) defaults() error {
	if cfg.DataDir == "" {
		return errors.New("--data-dir is required")
	}
	if cfg.Network == "" {
		return errors.New("--network NAME is required: the bridged network to join")
	}
	if cfg.Resync <= 0 {
		cfg.Resync = DefaultResync
	}
	if cfg.WatchTimeout <= 0 {
		cfg.WatchTimeout = DefaultWatchTimeout
	}
	if cfg.Logf == nil {
		cfg.Logf = log.Printf
	}
	return nil
}

// Run joins (when the data directory has no identity yet) and keeps the
// tunnel up until ctx ends, then returns nil and leaves the tunnel as it is
// (fednet host leave removes it). It sets up the last tunnel of the data
// directory at once, without the manager; it then follows the manager's
// answers, retrying with bounded backoff while it cannot reach it, and
// sets the tunnel up again every Resync. It returns an error when the
// manager says the host is gone (left, or removed by the operator): the
// tunnel is then removed.
//
// Run's kernel calls happen on the calling goroutine, so a caller may run
// it inside a network namespace (a lab host).
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.defaults(); err != nil {
		return err
	}
	id, t, err := join(ctx, cfg)
	if err != nil {
		return err
	}
	addr, err := identityAddress(id)
	if err != nil {
		return err
	}
	c, err := newClient(id, cfg)
	if err != nil {
		return err
	}
	defer c.Close()

	type answer struct {
		resp *api.HostTunnelResponse
		err  error
	}
	answers := make(chan answer)
	// One watch at a time, on its own goroutine; the kernel work stays on
	// this one. The first asks with after=0 and is answered at once (a
	// plan's generation is at least 1).
	var gen int64
	watch := func(after int64) {
		go func() {
			resp, changed, err := c.WatchHostTunnel(ctx, id.Host, after, cfg.WatchTimeout)
			if err == nil && !changed {
				resp = nil
			}
			select {
			case answers <- answer{resp, err}:
			case <-ctx.Done():
			}
		}()
	}
	apply := func() {
		if t == nil {
			return
		}
		changes, err := dataplane.ApplyHost(ctx, *t, addr)
		for _, ch := range changes {
			cfg.Logf("host %s: %s", id.Host, ch)
		}
		if err != nil && ctx.Err() == nil {
			cfg.Logf("host %s: setting up the tunnel: %v", id.Host, err)
		}
	}
	apply()
	watch(gen)
	resync := time.NewTicker(cfg.Resync)
	defer resync.Stop()
	delay := backoffMin
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-resync.C:
			apply()
		case a := <-answers:
			switch {
			case a.err != nil && gone(a.err):
				return removed(cfg, id, t, a.err)
			case a.err != nil:
				if ctx.Err() != nil {
					return nil
				}
				cfg.Logf("host %s: asking the manager for the tunnel: %v (again in %v)", id.Host, a.err, delay)
				select {
				case <-time.After(delay):
				case <-ctx.Done():
					return nil
				}
				delay = min(2*delay, backoffMax)
			case a.resp != nil:
				delay = backoffMin
				if t == nil || *t != a.resp.Tunnel {
					cfg.Logf("host %s: tunnel to gateway %s (%s), VNI %d, UDP port %d, MTU %d", id.Host, a.resp.Tunnel.Gateway, a.resp.Tunnel.Remote, a.resp.Tunnel.VNI, a.resp.Tunnel.UDPPort, a.resp.Tunnel.MTU)
				}
				nt := a.resp.Tunnel
				t, gen = &nt, a.resp.Generation
				if err := writeJSON(cfg.DataDir, TunnelFile, t); err != nil {
					cfg.Logf("host %s: %v", id.Host, err)
				}
				apply()
			default:
				delay = backoffMin
			}
			watch(gen)
		}
	}
}

// gone reports whether err says the host is no longer known.
func gone(err error) bool {
	var e *client.Error
	return errors.As(err, &e) && (e.Status == http.StatusNotFound || e.Status == http.StatusUnauthorized)
}

// removed tidies up after the manager forgot the host.
func removed(cfg Config, id Identity, t *plan.HostTunnel, cause error) error {
	if t != nil {
		if _, err := dataplane.RemoveHost(t.Device); err != nil {
			cfg.Logf("host %s: removing the tunnel: %v", id.Host, err)
		}
	}
	forget(cfg.DataDir)
	return fmt.Errorf("host %s left the federation or was removed (%v); its tunnel is gone; join again with a new host token", id.Host, cause)
}

// Leave takes the host out: it tells the manager (the gateway's end goes),
// removes the tunnel device and forgets the identity. When the manager
// cannot be reached the device is removed all the same and the error
// says so; the operator can remove the host with the admin token.
func Leave(ctx context.Context, cfg Config) ([]dataplane.Change, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("--data-dir is required")
	}
	var id Identity
	if err := readJSON(cfg.DataDir, IdentityFile, &id); err != nil {
		return nil, fmt.Errorf("this host has not joined (no %s in %s): %w", IdentityFile, cfg.DataDir, err)
	}
	var errs []error
	c, err := newClient(id, cfg)
	if err == nil {
		err = c.LeaveHost(ctx, id.Host)
		c.Close()
	}
	if err != nil && !gone(err) {
		errs = append(errs, fmt.Errorf("telling the manager: %w", err))
	}
	var changes []dataplane.Change
	var t plan.HostTunnel
	if err := readJSON(cfg.DataDir, TunnelFile, &t); err == nil {
		changes, err = dataplane.RemoveHost(t.Device)
		errs = append(errs, err)
	}
	forget(cfg.DataDir)
	return changes, errors.Join(errs...)
}

// join returns the host's identity and its last tunnel (nil when none):
// from the data directory, or by joining with the host token.
func join(ctx context.Context, cfg Config) (Identity, *plan.HostTunnel, error) {
	var id Identity
	err := readJSON(cfg.DataDir, IdentityFile, &id)
	switch {
	case err == nil:
		if id.Network != cfg.Network {
			return id, nil, fmt.Errorf("this host joined network %s, not %s (--network); leave first with fednet host leave", id.Network, cfg.Network)
		}
		var t plan.HostTunnel
		if err := readJSON(cfg.DataDir, TunnelFile, &t); err != nil {
			return id, nil, nil
		}
		return id, &t, nil
	case !errors.Is(err, fs.ErrNotExist):
		return id, nil, err
	}
	if cfg.Token == "" {
		return id, nil, errors.New("this host has not joined yet: give the host token with --token-file FILE (from fednet token create --site SITE --network NETWORK)")
	}
	jt, err := api.ParseJoinToken(cfg.Token)
	if err != nil {
		return id, nil, fmt.Errorf("host token: %w", err)
	}
	name := cfg.Name
	if name == "" {
		h, err := os.Hostname()
		if err != nil {
			return id, nil, fmt.Errorf("--name is required: the host name is unknown: %w", err)
		}
		name = strings.ToLower(strings.SplitN(h, ".", 2)[0])
	}
	lan := cfg.LANAddress
	if !lan.IsValid() {
		if lan, err = firstAddress(); err != nil {
			return id, nil, err
		}
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return id, nil, fmt.Errorf("creating --data-dir: %w", err)
	}
	id = Identity{Manager: jt.Manager, CAFingerprint: jt.CAFingerprint, Host: name, Network: cfg.Network}
	if cfg.Address.IsValid() {
		id.Address = cfg.Address.String()
	}
	c, err := newClient(id, cfg)
	if err != nil {
		return id, nil, err
	}
	defer c.Close()
	resp, err := c.JoinHost(ctx, jt.Secret, api.HostJoinRequest{Name: name, Address: lan})
	if err != nil {
		return id, nil, fmt.Errorf("joining: %w", err)
	}
	if resp.Tunnel.Network != cfg.Network {
		// The token was for another network: leave again at once.
		c2, _ := newClient(Identity{Manager: id.Manager, CAFingerprint: id.CAFingerprint, Credential: resp.Credential}, cfg)
		if c2 != nil {
			c2.LeaveHost(ctx, name)
			c2.Close()
		}
		return id, nil, fmt.Errorf("the host token is for network %s, not %s (--network)", resp.Tunnel.Network, cfg.Network)
	}
	id.Credential, id.Joined = resp.Credential, time.Now().UTC()
	if err := writeJSON(cfg.DataDir, IdentityFile, id); err != nil {
		return id, nil, err
	}
	t := resp.Tunnel
	if err := writeJSON(cfg.DataDir, TunnelFile, t); err != nil {
		return id, nil, err
	}
	cfg.Logf("host %s joined network %s from %s: tunnel to gateway %s (%s) on UDP port %d, MTU %d (%s)",
		name, t.Network, lan, t.Gateway, t.Remote, t.UDPPort, t.MTU, t.MTUReason)
	return id, &t, nil
}

func identityAddress(id Identity) (netip.Prefix, error) {
	if id.Address == "" {
		return netip.Prefix{}, nil
	}
	p, err := netip.ParsePrefix(id.Address)
	if err != nil {
		return p, fmt.Errorf("%s: address: %w", IdentityFile, err)
	}
	return p, nil
}

func newClient(id Identity, cfg Config) (*client.Client, error) {
	return client.New(client.Config{URL: id.Manager, Token: id.Credential, CAFingerprint: id.CAFingerprint, DialContext: cfg.DialContext})
}

// firstAddress returns the first global unicast IPv4 address of the
// machine's interfaces that are up.
func firstAddress() (netip.Addr, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return netip.Addr{}, fmt.Errorf("listing interfaces: %w", err)
	}
	for _, i := range ifs {
		if i.Flags&net.FlagUp == 0 || i.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, err := i.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap().Is4() && ip.IsGlobalUnicast() {
					return ip.Unmap(), nil
				}
			}
		}
	}
	return netip.Addr{}, errors.New("no IPv4 address found on this machine; give the host's LAN address with --lan-address")
}

func readJSON(dir, name string, v any) error {
	data, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %w", filepath.Join(dir, name), err)
	}
	return nil
}

func writeJSON(dir, name string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(filepath.Join(dir, name), append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	return nil
}

// forget removes the host's identity and tunnel files.
func forget(dir string) {
	os.Remove(filepath.Join(dir, IdentityFile))
	os.Remove(filepath.Join(dir, TunnelFile))
}
