// Package offload segments and coalesces packets the way a NIC with TSO,
// USO and UDP-tunnel GSO would, for a TUN device opened with a virtio-net
// header (IFF_VNET_HDR).
//
// With offloads negotiated (TUNSETOFFLOAD) the kernel hands a TUN reader
// super-packets of up to 64 KiB: one TCP segment (or UDP datagram series)
// with its headers once, a virtio-net Header saying how to cut it. Split
// cuts it into wire-sized packets with correct lengths, IPv4 IDs, TCP
// sequence numbers, TCP flags (CWR on the first, FIN and PSH on the last
// segment only) and checksums; it knows plain TCP and UDP over IPv4 and
// IPv6, and the same inside a UDP tunnel (VXLAN): outer IPv4 or IPv6 and
// UDP, the tunnel header and inner Ethernet frame (VLAN tags included)
// copied to every segment, outer and inner headers fixed up. A segment
// with an outer IPv4 header leaves without an outer UDP checksum (see
// Split).
//
// The other way, a Coalescer merges a batch of packets into as few
// super-packets as it can (GRO): consecutive TCP segments of one flow, UDP
// datagrams of one flow and equal size, and TCP segments of one inner flow
// inside VXLAN, so that the kernel takes each batch in a few writes and
// forwards or delivers 64 KiB at a time. It only merges what the kernel's
// own GRO would merge (same headers but for lengths, IDs and checksums,
// adjacent sequence numbers, ACK with at most PSH or FIN on the last,
// equal TCP options, valid checksums); anything else is passed through
// alone and in order. Payload bytes are never copied: a merged packet is a
// new header followed by slices of the input packets, for writev.
//
// The kernel (6.17+) checks that a UDP-tunnel super-packet written to a
// TUN device has room for an Ethernet header before its outer IP header,
// which an L3 TUN device never has. So a merged VXLAN super-packet gets
// 16 bytes of IPv4 NOP options in its outer header: legal IPv4 that the
// receiving kernel consumes locally (the outer header ends at the VXLAN
// socket) and that moves the outer UDP header past the check. Merging
// VXLAN packets is limited to IPv4 outer headers for that reason.
//
// Everything here is pure computation on byte slices: no I/O, no
// allocation per packet once a Coalescer has warmed up.
package offload
