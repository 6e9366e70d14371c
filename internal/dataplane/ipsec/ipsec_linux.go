package ipsec

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/strongswan/govici/vici"
	"github.com/vishvananda/netlink"

	"github.com/fednet/fednet/internal/backend"
	"github.com/fednet/fednet/internal/dataplane/tunnel"
	"github.com/fednet/fednet/internal/plan"
)

// linuxOp is an op the driver executes on Linux.
type linuxOp interface {
	exec(ctx context.Context, d *Driver) (tunnel.Change, error)
}

// Read implements tunnel.Machine: fednet's connections and their SAs, as
// charon reports them over vici; nil when charon does not answer.
func (d *Driver) Read(ctx context.Context, link tunnel.Interface) (tunnel.Device, error) {
	d.watch()
	var dev *Device
	err := d.session(ctx, func(ctx context.Context, s *vici.Session) error {
		var err error
		dev, err = readDevice(ctx, s)
		return err
	})
	var down notAnswering
	if errors.As(err, &down) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return dev, nil
}

// Exec implements tunnel.Machine.
func (d *Driver) Exec(ctx context.Context, op tunnel.Op) (tunnel.Change, error) {
	o, ok := op.(linuxOp)
	if !ok {
		return "", fmt.Errorf("ipsec: op %T is not the IPsec driver's", op)
	}
	return o.exec(ctx, d)
}

// Settle implements tunnel.Machine. Connections initiate themselves when
// loaded (start_action start, on the initiating side), so there is
// nothing left to do.
func (d *Driver) Settle(context.Context, plan.Tunnel, []plan.Peer, []tunnel.Op) {}

// notAnswering is the error of a vici socket nobody listens on.
type notAnswering struct{ err error }

func (e notAnswering) Error() string { return e.err.Error() }
func (e notAnswering) Unwrap() error { return e.err }

// session runs f on a new vici session with charon, bounded by the
// driver's timeout.
func (d *Driver) session(ctx context.Context, f func(context.Context, *vici.Session) error) error {
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	s, err := vici.NewSession(vici.WithSocketPath(d.socket))
	if err != nil {
		return notAnswering{fmt.Errorf("charon does not answer on its vici socket %s (is strongSwan's charon running? see docs/interop.md): %w", d.socket, err)}
	}
	defer s.Close()
	return f(ctx, s)
}

// readDevice lists fednet's connections and SAs.
func readDevice(ctx context.Context, s *vici.Session) (*Device, error) {
	dev := &Device{SAs: map[string]SA{}}
	for m, err := range s.CallStreaming(ctx, "list-conns", "list-conn", nil) {
		if err != nil {
			return nil, fmt.Errorf("vici list-conns: %w", err)
		}
		for _, name := range m.Keys() {
			peer, ok := strings.CutPrefix(name, ConnPrefix)
			sec, isSec := m.Get(name).(*vici.Message)
			if !ok || !isSec {
				continue
			}
			c := Conn{Peer: peer, Remote: strings.Join(list(sec.Get("remote_addrs")), ",")}
			if children, ok := sec.Get("children").(*vici.Message); ok {
				for _, child := range children.Keys() {
					// Children are named ConnPrefix + fingerprint, then
					// "-" and a number from the second on.
					c.Config, _, _ = strings.Cut(strings.TrimPrefix(child, ConnPrefix), "-")
					if cs, ok := children.Get(child).(*vici.Message); ok {
						for _, ts := range list(cs.Get("remote-ts")) {
							if p, err := netip.ParsePrefix(ts); err == nil {
								c.RemoteTS = append(c.RemoteTS, p)
							}
						}
					}
				}
			}
			c.RemoteTS = tunnel.CanonicalPrefixes(c.RemoteTS)
			dev.Conns = append(dev.Conns, c)
		}
	}
	slices.SortFunc(dev.Conns, func(a, b Conn) int { return strings.Compare(a.Peer, b.Peer) })
	q := vici.NewMessage()
	if err := q.Set("noblock", "yes"); err != nil {
		return nil, err
	}
	now := time.Now()
	for m, err := range s.CallStreaming(ctx, "list-sas", "list-sa", q) {
		if err != nil {
			return nil, fmt.Errorf("vici list-sas: %w", err)
		}
		for _, name := range m.Keys() {
			peer, ok := strings.CutPrefix(name, ConnPrefix)
			ike, isSec := m.Get(name).(*vici.Message)
			if !ok || !isSec {
				continue
			}
			sa := SA{State: str(ike.Get("state")), Remote: str(ike.Get("remote-host"))}
			if port := str(ike.Get("remote-port")); sa.Remote != "" && port != "" {
				sa.Remote = netipJoin(sa.Remote, port)
			}
			if secs, err := strconv.Atoi(str(ike.Get("established"))); err == nil {
				sa.Established = now.Add(-time.Duration(secs) * time.Second)
			}
			if children, ok := ike.Get("child-sas").(*vici.Message); ok {
				for _, k := range children.Keys() {
					cs, ok := children.Get(k).(*vici.Message)
					if !ok {
						continue
					}
					if str(cs.Get("state")) == "INSTALLED" {
						sa.Installed = true
					}
					in, _ := strconv.ParseInt(str(cs.Get("bytes-in")), 10, 64)
					out, _ := strconv.ParseInt(str(cs.Get("bytes-out")), 10, 64)
					sa.RxBytes += in
					sa.TxBytes += out
				}
			}
			// Of several IKE_SAs of one connection (a rekeying), the
			// established one counts.
			if old, ok := dev.SAs[peer]; !ok || old.State != "ESTABLISHED" || sa.State == "ESTABLISHED" && sa.Installed {
				dev.SAs[peer] = sa
			}
		}
	}
	return dev, nil
}

func netipJoin(host, port string) string {
	if a, err := netip.ParseAddr(host); err == nil && a.Is6() {
		return "[" + host + "]:" + port
	}
	return host + ":" + port
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

func list(v any) []string {
	switch x := v.(type) {
	case []string:
		return x
	case string:
		return []string{x}
	}
	return nil
}

// readPSK reads a pre-shared key file: its first line, at least 16 bytes.
func readPSK(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading the pre-shared key: %w", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	line = strings.TrimSpace(line)
	if len(line) < 16 {
		return "", fmt.Errorf("the pre-shared key in %s is %d bytes; want at least 16 (e.g. openssl rand -base64 32 > %s)", path, len(line), path)
	}
	return line, nil
}

// message builds a vici message from alternating keys and values.
func message(kv ...any) (*vici.Message, error) {
	m := vici.NewMessage()
	for i := 0; i+1 < len(kv); i += 2 {
		if err := m.Set(kv[i].(string), kv[i+1]); err != nil {
			return nil, fmt.Errorf("vici message field %s: %w", kv[i], err)
		}
	}
	return m, nil
}

// connMessage is the load-conn request of c: IKEv2 (or the version the
// plan asks for: an external site's profile), PSK, NAT-T always
// (charon's userspace ESP sends ESP in UDP only), no MOBIKE, DPD; one
// CHILD_SA with the local selectors and the peer's allowed IPs, or the
// plan's children. The initiating side starts the connection on load and
// after any close, retrying without end.
func (c conn) message(kernel bool) (*vici.Message, error) {
	ip := c.peer.IPsec
	dpd := fmt.Sprintf("%ds", ip.DPDSeconds)
	start, dpdAction, closeAction := "none", "clear", "none"
	if ip.Initiator {
		start, dpdAction, closeAction = "start", "restart", "start"
	}
	children := vici.NewMessage()
	for i, ch := range c.children() {
		childKV := []any{
			"local_ts", prefixStrings(ch.LocalTS), "remote_ts", prefixStrings(ch.RemoteTS), "esp_proposals", ip.ESP, "mode", "tunnel",
			"rekey_time", fmt.Sprintf("%ds", ip.RekeySeconds), "start_action", start,
			"dpd_action", dpdAction, "close_action", closeAction,
		}
		if kernel {
			childKV = append(childKV, "if_id_in", strconv.FormatUint(uint64(c.ifID), 10), "if_id_out", strconv.FormatUint(uint64(c.ifID), 10))
		}
		child, err := message(childKV...)
		if err != nil {
			return nil, err
		}
		if err := children.Set(c.childName(i), child); err != nil {
			return nil, fmt.Errorf("vici message field %s: %w", c.childName(i), err)
		}
	}
	local, err := message("auth", "psk", "id", ip.LocalID)
	if err != nil {
		return nil, err
	}
	remote, err := message("auth", "psk", "id", ip.RemoteID)
	if err != nil {
		return nil, err
	}
	version, ikeRekey := "2", 4*ip.RekeySeconds
	if ip.IKEVersion == 1 {
		version = "1"
	}
	if ip.IKERekeySeconds > 0 {
		ikeRekey = ip.IKERekeySeconds
	}
	body, err := message(
		"version", version, "remote_addrs", []string{c.remote()}, "encap", "yes", "mobike", "no",
		"proposals", ip.IKE, "dpd_delay", dpd, "rekey_time", fmt.Sprintf("%ds", ikeRekey),
		"keyingtries", "0", "unique", "replace",
		"local", local, "remote", remote, "children", children)
	if err != nil {
		return nil, err
	}
	return message(c.name(), body)
}

func prefixStrings(ps []netip.Prefix) []string {
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.String())
	}
	return out
}

// retryAfter is how long an initiating side waits after a failed attempt
// (the peer refused: no proposal, no key, no connection for us yet)
// before it initiates again. charon itself retries only timeouts.
const retryAfter = 5 * time.Second

// retry initiates the connection to peer again after retryAfter, when this
// side initiates it and no retry is pending.
func (d *Driver) retry(peer string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.initiating[peer]; !ok || d.pending[peer] {
		return
	}
	d.pending[peer] = true
	time.AfterFunc(retryAfter, func() {
		d.mu.Lock()
		delete(d.pending, peer)
		children, still := d.initiating[peer]
		d.mu.Unlock()
		if !still {
			return
		}
		err := d.session(context.Background(), func(ctx context.Context, s *vici.Session) error {
			for _, child := range children {
				m, err := message("ike", ConnPrefix+peer, "child", child, "timeout", "-1")
				if err != nil {
					return err
				}
				for _, err := range s.CallStreaming(ctx, "initiate", "control-log", m) {
					if err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err != nil {
			d.logf("ipsec link to %s: initiating again: %v", peer, err)
		}
	})
}

func (o connLoad) exec(ctx context.Context, d *Driver) (tunnel.Change, error) {
	c := o.c
	psk, err := readPSK(c.peer.IPsec.PSKFile)
	if err != nil {
		return "", fmt.Errorf("link to %s: %w", c.peer.Gateway, err)
	}
	kernel := false
	if l, err := netlink.LinkByName(c.iface); err == nil {
		kernel = l.Type() == "xfrm"
	}
	conn, err := c.message(kernel)
	if err != nil {
		return "", err
	}
	shared, err := message("id", c.name(), "type", "IKE", "data", psk, "owners", []string{c.peer.IPsec.LocalID, c.peer.IPsec.RemoteID})
	if err != nil {
		return "", err
	}
	// Recorded first: the connection initiates as it loads, and its first
	// failure may come before load-conn returns.
	d.mu.Lock()
	if c.peer.IPsec.Initiator {
		var names []string
		for i := range c.children() {
			names = append(names, c.childName(i))
		}
		d.initiating[c.peer.Gateway] = names
	} else {
		delete(d.initiating, c.peer.Gateway)
	}
	d.mu.Unlock()
	err = d.session(ctx, func(ctx context.Context, s *vici.Session) error {
		if _, err := s.Call(ctx, "load-shared", shared); err != nil {
			return fmt.Errorf("vici load-shared for the link to %s: %w", c.peer.Gateway, err)
		}
		if _, err := s.Call(ctx, "load-conn", conn); err != nil {
			return fmt.Errorf("vici load-conn %s: %w", c.name(), err)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	return o.Change(), nil
}

func (o connUnload) exec(ctx context.Context, d *Driver) (tunnel.Change, error) {
	name := ConnPrefix + o.peer
	err := d.session(ctx, func(ctx context.Context, s *vici.Session) error {
		m, err := message("name", name)
		if err != nil {
			return err
		}
		if _, err := s.Call(ctx, "unload-conn", m); err != nil {
			return fmt.Errorf("vici unload-conn %s: %w", name, err)
		}
		// Close what the connection left (unload-conn keeps SAs up).
		t, err := message("ike", name, "force", "yes", "timeout", "-1")
		if err != nil {
			return err
		}
		for _, err := range s.CallStreaming(ctx, "terminate", "control-log", t) {
			if err != nil {
				break // nothing to terminate is fine
			}
		}
		u, err := message("id", name)
		if err != nil {
			return err
		}
		s.Call(ctx, "unload-shared", u) // best effort: an older charon has no unload-shared
		return nil
	})
	if err != nil {
		return "", err
	}
	d.mu.Lock()
	delete(d.initiating, o.peer)
	d.mu.Unlock()
	return o.Change(), nil
}

func (o linkAdd) exec(ctx context.Context, d *Driver) (tunnel.Change, error) {
	if l, err := netlink.LinkByName(o.name); err == nil {
		// charon's kernel-libipsec TUN (made before the plan asked).
		if l.Type() != "tuntap" {
			return "", fmt.Errorf("interface %s exists and is a %s, neither an XFRM interface nor charon's TUN", o.name, l.Type())
		}
		return tunnel.Change("using charon's kernel-libipsec TUN " + o.name), nil
	}
	x := &netlink.Xfrmi{LinkAttrs: netlink.LinkAttrs{Name: o.name}, Ifid: o.ifID}
	if err := netlink.LinkAdd(x); err != nil {
		return "", fmt.Errorf("creating XFRM interface %s: %w; without XFRM interfaces (or kernel ESP), run charon with the kernel-libipsec plugin, whose TUN %s fednet then uses (docs/interop.md)", o.name, err, o.name)
	}
	if err := netlink.LinkSetAlias(x, tunnel.Mark(backend.IPsec)); err != nil {
		netlink.LinkDel(x)
		return "", fmt.Errorf("marking %s: %w", o.name, err)
	}
	return o.Change(), nil
}

func (o linkDel) exec(ctx context.Context, d *Driver) (tunnel.Change, error) {
	l, err := netlink.LinkByName(o.name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return o.Change(), nil
		}
		return "", fmt.Errorf("reading %s: %w", o.name, err)
	}
	if l.Type() == "tuntap" {
		if err := netlink.LinkSetAlias(l, ""); err != nil {
			return "", fmt.Errorf("unmarking %s: %w", o.name, err)
		}
		addrs, err := netlink.AddrList(l, netlink.FAMILY_ALL)
		if err != nil {
			return "", fmt.Errorf("reading the addresses of %s: %w", o.name, err)
		}
		for _, a := range addrs {
			if a.IP.IsLinkLocalUnicast() {
				continue
			}
			if err := netlink.AddrDel(l, &a); err != nil {
				return "", fmt.Errorf("removing %s from %s: %w", a.IPNet, o.name, err)
			}
		}
		return tunnel.Change(fmt.Sprintf("ip link set %s alias '' && ip address flush dev %s (charon's TUN)", o.name, o.name)), nil
	}
	if err := netlink.LinkDel(l); err != nil {
		return "", fmt.Errorf("deleting %s: %w", o.name, err)
	}
	return tunnel.Change("ip link del " + o.name), nil
}

// watch starts, once, the goroutine that follows charon's log for the
// reasons fednet's links fail (reasons), and logs each new one.
func (d *Driver) watch() {
	d.watchOnce.Do(func() { go d.follow() })
}

// follow subscribes to charon's log events and files those of fednet's
// connections; when charon goes away it reconnects, every two seconds at
// most, for as long as the process lives.
func (d *Driver) follow() {
	for {
		s, err := vici.NewSession(vici.WithSocketPath(d.socket))
		if err == nil {
			ch := make(chan vici.Event, 64)
			s.NotifyEvents(ch)
			if err := s.Subscribe("log"); err == nil {
				for ev := range ch {
					conn := str(ev.Message.Get("ikesa-name"))
					if level, err := strconv.Atoi(str(ev.Message.Get("level"))); conn == "" || err != nil || level > 1 {
						continue
					}
					peer, reason, changed := d.reasons.record(conn, str(ev.Message.Get("msg")))
					if changed {
						if reason == "" {
							d.logf("ipsec link to %s: established", peer)
						} else {
							d.logf("ipsec link to %s: %s", peer, reason)
						}
					}
					if reason != "" {
						d.retry(peer)
					}
				}
			}
			s.Close()
		}
		time.Sleep(2 * time.Second)
	}
}
