package wireguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/fednet/fednet/internal/dataplane/tunnel"
)

// Supervision of userspace devices, on while OnEvent's function is set.
// Each device process the driver starts
// or finds serving a TUN interface (a restarted agent adopts the running
// one) is watched: a child through Wait, another process through a pidfd.
// When it dies while its TUN lives on (the driver makes TUNs persistent),
// the driver starts a new process on the same TUN at once, gives it the
// configuration last known (snaps: private key, listen port, peers with
// their endpoints, allowed IPs and keepalive) and the MTU the new process
// reset, starts a handshake with every peer that has an endpoint, and
// emits a Restored event. When the interface died too (deleted, or a TUN
// from before persistence), it emits a lost event: the core's Apply makes
// it anew. Restarts follow the RestartPolicy.

// supervise watches process pid, which serves the device on the TUN
// interface name; exited, when not nil, is closed once the process (a
// child) exited, and status then returns its exit status. A watch on name
// is replaced.
func (d *Driver) supervise(name string, pid int, exited <-chan struct{}, status func() error) {
	link, err := netlink.LinkByName(name)
	if err != nil {
		d.logf("wireguard: not supervising userspace WireGuard for %s (pid %d): %v", name, pid, err)
		return
	}
	d.supMu.Lock()
	w := d.watches[name]
	if w == nil {
		w = &watch{name: name, history: restarts{policy: d.cfg.Restart}}
		d.watches[name] = w
	}
	d.supMu.Unlock()
	w.mu.Lock()
	w.pid, w.ifindex, w.retired = pid, link.Attrs().Index, false
	w.mu.Unlock()
	d.await(w, pid, exited, status)
}

// await waits in the background for process pid of w to exit and then
// repairs w.
func (d *Driver) await(w *watch, pid int, exited <-chan struct{}, status func() error) {
	if exited != nil {
		go func() {
			<-exited
			d.died(w, pid, "exited: "+exitStatus(status()))
		}()
		return
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		d.logf("wireguard: not supervising userspace WireGuard for %s (pid %d): pidfd_open: %v", w.name, pid, err)
		return
	}
	go func() {
		defer unix.Close(fd)
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			if _, err := unix.Poll(fds, -1); err == nil || !errors.Is(err, unix.EINTR) {
				break
			}
		}
		// Not our child: its exit status went to its parent.
		d.died(w, pid, "exited (started by an earlier agent: exit status unknown)")
	}()
}

// exitStatus renders a child's exit status.
func exitStatus(err error) string {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return "status 0"
	case errors.As(err, &ee):
		return ee.ProcessState.String() // "signal: killed", "exit status 1"
	}
	return err.Error()
}

// died repairs w after process pid, which served it, exited with cause.
// A process that is no longer w's, or whose exit the driver caused, is
// left alone.
func (d *Driver) died(w *watch, pid int, cause string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pid != pid || w.retired || !d.supervising() {
		return
	}
	d.repairLocked(w, fmt.Sprintf("(pid %d) %s", pid, cause))
}

// repairLocked replaces w's dead process, at once or after the delay the
// restart policy asks for, or reports w lost when its interface died too.
// w.mu is held.
func (d *Driver) repairLocked(w *watch, cause string) {
	noticed := time.Now()
	w.pid = 0
	if !d.tunKept(w) {
		d.forget(w)
		d.logf("wireguard: userspace WireGuard for %s %s, and its interface is gone; the plan must be applied again", w.name, cause)
		d.emit(tunnel.Event{Interface: w.name, Cause: cause})
		return
	}
	delay, n := w.history.next(noticed)
	if delay == 0 {
		d.restartLocked(w, cause, n, noticed)
		return
	}
	w.retryAt = noticed.Add(delay)
	d.logf("wireguard: userspace WireGuard for %s %s; restart %d within %v: restarting in %v",
		w.name, cause, n, w.history.policy.Window, delay)
	time.AfterFunc(delay, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.retryAt.IsZero() || w.retired {
			return
		}
		w.retryAt = time.Time{}
		d.restartLocked(w, cause, n, time.Now())
	})
}

// tunKept reports whether w's TUN interface is still there.
func (d *Driver) tunKept(w *watch) bool {
	link, err := netlink.LinkByName(w.name)
	if err != nil || link.Attrs().Index != w.ifindex {
		return false
	}
	tt, ok := link.(*netlink.Tuntap)
	return ok && tt.Mode == netlink.TUNTAP_MODE_TUN
}

// restartLocked starts a new process on w's TUN and restores the device's
// configuration and the interface's MTU. w.mu is held.
func (d *Driver) restartLocked(w *watch, cause string, n int, noticed time.Time) {
	lost := func(err error) {
		d.logf("wireguard: userspace WireGuard for %s %s; restarting it failed: %v; the plan must be applied again", w.name, cause, err)
		d.emit(tunnel.Event{Interface: w.name, Cause: cause})
	}
	link, err := netlink.LinkByName(w.name)
	if err != nil {
		d.forget(w)
		lost(err)
		return
	}
	mtu := link.Attrs().MTU
	ctx, cancel := context.WithTimeout(context.Background(), userspaceStartTimeout+d.cfg.Timeout)
	defer cancel()
	snap := d.snapshot(w.name)
	fallbackPort := 0
	if snap != nil {
		fallbackPort = snap.FallbackPort
	}
	p, err := d.startUserspace(ctx, w.name, fallbackPort)
	if err != nil {
		lost(err)
		return
	}
	w.pid = p.pid
	d.await(w, p.pid, p.done, func() error { return p.err })
	var errs []error
	// The new process set the TUN's MTU to its own default.
	if link, err := netlink.LinkByName(w.name); err == nil && link.Attrs().MTU != mtu {
		if err := netlink.LinkSetMTU(link, mtu); err != nil {
			errs = append(errs, fmt.Errorf("setting MTU %d: %w", mtu, err))
		}
	}
	if snap != nil {
		if err := d.restore(ctx, w.name, snap); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		lost(err)
		return
	}
	took := time.Since(noticed)
	what := "nothing known to restore"
	if snap != nil {
		what = fmt.Sprintf("key, listen port %d and %d peers restored", snap.ListenPort, len(snap.Peers))
	}
	d.logf("wireguard: userspace WireGuard for %s %s; restarted it in %v (pid %d, restart %d within %v): %s; interface, addresses and routes kept",
		w.name, cause, took.Round(time.Millisecond), p.pid, n, w.history.policy.Window, what)
	d.emit(tunnel.Event{Interface: w.name, Restored: true, Cause: cause, Took: took})
	if snap != nil {
		go d.kick(w.name, snap.Peers)
	}
}

// restore gives the device on name the configuration dev: this driver's
// private key when dev had it, the listen port, and exactly dev's peers.
func (d *Driver) restore(ctx context.Context, name string, dev *Device) error {
	cfg := wgtypes.Config{ReplacePeers: true, Peers: []wgtypes.PeerConfig{}}
	if !dev.PublicKey.IsZero() && dev.PublicKey == d.pub {
		k := wgtypes.Key(d.cfg.PrivateKey)
		cfg.PrivateKey = &k
	}
	if dev.ListenPort > 0 {
		port := dev.ListenPort
		cfg.ListenPort = &port
	}
	for _, p := range dev.Peers {
		ka := time.Duration(p.PersistentKeepalive) * time.Second
		pc := wgtypes.PeerConfig{PublicKey: wgtypes.Key(p.PublicKey), PersistentKeepaliveInterval: &ka, ReplaceAllowedIPs: true}
		if ap, err := netip.ParseAddrPort(p.Endpoint); err == nil {
			pc.Endpoint = net.UDPAddrFromAddrPort(ap)
		}
		for _, a := range p.AllowedIPs {
			pc.AllowedIPs = append(pc.AllowedIPs, tunnel.IPNet(a))
		}
		cfg.Peers = append(cfg.Peers, pc)
	}
	if err := d.configure(ctx, name, cfg); err != nil {
		return fmt.Errorf("restoring WireGuard device %s: %w", name, err)
	}
	return nil
}

// kickWithin bounds how long kick tries to bring the restored links up.
const kickWithin = 2 * time.Second

// kick starts a handshake with each of peers that has an endpoint, on the
// device name just restored, and repeats it every 100 ms until each has
// one or kickWithin passed. The peers still hold sessions with the dead
// process, so they would not start one before their own timeouts (15 s
// with traffic, never without); turning a peer's persistent keepalive on
// makes wireguard-go send a keepalive at once, which needs a handshake
// first. Each peer's keepalive ends as it was.
func (d *Driver) kick(name string, peers []Peer) {
	pending := map[wgtypes.Key]int{} // keepalive seconds
	for _, p := range peers {
		if p.Endpoint != "" {
			pending[wgtypes.Key(p.PublicKey)] = p.PersistentKeepalive
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), kickWithin)
	defer cancel()
	for round := 0; len(pending) > 0 && ctx.Err() == nil; round++ {
		if round%20 == 0 {
			for _, step := range []func(int) int{
				func(int) int { return 0 },
				func(ka int) int { return max(ka, 1) },
				func(ka int) int { return ka },
			} {
				cfg := wgtypes.Config{}
				for k, ka := range pending {
					iv := time.Duration(step(ka)) * time.Second
					cfg.Peers = append(cfg.Peers, wgtypes.PeerConfig{PublicKey: k, UpdateOnly: true, PersistentKeepaliveInterval: &iv})
				}
				if err := d.configure(ctx, name, cfg); err != nil {
					d.logf("wireguard: starting handshakes on %s after its restart: %v", name, err)
					return
				}
			}
		}
		time.Sleep(5 * time.Millisecond)
		dev, err := d.wgDevice(ctx, name)
		if err != nil {
			continue
		}
		for _, p := range dev.Peers {
			if p.LastHandshakeTime.Unix() > 0 {
				delete(pending, p.PublicKey)
			}
		}
	}
	if len(pending) > 0 {
		d.logf("wireguard: %d peers of %s have no handshake %v after its restart; their traffic starts one", len(pending), name, kickWithin)
	}
}

// forget stops supervising w's interface.
func (d *Driver) forget(w *watch) {
	d.supMu.Lock()
	defer d.supMu.Unlock()
	if d.watches[w.name] == w {
		delete(d.watches, w.name)
	}
}

// retire is called before the driver deletes the interface name itself:
// the process's exit is then expected, and a pending restart is dropped.
func (d *Driver) retire(name string) {
	d.supMu.Lock()
	w := d.watches[name]
	delete(d.watches, name)
	d.supMu.Unlock()
	if w != nil {
		w.mu.Lock()
		w.retired, w.retryAt = true, time.Time{}
		w.mu.Unlock()
	}
}

// settle is called before the device on name is read. When its supervised
// process is dead and the death not yet handled, it repairs it now; it
// fails while a delayed restart is pending, so that Apply does not replace
// the device behind the restart policy's back.
func (d *Driver) settle(name string) error {
	d.supMu.Lock()
	w := d.watches[name]
	d.supMu.Unlock()
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pid > 0 && exited(w.pid) && d.supervising() {
		d.repairLocked(w, fmt.Sprintf("(pid %d) exited", w.pid))
	}
	if !w.retryAt.IsZero() {
		return fmt.Errorf("userspace WireGuard for %s keeps dying (%d restarts within %v); the next restart is due at %s",
			name, len(w.history.at), w.history.policy.Window, w.retryAt.Format(time.TimeOnly))
	}
	return nil
}

// adopt supervises the process serving the device on TUN name, found by
// its UAPI socket, unless it is supervised already: a restarted agent
// takes over the device its predecessor started.
func (d *Driver) adopt(name string) {
	d.supMu.Lock()
	_, ok := d.watches[name]
	d.supMu.Unlock()
	if ok || !d.supervising() {
		return
	}
	if pid := socketOwner(filepath.Join(socketDir, name+".sock")); pid > 0 {
		d.logf("wireguard: supervising the running userspace WireGuard for %s (pid %d)", name, pid)
		d.supervise(name, pid, nil, nil)
	}
}
