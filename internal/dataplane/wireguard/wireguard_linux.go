package wireguard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/fednet/fednet/internal/backend"
	"github.com/fednet/fednet/internal/dataplane/tunnel"
	"github.com/fednet/fednet/internal/plan"
)

// linuxOp is an op of this driver that runs on Linux; it returns the
// change it made.
type linuxOp interface {
	exec(ctx context.Context, d *Driver) (tunnel.Change, error)
}

// Read implements tunnel.Machine. A kernel link whose device cannot be read
// is an error; a TUN link whose userspace device does not answer has no
// device (Diff then recreates it); a link of another kind has none. A
// supervised userspace device found dead is replaced first; while its
// restart waits out the restart policy, Read fails. A userspace device
// that answers and is not supervised yet (started by an earlier agent)
// is supervised from now on.
func (d *Driver) Read(ctx context.Context, link tunnel.Interface) (tunnel.Device, error) {
	if link.Kind != KindKernel && link.Kind != KindUserspace {
		return nil, nil
	}
	if link.Kind == KindUserspace {
		if err := d.settle(link.Name); err != nil {
			return nil, err
		}
	}
	dev, err := d.readDevice(ctx, link.Name)
	switch {
	case err != nil && link.Kind == KindKernel:
		return nil, fmt.Errorf("reading WireGuard device %s: %w", link.Name, err)
	case err != nil:
		d.logf("wireguard: %s is a TUN interface but no userspace WireGuard device answers (%v)", link.Name, err)
		return nil, nil
	}
	if link.Kind == KindUserspace {
		if err := readFallback(link.Name, dev); err != nil {
			return nil, fmt.Errorf("reading WireGuard device %s: %w", link.Name, err)
		}
	}
	d.remember(link.Name, dev)
	if link.Kind == KindUserspace {
		d.adopt(link.Name)
	}
	return dev, nil
}

// Exec implements tunnel.Machine.
func (d *Driver) Exec(ctx context.Context, op tunnel.Op) (tunnel.Change, error) {
	o, ok := op.(linuxOp)
	if !ok {
		return op.Change(), fmt.Errorf("wireguard: op %T is not one of this driver's", op)
	}
	c, err := o.exec(ctx, d)
	if err == nil {
		d.track(op)
	}
	return c, err
}

// withTimeout runs f and returns its error, or an error after the
// driver's timeout or at ctx's end (leaving f to finish in the
// background: wgctrl sets no deadline on a userspace device's socket).
func (d *Driver) withTimeout(ctx context.Context, what string, f func() error) error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	timer := time.NewTimer(d.cfg.Timeout)
	defer timer.Stop()
	select {
	case err := <-done:
		return err
	case <-timer.C:
		return fmt.Errorf("%s: no answer within %v", what, d.cfg.Timeout)
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", what, ctx.Err())
	}
}

// wgDevice reads device name through wgctrl, bounded.
func (d *Driver) wgDevice(ctx context.Context, name string) (*wgtypes.Device, error) {
	var dev *wgtypes.Device
	err := d.withTimeout(ctx, "reading WireGuard device "+name, func() error {
		c, err := wgctrl.New()
		if err != nil {
			return err
		}
		defer c.Close()
		v, err := c.Device(name)
		dev = v
		return err
	})
	if err != nil {
		return nil, err // dev may still be written by the call left behind
	}
	return dev, nil
}

func (d *Driver) readDevice(ctx context.Context, name string) (*Device, error) {
	dev, err := d.wgDevice(ctx, name)
	if err != nil {
		return nil, err
	}
	w := &Device{ListenPort: dev.ListenPort}
	if dev.PrivateKey != (wgtypes.Key{}) {
		w.PublicKey = plan.Key(dev.PublicKey)
	}
	for _, p := range dev.Peers {
		ps := Peer{
			PublicKey:           plan.Key(p.PublicKey),
			PersistentKeepalive: int(p.PersistentKeepaliveInterval / time.Second),
			LastHandshake:       p.LastHandshakeTime,
			RxBytes:             p.ReceiveBytes,
			TxBytes:             p.TransmitBytes,
		}
		if ps.LastHandshake.Unix() <= 0 {
			ps.LastHandshake = time.Time{} // userspace devices say 1970 for never
		}
		if p.Endpoint != nil {
			ap := p.Endpoint.AddrPort()
			ps.Endpoint = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()).String()
		}
		for _, a := range p.AllowedIPs {
			if pre, ok := tunnel.PrefixOf(&a); ok {
				ps.AllowedIPs = append(ps.AllowedIPs, pre)
			}
		}
		w.Peers = append(w.Peers, ps)
	}
	w.normalize()
	return w, nil
}

func (d *Driver) configure(ctx context.Context, name string, cfg wgtypes.Config) error {
	return d.withTimeout(ctx, "configuring WireGuard device "+name, func() error {
		c, err := wgctrl.New()
		if err != nil {
			return err
		}
		defer c.Close()
		return c.ConfigureDevice(name, cfg)
	})
}

func (o linkDel) exec(ctx context.Context, d *Driver) (tunnel.Change, error) {
	c := o.Change()
	d.retire(o.name) // its process's exit is expected now
	link, err := netlink.LinkByName(o.name)
	var notFound netlink.LinkNotFoundError
	if errors.As(err, &notFound) {
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("deleting interface %s: %w", o.name, err)
	}
	tt, ok := link.(*netlink.Tuntap)
	userspace := ok && tt.Mode == netlink.TUNTAP_MODE_TUN
	owner := 0
	if userspace {
		owner = socketOwner(filepath.Join(socketDir, o.name+".sock"))
	}
	if err := netlink.LinkDel(link); err != nil {
		return c, fmt.Errorf("deleting interface %s: %w", o.name, err)
	}
	if userspace {
		d.retireUserspace(ctx, o.name, owner)
	}
	return c, nil
}

// exec creates the interface, kernel WireGuard or the userspace device,
// and marks it; an interface that cannot be marked is deleted again, so no
// unmarked interface is left behind.
func (o linkAdd) exec(ctx context.Context, d *Driver) (tunnel.Change, error) {
	made := o
	if o.mode != Userspace {
		made.mode = Kernel
		err := netlink.LinkAdd(&netlink.Wireguard{LinkAttrs: netlink.LinkAttrs{Name: o.name}})
		if err != nil && (o.mode == Kernel || !kernelLacksWireGuard(err)) {
			return o.Change(), fmt.Errorf("creating WireGuard interface %s: %w", o.name, err)
		}
		if err != nil {
			d.logf("wireguard: the kernel has no WireGuard (%v); starting userspace WireGuard for %s", err, o.name)
			made.mode = Userspace
		}
	}
	if made.mode == Userspace {
		p, err := d.startUserspace(ctx, o.name, o.fallbackPort)
		if err != nil {
			return made.Change(), err
		}
		d.supervise(o.name, p.pid, p.done, func() error { return p.err })
	}
	if err := mark(o.name); err != nil {
		del := linkDel{name: o.name}
		if _, delErr := del.exec(ctx, d); delErr != nil {
			err = errors.Join(err, delErr)
		}
		return made.Change(), fmt.Errorf("marking interface %s as fednet's: %w", o.name, err)
	}
	return made.Change(), nil
}

// mark sets fednet's alias on the interface name.
func mark(name string) error {
	link, err := netlink.LinkByName(name)
	if err != nil {
		return err
	}
	return netlink.LinkSetAlias(link, tunnel.Mark(backend.WireGuard))
}

// kernelLacksWireGuard reports whether err from creating a wireguard link
// means the kernel does not know the link kind.
func kernelLacksWireGuard(err error) bool {
	return errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENODEV) || errors.Is(err, unix.EPROTONOSUPPORT)
}

func (o deviceSet) exec(ctx context.Context, d *Driver) (tunnel.Change, error) {
	c := o.Change()
	cfg := wgtypes.Config{}
	if o.privateKey {
		if d.cfg.PrivateKey.IsZero() {
			return c, fmt.Errorf("configuring WireGuard device %s: the driver has no private key", o.name)
		}
		k := wgtypes.Key(d.cfg.PrivateKey)
		cfg.PrivateKey = &k
	}
	if o.listenPort >= 0 {
		port := o.listenPort
		cfg.ListenPort = &port
	}
	if err := d.configure(ctx, o.name, cfg); err != nil {
		return c, fmt.Errorf("configuring WireGuard device %s (%s): %w", o.name, c, err)
	}
	return c, nil
}

func (o peerRemove) exec(ctx context.Context, d *Driver) (tunnel.Change, error) {
	err := d.configure(ctx, o.dev, wgtypes.Config{Peers: []wgtypes.PeerConfig{{PublicKey: wgtypes.Key(o.key), Remove: true}}})
	if err != nil {
		return o.Change(), fmt.Errorf("removing peer %s from %s: %w", o.key, o.dev, err)
	}
	return o.Change(), nil
}

func (o peerSet) exec(ctx context.Context, d *Driver) (tunnel.Change, error) {
	c := o.Change()
	pc := wgtypes.PeerConfig{PublicKey: wgtypes.Key(o.key)}
	if o.endpoint != "" {
		ap, err := netip.ParseAddrPort(o.endpoint)
		if err != nil {
			return c, fmt.Errorf("setting peer %s on %s: endpoint: %w", o.key, o.dev, err)
		}
		pc.Endpoint = net.UDPAddrFromAddrPort(ap)
	}
	if o.setAllowedIPs {
		pc.ReplaceAllowedIPs = !o.addOnly
		pc.AllowedIPs = []net.IPNet{}
		for _, a := range o.allowedIPs {
			pc.AllowedIPs = append(pc.AllowedIPs, tunnel.IPNet(a))
		}
	}
	if o.setKeepalive {
		ka := time.Duration(o.keepalive) * time.Second
		pc.PersistentKeepaliveInterval = &ka
	}
	if err := d.configure(ctx, o.dev, wgtypes.Config{Peers: []wgtypes.PeerConfig{pc}}); err != nil {
		return c, fmt.Errorf("setting peer %s on %s: %w", o.key, o.dev, err)
	}
	return c, nil
}

// Settle implements tunnel.Machine: it starts the handshake with each new
// peer (every peer after our own key changed) whose public key sorts above
// ours, by sending one datagram to the peer's transit address through the
// tunnel. When both sides of a new link get traffic at once, both send a
// handshake initiation, each answers the other's, and each drops the
// answer to its own: the link then waits for WireGuard's 15-second retry.
// With only the lower key initiating (before any traffic), new links come
// up in one round trip. The datagram is sent again while no handshake is
// seen (kickRepeats). The datagram goes to the discard port; the peer's
// firewall admits it from the tunnel and nothing listens there. Best
// effort: a failure only costs the race its usual retry.
func (d *Driver) Settle(ctx context.Context, t plan.Tunnel, peers []plan.Peer, done []tunnel.Op) {
	created := map[plan.Key]bool{}
	for _, o := range done {
		if s, ok := o.(starter); ok {
			for _, k := range s.starts(peers) {
				created[k] = true
			}
		}
	}
	transit := t.Address.Masked()
	kicks := map[wgtypes.Key][]netip.Addr{}
	for _, peer := range peers {
		k := peer.WireGuard.PublicKey
		if !created[k] || k.IsZero() || bytes.Compare(d.pub[:], k[:]) >= 0 {
			continue
		}
		for _, a := range peer.AllowedIPs {
			if !a.IsSingleIP() || !transit.IsValid() || !transit.Contains(a.Addr()) {
				continue
			}
			kicks[wgtypes.Key(k)] = append(kicks[wgtypes.Key(k)], a.Addr())
			d.handshakeDatagram(peer.Gateway, a.Addr())
		}
	}
	if len(kicks) == 0 {
		return
	}
	// A device that has just come up may not run its peers yet (wireguard-go
	// starts them when it takes the interface's up event, which can come
	// after the datagram): the datagram is then dropped, and with only our
	// side initiating the link would wait for traffic. So send it again
	// while no handshake with the peer is seen.
	name := t.Name
	peersNow := func() ([]wgtypes.Peer, error) {
		dev, err := d.wgDevice(context.Background(), name)
		if err != nil {
			return nil, err
		}
		return dev.Peers, nil
	}
	go kickAgain(kicks, kickRepeats, peersNow, func(a netip.Addr) { d.handshakeDatagram("", a) })
}

// kickRepeats are the pauses between the handshake datagrams Settle sends
// again while a new peer has no handshake.
var kickRepeats = []time.Duration{200 * time.Millisecond, 300 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second}

// kickAgain sends, after each pause of waits, the handshake datagram to
// the addresses kicks holds of each peer that peers says has had no
// handshake yet; it stops when every such peer has had one, or when the
// device cannot be read.
func kickAgain(kicks map[wgtypes.Key][]netip.Addr, waits []time.Duration, peers func() ([]wgtypes.Peer, error), send func(netip.Addr)) {
	for _, wait := range waits {
		time.Sleep(wait)
		ps, err := peers()
		if err != nil {
			return
		}
		waiting := false
		for _, p := range ps {
			if addrs, ok := kicks[p.PublicKey]; ok && p.LastHandshakeTime.Unix() <= 0 {
				waiting = true
				for _, a := range addrs {
					send(a)
				}
			}
		}
		if !waiting {
			return
		}
	}
}

// handshakeDatagram sends the handshake datagram to a peer's transit address.
func (d *Driver) handshakeDatagram(gateway string, a netip.Addr) {
	conn, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, discardPort)))
	if err == nil {
		_, err = conn.Write([]byte("fednet: handshake"))
		conn.Close()
	}
	if err != nil && gateway != "" {
		d.logf("starting the handshake with peer %s (%s): %v", gateway, a, err)
	}
}

// discardPort is the UDP port (RFC 863) the handshake datagram goes to.
const discardPort = 9
