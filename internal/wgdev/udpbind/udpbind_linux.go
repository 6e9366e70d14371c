package udpbind

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/conn"
)

// Limits.
const (
	// batchSize is how many datagrams a receive or send handles at most
	// (wireguard-go's batch).
	batchSize = conn.IdealBatchSize
	// maxSegments is the most datagrams the kernel puts in one GSO or GRO
	// message.
	maxSegments = 64
	// socketBuffer is each socket's send and receive buffer (as
	// wireguard-go's).
	socketBuffer = 7 << 20
	// The largest UDP payload of one message (IPv4 counts its header).
	maxIPv4Payload = 1<<16 - 1 - 20 - 8
	maxIPv6Payload = 1<<16 - 1 - 8
	// rxOOB is the control space of a received message: its packet info
	// (IPv6's is the larger) and UDP GRO's segment size.
	rxOOB = 64
	// txOOB is the control space of a sent message: packet info and
	// UDP_SEGMENT.
	txOOB = 64
)

// Bind is a conn.Bind on an IPv4 and an IPv6 UDP socket. It is safe for
// concurrent use; each receive function is called from one goroutine at a
// time, as wireguard-go does.
type Bind struct {
	mu     sync.Mutex
	v4, v6 *socket // nil when closed or the family is missing
	open   bool
}

// New returns a closed bind.
func New() conn.Bind { return &Bind{} }

var _ conn.Bind = (*Bind)(nil)

// socket is one UDP socket of the bind.
type socket struct {
	conn *net.UDPConn
	rc   syscall.RawConn
	v6   bool
	gso  atomic.Bool // UDP GSO on send
	gro  bool        // UDP GRO on receive
	rx   receiver    // used by the one receiving goroutine
	tx   sync.Pool   // *sender
	// sys sends messages (sendmmsg); tests put a kernel that refuses
	// UDP GSO in its place. Set before the socket is used.
	sys func(fd uintptr, hdrs []mmsghdr) (int, syscall.Errno)
}

// Open implements conn.Bind: it listens on port (0: any) on IPv4 and IPv6,
// on the same port. A family the machine lacks is left out.
func (b *Bind) Open(port uint16) ([]conn.ReceiveFunc, uint16, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.open {
		return nil, 0, conn.ErrBindAlreadyOpen
	}
	// With port 0 the IPv6 socket takes the port the kernel gave IPv4's,
	// which may be taken in IPv6: then try again with another.
	tries := 1
	if port == 0 {
		tries = 100
	}
	var err error
	for range tries {
		var v4, v6 *socket
		var actual uint16
		v4, actual, err = listen("udp4", port)
		if errors.Is(err, syscall.EAFNOSUPPORT) {
			v4, err = nil, nil
			actual = port
		}
		if err != nil {
			return nil, 0, err
		}
		v6, actual6, err6 := listen("udp6", actual)
		if errors.Is(err6, syscall.EAFNOSUPPORT) {
			v6, err6 = nil, nil
		}
		if err6 != nil {
			if v4 != nil {
				v4.conn.Close()
			}
			err = err6
			if port == 0 && errors.Is(err6, syscall.EADDRINUSE) {
				continue
			}
			return nil, 0, err
		}
		if v4 == nil && v6 == nil {
			return nil, 0, syscall.EAFNOSUPPORT
		}
		if v4 == nil {
			actual = actual6
		}
		b.v4, b.v6, b.open = v4, v6, true
		var fns []conn.ReceiveFunc
		if v4 != nil {
			fns = append(fns, v4.receiveIPv4)
		}
		if v6 != nil {
			fns = append(fns, v6.receiveIPv6)
		}
		return fns, actual, nil
	}
	return nil, 0, err
}

// listen opens a socket of network udp4 or udp6 on port.
func listen(network string, port uint16) (*socket, uint16, error) {
	lc := net.ListenConfig{Control: func(network, _ string, c syscall.RawConn) error {
		var err error
		cerr := c.Control(func(fd uintptr) {
			s := int(fd)
			_ = unix.SetsockoptInt(s, unix.SOL_SOCKET, unix.SO_RCVBUF, socketBuffer)
			_ = unix.SetsockoptInt(s, unix.SOL_SOCKET, unix.SO_SNDBUF, socketBuffer)
			_ = unix.SetsockoptInt(s, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, socketBuffer)
			_ = unix.SetsockoptInt(s, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, socketBuffer)
			if network == "udp4" {
				err = unix.SetsockoptInt(s, unix.IPPROTO_IP, unix.IP_PKTINFO, 1)
			} else {
				err = unix.SetsockoptInt(s, unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1)
				if err == nil {
					err = unix.SetsockoptInt(s, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1)
				}
			}
			// Without UDP GRO (before Linux 5.0) datagrams come one by one.
			_ = unix.SetsockoptInt(s, unix.IPPROTO_UDP, unix.UDP_GRO, 1)
		})
		return errors.Join(cerr, err)
	}}
	pc, err := lc.ListenPacket(context.Background(), network, ":"+strconv.Itoa(int(port)))
	if err != nil {
		return nil, 0, unwrapErrno(err)
	}
	c := pc.(*net.UDPConn)
	rc, err := c.SyscallConn()
	if err != nil {
		c.Close()
		return nil, 0, err
	}
	s := &socket{conn: c, rc: rc, v6: network == "udp6", sys: sendmmsg}
	_ = rc.Control(func(fd uintptr) {
		_, err := unix.GetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_SEGMENT)
		s.gso.Store(err == nil)
		v, err := unix.GetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_GRO)
		s.gro = err == nil && v == 1
	})
	s.rx.init()
	s.tx.New = func() any { return newSender() }
	return s, uint16(c.LocalAddr().(*net.UDPAddr).Port), nil
}

// unwrapErrno returns the errno inside a listen error, so that callers can
// tell a missing family or a port in use.
func unwrapErrno(err error) error {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return err
}

// Close implements conn.Bind: the receive functions return net.ErrClosed.
func (b *Bind) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	var errs []error
	for _, s := range []*socket{b.v4, b.v6} {
		if s != nil {
			errs = append(errs, s.conn.Close())
		}
	}
	b.v4, b.v6, b.open = nil, nil, false
	return errors.Join(errs...)
}

// SetMark implements conn.Bind: SO_MARK on both sockets.
func (b *Bind) SetMark(mark uint32) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, s := range []*socket{b.v4, b.v6} {
		if s == nil {
			continue
		}
		var err error
		if cerr := s.rc.Control(func(fd uintptr) {
			err = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK, int(mark))
		}); cerr != nil {
			return cerr
		}
		if err != nil {
			return os.NewSyscallError("setsockopt SO_MARK", err)
		}
	}
	return nil
}

// BatchSize implements conn.Bind.
func (b *Bind) BatchSize() int { return batchSize }

// ParseEndpoint implements conn.Bind.
func (b *Bind) ParseEndpoint(s string) (conn.Endpoint, error) {
	e, err := parseEndpoint(s)
	if err != nil {
		return nil, err
	}
	return e, nil
}

// The receive functions carry the family in their names, which
// wireguard-go's logs show (conn.ReceiveFunc.PrettyName).
func (s *socket) receiveIPv4(bufs [][]byte, sizes []int, eps []conn.Endpoint) (int, error) {
	return s.receive(bufs, sizes, eps)
}

func (s *socket) receiveIPv6(bufs [][]byte, sizes []int, eps []conn.Endpoint) (int, error) {
	return s.receive(bufs, sizes, eps)
}

// mmsghdr is struct mmsghdr of recvmmsg and sendmmsg.
type mmsghdr struct {
	hdr unix.Msghdr
	n   uint32
	_   [4]byte
}

// receiver is the receiving state of a socket.
type receiver struct {
	hdrs  [batchSize]mmsghdr
	iovs  [batchSize]unix.Iovec
	names [batchSize]unix.RawSockaddrInet6 // large enough for IPv4's
	oob   [batchSize * rxOOB]byte
	msgs  [batchSize]rxMsg
	// next is how many messages the next read asks for (with GRO; without,
	// a whole batch): it doubles after a read whose messages were single
	// datagrams, up to a batch, and falls to what fits the batch if every
	// message held as many datagrams as the fullest of the last read (2
	// for GRO's 64). A wrong guess costs copies to the stash; doubling
	// bounds it when single messages come between merged ones.
	next int
	// stash holds what a read brought beyond the batch, for the next
	// calls; spare holds buffers stash used before.
	stash []stashed
	spare [][]byte
}

// rxMsg is what a read tells of one message.
type rxMsg struct {
	size, gso, segs int
}

// stashed is a message kept for the next call.
type stashed struct {
	buf      []byte
	gso      int
	segs     int
	next     int // the first datagram not handed out yet
	endpoint *Endpoint
}

func (r *receiver) init() {
	r.next = batchSize / maxSegments
	for i := range r.hdrs {
		h := &r.hdrs[i].hdr
		h.Name = (*byte)(unsafe.Pointer(&r.names[i]))
		h.Iov = &r.iovs[i]
		h.SetIovlen(1)
		h.Control = &r.oob[i*rxOOB]
	}
}

// receive implements conn.ReceiveFunc.
func (s *socket) receive(bufs [][]byte, sizes []int, eps []conn.Endpoint) (int, error) {
	r := &s.rx
	if len(r.stash) > 0 {
		return r.drain(bufs, sizes, eps), nil
	}
	want := max(min(r.next, len(bufs), batchSize), 1)
	if !s.gro {
		want = min(len(bufs), batchSize)
	}
	for i := range want {
		r.iovs[i].Base = unsafe.SliceData(bufs[i])
		r.iovs[i].SetLen(len(bufs[i]))
		h := &r.hdrs[i].hdr
		h.Namelen = unix.SizeofSockaddrInet6
		h.SetControllen(rxOOB)
		h.Flags = 0
	}
	n, err := s.recvmmsg(want)
	if err != nil {
		return 0, err
	}
	// How many datagrams each message holds, and which messages fit.
	total, most, fit := 0, 1, n
	for i := range n {
		m := rxMsg{size: int(r.hdrs[i].n), segs: 1}
		if s.gro {
			m.gso = groSize(r.oob[i*rxOOB : i*rxOOB+int(r.hdrs[i].hdr.Controllen)])
		}
		if m.gso > 0 && m.size > m.gso {
			m.segs = (m.size + m.gso - 1) / m.gso
		}
		r.msgs[i] = m
		most = max(most, m.segs)
		if fit == n && total+m.segs > len(bufs) {
			fit = i
		}
		if fit == n {
			total += m.segs
		}
	}
	if most == 1 {
		r.next = min(2*r.next, batchSize)
	} else {
		r.next = min(max(len(bufs)/most, 1), 2*r.next)
	}
	var last *Endpoint
	endpoint := func(i int) *Endpoint {
		e := s.endpoint(i)
		if last != nil && *last == e {
			return last
		}
		last = &e
		return last
	}
	for i := fit; i < n; i++ {
		r.keep(bufs[i][:r.msgs[i].size], r.msgs[i], endpoint(i))
	}
	if fit == 0 {
		// The first message alone holds more than bufs.
		return r.drain(bufs, sizes, eps), nil
	}
	// Split the messages that fit into the batch, last first: message i's
	// datagrams go to slots at or after i, which the messages after it
	// have left already.
	last = nil
	out := total
	for i := fit - 1; i >= 0; i-- {
		m := r.msgs[i]
		out -= m.segs
		ep := endpoint(i)
		src := bufs[i][:m.size]
		if m.segs == 1 {
			if out != i {
				copy(bufs[out], src)
			}
			sizes[out], eps[out] = m.size, ep
			continue
		}
		for k := range m.segs {
			lo, hi := k*m.gso, min((k+1)*m.gso, m.size)
			if out+k != i {
				copy(bufs[out+k], src[lo:hi])
			}
			sizes[out+k], eps[out+k] = hi-lo, ep
		}
	}
	return total, nil
}

// recvmmsg reads up to n messages into the receiver's headers, waiting
// until there is at least one.
func (s *socket) recvmmsg(n int) (int, error) {
	var got int
	var errno syscall.Errno
	err := s.rc.Read(func(fd uintptr) bool {
		for {
			r0, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&s.rx.hdrs[0])), uintptr(n), 0, 0, 0)
			switch e {
			case unix.EINTR:
				continue
			case unix.EAGAIN:
				return false
			}
			got, errno = int(r0), e
			return true
		}
	})
	if err != nil {
		return 0, err
	}
	if errno != 0 {
		return 0, os.NewSyscallError("recvmmsg", errno)
	}
	return got, nil
}

// endpoint returns the sender and local address of received message i.
func (s *socket) endpoint(i int) Endpoint {
	r := &s.rx
	var e Endpoint
	sa := &r.names[i]
	switch sa.Family {
	case unix.AF_INET:
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&sa4.Port))[:])
		e.dst = netip.AddrPortFrom(netip.AddrFrom4(sa4.Addr), port)
	case unix.AF_INET6:
		port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:])
		e.dst = netip.AddrPortFrom(netip.AddrFrom16(sa.Addr), port)
	}
	oob := r.oob[i*rxOOB : i*rxOOB+int(r.hdrs[i].hdr.Controllen)]
	forEachCmsg(oob, func(level, typ int32, data []byte) {
		switch {
		case level == unix.IPPROTO_IP && typ == unix.IP_PKTINFO && len(data) >= unix.SizeofInet4Pktinfo:
			info := (*unix.Inet4Pktinfo)(unsafe.Pointer(&data[0]))
			e.src, e.ifindex = netip.AddrFrom4(info.Spec_dst), info.Ifindex
		case level == unix.IPPROTO_IPV6 && typ == unix.IPV6_PKTINFO && len(data) >= unix.SizeofInet6Pktinfo:
			info := (*unix.Inet6Pktinfo)(unsafe.Pointer(&data[0]))
			e.src, e.ifindex = netip.AddrFrom16(info.Addr), int32(info.Ifindex)
		}
	})
	return e
}

// groSize returns the segment size of a GRO message from its control
// data, 0 if it has none.
func groSize(oob []byte) int {
	size := 0
	forEachCmsg(oob, func(level, typ int32, data []byte) {
		if level == unix.SOL_UDP && typ == unix.UDP_GRO {
			switch {
			case len(data) >= 4:
				size = int(binary.NativeEndian.Uint32(data))
			case len(data) >= 2:
				size = int(binary.NativeEndian.Uint16(data))
			}
		}
	})
	return size
}

// forEachCmsg calls fn with each control message in oob.
func forEachCmsg(oob []byte, fn func(level, typ int32, data []byte)) {
	for len(oob) >= unix.SizeofCmsghdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
		l := int(h.Len)
		if l < unix.CmsgLen(0) || l > len(oob) {
			return
		}
		fn(h.Level, h.Type, oob[unix.CmsgLen(0):l])
		next := unix.CmsgSpace(l - unix.CmsgLen(0))
		if next > len(oob) {
			return
		}
		oob = oob[next:]
	}
}

// keep copies a message that does not fit into the batch to the stash.
func (r *receiver) keep(b []byte, m rxMsg, ep *Endpoint) {
	var buf []byte
	if n := len(r.spare); n > 0 && cap(r.spare[n-1]) >= len(b) {
		buf, r.spare = r.spare[n-1][:len(b)], r.spare[:n-1]
	} else {
		buf = make([]byte, len(b), max(len(b), 2048))
	}
	copy(buf, b)
	gso := m.gso
	if m.segs == 1 {
		gso = len(b)
	}
	r.stash = append(r.stash, stashed{buf: buf, gso: gso, segs: m.segs, endpoint: ep})
}

// drain moves the stash's datagrams into bufs, as many as fit.
func (r *receiver) drain(bufs [][]byte, sizes []int, eps []conn.Endpoint) int {
	out, done := 0, 0
	for i := range r.stash {
		m := &r.stash[i]
		for ; m.next < m.segs && out < len(bufs); m.next++ {
			lo, hi := m.next*m.gso, min((m.next+1)*m.gso, len(m.buf))
			sizes[out] = copy(bufs[out], m.buf[lo:hi])
			eps[out] = m.endpoint
			out++
		}
		if m.next < m.segs {
			break
		}
		r.spare = append(r.spare, m.buf)
		done++
	}
	n := copy(r.stash, r.stash[done:])
	clear(r.stash[n:])
	r.stash = r.stash[:n]
	return out
}

// sender is the state of one Send.
type sender struct {
	hdrs  [batchSize]mmsghdr
	first [batchSize]int // each message's first datagram
	iovs  [batchSize]unix.Iovec
	oob   [batchSize * txOOB]byte
	name  unix.RawSockaddrInet6
}

func newSender() *sender { return &sender{} }

// Send implements conn.Bind.
func (b *Bind) Send(bufs [][]byte, ep conn.Endpoint) error {
	if len(bufs) == 0 {
		return nil
	}
	dst, src, ifindex := target(ep)
	b.mu.Lock()
	s := b.v4
	if !dst.Addr().Is4() {
		s = b.v6
	}
	b.mu.Unlock()
	if s == nil {
		return syscall.EAFNOSUPPORT
	}
	for len(bufs) > 0 {
		n := min(len(bufs), batchSize)
		if err := s.send(bufs[:n], dst, src, ifindex); err != nil {
			return err
		}
		bufs = bufs[n:]
	}
	return nil
}

// target returns where an endpoint sends to and from.
func target(ep conn.Endpoint) (dst netip.AddrPort, src netip.Addr, ifindex int32) {
	switch e := ep.(type) {
	case *Endpoint:
		return e.dst, e.src, e.ifindex
	case *conn.StdNetEndpoint:
		return e.AddrPort, e.SrcIP(), e.SrcIfidx()
	}
	dst, _ = netip.ParseAddrPort(ep.DstToString())
	return dst, ep.SrcIP(), 0
}

// send sends up to batchSize datagrams to dst.
func (s *socket) send(bufs [][]byte, dst netip.AddrPort, src netip.Addr, ifindex int32) error {
	t := s.tx.Get().(*sender)
	defer s.tx.Put(t)
	var namelen uint32
	if s.v6 {
		sa := &t.name
		*sa = unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: dst.Addr().As16(), Scope_id: scopeID(dst.Addr())}
		binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:], dst.Port())
		namelen = unix.SizeofSockaddrInet6
	} else {
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(&t.name))
		*sa = unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: dst.Addr().As4()}
		binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:], dst.Port())
		namelen = unix.SizeofSockaddrInet4
	}
	gso := s.gso.Load()
	n := t.build(bufs, gso, s.v6, namelen, src, ifindex)
	sent, err := s.sendmmsg(t, n)
	if gso && errors.Is(err, syscall.EIO) {
		// The kernel cannot segment on this route (a device without
		// checksum offload): send datagram by datagram from now on,
		// starting with the first datagram of the message it refused.
		s.gso.Store(false)
		rest := bufs[t.first[sent]:]
		n = t.build(rest, false, s.v6, namelen, src, ifindex)
		_, err = s.sendmmsg(t, n)
	}
	return err
}

// scopeID is the zone of a link-local IPv6 address as an interface index.
func scopeID(a netip.Addr) uint32 {
	if z := a.Zone(); z != "" {
		if i, err := net.InterfaceByName(z); err == nil {
			return uint32(i.Index)
		}
		if n, err := strconv.Atoi(z); err == nil {
			return uint32(n)
		}
	}
	return 0
}

// build fills the sender's I/O vector and headers for bufs (at most
// batchSize): with gso, runs of datagrams of one size (the last may be
// shorter) become one message. It returns the number of messages; message
// m starts with datagram t.first[m].
func (t *sender) build(bufs [][]byte, gso, v6 bool, namelen uint32, src netip.Addr, ifindex int32) int {
	for i, b := range bufs {
		t.iovs[i].Base = unsafe.SliceData(b)
		t.iovs[i].SetLen(len(b))
	}
	limit := maxIPv4Payload
	if v6 {
		limit = maxIPv6Payload
	}
	n := 0
	for i := 0; i < len(bufs); {
		size := len(bufs[i])
		j, total := i+1, size
		if gso {
			for j < len(bufs) && j-i < maxSegments && total+len(bufs[j]) <= limit && len(bufs[j]) <= size && len(bufs[j-1]) == size {
				total += len(bufs[j])
				j++
			}
		}
		t.first[n] = i
		h := &t.hdrs[n].hdr
		*h = unix.Msghdr{Name: (*byte)(unsafe.Pointer(&t.name)), Namelen: namelen, Iov: &t.iovs[i]}
		h.SetIovlen(j - i)
		oob := t.oob[n*txOOB : (n+1)*txOOB]
		used := 0
		if src.IsValid() {
			used += putPktinfo(oob, v6, src, ifindex)
		}
		if j-i > 1 {
			used += putCmsg(oob[used:], unix.SOL_UDP, unix.UDP_SEGMENT, func(d []byte) int {
				binary.NativeEndian.PutUint16(d, uint16(size))
				return 2
			})
		}
		if used > 0 {
			h.Control = &oob[0]
			h.SetControllen(used)
		}
		n++
		i = j
	}
	return n
}

// putPktinfo writes the packet info control message that sends from src
// (and interface ifindex) and returns its length.
func putPktinfo(oob []byte, v6 bool, src netip.Addr, ifindex int32) int {
	if v6 {
		if !src.Is6() || src.Is4In6() {
			return 0
		}
		return putCmsg(oob, unix.IPPROTO_IPV6, unix.IPV6_PKTINFO, func(d []byte) int {
			info := (*unix.Inet6Pktinfo)(unsafe.Pointer(&d[0]))
			*info = unix.Inet6Pktinfo{Addr: src.As16(), Ifindex: uint32(ifindex)}
			return unix.SizeofInet6Pktinfo
		})
	}
	if !src.Is4() {
		return 0
	}
	return putCmsg(oob, unix.IPPROTO_IP, unix.IP_PKTINFO, func(d []byte) int {
		info := (*unix.Inet4Pktinfo)(unsafe.Pointer(&d[0]))
		*info = unix.Inet4Pktinfo{Ifindex: ifindex, Spec_dst: src.As4()}
		return unix.SizeofInet4Pktinfo
	})
}

// putCmsg writes a control message whose data fill writes, and returns the
// space it takes.
func putCmsg(oob []byte, level, typ int, fill func([]byte) int) int {
	clear(oob)
	h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
	l := fill(oob[unix.CmsgLen(0):])
	h.Level, h.Type = int32(level), int32(typ)
	h.SetLen(unix.CmsgLen(l))
	return unix.CmsgSpace(l)
}

// sendmmsg is the system call: it sends hdrs (at least one) on fd and
// returns how many it sent.
func sendmmsg(fd uintptr, hdrs []mmsghdr) (int, syscall.Errno) {
	r0, _, e := unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&hdrs[0])), uintptr(len(hdrs)), 0, 0, 0)
	return int(r0), e
}

// sendmmsg sends the sender's first n messages, all of them unless an
// error stops it, and returns how many it sent.
func (s *socket) sendmmsg(t *sender, n int) (int, error) {
	start := 0
	for start < n {
		var sent int
		var errno syscall.Errno
		err := s.rc.Write(func(fd uintptr) bool {
			for {
				r, e := s.sys(fd, t.hdrs[start:n])
				switch e {
				case unix.EINTR:
					continue
				case unix.EAGAIN:
					return false
				}
				sent, errno = r, e
				return true
			}
		})
		if err != nil {
			return start, err
		}
		if errno != 0 {
			return start, os.NewSyscallError("sendmmsg", errno)
		}
		start += sent
	}
	return start, nil
}
