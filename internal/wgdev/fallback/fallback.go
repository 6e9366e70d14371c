// Package fallback carries a userspace WireGuard device's packets over UDP
// and, for each peer whose UDP is blocked, over a TLS stream on TCP (port
// 443 by default) instead: a conn.Bind for wireguard-go. Seen from the
// network, the fallback is a TLS connection to port 443, as HTTPS is.
//
// Each packet on a stream is a frame: its length (2 bytes, big-endian)
// and the packet, a WireGuard message as it would have gone in a UDP
// datagram. TLS is camouflage and keeps the framing intact; WireGuard
// authenticates the peers and encrypts the packets as over UDP, so the
// stream needs no certificate check (see Config.TLS).
//
// Which transport a link uses is decided per peer endpoint by a Policy:
// a handshake initiation that UDP does not answer within a few seconds
// makes the bind dial the peer's stream and replay the initiation over it;
// while on the stream, a batch goes over UDP now and then, and the first
// answer over UDP moves the link back. Only the side that sends to a UDP
// endpoint dials; the other answers over the stream it accepted, so a
// gateway behind NAT with UDP blocked reaches any gateway with a public
// TCP port.
//
// The bind writes the transports in use to a status file (Status), which
// the data plane reads to report each link's transport.
package fallback
