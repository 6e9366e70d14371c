package udpbind_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/conn"

	"github.com/fednet/fednet/internal/await"
	"github.com/fednet/fednet/internal/dataplane/nstest"
	"github.com/fednet/fednet/internal/wgdev/udpbind"
)

// TestBind runs the bind's tests in a namespace of their own (loopback
// only).
func TestBind(t *testing.T) {
	if !nstest.Inner(t) {
		nstest.New(t).Run(t)
		return
	}
	t.Run("ReadsAWholeBatch", testReadsWholeBatch)
	t.Run("SplitsGROAndKeepsTheRest", testSplitsGRO)
	t.Run("SmallBatches", testSmallBatches)
	t.Run("SendCoalesces", testSendCoalesces)
	t.Run("SendWithoutGSO", testSendWithoutGSO)
	t.Run("SendFallsBackOnEIO", testSendFallsBackOnEIO)
	t.Run("StickySource", testStickySource)
	t.Run("IPv6", testIPv6)
	t.Run("Close", testClose)
}

// open opens a bind on any port and returns it, its receive functions and
// the port.
func open(t *testing.T) (*udpbind.Bind, []conn.ReceiveFunc, uint16) {
	t.Helper()
	b := udpbind.New().(*udpbind.Bind)
	fns, port, err := b.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if len(fns) != 2 {
		t.Fatalf("%d receive functions, want 2 (IPv4 and IPv6)", len(fns))
	}
	return b, fns, port
}

// batch returns n buffers of wireguard-go's size.
func batch(n int) ([][]byte, []int, []conn.Endpoint) {
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = make([]byte, 1<<16)
	}
	return bufs, make([]int, n), make([]conn.Endpoint, n)
}

// datagram returns datagram i of a test stream: its number, then filler.
func datagram(i, size int) []byte {
	b := bytes.Repeat([]byte{byte(i)}, size)
	binary.BigEndian.PutUint32(b, uint32(i))
	return b
}

// udpSocket returns a plain UDP socket on addr (any port), with UDP GSO
// allowed.
func udpSocket(t *testing.T, network, addr string) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP(network, net.UDPAddrFromAddrPort(netip.MustParseAddrPort(addr)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	// Room for a whole test stream (root may exceed rmem_max).
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	_ = rc.Control(func(fd uintptr) { _ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20) })
	return c
}

// sendGSO sends payload as one message with UDP_SEGMENT size (0: none).
func sendGSO(t *testing.T, c *net.UDPConn, to netip.AddrPort, payload []byte, size int) {
	t.Helper()
	var oob []byte
	if size > 0 {
		oob = udpbind.SegmentCmsg(size)
	}
	if _, _, err := c.WriteMsgUDPAddrPort(payload, oob, to); err != nil {
		t.Fatal(err)
	}
}

// rxQueue returns the receive queue (bytes) of the IPv4 UDP socket on
// port, from /proc/net/udp of this namespace.
func rxQueue(t *testing.T, port uint16) int {
	t.Helper()
	f, err := os.Open("/proc/net/udp")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := fmt.Sprintf(":%04X", port)
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) > 4 && strings.HasSuffix(fields[1], want) {
			_, rx, _ := strings.Cut(fields[4], ":")
			n, err := strconv.ParseInt(rx, 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return int(n)
		}
	}
	t.Fatalf("no UDP socket on port %d", port)
	return 0
}

// waitQueued waits until the socket on port holds at least bytes.
func waitQueued(t *testing.T, port uint16, bytes int) {
	t.Helper()
	await.Until(t, 10*time.Second, func() (bool, string) {
		have := rxQueue(t, port)
		return have >= bytes, fmt.Sprintf("the socket on port %d holds %d bytes, want %d", port, have, bytes)
	})
}

// receiveAll calls fn (a receive function of b) until it has n datagrams
// and returns them with their endpoints and the number of calls.
func receiveAll(t *testing.T, b *udpbind.Bind, fn conn.ReceiveFunc, batchLen, n int) ([][]byte, []conn.Endpoint, int) {
	t.Helper()
	bufs, sizes, eps := batch(batchLen)
	var got [][]byte
	var from []conn.Endpoint
	calls := 0
	for len(got) < n {
		c := receive(t, b, fn, bufs, sizes, eps)
		calls++
		for i := range c {
			got = append(got, bytes.Clone(bufs[i][:sizes[i]]))
			from = append(from, eps[i])
		}
		if calls > 10*n+10 {
			t.Fatalf("%d datagrams after %d calls, want %d", len(got), calls, n)
		}
	}
	if len(got) != n {
		t.Fatalf("%d datagrams, want %d", len(got), n)
	}
	return got, from, calls
}

// receive calls fn, a receive function of b, once. A call that waits
// 10 s (for datagrams the bind lost) closes b and fails t instead of
// hanging.
func receive(t *testing.T, b *udpbind.Bind, fn conn.ReceiveFunc, bufs [][]byte, sizes []int, eps []conn.Endpoint) int {
	t.Helper()
	var expired atomic.Bool
	timer := time.AfterFunc(10*time.Second, func() {
		expired.Store(true)
		b.Close()
	})
	n, err := fn(bufs, sizes, eps)
	timer.Stop()
	if expired.Load() {
		t.Fatalf("a receive waited 10 s for datagrams that did not come: the bind lost some")
	}
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// checkStream checks that got is datagrams first..first+len(got)-1 of
// size bytes each.
func checkStream(t *testing.T, got [][]byte, first, size int) {
	t.Helper()
	for i, g := range got {
		if want := datagram(first+i, size); !bytes.Equal(g, want) {
			t.Fatalf("datagram %d: %d bytes starting %x, want %d starting %x", i, len(g), g[:min(8, len(g))], len(want), want[:8])
		}
	}
}

// Datagrams that arrive one by one are read in reads that double, up to a
// batch at a time, not two per call (wireguard-go's StdNetBind with UDP
// GRO).
func testReadsWholeBatch(t *testing.T) {
	b, fns, port := open(t)
	if !udpbind.GRO(b) {
		t.Skip("no UDP GRO on this kernel: every read asks for a whole batch")
	}
	to := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port)
	c := udpSocket(t, "udp4", "127.0.0.1:0")
	if udpbind.Next(b) != 2 {
		t.Errorf("a new bind asks for %d messages, want 2 (as StdNetBind)", udpbind.Next(b))
	}
	// One datagram first, to learn how much of the queue one takes.
	sendGSO(t, c, to, datagram(0, 200), 0)
	waitQueued(t, port, 1)
	one := rxQueue(t, port)
	got, eps, _ := receiveAll(t, b, fns[0], 128, 1)
	checkStream(t, got, 0, 200)
	if e := eps[0].(*udpbind.Endpoint); e.DstAddrPort() != c.LocalAddr().(*net.UDPAddr).AddrPort() || e.SrcIP() != netip.MustParseAddr("127.0.0.1") {
		t.Errorf("endpoint %v from %v, want %v from 127.0.0.1", e.DstAddrPort(), e.SrcIP(), c.LocalAddr())
	}
	// 100 queued: reads of 4, 8, 16, 32, then the 40 left.
	for i := 1; i <= 100; i++ {
		sendGSO(t, c, to, datagram(i, 200), 0)
	}
	waitQueued(t, port, 100*one)
	got, _, calls := receiveAll(t, b, fns[0], 128, 100)
	checkStream(t, got, 1, 200)
	if calls != 5 {
		t.Errorf("100 queued datagrams took %d calls, want 5", calls)
	}
	// Now a whole batch at a time.
	if udpbind.Next(b) != 128 {
		t.Fatalf("after reads of single datagrams the bind asks for %d messages, want 128", udpbind.Next(b))
	}
	for i := 101; i <= 200; i++ {
		sendGSO(t, c, to, datagram(i, 200), 0)
	}
	waitQueued(t, port, 100*one)
	got, _, calls = receiveAll(t, b, fns[0], 128, 100)
	checkStream(t, got, 101, 200)
	if calls != 1 {
		t.Errorf("100 queued datagrams took %d calls, want 1", calls)
	}
}

// primeSingles sends single datagrams to the bind and reads them until
// its reads ask for a whole batch.
func primeSingles(t *testing.T, b *udpbind.Bind, fn conn.ReceiveFunc, c *net.UDPConn, to netip.AddrPort) {
	t.Helper()
	for i := 0; udpbind.Next(b) < 128; i++ {
		if i == 10 {
			t.Fatalf("after %d reads of single datagrams the bind asks for %d messages, want 128", i, udpbind.Next(b))
		}
		sendQueued(t, c, to, datagram(0, 100), 0)
		receiveAll(t, b, fn, 128, 1)
	}
}

// GRO super-datagrams are split; a read that brings more than the batch
// holds keeps the rest for the next call, in order.
func testSplitsGRO(t *testing.T) {
	b, fns, port := open(t)
	if !udpbind.GRO(b) {
		t.Skip("no UDP GRO on this kernel")
	}
	to := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port)
	c := udpSocket(t, "udp4", "127.0.0.1:0")
	// Singles first, so that the bind reads a whole batch next.
	primeSingles(t, b, fns[0], c, to)
	var got [][]byte
	// Three messages of 64 datagrams each (the last of 90 bytes), with
	// a single datagram between the second and the third: 193 datagrams,
	// more than a batch.
	var stream [][]byte
	n := 1
	super := func(count int) {
		var p []byte
		for k := range count {
			size := 100
			if k == count-1 {
				size = 90
			}
			d := datagram(n, size)
			stream = append(stream, d)
			p = append(p, d...)
			n++
		}
		sendQueued(t, c, to, p, 100)
	}
	super(64)
	super(64)
	stream = append(stream, datagram(n, 100))
	sendQueued(t, c, to, datagram(n, 100), 0)
	n++
	super(64)
	// One read takes all four messages: the first two fill the batch
	// (128), the single and the third (65) wait in the stash.
	bufs, sizes, eps := batch(128)
	var calls []int
	var stashed []int
	got = nil
	for len(got) < len(stream) && len(calls) < 10 {
		k := receive(t, b, fns[0], bufs, sizes, eps)
		for i := range k {
			got = append(got, bytes.Clone(bufs[i][:sizes[i]]))
		}
		calls = append(calls, k)
		stashed = append(stashed, udpbind.Stashed(b))
	}
	if fmt.Sprint(calls) != "[128 65]" || fmt.Sprint(stashed) != "[65 0]" {
		t.Errorf("calls returned %v datagrams and kept %v, want [128 65] and [65 0]", calls, stashed)
	}
	if len(got) != len(stream) {
		t.Fatalf("%d datagrams, want %d", len(got), len(stream))
	}
	for i := range stream {
		if !bytes.Equal(got[i], stream[i]) {
			t.Fatalf("datagram %d: %d bytes starting %x, want %d starting %x", i, len(got[i]), got[i][:4], len(stream[i]), stream[i][:4])
		}
	}
	// Having read merged messages, the bind reads fewer at a time: as
	// many as fit the batch if they hold 64 datagrams each.
	if udpbind.Next(b) != 2 {
		t.Errorf("after GRO messages of 64 the bind asks for %d messages, want 2", udpbind.Next(b))
	}
}

// sendQueued sends payload (as sendGSO) and waits until the bind's socket
// on to's port holds more than before: the message has arrived.
func sendQueued(t *testing.T, c *net.UDPConn, to netip.AddrPort, payload []byte, size int) {
	t.Helper()
	before := rxQueue(t, to.Port())
	sendGSO(t, c, to, payload, size)
	waitQueued(t, to.Port(), before+1)
}

// A batch smaller than a GRO message still gets every datagram, a full
// batch per call.
func testSmallBatches(t *testing.T) {
	b, fns, port := open(t)
	if !udpbind.GRO(b) {
		t.Skip("no UDP GRO on this kernel")
	}
	to := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port)
	c := udpSocket(t, "udp4", "127.0.0.1:0")
	var p []byte
	for i := range 50 {
		p = append(p, datagram(i, 120)...)
	}
	sendQueued(t, c, to, p, 120)
	got, _, calls := receiveAll(t, b, fns[0], 7, 50)
	checkStream(t, got, 0, 120)
	if calls != 8 {
		t.Errorf("50 datagrams in batches of 7 took %d calls, want 8", calls)
	}
}

// Send puts runs of datagrams of one size into GSO messages; what arrives
// is every datagram as sent.
func testSendCoalesces(t *testing.T) {
	b, _, _ := open(t)
	if !udpbind.GSO(b) {
		t.Skip("no UDP GSO on this kernel")
	}
	rx := udpSocket(t, "udp4", "127.0.0.1:0")
	ep, err := b.ParseEndpoint(rx.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	// Sizes: a run of 70 (more than one message holds), a shorter one
	// that ends it, a single larger one, and a run of 700-byte datagrams
	// too long for one message (65535 bytes).
	var sizes []int
	for range 70 {
		sizes = append(sizes, 1000)
	}
	sizes = append(sizes, 500, 1400)
	for range 57 {
		sizes = append(sizes, 1200)
	}
	var bufs [][]byte
	for i, s := range sizes {
		bufs = append(bufs, datagram(i, s))
	}
	if err := b.Send(bufs, ep); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<16)
	for i, s := range sizes {
		_ = rx.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, _, err := rx.ReadFromUDPAddrPort(buf)
		if err != nil {
			t.Fatalf("datagram %d: %v", i, err)
		}
		if want := datagram(i, s); !bytes.Equal(buf[:n], want) {
			t.Fatalf("datagram %d: %d bytes starting %x, want %d starting %x", i, n, buf[:4], s, want[:4])
		}
	}
}

// With GSO off, each datagram is a message of its own.
func testSendWithoutGSO(t *testing.T) {
	b, _, _ := open(t)
	udpbind.SetGSO(b, false)
	rx := udpSocket(t, "udp4", "127.0.0.1:0")
	ep, err := b.ParseEndpoint(rx.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	var bufs [][]byte
	for i := range 10 {
		bufs = append(bufs, datagram(i, 300))
	}
	if err := b.Send(bufs, ep); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<16)
	for i := range 10 {
		_ = rx.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, _, err := rx.ReadFromUDPAddrPort(buf)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf[:n], datagram(i, 300)) {
			t.Fatalf("datagram %d differs", i)
		}
	}
}

// A kernel that refuses UDP GSO on the route (EIO) turns GSO off: the
// datagrams it refused go out one by one, those it took before are not
// sent again, and later sends do not try GSO.
func testSendFallsBackOnEIO(t *testing.T) {
	b, _, _ := open(t)
	refused := udpbind.RefuseGSO(b)
	rx := udpSocket(t, "udp4", "127.0.0.1:0")
	ep, err := b.ParseEndpoint(rx.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	// One datagram alone (a message the kernel takes), then a run of ten
	// that would be one GSO message.
	bufs := [][]byte{datagram(0, 300)}
	for i := 1; i <= 10; i++ {
		bufs = append(bufs, datagram(i, 1000))
	}
	if err := b.Send(bufs, ep); err != nil {
		t.Fatalf("Send: %v, want the datagrams sent without GSO", err)
	}
	if udpbind.GSO(b) {
		t.Error("GSO still on after EIO")
	}
	if err := b.Send(bufs[1:], ep); err != nil {
		t.Fatal(err)
	}
	if n := refused(); n != 1 {
		t.Errorf("the kernel refused %d messages, want 1 (GSO is tried once)", n)
	}
	want := append(bufs, bufs[1:]...)
	buf := make([]byte, 1<<16)
	for i, w := range want {
		_ = rx.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, _, err := rx.ReadFromUDPAddrPort(buf)
		if err != nil {
			t.Fatalf("datagram %d: %v", i, err)
		}
		if !bytes.Equal(buf[:n], w) {
			t.Fatalf("datagram %d: %d bytes starting %x, want %d starting %x", i, n, buf[:4], len(w), w[:4])
		}
	}
	// Nothing twice: the socket holds no more.
	if q := rxQueue(t, uint16(rx.LocalAddr().(*net.UDPAddr).Port)); q != 0 {
		t.Errorf("%d bytes more than sent arrived", q)
	}
}

// A reply leaves from the address the peer's datagram arrived at; after
// ClearSrc the kernel chooses.
func testStickySource(t *testing.T) {
	b, fns, port := open(t)
	peer := udpSocket(t, "udp4", "127.0.0.1:0")
	sendGSO(t, peer, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.3"), port), datagram(0, 64), 0)
	_, eps, _ := receiveAll(t, b, fns[0], 128, 1)
	ep := eps[0].(*udpbind.Endpoint)
	if ep.SrcIP() != netip.MustParseAddr("127.0.0.3") || ep.SrcToString() != "127.0.0.3" {
		t.Fatalf("source %v, want 127.0.0.3", ep.SrcIP())
	}
	buf := make([]byte, 100)
	for _, want := range []string{"127.0.0.3", "127.0.0.1"} {
		if err := b.Send([][]byte{datagram(1, 64)}, ep); err != nil {
			t.Fatal(err)
		}
		_ = peer.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, from, err := peer.ReadFromUDPAddrPort(buf)
		if err != nil {
			t.Fatal(err)
		}
		if from.Addr().String() != want || from.Port() != port {
			t.Errorf("reply from %v, want %s:%d", from, want, port)
		}
		ep.ClearSrc()
	}
	// wireguard-go's endpoints (the TCP fallback makes them) work too.
	std := &conn.StdNetEndpoint{AddrPort: peer.LocalAddr().(*net.UDPAddr).AddrPort()}
	if err := b.Send([][]byte{datagram(2, 64)}, std); err != nil {
		t.Fatal(err)
	}
	_ = peer.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, _, err := peer.ReadFromUDPAddrPort(buf); err != nil || !bytes.Equal(buf[:n], datagram(2, 64)) {
		t.Fatalf("to a StdNetEndpoint: %v", err)
	}
}

func testIPv6(t *testing.T) {
	b, fns, port := open(t)
	c := udpSocket(t, "udp6", "[::1]:0")
	to := netip.AddrPortFrom(netip.IPv6Loopback(), port)
	for i := range 5 {
		sendGSO(t, c, to, datagram(i, 500), 0)
	}
	got, eps, _ := receiveAll(t, b, fns[1], 128, 5)
	checkStream(t, got, 0, 500)
	ep := eps[0].(*udpbind.Endpoint)
	if ep.DstToString() != c.LocalAddr().String() || ep.SrcIP() != netip.IPv6Loopback() {
		t.Errorf("endpoint %s from %v, want %s from ::1", ep.DstToString(), ep.SrcIP(), c.LocalAddr())
	}
	if err := b.Send([][]byte{datagram(9, 100), datagram(10, 100)}, ep); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1000)
	for i := 9; i <= 10; i++ {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, _, err := c.ReadFromUDPAddrPort(buf)
		if err != nil || !bytes.Equal(buf[:n], datagram(i, 100)) {
			t.Fatalf("datagram %d over IPv6: %v", i, err)
		}
	}
	if _, _, err := b.Open(0); err != conn.ErrBindAlreadyOpen {
		t.Errorf("second Open: %v, want ErrBindAlreadyOpen", err)
	}
}

// After Close the receive functions return net.ErrClosed (wireguard-go
// stops its receiving goroutines on it).
func testClose(t *testing.T) {
	b, fns, _ := open(t)
	errc := make(chan error, 1)
	go func() {
		bufs, sizes, eps := batch(128)
		_, err := fns[0](bufs, sizes, eps)
		errc <- err
	}()
	time.Sleep(10 * time.Millisecond)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("receive after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("receive did not return after Close")
	}
	// Open again works.
	if _, _, err := b.Open(0); err != nil {
		t.Fatal(err)
	}
}
