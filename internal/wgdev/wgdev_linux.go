package wgdev

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"

	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/ipc"
	"golang.zx2c4.com/wireguard/tun"
)

// Run creates the TUN interface name (or attaches to it), runs a WireGuard device on it and
// serves the UAPI socket SocketPath(name) until one of these happens:
//
//   - ctx is cancelled: Run returns nil;
//   - the device closes, which wireguard-go does when reading the TUN fails,
//     as it does once the interface is deleted (ip link del NAME): Run
//     returns nil;
//   - the UAPI socket fails or is removed: Run returns an error.
//
// On return the device is closed (which removes the interface, unless it
// is a persistent TUN that existed before Run: then it stays), the socket
// file is removed and every UAPI connection is closed. logf receives
// wireguard-go's error messages and Run's own notices; nil discards them.
// Run fails at once if the interface cannot be created or the socket is in
// use by another live device.
func Run(ctx context.Context, name string, logf func(string, ...any)) error {
	if err := validName(name); err != nil {
		return err
	}
	if logf == nil {
		logf = device.DiscardLogf
	}
	tdev, err := tun.CreateTUN(name, MTU)
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
	logger := &device.Logger{
		Verbosef: device.DiscardLogf,
		Errorf: func(format string, args ...any) {
			logf("wgdev %s: "+format, append([]any{name}, args...)...)
		},
	}
	if os.Getenv(VerboseEnv) != "" {
		logger.Verbosef = func(format string, args ...any) {
			logf("wgdev %s: "+format, append([]any{name}, args...)...)
		}
	}
	dev := device.NewDevice(tdev, conn.NewDefaultBind(), logger)
	defer dev.Close()

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
