package lab

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// ExternalWireReport counts what a capture on the lab's internet saw of
// the nodes standing in for external sites' VPN gateways.
type ExternalWireReport struct {
	// Packets counts the IPv4 packets from or to an external endpoint.
	Packets int
	// IKE counts UDP to or from port 500 or 4500 (IKE, and ESP in UDP
	// 4500 under NAT traversal); ESP counts IP protocol 50.
	IKE, ESP int
	// Other counts the rest (anything else leaving or reaching them).
	Other int
	// Plaintext counts packets carrying overlay traffic in clear (as
	// FallbackWireReport.Plaintext).
	Plaintext int
	// Samples describe the first few Other and Plaintext packets.
	Samples []string
}

// String summarises the report.
func (r ExternalWireReport) String() string {
	return fmt.Sprintf("%d packets of the external sites' VPN gateways: %d UDP 500/4500, %d ESP, %d other, %d plaintext",
		r.Packets, r.IKE, r.ESP, r.Other, r.Plaintext)
}

// AnalyzeExternal reads a pcap captured on the lab's internet and counts
// the IPv4 packets from or to any of endpoints (the external sites' VPN
// gateways; every packet when endpoints is empty) by kind, and those that
// carry overlay traffic in clear (overlay addresses in the header, or two
// of inner adjacent in the payload).
func AnalyzeExternal(pcapPath string, endpoints []netip.Addr, overlay netip.Prefix, inner []netip.Addr) (ExternalWireReport, error) {
	var r ExternalWireReport
	plainText := plaintextTest(overlay, inner)
	var udp layers.UDP
	df := gopacket.NilDecodeFeedback
	err := eachIPv4(pcapPath, func(s, d netip.Addr, ip4 *layers.IPv4) {
		if len(endpoints) > 0 && !slices.Contains(endpoints, s) && !slices.Contains(endpoints, d) {
			return
		}
		r.Packets++
		desc := fmt.Sprintf("%v %s > %s", ip4.Protocol, s, d)
		if plainText(s, d, ip4.Payload) {
			r.Plaintext++
			r.Samples = sample(r.Samples, "plaintext "+desc)
		}
		switch {
		case ip4.Protocol == layers.IPProtocolESP:
			r.ESP++
		case ip4.Protocol == layers.IPProtocolUDP && udp.DecodeFromBytes(ip4.Payload, df) == nil && ikePort(udp):
			r.IKE++
		default:
			r.Other++
			if len(endpoints) > 0 {
				r.Samples = sample(r.Samples, desc)
			}
		}
	})
	return r, err
}

func ikePort(u layers.UDP) bool {
	for _, p := range []layers.UDPPort{u.SrcPort, u.DstPort} {
		if p == 500 || p == 4500 {
			return true
		}
	}
	return false
}
