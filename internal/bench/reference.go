package bench

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/fednet/fednet/internal/lab"
	"github.com/fednet/fednet/internal/spec"
	"github.com/fednet/fednet/internal/wgdev"
)

// standaloneIface is the WireGuard interface of the reference lab's
// standalone tunnel.
const standaloneIface = "wg0"

// referenceName returns the name of the reference lab of lab name: lab
// names are at most 16 lowercase letters and digits.
func referenceName(name string) string {
	if len(name) > 13 {
		name = name[:13]
	}
	return name + "ref"
}

// referenceSpec returns a federation of the sites a and b of f only, one
// gateway and one host each, no networks: the layout of the reference lab,
// which has the same addresses, MTU and path through a lab internet as
// the measured lab but no fednet.
func referenceSpec(f *spec.Federation, a, b string) *spec.Federation {
	rf := *f
	rf.Sites = nil
	for _, s := range f.Sites {
		if s.Name == a || s.Name == b {
			s.Gateways = s.Gateways[:1]
			rf.Sites = append(rf.Sites, s)
		}
	}
	rf.Networks = nil
	rf.Lab = &spec.Lab{HostsPerSite: 1}
	if f.Lab != nil {
		rf.Lab.PublicAddresses = f.Lab.PublicAddresses
	}
	return &rf
}

// startStandalone joins the two sites of the reference lab r with a plain
// WireGuard tunnel, configured by hand as an operator without fednet would:
// a userspace device per gateway (the command argv with the interface
// name added, standaloneDevice(binary) when nil: wireguard-go and nothing
// else), `wg set` with
// fresh keys, the tunnel MTU mtu, a route to the other site's prefixes and
// IP forwarding. No firewall, no agent. It returns the devices' processes;
// deleting the interface (stopStandalone) ends them.
func startStandalone(ctx context.Context, r *lab.Lab, mtu int, argv []string) ([]*lab.Process, error) {
	gws := r.Gateways()
	if len(gws) != 2 {
		return nil, fmt.Errorf("reference lab: want 2 gateways, have %d", len(gws))
	}
	if argv == nil {
		return nil, errors.New("standalone tunnel: no device command")
	}
	var procs []*lab.Process
	type end struct {
		node    *lab.Node
		keyFile string
		pub     wgtypes.Key
	}
	var ends [2]end
	for i, gw := range gws {
		k, err := wgtypes.GeneratePrivateKey()
		if err != nil {
			return procs, err
		}
		keyFile := filepath.Join(gw.Dir, "standalone.key")
		if err := os.WriteFile(keyFile, []byte(k.String()+"\n"), 0o600); err != nil {
			return procs, fmt.Errorf("standalone key of %s: %w", gw, err)
		}
		ends[i] = end{node: gw, keyFile: keyFile, pub: k.PublicKey()}
		p, err := r.Start(gw, argv[0], append(slices.Clone(argv[1:]), standaloneIface)...)
		if err != nil {
			return procs, err
		}
		procs = append(procs, p)
		if err := waitSocket(ctx, filepath.Join(gw.WireGuardDir(), standaloneIface+".sock"), p); err != nil {
			return procs, fmt.Errorf("standalone wireguard-go in %s: %w", gw, err)
		}
	}
	port := r.Federation.Overlay.ListenPort
	if port == 0 {
		port = spec.DefaultListenPort
	}
	for i, e := range ends {
		peer := ends[1-i]
		var remote []string
		for _, s := range r.Federation.Sites {
			if s.Name == peer.node.Site {
				for _, p := range s.Prefixes {
					remote = append(remote, p.String())
				}
			}
		}
		endpoint := netip.AddrPortFrom(peer.node.Public.Addr(), uint16(port)).String()
		steps := [][]string{
			{"wg", "set", standaloneIface, "private-key", e.keyFile, "listen-port", strconv.Itoa(port),
				"peer", peer.pub.String(), "endpoint", endpoint, "allowed-ips", strings.Join(remote, ",")},
			{"ip", "link", "set", "dev", standaloneIface, "mtu", strconv.Itoa(mtu), "up"},
			{"sysctl", "-qw", "net.ipv4.ip_forward=1"},
		}
		for _, p := range remote {
			steps = append(steps, []string{"ip", "route", "add", p, "dev", standaloneIface})
		}
		for _, s := range steps {
			if _, err := e.node.Run(ctx, s[0], s[1:]...); err != nil {
				return procs, fmt.Errorf("standalone tunnel: %w", err)
			}
		}
	}
	return procs, nil
}

// standaloneDevice is the command of the standalone tunnel's devices:
// `fednet wgdev` on wireguard-go's own TUN device, queues and UDP bind,
// wireguard-go as it comes, without fednet's offloads, queue management
// and batch reads, with a thread per CPU (Go's default; --procs 0 also
// keeps a FEDNET_WGDEV_PROCS in bench's environment away from it).
func standaloneDevice(binary string) []string {
	return []string{binary, "wgdev", "--tun", string(wgdev.TUNWireGuardGo), "--aqm", "off", "--bind", string(wgdev.BindWireGuardGo), "--procs", "0"}
}

// stopStandalone removes the standalone tunnel's interfaces from the
// reference lab r, which ends its devices procs, and waits until they
// have exited (at most 10 s).
func stopStandalone(ctx context.Context, r *lab.Lab, procs []*lab.Process) error {
	var errs []error
	for _, gw := range r.Gateways() {
		if _, err := gw.Run(ctx, "ip", "link", "del", standaloneIface); err != nil {
			errs = append(errs, err)
		}
	}
	for _, p := range procs {
		select {
		case <-p.Done():
		case <-time.After(10 * time.Second):
			errs = append(errs, errors.Join(fmt.Errorf("the standalone device in %s did not exit", p.Node), p.Stop(ctx)))
		}
	}
	return errors.Join(errs...)
}

// waitSocket polls until the UAPI socket exists, the device process exits,
// or 10 s pass.
func waitSocket(ctx context.Context, sock string, p *lab.Process) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		if _, err := os.Stat(sock); err == nil {
			return nil
		}
		select {
		case <-p.Done():
			return fmt.Errorf("exited (%v): %s", p.Err(), p.LogText())
		case <-ctx.Done():
			return errors.Join(fmt.Errorf("no control socket %s", sock), ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
