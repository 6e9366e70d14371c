// Package tundev is a TUN device for wireguard-go (a tun.Device) that
// moves super-packets across the kernel boundary: it negotiates TSO, USO
// and UDP-tunnel GSO (Linux 6.17+) with the kernel, splits what it reads
// into wire-sized packets and merges what it writes into super-packets
// (package offload).
//
// wireguard-go's own TUN device does the same for TCP and UDP, but not
// for VXLAN: without UDP-tunnel GSO the kernel cuts each bridged
// network's VXLAN super-packet into MTU-sized frames before the tunnel,
// and every frame crosses the kernel and the bridge on its own. Here a
// VXLAN super-packet is read whole, and VXLAN frames of one inner TCP
// flow are written back as one, which the receiving kernel decapsulates
// and bridges at once.
//
// The device falls back on its own: a kernel that refuses the tunnel
// offload (TUNSETOFFLOAD fails with EINVAL) gets TSO and USO only, one
// that refuses those gets packets one by one. A merged write the kernel
// refuses turns merging of that kind off for the device's life and is
// written again packet by packet.
package tundev

import (
	"fmt"
	"strings"

	"github.com/fednet/fednet/internal/offload"
)

// Mode limits the offloads a Device asks the kernel for.
type Mode int

const (
	// All asks for every offload, UDP-tunnel GSO included.
	All Mode = iota
	// NoTunnel asks for TSO and USO, as a kernel before 6.17 offers.
	NoTunnel
	// None asks for no offload: one packet per read and write.
	None
)

func (m Mode) String() string {
	switch m {
	case All:
		return "all"
	case NoTunnel:
		return "no-tunnel"
	case None:
		return "none"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Stats count what crossed the device. Reads and Writes are system calls;
// SuperRead are reads that were super-packets, TunnelRead those of them
// inside a UDP tunnel; Merged are writes that carried more than one
// packet, TunnelMerged those inside a UDP tunnel; Packets* count packets
// handed to and taken from wireguard-go.
type Stats struct {
	Reads, SuperRead, TunnelRead, PacketsRead    uint64
	Writes, Merged, TunnelMerged, PacketsWritten uint64
	Dropped                                      uint64
	// Calls counts Read calls, Backlogged those that returned with more
	// packets waiting in the kernel (a full batch).
	Calls, Backlogged uint64
}

func (s Stats) String() string {
	return fmt.Sprintf("read %d packets in %d reads (%d super-packets, %d VXLAN; %d of %d batches full); wrote %d packets in %d writes (%d merged, %d VXLAN); %d dropped",
		s.PacketsRead, s.Reads, s.SuperRead, s.TunnelRead, s.Backlogged, s.Calls, s.PacketsWritten, s.Writes, s.Merged, s.TunnelMerged, s.Dropped)
}

// describeOffloads says what was negotiated, for logs.
func describeOffloads(o offload.Offloads) string {
	var parts []string
	if o.TCP {
		parts = append(parts, "TSO")
	}
	if o.UDP {
		parts = append(parts, "USO")
	}
	if o.Tunnel {
		parts = append(parts, "UDP-tunnel GSO")
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
