package wgdev_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/fednet/fednet/internal/await"
	"github.com/fednet/fednet/internal/dataplane/nstest"
	"github.com/fednet/fednet/internal/wgdev"
)

const ifname = "wgt0"

// started runs wgdev.Run in the background and waits until wgctrl sees the
// device. The returned channel yields Run's result.
func started(t *testing.T, ctx context.Context) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		done <- wgdev.Run(ctx, ifname, t.Logf)
	}()
	t.Cleanup(func() {
		select {
		case <-returned:
		case <-time.After(10 * time.Second):
			t.Errorf("Run did not return")
		}
	})
	wg, err := wgctrl.New()
	if err != nil {
		t.Fatal(err)
	}
	defer wg.Close()
	err = await.Poll(5*time.Second, await.NoError(func() error {
		select {
		case err := <-done:
			done <- err
			return fmt.Errorf("Run returned early: %v", err)
		default:
		}
		_, err := wg.Device(ifname)
		return err
	}))
	if err != nil {
		t.Fatalf("device %s never answered: %v", ifname, err)
	}
	return done
}

func waitDone(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return within 5s")
		return nil
	}
}

func assertGone(t *testing.T) {
	t.Helper()
	err := await.Poll(5*time.Second, await.NoError(func() error {
		if _, err := netlink.LinkByName(ifname); err == nil {
			return errors.New("link still exists")
		}
		if _, err := os.Stat(wgdev.SocketPath(ifname)); err == nil {
			return errors.New("socket still exists")
		}
		return nil
	}))
	if err != nil {
		t.Error(err)
	}
}

func inner(t *testing.T) bool {
	if nstest.Inner(t) {
		return true
	}
	nstest.New(t).Run(t)
	return false
}

// TestRunThreads: Run sets the process's GOMAXPROCS to DefaultProcs of
// what Go chose, to Go's own (one per CPU) when FEDNET_WGDEV_PROCS is 0,
// and to the number it gives otherwise.
func TestRunThreads(t *testing.T) {
	if !inner(t) {
		return
	}
	perCPU := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(perCPU)
	for _, tc := range []struct {
		env  string
		want int
	}{{"", wgdev.DefaultProcs(perCPU)}, {"0", perCPU}, {"3", 3}} {
		runtime.GOMAXPROCS(perCPU)
		t.Setenv(wgdev.ProcsEnv, tc.env)
		ctx, cancel := context.WithCancel(context.Background())
		done := started(t, ctx)
		if got := runtime.GOMAXPROCS(0); got != tc.want {
			t.Errorf("%s=%q: GOMAXPROCS %d while the device runs, want %d (Go chose %d)", wgdev.ProcsEnv, tc.env, got, tc.want, perCPU)
		}
		cancel()
		if err := waitDone(t, done); err != nil {
			t.Errorf("Run = %v after its context ended, want nil", err)
		}
		assertGone(t)
	}
}

// TestRunExitsWhenLinkDeleted checks the fact the dataplane relies on:
// deleting the interface makes the userspace device exit.
func TestRunExitsWhenLinkDeleted(t *testing.T) {
	if !inner(t) {
		return
	}
	done := started(t, context.Background())

	const port = 51999
	wg, priv := configure(t, port)
	d, err := wg.Device(ifname)
	if err != nil {
		t.Fatal(err)
	}
	if d.PublicKey != priv.PublicKey() || d.ListenPort != port || d.Type != wgtypes.Userspace {
		t.Errorf("device = key %s port %d type %v, want key %s port %d userspace", d.PublicKey, d.ListenPort, d.Type, priv.PublicKey(), port)
	}
	link, err := netlink.LinkByName(ifname)
	if err != nil {
		t.Fatal(err)
	}
	if link.Attrs().MTU != wgdev.MTU {
		t.Errorf("MTU = %d, want %d", link.Attrs().MTU, wgdev.MTU)
	}

	start := time.Now()
	if err := netlink.LinkDel(link); err != nil {
		t.Fatalf("deleting %s: %v", ifname, err)
	}
	if err := waitDone(t, done); err != nil {
		t.Errorf("Run = %v, want nil after the link was deleted", err)
	}
	t.Logf("Run returned %v after the link was deleted", time.Since(start))
	assertGone(t)
}

func TestRunStopsOnCancel(t *testing.T) {
	if !inner(t) {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := started(t, ctx)
	cancel()
	if err := waitDone(t, done); err != nil {
		t.Errorf("Run = %v, want nil after cancel", err)
	}
	assertGone(t)
}

func TestRunFailsWhenSocketRemoved(t *testing.T) {
	if !inner(t) {
		return
	}
	done := started(t, context.Background())
	if err := os.Remove(wgdev.SocketPath(ifname)); err != nil {
		t.Fatal(err)
	}
	if err := waitDone(t, done); err == nil {
		t.Error("Run = nil, want an error after its socket was removed")
	} else {
		t.Logf("Run = %v", err)
	}
	assertGone(t)
}

func TestRunRefusesSecondDevice(t *testing.T) {
	if !inner(t) {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := started(t, ctx)
	err := wgdev.Run(context.Background(), ifname, t.Logf)
	if err == nil {
		t.Fatal("second Run with the same name = nil, want an error")
	}
	t.Logf("second Run = %v", err)
	// The first device still answers.
	wg, err := wgctrl.New()
	if err != nil {
		t.Fatal(err)
	}
	defer wg.Close()
	if _, err := wg.Device(ifname); err != nil {
		t.Errorf("first device after the failed second Run: %v", err)
	}
	cancel()
	if err := waitDone(t, done); err != nil {
		t.Error(err)
	}
}

func TestRunRejectsBadNames(t *testing.T) {
	for _, name := range []string{"", "a/b", "waytoolonginterfacename", "a b"} {
		if err := wgdev.Run(context.Background(), name, nil); err == nil {
			t.Errorf("Run(%q) = nil, want an error", name)
		}
	}
}

// TestRunRetriesUpWhenPortBusy: the device's UDP port is taken when its
// interface comes up (as by a replaced device's process still exiting).
// wireguard-go brings the device back down and only logs it; Run tries
// again, and once the port is free the device is up on it, its interface
// never touched again. Without the retries the device stays down.
func TestRunRetriesUpWhenPortBusy(t *testing.T) {
	if !inner(t) {
		return
	}
	const port = 51998
	busy, err := net.ListenUDP("udp4", &net.UDPAddr{Port: port})
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := started(t, ctx)
	defer func() {
		cancel()
		waitDone(t, done)
	}()
	wg, _ := configure(t, port)
	link, err := netlink.LinkByName(ifname)
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetUp(link); err != nil {
		t.Fatal(err)
	}
	// listenPort is the port the device listens on, 0 while it is down
	// after a failed bind.
	listenPort := func() int {
		d, err := wg.Device(ifname)
		if err != nil {
			t.Fatal(err)
		}
		return d.ListenPort
	}
	if err := await.Poll(5*time.Second, func() (bool, string) {
		return listenPort() == 0, fmt.Sprintf("listen port %d with the port taken", listenPort())
	}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // a few retries that fail
	busy.Close()
	if err := await.Poll(10*time.Second, func() (bool, string) {
		return listenPort() == port, fmt.Sprintf("listen port %d", listenPort())
	}); err != nil {
		t.Errorf("after the port was freed the device did not come up on it: %v", err)
	}
}

// configure gives the device under test a new private key and listen
// port port through the UAPI socket, and returns the client (closed when
// the test ends) and the key.
func configure(t *testing.T, port int) (*wgctrl.Client, wgtypes.Key) {
	t.Helper()
	wg, err := wgctrl.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wg.Close() })
	priv, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	if err := wg.ConfigureDevice(ifname, wgtypes.Config{PrivateKey: &priv, ListenPort: &port}); err != nil {
		t.Fatal(err)
	}
	return wg, priv
}
