package wgdev

import (
	"context"
	"errors"
	"fmt"
	"github.com/fednet/fednet/internal/cpuprofile"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/ipc"
	"golang.zx2c4.com/wireguard/tun"

	"github.com/vishvananda/netlink"

	"github.com/fednet/fednet/internal/wgdev/aqm"
	"github.com/fednet/fednet/internal/wgdev/tundev"
)

// Run is Serve with the TUN device, queue management, threads and UDP bind
// the environment names (TUNEnv, AQMEnv, ProcsEnv, BindEnv; by default
// TUNOffload, queue management on, DefaultProcs threads and fednet's bind)
// and the options opts.
func Run(ctx context.Context, name string, logf func(string, ...any), opts ...Option) error {
	t, err := ParseTUN(os.Getenv(TUNEnv))
	if err != nil {
		return fmt.Errorf("%s: %w", TUNEnv, err)
	}
	q, err := ParseAQM(os.Getenv(AQMEnv))
	if err != nil {
		return fmt.Errorf("%s: %w", AQMEnv, err)
	}
	p, err := ParseProcs(os.Getenv(ProcsEnv))
	if err != nil {
		return fmt.Errorf("%s: %w", ProcsEnv, err)
	}
	b, err := ParseBind(os.Getenv(BindEnv))
	if err != nil {
		return fmt.Errorf("%s: %w", BindEnv, err)
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	return Serve(ctx, Config{Name: name, TUN: t, AQM: q, Bind: b, Procs: p, FallbackPort: o.fallbackPort, Logf: logf})
}

// Serve creates the TUN interface cfg.Name (or attaches to it), runs a
// WireGuard device on it and serves the UAPI socket SocketPath(name) until
// one of these happens:
//
//   - ctx is cancelled: Serve returns nil;
//   - the device closes, which wireguard-go does when reading the TUN fails,
//     as it does once the interface is deleted (ip link del NAME): Serve
//     returns nil;
//   - the UAPI socket fails or is removed: Serve returns an error.
//
// On return the device is closed (which removes the interface, unless it
// is a persistent TUN that existed before Serve: then it stays), the socket
// file is removed and every UAPI connection is closed. Serve fails at once
// if the interface cannot be created or the socket is in use by another
// live device. cfg.FallbackPort gives the device the TCP fallback
// (WithFallback).
func Serve(ctx context.Context, cfg Config) error {
	name, logf := cfg.Name, cfg.Logf
	if err := validName(name); err != nil {
		return err
	}
	if logf == nil {
		logf = device.DiscardLogf
	}
	switch procs := cfg.Procs; {
	case procs > 0:
		runtime.GOMAXPROCS(procs)
	case procs == 0:
		runtime.GOMAXPROCS(DefaultProcs(runtime.GOMAXPROCS(0)))
	}
	logf("wgdev %s: GOMAXPROCS %d (threads running the device's Go code at once; the machine has %d CPUs)", name, runtime.GOMAXPROCS(0), runtime.NumCPU())
	if dir := os.Getenv(ProfileEnv); dir != "" {
		stop, err := cpuprofile.Start(filepath.Join(dir, "wgdev-"+name+"-"+strconv.Itoa(os.Getpid())+".pprof"))
		if err != nil {
			return fmt.Errorf("%s: %w", ProfileEnv, err)
		}
		defer stop()
	}
	tdev, err := createTUN(cfg.TUN, name, func(format string, args ...any) {
		logf("wgdev %s: "+format, append([]any{name}, args...)...)
	})
	if err != nil {
		return fmt.Errorf("creating TUN interface %s: %w", name, err)
	}
	if real, err := tdev.Name(); err == nil && real != name {
		tdev.Close()
		return fmt.Errorf("creating TUN interface %s: the kernel named it %s", name, real)
	}
	file, err := ipc.UAPIOpen(name)
	if err != nil {
		tdev.Close()
		return fmt.Errorf("opening UAPI socket %s: %w", SocketPath(name), err)
	}
	// upFailed is signalled when wireguard-go could not bring the device
	// up (it then stays down): see retryUp.
	upFailed := make(chan struct{}, 1)
	logger := &device.Logger{
		Verbosef: device.DiscardLogf,
		Errorf: func(format string, args ...any) {
			logf("wgdev %s: "+format, append([]any{name}, args...)...)
			if strings.HasPrefix(format, "Unable to update bind") {
				select {
				case upFailed <- struct{}{}:
				default:
				}
			}
		},
	}
	if os.Getenv(VerboseEnv) != "" {
		logger.Verbosef = func(format string, args ...any) {
			logf("wgdev %s: "+format, append([]any{name}, args...)...)
		}
	}
	bind, cleanup, err := newBind(name, cfg.Bind, options{fallbackPort: cfg.FallbackPort}, logf)
	if err != nil {
		tdev.Close()
		file.Close()
		return err
	}
	defer cleanup()
	if !cfg.AQM.Off {
		q := aqm.New(aqm.Config{Target: cfg.AQM.Target, Interval: cfg.AQM.Interval})
		tdev, bind = q.TUN(tdev), q.Bind(bind)
		stop, err := watchRoutes(q.RouteChanged)
		if err != nil {
			tdev.Close()
			file.Close()
			return fmt.Errorf("watching routes: %w", err)
		}
		defer stop()
		defer func() { logf("wgdev %s: queue management: %v", name, q) }()
		stopReport := make(chan struct{})
		defer close(stopReport)
		go q.Report(name, aqm.ReportEvery, logf, stopReport)
	}
	asked := &askedPort{Bind: bind}
	bind = asked
	dev := device.NewDevice(tdev, bind, logger)
	retryDone := make(chan struct{})
	defer func() { <-retryDone }() // after the device closed (retryUp returns then)
	defer dev.Close()
	go func() {
		defer close(retryDone)
		retryUp(ctx, dev, name, asked, upFailed, logf)
	}()

	uapi, err := ipc.UAPIListen(name, file)
	// UAPIListen works on a duplicate of the descriptor.
	file.Close()
	if err != nil {
		return fmt.Errorf("listening on UAPI socket %s: %w", SocketPath(name), err)
	}
	defer uapi.Close()

	var (
		mu     sync.Mutex
		conns  = map[net.Conn]struct{}{}
		closed bool
		wg     sync.WaitGroup
	)
	defer func() {
		mu.Lock()
		closed = true
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}()
	acceptErr := make(chan error, 1)
	go func() {
		for {
			c, err := uapi.Accept()
			if err != nil {
				acceptErr <- err
				return
			}
			mu.Lock()
			if closed {
				mu.Unlock()
				c.Close()
				continue
			}
			conns[c] = struct{}{}
			wg.Add(1)
			mu.Unlock()
			go func() {
				defer wg.Done()
				dev.IpcHandle(c) // closes c
				mu.Lock()
				delete(conns, c)
				mu.Unlock()
			}()
		}
	}()

	select {
	case <-ctx.Done():
		logf("wgdev %s: stopping: %v", name, context.Cause(ctx))
		return nil
	case <-dev.Wait():
		logf("wgdev %s: device closed (interface gone?), exiting", name)
		return nil
	case err := <-acceptErr:
		if _, statErr := os.Lstat(SocketPath(name)); errors.Is(statErr, os.ErrNotExist) {
			return fmt.Errorf("UAPI socket %s was removed", SocketPath(name))
		}
		return fmt.Errorf("UAPI socket %s: %w", SocketPath(name), err)
	}
}

// createTUN creates the TUN device t on the interface name.
func createTUN(t TUN, name string, logf func(string, ...any)) (tun.Device, error) {
	mode := tundev.All
	switch t {
	case TUNWireGuardGo:
		logf("TUN device: wireguard-go's")
		if err := tundev.DefaultHeader(name); err != nil {
			return nil, err
		}
		return tun.CreateTUN(name, MTU)
	case TUNNoTunnel:
		mode = tundev.NoTunnel
	case TUNNone:
		mode = tundev.None
	case TUNOffload, "":
	default:
		return nil, fmt.Errorf("TUN device %q unknown: use one of %s", t, tunList())
	}
	return tundev.New(tundev.Config{Name: name, MTU: MTU, Mode: mode, Logf: logf})
}

// watchRoutes calls changed on every route change in the namespace until
// stop is called.
func watchRoutes(changed func()) (stop func(), err error) {
	done := make(chan struct{})
	ch := make(chan netlink.RouteUpdate, 16)
	if err := netlink.RouteSubscribe(ch, done); err != nil {
		return nil, err
	}
	go func() {
		for range ch {
			changed()
		}
	}()
	return func() { close(done) }, nil
}

// Retries of a device that could not come up.
const (
	upRetryFirst = 100 * time.Millisecond
	upRetryMax   = 2 * time.Second
)

// retryUp brings the device up again after wireguard-go failed to (it
// signals upFailed), until it comes up, while the interface is up: with
// its UDP port in use for a moment (a replaced device's process still
// exiting), wireguard-go brings the device back down and only logs it,
// and nothing would try again until the interface goes down and up — a
// device without tunnels, its peers' handshakes unanswered. The retries
// back off from upRetryFirst to upRetryMax. It returns when the device
// closes or ctx ends.
func retryUp(ctx context.Context, dev *device.Device, name string, asked *askedPort, upFailed <-chan struct{}, logf func(string, ...any)) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-dev.Wait():
			return
		case <-upFailed:
		}
		delay := upRetryFirst
		for attempt := 1; ; attempt++ {
			logf("wgdev %s: the device could not come up; trying again in %v", name, delay)
			select {
			case <-ctx.Done():
				return
			case <-dev.Wait():
				return
			case <-time.After(delay):
			}
			// Only while the interface is up: a device whose interface
			// went down meanwhile stays down (its next up tries anew).
			link, err := netlink.LinkByName(name)
			if err != nil || link.Attrs().Flags&net.FlagUp == 0 {
				break
			}
			// wireguard-go forgot the port when the bind failed; the
			// device is down, so setting it only stores it for Up. A
			// failure signals upFailed again: drain it, this loop is the
			// retry.
			if port := asked.port.Load(); port != 0 {
				if err := dev.IpcSet(fmt.Sprintf("listen_port=%d\n", port)); err != nil {
					logf("wgdev %s: setting the listen port %d again: %v", name, port, err)
				}
			}
			err = dev.Up()
			select {
			case <-upFailed:
			default:
			}
			if err == nil {
				logf("wgdev %s: the device came up (attempt %d)", name, attempt+1)
				break
			}
			delay = min(2*delay, upRetryMax)
		}
	}
}

// askedPort is a bind that remembers the last port other than 0 it was
// asked to open, for retryUp: wireguard-go sets its port to 0 when the
// bind fails.
type askedPort struct {
	conn.Bind
	port atomic.Uint32
}

// Open implements conn.Bind.
func (b *askedPort) Open(port uint16) ([]conn.ReceiveFunc, uint16, error) {
	if port != 0 {
		b.port.Store(uint32(port))
	}
	return b.Bind.Open(port)
}
