// Package udpbind is fednet's UDP bind for wireguard-go (a conn.Bind):
// the sockets a userspace WireGuard device sends and receives its
// encrypted datagrams on.
//
// It differs from wireguard-go's StdNetBind in how much it reads per
// system call. StdNetBind, with UDP GRO on, reads two messages per
// recvmmsg, so that each can be a GRO super-datagram of up to 64
// datagrams split in place within the device's batch of 128. When
// datagrams arrive one by one (a path that does not merge them, as a
// gateway's receive often is when the sender's datagrams crossed a
// router), every read then carries one or two datagrams, and so does
// everything behind it: each decryption hand-off, each TUN write, the
// receiving device's coalescing, which has nothing to merge. This bind
// reads as many messages as the batch holds when they come one by one,
// and fewer (as StdNetBind) when they come merged: it doubles the
// messages it asks for after each read of single datagrams, up to the
// batch, and falls back to what fits the batch as soon as a read brings
// merged ones. A read that brings more than the batch holds keeps the
// rest for the next call (stash), so nothing is lost when the guess is
// wrong; doubling bounds what a wrong guess copies.
//
// Sending is as StdNetBind's: consecutive datagrams of one size go out as
// one UDP GSO message (UDP_SEGMENT), without copying them together (each
// datagram is an element of the message's I/O vector), and a kernel that
// refuses GSO on the route (EIO: an IPsec route, and on older kernels a
// device without checksum offload, which Linux 6.18 accepted in a test)
// turns it off for the socket, sending again only what it refused. Sticky
// sources are kept (the local address and interface a peer's datagram
// arrived on are where replies leave from).
//
// On other systems New returns wireguard-go's default bind.
package udpbind

import (
	"net/netip"
)

// Endpoint is a peer's UDP address with the local address (and interface)
// its datagrams arrived at, which the bind answers from.
type Endpoint struct {
	dst     netip.AddrPort
	src     netip.Addr // zero: none (the kernel chooses)
	ifindex int32
}

// ClearSrc implements conn.Endpoint: the kernel chooses the source again.
func (e *Endpoint) ClearSrc() { e.src, e.ifindex = netip.Addr{}, 0 }

// SrcToString implements conn.Endpoint.
func (e *Endpoint) SrcToString() string {
	if !e.src.IsValid() {
		return ""
	}
	return e.src.String()
}

// DstToString implements conn.Endpoint.
func (e *Endpoint) DstToString() string { return e.dst.String() }

// DstToBytes implements conn.Endpoint (as StdNetEndpoint: the address and
// port, for cookies).
func (e *Endpoint) DstToBytes() []byte {
	b, _ := e.dst.MarshalBinary()
	return b
}

// DstIP implements conn.Endpoint.
func (e *Endpoint) DstIP() netip.Addr { return e.dst.Addr() }

// SrcIP implements conn.Endpoint.
func (e *Endpoint) SrcIP() netip.Addr { return e.src }

// DstAddrPort returns the peer's address and port.
func (e *Endpoint) DstAddrPort() netip.AddrPort { return e.dst }

// parseEndpoint reads an endpoint "ADDR:PORT" as conn.Bind.ParseEndpoint.
func parseEndpoint(s string) (*Endpoint, error) {
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		return nil, err
	}
	return &Endpoint{dst: ap}, nil
}
