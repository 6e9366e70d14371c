package tundev_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/fednet/fednet/internal/await"
	"github.com/fednet/fednet/internal/dataplane/nstest"
	"github.com/fednet/fednet/internal/offload"
	"github.com/fednet/fednet/internal/wgdev/tundev"
)

// inNetns runs f on a thread in the named network namespace; sockets f
// creates stay there.
func inNetns(t *testing.T, name string, f func() error) error {
	t.Helper()
	ns, err := netns.GetFromName(name)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		if err := netns.Set(ns); err != nil {
			errc <- err
			return
		}
		ferr := f()
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
		errc <- ferr
	}()
	return <-errc
}

// pipe moves packets from one device to the other as wireguard-go would
// (batches of 128, 16 bytes of headroom), until from fails.
func pipe(from, to *tundev.Device, wg *sync.WaitGroup) {
	defer wg.Done()
	const offset = 16
	bufs := make([][]byte, from.BatchSize())
	sizes := make([]int, len(bufs))
	for i := range bufs {
		bufs[i] = make([]byte, 65535)
	}
	out := make([][]byte, 0, len(bufs))
	for {
		n, err := from.Read(bufs, sizes, offset)
		out = out[:0]
		for i := range n {
			out = append(out, bufs[i][:offset+sizes[i]])
		}
		if len(out) > 0 {
			if _, werr := to.Write(out, offset); errors.Is(werr, os.ErrClosed) {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// site is one end: a namespace with a device on a wire to the other.
type site struct {
	ns  *nstest.Netns
	dev *tundev.Device
	// tunnel is its address on the device, lan its address on the bridge
	// behind VXLAN.
	tunnel, lan string
}

// twoSites builds two namespaces whose devices are joined by a userspace
// wire, with a VXLAN device enslaved to a bridge on each (a bridged
// network) over it.
func twoSites(t *testing.T, mode tundev.Mode) [2]*site {
	t.Helper()
	var s [2]*site
	for i := range s {
		s[i] = &site{ns: nstest.New(t), tunnel: fmt.Sprintf("10.99.0.%d", i+1), lan: fmt.Sprintf("192.168.77.%d", i+1)}
		dev, err := tundev.New(tundev.Config{Name: "tnl0", MTU: 1420, Mode: mode, Netns: s[i].ns.Name, Logf: t.Logf})
		if err != nil {
			t.Fatal(err)
		}
		s[i].dev = dev
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go pipe(s[0].dev, s[1].dev, &wg)
	go pipe(s[1].dev, s[0].dev, &wg)
	t.Cleanup(func() {
		for _, x := range s {
			x.dev.Close()
		}
		wg.Wait()
	})
	for i, x := range s {
		other := s[1-i]
		for _, argv := range [][]string{
			{"ip", "addr", "add", x.tunnel + "/24", "dev", "tnl0"},
			{"ip", "link", "set", "tnl0", "up"},
			{"ip", "link", "add", "br0", "mtu", "1370", "type", "bridge"},
			{"ip", "link", "add", "vx0", "mtu", "1370", "type", "vxlan", "id", "200", "local", x.tunnel, "remote", other.tunnel, "dstport", "4789"},
			{"ip", "link", "set", "vx0", "master", "br0", "up"},
			{"ip", "addr", "add", x.lan + "/24", "dev", "br0"},
			{"ip", "link", "set", "br0", "up"},
		} {
			x.ns.Exec(t, argv...)
		}
	}
	await.Until(t, 10*time.Second, await.NoError(func() error {
		return inNetns(t, s[0].ns.Name, func() error {
			c, err := net.DialTimeout("tcp", s[1].lan+":9", 200*time.Millisecond)
			if err == nil {
				c.Close()
				return nil
			}
			var op *net.OpError
			if errors.As(err, &op) && errors.Is(err, errRefused) {
				return nil // the far end answered: the path works
			}
			return fmt.Errorf("no path across the wire: %w", err)
		})
	}))
	return s
}

var errRefused = errors.New("connection refused")

func init() {
	errRefused = syscallECONNREFUSED
}

// transfer sends data from site a to b's address to over TCP and returns
// what b received.
func transfer(t *testing.T, a, b *site, to string, data []byte) []byte {
	t.Helper()
	var ln net.Listener
	if err := inNetns(t, b.ns.Name, func() (err error) { ln, err = net.Listen("tcp", to+":0"); return err }); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type result struct {
		b   []byte
		err error
	}
	got := make(chan result, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- result{nil, err}
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(60 * time.Second))
		b, err := io.ReadAll(c)
		got <- result{b, err}
	}()
	var c net.Conn
	if err := inNetns(t, a.ns.Name, func() (err error) {
		c, err = net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := c.Write(data); err != nil {
		t.Fatalf("sending %d bytes: %v", len(data), err)
	}
	c.Close()
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("receiving: %v", r.err)
		}
		return r.b
	case <-time.After(90 * time.Second):
		t.Fatal("transfer did not finish")
		return nil
	}
}

// TestTransfer sends known files across the wire, routed (TCP on the
// devices' own addresses) and bridged (TCP through VXLAN and the bridges),
// at the MTU boundary and above it, and checks they arrive byte for byte,
// in each offload mode; and that the mode did what it says: super-packets
// read and merged on write, VXLAN ones only with the tunnel offload.
func TestTransfer(t *testing.T) {
	// The inner MSS: bridge MTU 1370 - 20 (IPv4) - 32 (TCP with
	// timestamps).
	const mss = 1318
	sizes := []int{1, mss - 1, mss, mss + 1, 2 * mss, 4<<20 + 1}
	data := make([]byte, sizes[len(sizes)-1])
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []tundev.Mode{tundev.All, tundev.NoTunnel, tundev.None} {
		t.Run(mode.String(), func(t *testing.T) {
			s := twoSites(t, mode)
			for _, path := range []string{"routed", "bridged"} {
				for _, n := range sizes {
					to := s[1].tunnel
					if path == "bridged" {
						to = s[1].lan
					}
					got := transfer(t, s[0], s[1], to, data[:n])
					if len(got) != n || sha256.Sum256(got) != sha256.Sum256(data[:n]) {
						i := 0
						for i < min(len(got), n) && got[i] == data[i] {
							i++
						}
						t.Errorf("%s, %d bytes: received %d bytes, first difference at %d", path, n, len(got), i)
					}
				}
			}
			a, b := s[0].dev.Stats(), s[1].dev.Stats()
			t.Logf("sender: %v", a)
			t.Logf("receiver: %v", b)
			switch mode {
			case tundev.All:
				if a.TunnelRead == 0 || b.TunnelMerged == 0 {
					t.Errorf("with UDP-tunnel offload: %d VXLAN super-packets read, %d merged, want some of both", a.TunnelRead, b.TunnelMerged)
				}
				if a.SuperRead == a.TunnelRead || b.Merged == b.TunnelMerged {
					t.Errorf("routed TCP: no super-packets read (%d) or merged (%d)", a.SuperRead-a.TunnelRead, b.Merged-b.TunnelMerged)
				}
			case tundev.NoTunnel:
				if a.TunnelRead != 0 || b.TunnelMerged != 0 {
					t.Errorf("without UDP-tunnel offload: %d VXLAN super-packets read, %d merged, want none", a.TunnelRead, b.TunnelMerged)
				}
				if a.SuperRead == 0 || b.Merged == 0 {
					t.Errorf("with TSO: %d super-packets read, %d merged, want some", a.SuperRead, b.Merged)
				}
			case tundev.None:
				if a.SuperRead != 0 || b.Merged != 0 || b.Writes != b.PacketsWritten {
					t.Errorf("without offloads: %d super-packets read, %d merged (%d writes for %d packets), want none", a.SuperRead, b.Merged, b.Writes, b.PacketsWritten)
				}
			}
			if a.Dropped+b.Dropped != 0 {
				t.Errorf("%d packets dropped", a.Dropped+b.Dropped)
			}
		})
	}
}

// TestClose checks what wireguard-go relies on: Read fails with
// os.ErrClosed after Close, and when the interface is deleted; the events
// channel closes.
func TestClose(t *testing.T) {
	ns := nstest.New(t)
	for _, del := range []bool{false, true} {
		dev, err := tundev.New(tundev.Config{Name: "tnl1", Netns: ns.Name})
		if err != nil {
			t.Fatal(err)
		}
		ns.Exec(t, "ip", "link", "set", "tnl1", "up")
		select {
		case e := <-dev.Events():
			t.Logf("event %d", e)
		case <-time.After(5 * time.Second):
			t.Fatal("no event after the interface came up")
		}
		errc := make(chan error, 1)
		go func() {
			bufs, sizes := [][]byte{make([]byte, 2000)}, []int{0}
			for {
				if _, err := dev.Read(bufs, sizes, 0); err != nil {
					errc <- err
					return
				}
			}
		}()
		if del {
			ns.Exec(t, "ip", "link", "del", "tnl1")
		} else {
			dev.Close()
		}
		select {
		case err := <-errc:
			if !errors.Is(err, os.ErrClosed) {
				t.Errorf("deleted %v: Read = %v, want os.ErrClosed", del, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("deleted %v: Read did not return", del)
		}
		dev.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		for range dev.Events() {
			if ctx.Err() != nil {
				t.Fatal("events channel not closed")
			}
		}
		cancel()
		if out := ns.Exec(t, "ip", "link", "show"); bytes.Contains([]byte(out), []byte("tnl1")) {
			t.Errorf("interface left after Close: %s", out)
		}
	}
}

// TestDefaultHeader: a persistent TUN keeps the virtio-net header length a
// Device with the tunnel offload set; DefaultHeader puts it back to the
// kernel's default, which wireguard-go's TUN device assumes.
func TestDefaultHeader(t *testing.T) {
	ns := nstest.New(t)
	const name = "tnl2"
	// attach runs f on a descriptor attached to the TUN interface name in
	// ns (creating it if there is none).
	attach := func(f func(fd int) error) {
		t.Helper()
		if err := inNetns(t, ns.Name, func() error {
			fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			ifr, err := unix.NewIfreq(name)
			if err != nil {
				return err
			}
			ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
			if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
				return err
			}
			return f(fd)
		}); err != nil {
			t.Fatal(err)
		}
	}
	hdrLen := func() (n int) {
		attach(func(fd int) (err error) { n, err = unix.IoctlGetInt(fd, unix.TUNGETVNETHDRSZ); return err })
		return n
	}
	attach(func(fd int) error { return unix.IoctlSetInt(fd, unix.TUNSETPERSIST, 1) })
	t.Cleanup(func() { ns.Exec(t, "ip", "link", "del", name) })
	dev, err := tundev.New(tundev.Config{Name: name, Mode: tundev.All, Netns: ns.Name, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	tunnel := dev.Offloads().Tunnel
	dev.Close()
	if !tunnel {
		t.Skip("the kernel has no UDP-tunnel GSO: the header keeps its default length anyway")
	}
	if n := hdrLen(); n != offload.TunnelHeaderLen {
		t.Fatalf("after a Device with the tunnel offload: header length %d, want %d", n, offload.TunnelHeaderLen)
	}
	if err := inNetns(t, ns.Name, func() error { return tundev.DefaultHeader(name) }); err != nil {
		t.Fatal(err)
	}
	if n := hdrLen(); n != offload.HeaderLen {
		t.Errorf("after DefaultHeader: header length %d, want %d", n, offload.HeaderLen)
	}
	if err := inNetns(t, ns.Name, func() error { return tundev.DefaultHeader("absent0") }); err != nil {
		t.Errorf("DefaultHeader of no interface: %v, want nil", err)
	}
}
