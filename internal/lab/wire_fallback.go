package lab

import (
	"bytes"
	"fmt"
	"net/netip"
	"slices"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// FallbackWireReport counts what a capture on the lab's internet saw of
// one gateway while its UDP was blocked and its links ran over the TCP
// fallback.
type FallbackWireReport struct {
	// Packets counts the IPv4 packets between the gateway and any address
	// but a control-plane one.
	Packets int
	// TCP counts those that are TCP from or to the fallback port.
	TCP int
	// TLSRecords counts the TCP packets whose payload starts with a TLS
	// record header (content type 20-23, version 3.1-3.4); a segment may
	// also start inside a record, so it is at most TCP.
	TLSRecords int
	// UDP counts UDP packets from or to the gateway (none may cross
	// while its UDP is blocked).
	UDP int
	// Other counts the rest: TCP on other ports, ICMP, other protocols.
	Other int
	// Control counts packets between the gateway and a control-plane
	// address (the manager, over HTTPS), which are not counted above.
	Control int
	// Plaintext counts packets that carry an overlay packet in clear: an
	// overlay address in the outer IP header, or the source and
	// destination of a host pair next to each other in the payload, as
	// an inner IPv4 header holds them.
	Plaintext int
	// Samples describe the first few UDP, Other and Plaintext packets.
	Samples []string
}

// String summarises the report.
func (r FallbackWireReport) String() string {
	return fmt.Sprintf("%d packets of the gateway: %d TCP on the fallback port (%d starting a TLS record), %d UDP, %d other, %d plaintext; %d to or from the control plane",
		r.Packets, r.TCP, r.TLSRecords, r.UDP, r.Other, r.Plaintext, r.Control)
}

// AnalyzeFallback reads a pcap captured on the lab's internet and counts
// the IPv4 packets from or to gw by kind: TCP on port (and those starting
// a TLS record), UDP, other; and those that carry overlay traffic in
// clear: an address of overlay in the IP header, or two of inner (the
// hosts whose traffic crossed) adjacent in the payload. Packets between gw
// and a control address count in Control only (and in Plaintext if so).
func AnalyzeFallback(pcapPath string, gw netip.Addr, port int, overlay netip.Prefix, inner []netip.Addr, control ...netip.Addr) (FallbackWireReport, error) {
	var r FallbackWireReport
	plainText := plaintextTest(overlay, inner)
	var tcp layers.TCP
	df := gopacket.NilDecodeFeedback
	err := eachIPv4(pcapPath, func(s, d netip.Addr, ip4 *layers.IPv4) {
		if s != gw && d != gw {
			return
		}
		desc := fmt.Sprintf("%v %s > %s", ip4.Protocol, s, d)
		if plainText(s, d, ip4.Payload) {
			r.Plaintext++
			r.Samples = sample(r.Samples, "plaintext "+desc)
		}
		if slices.Contains(control, s) || slices.Contains(control, d) {
			r.Control++
			return
		}
		r.Packets++
		switch ip4.Protocol {
		case layers.IPProtocolUDP:
			r.UDP++
			r.Samples = sample(r.Samples, desc)
		case layers.IPProtocolTCP:
			if tcp.DecodeFromBytes(ip4.Payload, df) == nil && (int(tcp.SrcPort) == port || int(tcp.DstPort) == port) {
				r.TCP++
				if tlsRecord(tcp.Payload) {
					r.TLSRecords++
				}
				return
			}
			r.Other++
			r.Samples = sample(r.Samples, desc)
		default:
			r.Other++
			r.Samples = sample(r.Samples, desc)
		}
	})
	return r, err
}

// plaintextTest returns the test of a packet (outer source, destination,
// payload) carrying overlay traffic in clear: an address of overlay in the
// outer header, or two of inner (hosts whose traffic crossed) adjacent in
// the payload, as an inner IPv4 header holds them.
func plaintextTest(overlay netip.Prefix, inner []netip.Addr) func(s, d netip.Addr, payload []byte) bool {
	var pairs [][]byte
	for _, a := range inner {
		for _, b := range inner {
			if a != b && a.Is4() && b.Is4() {
				a4, b4 := a.As4(), b.As4()
				pairs = append(pairs, append(a4[:], b4[:]...))
			}
		}
	}
	return func(s, d netip.Addr, payload []byte) bool {
		if overlay.Contains(s) || overlay.Contains(d) {
			return true
		}
		for _, p := range pairs {
			if bytes.Contains(payload, p) {
				return true
			}
		}
		return false
	}
}

// tlsRecord reports whether p starts with a TLS record header.
func tlsRecord(p []byte) bool {
	return len(p) >= 5 && p[0] >= 20 && p[0] <= 23 && p[1] == 3 && p[2] >= 1 && p[2] <= 4
}
