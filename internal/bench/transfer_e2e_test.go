package bench_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/demo"
	"github.com/fednet/fednet/internal/lab"
	"github.com/fednet/fednet/internal/spec"
	"github.com/fednet/fednet/internal/wgdev"
)

// TestTransferExact sends known data between the two sites of smallSpec,
// over the bridged network (VXLAN through the tunnel) and the routed one,
// in sizes around the path MSS and well above it, and checks it arrives
// byte for byte. It runs once with fednet's TUN device and all its
// offloads (VXLAN super-packets), once with the UDP-tunnel offload off as
// on a kernel before 6.17 (the fallback), and checks from the userspace
// device's own account that each did what it says.
func TestTransferExact(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the lab creates network namespaces (CI runs as root)")
	}
	f, err := spec.Parse([]byte(smallSpec))
	if err != nil {
		t.Fatal(err)
	}
	bridged, err := demo.LabBridged(f)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 8<<20+1)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []wgdev.TUN{wgdev.TUNOffload, wgdev.TUNNoTunnel} {
		t.Run(string(mode), func(t *testing.T) {
			// The agents pass the environment on to the userspace device.
			t.Setenv(wgdev.TUNEnv, string(mode))
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			const name = "e2exfer"
			if err := lab.Down(ctx, name); err != nil {
				t.Fatal(err)
			}
			l, err := lab.Up(ctx, lab.Config{Federation: f, Name: name, Bridged: bridged})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := l.Down(context.Background()); err != nil {
					t.Error(err)
				}
			})
			d, err := demo.Deploy(ctx, l, binary)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { d.Stop(context.Background()) })
			a, b := f.Sites[0].Name, f.Sites[1].Name
			paths := []struct {
				name     string
				from, to *lab.Node
			}{
				{"bridged", l.BridgedHosts(bridged[0].Name, a)[0], l.BridgedHosts(bridged[0].Name, b)[0]},
				{"routed", l.Hosts(a)[0], l.Hosts(b)[0]},
			}
			var pairs []demo.Pair
			for _, p := range paths {
				pairs = append(pairs, demo.Pair{From: p.from, To: p.to})
			}
			wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
			defer wcancel()
			if _, err := demo.WaitReachable(wctx, pairs, d.AgentsAlive); err != nil {
				t.Fatal(err)
			}
			for _, p := range paths {
				mss := pathMSS(t, ctx, p.from)
				for _, n := range []int{1, mss - 1, mss, mss + 1, 3 * mss, 3*mss + 1, len(data)} {
					got, err := sendVerified(ctx, p.from, p.to, data[:n])
					if err != nil {
						t.Fatalf("%s, %d bytes: %v", p.name, n, err)
					}
					if got != sha256.Sum256(data[:n]) {
						t.Errorf("%s, %d bytes (MSS %d): the data arrived changed", p.name, n, mss)
					}
				}
			}
			// The userspace device logs what crossed it when it stops,
			// which it does when its interface is deleted.
			gw := l.SiteGateways(a)[0]
			if _, err := gw.Run(ctx, "ip", "link", "del", spec.DefaultInterface); err != nil {
				t.Fatal(err)
			}
			stats := deviceStats(t, filepath.Join(gw.WireGuardDir(), spec.DefaultInterface+".log"))
			t.Logf("%s: %s", gw.Name, stats.line)
			switch mode {
			case wgdev.TUNOffload:
				if stats.vxlanRead == 0 || stats.superRead == stats.vxlanRead {
					t.Errorf("with every offload: %d VXLAN super-packets and %d others read, want some of both", stats.vxlanRead, stats.superRead-stats.vxlanRead)
				}
			case wgdev.TUNNoTunnel:
				if stats.vxlanRead != 0 || stats.superRead == 0 {
					t.Errorf("without the UDP-tunnel offload: %d VXLAN super-packets and %d super-packets read, want none and some", stats.vxlanRead, stats.superRead)
				}
			}
		})
	}
}

// pathMSS returns the MSS of TCP from node: its interface MTU less the
// IPv4 and TCP headers and the timestamp option.
func pathMSS(t *testing.T, ctx context.Context, n *lab.Node) int {
	t.Helper()
	out, err := n.Run(ctx, "cat", "/sys/class/net/"+lab.HostInterface+"/mtu")
	if err != nil {
		t.Fatal(err)
	}
	mtu, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		t.Fatal(err)
	}
	return mtu - 20 - 20 - 12
}

// sendVerified sends data over TCP from node from to node to's LAN
// address and returns the SHA-256 of what to received.
func sendVerified(ctx context.Context, from, to *lab.Node, data []byte) ([sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	deadline, _ := ctx.Deadline()
	var ln net.Listener
	if err := to.Do(func() (err error) {
		ln, err = net.Listen("tcp", net.JoinHostPort(to.LAN.Addr().String(), "0"))
		return err
	}); err != nil {
		return sum, err
	}
	defer ln.Close()
	type result struct {
		sum [sha256.Size]byte
		n   int64
		err error
	}
	got := make(chan result, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- result{err: err}
			return
		}
		defer c.Close()
		c.SetDeadline(deadline)
		h := sha256.New()
		n, err := io.Copy(h, c)
		var r result
		copy(r.sum[:], h.Sum(nil))
		r.n, r.err = n, err
		got <- r
	}()
	var c net.Conn
	if err := from.Do(func() (err error) {
		c, err = (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, "tcp", ln.Addr().String())
		return err
	}); err != nil {
		return sum, err
	}
	c.SetDeadline(deadline)
	_, werr := c.Write(data)
	c.Close()
	r := <-got
	if werr != nil || r.err != nil {
		return sum, fmt.Errorf("sending: %v; receiving: %v", werr, r.err)
	}
	if r.n != int64(len(data)) {
		return sum, fmt.Errorf("received %d bytes of %d", r.n, len(data))
	}
	return r.sum, nil
}

type devStats struct {
	line                 string
	superRead, vxlanRead int
}

var statsLine = regexp.MustCompile(`closed: read \d+ packets in \d+ reads \((\d+) super-packets, (\d+) VXLAN;`)

// deviceStats waits for the userspace device's closing line in its log.
func deviceStats(t *testing.T, log string) devStats {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(log)
		if m := statsLine.FindSubmatch(b); m != nil {
			s := devStats{line: string(m[0])}
			s.superRead, _ = strconv.Atoi(string(m[1]))
			s.vxlanRead, _ = strconv.Atoi(string(m[2]))
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("no statistics in %s after the interface was deleted:\n%s", log, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
