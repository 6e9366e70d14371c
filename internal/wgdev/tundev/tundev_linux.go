//go:build linux

package tundev

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/tun"

	"github.com/fednet/fednet/internal/offload"
)

// Config configures a Device.
type Config struct {
	// Name is the interface to create (at most 15 bytes); it must not
	// exist.
	Name string
	// MTU is set on the interface if positive.
	MTU  int
	Mode Mode
	// Netns names a network namespace (/run/netns/NAME) to create the
	// interface in and watch it from; empty: the caller's.
	Netns string
	// Logf receives notices (offloads negotiated, fallbacks); nil
	// discards them.
	Logf func(format string, args ...any)
}

// Device is a TUN interface with offloads. Read is called by one
// goroutine at a time (wireguard-go's TUN reader); Write is safe for
// concurrent use. After Close, Read and Write return os.ErrClosed and
// the Events channel is closed.
type Device struct {
	cfg      Config
	file     *os.File
	rc       syscall.RawConn
	name     string
	index    int
	ns       netns.NsHandle // the interface's namespace when Config.Netns is set, else None
	nl       *netlink.Handle
	hdrLen   int
	offloads offload.Offloads

	// merge holds the kinds of packets still merged on write (mergeTCP
	// ...); a kind the kernel once refused is cleared.
	merge atomic.Uint32
	ports atomic.Pointer[portSet]

	events    chan tun.Event
	queued    atomic.Uint32 // events not yet delivered
	wake      chan struct{}
	done      chan struct{}
	watchDone chan struct{}
	closeOnce sync.Once
	closeErr  error

	readMu  sync.Mutex
	rbuf    []byte
	pending pending

	writers sync.Pool
	stats   counters
	dropLog atomic.Int64 // when a drop was last logged (Unix seconds)
}

const (
	mergeTCP = 1 << iota
	mergeUDP
	mergeTunnel
)

// TUNSETOFFLOAD bits (include/uapi/linux/if_tun.h); x/sys/unix lacks the
// tunnel ones.
const (
	tunFCsum         = unix.TUN_F_CSUM
	tunFTSO4         = unix.TUN_F_TSO4
	tunFTSO6         = unix.TUN_F_TSO6
	tunFTSOECN       = unix.TUN_F_TSO_ECN
	tunFUSO4         = unix.TUN_F_USO4
	tunFUSO6         = unix.TUN_F_USO6
	tunFUDPTunnel    = 0x080
	tunFUDPTunnelCsm = 0x100
)

// step is one set of offloads to ask the kernel for.
type step struct {
	flags  int
	hdrLen int
	off    offload.Offloads
}

// steps are tried in order; the first the kernel accepts wins.
var steps = []step{
	{tunFCsum | tunFTSO4 | tunFTSO6 | tunFTSOECN | tunFUSO4 | tunFUSO6 | tunFUDPTunnel | tunFUDPTunnelCsm,
		offload.TunnelHeaderLen, offload.Offloads{TCP: true, UDP: true, Tunnel: true}},
	{tunFCsum | tunFTSO4 | tunFTSO6 | tunFTSOECN | tunFUSO4 | tunFUSO6, offload.HeaderLen, offload.Offloads{TCP: true, UDP: true}},
	{tunFCsum | tunFTSO4 | tunFTSO6 | tunFTSOECN, offload.HeaderLen, offload.Offloads{TCP: true}},
	{tunFCsum | tunFTSO4 | tunFTSO6, offload.HeaderLen, offload.Offloads{TCP: true}},
	{0, offload.HeaderLen, offload.Offloads{}},
}

// negotiate asks for the offloads of mode and less until the kernel
// accepts, through setHdrLen (TUNSETVNETHDRSZ) and setOffload
// (TUNSETOFFLOAD); EINVAL means "not supported", other errors are
// returned.
func negotiate(mode Mode, setHdrLen, setOffload func(int) error) (step, error) {
	for _, s := range steps {
		if mode >= NoTunnel && s.off.Tunnel || mode == None && s.flags != 0 {
			continue
		}
		if err := setHdrLen(s.hdrLen); err != nil {
			return s, fmt.Errorf("setting the virtio-net header length to %d: %w", s.hdrLen, err)
		}
		err := setOffload(s.flags)
		if err == nil {
			return s, nil
		}
		if !errors.Is(err, unix.EINVAL) {
			return s, fmt.Errorf("setting offloads %#x: %w", s.flags, err)
		}
	}
	return step{}, errors.New("the kernel refuses even no offloads")
}

// New creates the TUN interface and negotiates offloads. The interface is
// removed when the Device is closed.
func New(cfg Config) (*Device, error) {
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	d := &Device{cfg: cfg, ns: netns.None(), events: make(chan tun.Event, 16), wake: make(chan struct{}, 1), done: make(chan struct{}), watchDone: make(chan struct{})}
	var err error
	if cfg.Netns != "" {
		if d.ns, err = netns.GetFromName(cfg.Netns); err != nil {
			return nil, fmt.Errorf("network namespace %s: %w", cfg.Netns, err)
		}
	}
	fd, err := d.open()
	if err != nil {
		d.ns.Close()
		return nil, err
	}
	if err := d.setUp(fd); err != nil {
		unix.Close(fd)
		if d.nl != nil {
			d.nl.Close()
		}
		d.ns.Close()
		return nil, err
	}
	go d.watch()
	go d.deliver()
	return d, nil
}

// open opens /dev/net/tun and creates the interface, in the configured
// namespace, and negotiates offloads.
func (d *Device) open() (int, error) {
	type result struct {
		fd  int
		err error
	}
	res := make(chan result, 1)
	go func() {
		// Switching the namespace of a locked thread; if it cannot be
		// switched back the thread dies with this goroutine (still
		// locked).
		runtime.LockOSThread()
		if d.ns.IsOpen() {
			orig, err := netns.Get()
			if err != nil {
				res <- result{-1, fmt.Errorf("current network namespace: %w", err)}
				return
			}
			defer orig.Close()
			if err := netns.Set(d.ns); err != nil {
				res <- result{-1, fmt.Errorf("entering network namespace %s: %w", d.cfg.Netns, err)}
				return
			}
			fd, err := d.create()
			if netns.Set(orig) == nil {
				runtime.UnlockOSThread()
			}
			res <- result{fd, err}
			return
		}
		fd, err := d.create()
		runtime.UnlockOSThread()
		res <- result{fd, err}
	}()
	r := <-res
	return r.fd, r.err
}

// create opens the TUN device and negotiates offloads on it.
func (d *Device) create() (int, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("opening /dev/net/tun: %w", err)
	}
	ifr, err := unix.NewIfreq(d.cfg.Name)
	if err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("interface name %q: %w", d.cfg.Name, err)
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("creating TUN interface %s: %w", d.cfg.Name, err)
	}
	// Little-endian virtio-net headers whatever the machine (a no-op on
	// little-endian machines, where it may also be unsupported).
	if err := unix.IoctlSetPointerInt(fd, unix.TUNSETVNETLE, 1); err != nil && !littleEndian() {
		unix.Close(fd)
		return -1, fmt.Errorf("setting little-endian virtio-net headers: %w", err)
	}
	s, err := negotiate(d.cfg.Mode,
		func(n int) error { return unix.IoctlSetPointerInt(fd, unix.TUNSETVNETHDRSZ, n) },
		func(f int) error { return unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, f) })
	if err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("TUN interface %s: %w", d.cfg.Name, err)
	}
	d.hdrLen, d.offloads = s.hdrLen, s.off
	return fd, nil
}

func littleEndian() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}

// setUp wraps fd in a file and finds the interface.
func (d *Device) setUp(fd int) error {
	if err := unix.SetNonblock(fd, true); err != nil {
		return fmt.Errorf("TUN interface %s: %w", d.cfg.Name, err)
	}
	ifr, err := unix.NewIfreq("")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.TUNGETIFF, ifr); err != nil {
		return fmt.Errorf("reading the name of TUN interface %s: %w", d.cfg.Name, err)
	}
	d.name = ifr.Name()
	if d.ns.IsOpen() {
		d.nl, err = netlink.NewHandleAt(d.ns)
	} else {
		d.nl, err = netlink.NewHandle()
	}
	if err != nil {
		return fmt.Errorf("netlink: %w", err)
	}
	link, err := d.nl.LinkByName(d.name)
	if err != nil {
		return fmt.Errorf("finding TUN interface %s: %w", d.name, err)
	}
	d.index = link.Attrs().Index
	if d.cfg.MTU > 0 {
		if err := d.nl.LinkSetMTU(link, d.cfg.MTU); err != nil {
			return fmt.Errorf("setting the MTU of %s to %d: %w", d.name, d.cfg.MTU, err)
		}
	}
	var m uint32
	if d.offloads.TCP {
		m |= mergeTCP
	}
	if d.offloads.UDP {
		m |= mergeUDP
	}
	if d.offloads.Tunnel {
		m |= mergeTunnel
	}
	d.merge.Store(m)
	d.ports.Store(&portSet{})
	d.rbuf = make([]byte, d.hdrLen+readSize)
	d.file = os.NewFile(uintptr(fd), "/dev/net/tun")
	if d.rc, err = d.file.SyscallConn(); err != nil {
		return err
	}
	d.cfg.Logf("TUN interface %s: offloads %s", d.name, describeOffloads(d.offloads))
	return nil
}

// readSize is the largest packet a read takes. The kernel's super-packets
// stay below 64 KiB plus the outer headers of a tunnel.
const readSize = 1 << 17

// Offloads returns the offloads negotiated with the kernel.
func (d *Device) Offloads() offload.Offloads { return d.offloads }

// File returns the TUN file.
func (d *Device) File() *os.File { return d.file }

// Name returns the interface name.
func (d *Device) Name() (string, error) { return d.name, nil }

// BatchSize is wireguard-go's batch size.
func (d *Device) BatchSize() int { return conn.IdealBatchSize }

// Events delivers EventUp, EventDown and EventMTUUpdate; it is closed
// after Close.
func (d *Device) Events() <-chan tun.Event { return d.events }

// MTU returns the interface's MTU.
func (d *Device) MTU() (int, error) {
	link, err := d.nl.LinkByIndex(d.index)
	if err != nil {
		return 0, fmt.Errorf("reading the MTU of %s: %w", d.name, err)
	}
	return link.Attrs().MTU, nil
}

// Close closes the device, which removes the interface. It waits for the
// event watcher to stop.
func (d *Device) Close() error {
	d.closeOnce.Do(func() {
		close(d.done)
		d.closeErr = d.file.Close()
		<-d.watchDone
		d.nl.Close()
		d.ns.Close()
		d.cfg.Logf("TUN interface %s closed: %v", d.name, d.Stats())
	})
	return d.closeErr
}

// pending is a super-packet read but not yet handed out whole.
type pending struct {
	pkt  []byte
	h    offload.Header
	next int // next segment to hand out
}

// Read reads packets into bufs[i][offset:], their lengths into sizes, and
// returns how many. It blocks for the first packet, then takes what else
// the kernel has queued, as long as bufs last; a super-packet is split
// into as many packets as it makes (continued on the next call if bufs run
// out). A packet that cannot be split is dropped and counted. After
// Close, or once the interface is gone, it returns os.ErrClosed.
func (d *Device) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	d.readMu.Lock()
	defer d.readMu.Unlock()
	d.stats.calls.Add(1)
	n := 0
	if p := &d.pending; p.pkt != nil {
		k, total, err := offload.Split(p.pkt, p.h, p.next, bufs, sizes, offset)
		if err != nil {
			d.stats.dropped.Add(1)
			p.pkt = nil
		} else {
			n += k
			p.next += k
			if p.next >= total {
				p.pkt = nil
			}
		}
		if n == len(bufs) || p.pkt != nil {
			d.stats.packetsRead.Add(uint64(n))
			d.stats.backlogged.Add(1)
			return n, nil
		}
	}
	for n < len(bufs) {
		m, err := d.read(n == 0)
		if err == unix.EAGAIN {
			break
		}
		if err != nil {
			if n > 0 {
				break // the next call reports it
			}
			return 0, err
		}
		d.stats.reads.Add(1)
		h, err := offload.DecodeHeader(d.rbuf[:d.hdrLen])
		if err != nil || m < d.hdrLen {
			d.stats.dropped.Add(1)
			continue
		}
		pkt := d.rbuf[d.hdrLen:m]
		k, total, err := offload.Split(pkt, h, 0, bufs[n:], sizes[n:], offset)
		if err != nil {
			d.dropped(h, err)
			continue
		}
		if h.GSOType != offload.GSONone {
			d.stats.superRead.Add(1)
			if h.GSOType.Tunnel() {
				d.stats.tunnelRead.Add(1)
			}
		}
		n += k
		if k < total {
			d.pending = pending{pkt: pkt, h: h, next: k}
			break
		}
	}
	if n == len(bufs) || d.pending.pkt != nil {
		d.stats.backlogged.Add(1)
	}
	d.stats.packetsRead.Add(uint64(n))
	return n, nil
}

// read reads one packet into rbuf; wait says whether to wait for one.
// It returns EAGAIN when not waiting and nothing is there.
func (d *Device) read(wait bool) (int, error) {
	var n int
	var err error
	rerr := d.rc.Read(func(fd uintptr) bool {
		for {
			n, err = unix.Read(int(fd), d.rbuf)
			if err != unix.EINTR {
				break
			}
		}
		return !(wait && err == unix.EAGAIN)
	})
	if rerr != nil {
		return 0, d.closedErr(rerr)
	}
	if err != nil && err != unix.EAGAIN {
		return 0, d.closedErr(err)
	}
	return n, err
}

// closedErr maps the errors of a closed file or a deleted interface to
// os.ErrClosed.
func (d *Device) closedErr(err error) error {
	if errors.Is(err, unix.EBADFD) || errors.Is(err, os.ErrClosed) {
		return os.ErrClosed
	}
	select {
	case <-d.done:
		return os.ErrClosed // the file's "use of closed file"
	default:
		return err
	}
}

// dropped counts a packet Split refused and logs it, at most once a
// minute.
func (d *Device) dropped(h offload.Header, err error) {
	d.stats.dropped.Add(1)
	now := time.Now().Unix()
	if last := d.dropLog.Load(); now-last >= 60 && d.dropLog.CompareAndSwap(last, now) {
		d.cfg.Logf("TUN interface %s: dropped a packet the kernel handed over (%+v): %v", d.name, h, err)
	}
}

// writer is one Write call's state, pooled.
type writer struct {
	merge uint32
	c     *offload.Coalescer
	pkts  [][]byte
	iov   []unix.Iovec
}

// Write writes packets bufs[i][offset:], merging what it can into
// super-packets (see package offload), and returns how many packets it
// wrote. Errors of single packets are joined; the rest are still written.
func (d *Device) Write(bufs [][]byte, offset int) (int, error) {
	w, _ := d.writers.Get().(*writer)
	if w == nil {
		w = &writer{}
	}
	defer d.writers.Put(w)
	if m := d.merge.Load(); w.c == nil || w.merge != m {
		w.merge = m
		w.c = offload.NewCoalescer(offload.Config{
			Offloads:   offload.Offloads{TCP: m&mergeTCP != 0, UDP: m&mergeUDP != 0, Tunnel: m&mergeTunnel != 0},
			HeaderLen:  d.hdrLen,
			TunnelPort: d.tunnelPort,
		})
	}
	w.pkts = w.pkts[:0]
	for _, b := range bufs {
		w.pkts = append(w.pkts, b[offset:])
	}
	var errs []error
	written := 0
	for _, wr := range w.c.Coalesce(w.pkts) {
		err := d.writev(w, wr)
		if err == nil {
			written += len(wr.Packets)
			continue
		}
		if errors.Is(err, os.ErrClosed) {
			return written, err
		}
		if wr.Merged() && errors.Is(err, unix.EINVAL) {
			d.refused(wr, err)
			for _, s := range w.c.Singles(wr) {
				if err := d.writev(w, s); err != nil {
					errs = append(errs, err)
				} else {
					written++
				}
			}
			continue
		}
		errs = append(errs, err)
	}
	d.stats.packetsWritten.Add(uint64(written))
	return written, errors.Join(errs...)
}

// refused turns off merging of the kind of wr, which the kernel refused.
func (d *Device) refused(wr offload.Write, err error) {
	h, _ := offload.DecodeHeader(wr.Head[:d.hdrLen])
	bit := uint32(mergeTCP)
	switch {
	case h.GSOType.Tunnel():
		bit = mergeTunnel
	case h.GSOType.Base() == offload.GSOUDPL4:
		bit = mergeUDP
	}
	for {
		m := d.merge.Load()
		if m&bit == 0 || d.merge.CompareAndSwap(m, m&^bit) {
			if m&bit != 0 {
				d.cfg.Logf("TUN interface %s: the kernel refused a merged %v packet (%v); writing such packets one by one from now on", d.name, h.GSOType, err)
			}
			return
		}
	}
}

// writev writes one packet: wr.Head and wr.Parts.
func (d *Device) writev(w *writer, wr offload.Write) error {
	w.iov = appendIovec(w.iov[:0], wr.Head)
	for _, b := range wr.Parts {
		w.iov = appendIovec(w.iov, b)
	}
	var errno syscall.Errno
	err := d.rc.Write(func(fd uintptr) bool {
		_, _, errno = unix.Syscall(unix.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&w.iov[0])), uintptr(len(w.iov)))
		return errno != unix.EAGAIN
	})
	runtime.KeepAlive(wr)
	if err != nil {
		return d.closedErr(err)
	}
	if errno != 0 {
		return d.closedErr(errno)
	}
	d.stats.writes.Add(1)
	if wr.Merged() {
		d.stats.merged.Add(1)
		if h, _ := offload.DecodeHeader(wr.Head[:d.hdrLen]); h.GSOType.Tunnel() {
			d.stats.tunnelMerged.Add(1)
		}
	}
	return nil
}

func appendIovec(iov []unix.Iovec, b []byte) []unix.Iovec {
	if len(b) == 0 {
		return iov
	}
	v := unix.Iovec{Base: &b[0]}
	v.SetLen(len(b))
	return append(iov, v)
}

// counters are Stats, updated atomically.
type counters struct {
	reads, superRead, tunnelRead, packetsRead             atomic.Uint64
	writes, merged, tunnelMerged, packetsWritten, dropped atomic.Uint64
	calls, backlogged                                     atomic.Uint64
}

// Stats returns the counts since the device was created.
func (d *Device) Stats() Stats {
	c := &d.stats
	return Stats{Reads: c.reads.Load(), SuperRead: c.superRead.Load(), TunnelRead: c.tunnelRead.Load(), PacketsRead: c.packetsRead.Load(),
		Writes: c.writes.Load(), Merged: c.merged.Load(), TunnelMerged: c.tunnelMerged.Load(), PacketsWritten: c.packetsWritten.Load(),
		Dropped: c.dropped.Load(), Calls: c.calls.Load(), Backlogged: c.backlogged.Load()}
}

// portSet is a set of UDP ports.
type portSet [1024]uint64

func (s *portSet) has(p uint16) bool { return s[p/64]&(1<<(p%64)) != 0 }
func (s *portSet) add(p uint16)      { s[p/64] |= 1 << (p % 64) }

// tunnelPort reports whether a VXLAN device in the interface's namespace
// listens on port.
func (d *Device) tunnelPort(port uint16) bool { return d.ports.Load().has(port) }

// watch follows the interface's state (EventUp, EventDown,
// EventMTUUpdate) and the namespace's VXLAN devices until Close.
func (d *Device) watch() {
	defer close(d.watchDone)
	var (
		running, seen bool
		mtu           int
		vxlans        = map[int]uint16{}
	)
	for {
		updates := make(chan netlink.LinkUpdate, 64)
		opts := netlink.LinkSubscribeOptions{ListExisting: true, ErrorCallback: func(err error) {
			select {
			case <-d.done:
			default:
				d.cfg.Logf("TUN interface %s: link updates: %v", d.name, err)
			}
		}}
		if d.ns.IsOpen() {
			opts.Namespace = &d.ns
		}
		if err := netlink.LinkSubscribeWithOptions(updates, d.done, opts); err != nil {
			d.cfg.Logf("TUN interface %s: subscribing to link updates: %v", d.name, err)
			close(updates)
		}
		for u := range updates {
			if u.Family != unix.AF_UNSPEC {
				continue // a bridge port's state (AF_BRIDGE), not the link's
			}
			deleted := u.Header.Type == unix.RTM_DELLINK
			idx := int(u.Index)
			if vx, ok := u.Link.(*netlink.Vxlan); ok && !deleted {
				if p := uint16(vx.Port); vxlans[idx] != p {
					vxlans[idx] = p
					d.publishPorts(vxlans)
				}
			} else if _, ok := vxlans[idx]; ok && deleted {
				delete(vxlans, idx)
				d.publishPorts(vxlans)
			}
			if idx != d.index || deleted {
				continue
			}
			now := u.Flags&unix.IFF_RUNNING != 0
			if now && (!running || !seen) {
				d.send(tun.EventUp)
			} else if !now && running {
				d.send(tun.EventDown)
			}
			running, seen = now, true
			if m := u.Attrs().MTU; m != mtu {
				mtu = m
				d.send(tun.EventMTUUpdate)
			}
		}
		select {
		case <-d.done:
			return
		case <-time.After(time.Second):
			// The subscription failed (a full socket buffer): again,
			// from the current state.
		}
	}
}

func (d *Device) publishPorts(vxlans map[int]uint16) {
	s := &portSet{}
	for _, p := range vxlans {
		s.add(p)
	}
	d.ports.Store(s)
}

// send queues an event for deliver, never blocking: the watcher must go
// on following VXLAN devices while wireguard-go is slow to take events.
// Of EventUp and EventDown only the last one queued is kept.
func (d *Device) send(e tun.Event) {
	for {
		old := d.queued.Load()
		n := old | uint32(e)
		if e&(tun.EventUp|tun.EventDown) != 0 {
			n = n&^uint32(tun.EventUp|tun.EventDown) | uint32(e)
		}
		if d.queued.CompareAndSwap(old, n) {
			break
		}
	}
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// deliver hands queued events to the Events channel until Close, then
// closes it.
func (d *Device) deliver() {
	defer close(d.events)
	for {
		select {
		case <-d.wake:
		case <-d.done:
			return
		}
		q := d.queued.Swap(0)
		for _, e := range []tun.Event{tun.EventMTUUpdate, tun.EventUp, tun.EventDown} {
			if q&uint32(e) == 0 {
				continue
			}
			select {
			case d.events <- e:
			case <-d.done:
				return
			}
		}
	}
}

// DefaultHeader sets the virtio-net header length of the existing TUN
// interface name back to the kernel's default (offload.HeaderLen), which
// wireguard-go's own TUN device assumes without setting it. A persistent
// TUN keeps the length a Device set on it (TunnelHeaderLen with UDP-tunnel
// GSO) after the Device is gone, and wireguard-go's device attached to it
// then has every write refused (EINVAL) and misreads every packet. It does
// nothing when there is no such interface, and fails when a process is
// attached to it.
func DefaultHeader(name string) error {
	if _, err := net.InterfaceByName(name); err != nil {
		return nil
	}
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening /dev/net/tun: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return fmt.Errorf("interface name %q: %w", name, err)
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		return fmt.Errorf("attaching to TUN interface %s: %w", name, err)
	}
	if err := unix.IoctlSetPointerInt(fd, unix.TUNSETVNETHDRSZ, offload.HeaderLen); err != nil {
		return fmt.Errorf("TUN interface %s: setting the virtio-net header length to %d: %w", name, offload.HeaderLen, err)
	}
	return nil
}
