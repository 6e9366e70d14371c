package lab

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

// maxSamples bounds each of WireReport's sample lists.
const maxSamples = 10

// WireReport counts what a capture on the lab's internet saw.
type WireReport struct {
	// Packets is every IPv4 and IPv6 packet in the capture.
	Packets int
	// Gateway counts packets whose source and destination are both
	// gateway public addresses (addresses in the lab's public ranges other
	// than the routers').
	Gateway int
	// WireGuard counts the Gateway packets that are UDP from or to the
	// WireGuard port.
	WireGuard int
	// NonWireGuard counts the other Gateway packets (ICMP, TCP, UDP on
	// other ports, and IP fragments after the first, whose ports cannot be
	// seen).
	NonWireGuard int
	// Control counts packets to or from a control-plane address (the
	// manager): agents talk to it over HTTPS, not WireGuard, so these are
	// not Gateway packets. They still count as Plaintext if they carry an
	// overlay address.
	Control int
	// Plaintext counts packets whose IP source or destination lies in the
	// overlay supernet: overlay traffic on the internet in clear.
	Plaintext int
	// Undecodable counts frames that claimed to carry IP but did not parse.
	Undecodable int
	// PlaintextSamples and NonWireGuardSamples describe the first few
	// packets of each kind, such as "ICMPv4 198.51.100.10 > 203.0.113.20".
	PlaintextSamples    []string
	NonWireGuardSamples []string
}

// String summarises the report.
func (r WireReport) String() string {
	return fmt.Sprintf("%d IP packets, %d between gateways (%d WireGuard, %d other), %d control plane, %d plaintext overlay",
		r.Packets, r.Gateway, r.WireGuard, r.NonWireGuard, r.Control, r.Plaintext)
}

// isGatewayAddr reports whether a is a possible gateway public address of
// a lab: inside a public range, not a router.
func isGatewayAddr(a netip.Addr) bool {
	r, ok := publicRange(a)
	return ok && usable(r, a)
}

// AnalyzeWire reads a pcap or pcapng file captured on the lab's internet
// (Ethernet, Linux cooked or raw IP frames) and counts the packets between
// gateways that are not UDP on wgPort, and the packets that carry an
// address of the overlay supernet in their IP header. Only the outer IP
// header is read. A capture cut short in its last packet is read up to
// that packet. Packets to or from a control address are counted in
// Control instead of Gateway.
func AnalyzeWire(pcapPath string, overlay netip.Prefix, wgPort int, control ...netip.Addr) (WireReport, error) {
	var r WireReport
	f, err := os.Open(pcapPath)
	if err != nil {
		return r, fmt.Errorf("reading capture: %w", err)
	}
	defer f.Close()
	br := bufio.NewReader(f)
	magic, err := br.Peek(4)
	if err != nil {
		return r, fmt.Errorf("reading capture %s: %w", pcapPath, err)
	}
	type source interface {
		ReadPacketData() ([]byte, gopacket.CaptureInfo, error)
	}
	var src source
	var link layers.LinkType
	if bytes.Equal(magic, []byte{0x0a, 0x0d, 0x0d, 0x0a}) {
		ng, err := pcapgo.NewNgReader(br, pcapgo.DefaultNgReaderOptions)
		if err != nil {
			return r, fmt.Errorf("reading capture %s: %w", pcapPath, err)
		}
		src, link = ng, ng.LinkType()
	} else {
		pr, err := pcapgo.NewReader(br)
		if err != nil {
			return r, fmt.Errorf("reading capture %s: %w", pcapPath, err)
		}
		src, link = pr, pr.LinkType()
	}
	switch link {
	case layers.LinkTypeEthernet, layers.LinkTypeLinuxSLL, layers.LinkTypeRaw, layers.LinkTypeIPv4, layers.LinkTypeIPv6:
	default:
		return r, fmt.Errorf("capture %s: link type %v not supported (want Ethernet, Linux cooked or raw IP)", pcapPath, link)
	}
	overlay = overlay.Masked()
	var (
		eth layers.Ethernet
		sll layers.LinuxSLL
		ip4 layers.IPv4
		ip6 layers.IPv6
		udp layers.UDP
	)
	df := gopacket.NilDecodeFeedback
	for {
		data, _, err := src.ReadPacketData()
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return r, fmt.Errorf("reading capture %s after %d IP packets: %w", pcapPath, r.Packets, err)
		}
		// Find the IP header.
		var etype layers.EthernetType
		payload := data
		switch link {
		case layers.LinkTypeEthernet:
			if eth.DecodeFromBytes(data, df) != nil {
				continue
			}
			etype, payload = eth.EthernetType, eth.Payload
		case layers.LinkTypeLinuxSLL:
			if sll.DecodeFromBytes(data, df) != nil {
				continue
			}
			etype, payload = sll.EthernetType, sll.Payload
		default:
			if len(data) == 0 {
				continue
			}
			switch data[0] >> 4 {
			case 4:
				etype = layers.EthernetTypeIPv4
			case 6:
				etype = layers.EthernetTypeIPv6
			}
		}
		var src, dst netip.Addr
		var proto layers.IPProtocol
		var l4 []byte
		laterFragment := false
		switch etype {
		case layers.EthernetTypeIPv4:
			r.Packets++
			if ip4.DecodeFromBytes(payload, df) != nil {
				r.Undecodable++
				continue
			}
			src, _ = netip.AddrFromSlice(ip4.SrcIP.To4())
			dst, _ = netip.AddrFromSlice(ip4.DstIP.To4())
			proto, l4 = ip4.Protocol, ip4.Payload
			laterFragment = ip4.FragOffset != 0
		case layers.EthernetTypeIPv6:
			r.Packets++
			if ip6.DecodeFromBytes(payload, df) != nil {
				r.Undecodable++
				continue
			}
			src, _ = netip.AddrFromSlice(ip6.SrcIP)
			dst, _ = netip.AddrFromSlice(ip6.DstIP)
			proto, l4 = ip6.NextHeader, ip6.Payload
		default:
			continue
		}
		src, dst = src.Unmap(), dst.Unmap()
		desc := fmt.Sprintf("%v %s > %s", proto, src, dst)
		if overlay.Contains(src) || overlay.Contains(dst) {
			r.Plaintext++
			r.PlaintextSamples = sample(r.PlaintextSamples, desc)
		}
		if slices.Contains(control, src) || slices.Contains(control, dst) {
			r.Control++
			continue
		}
		if !isGatewayAddr(src) || !isGatewayAddr(dst) {
			continue
		}
		r.Gateway++
		wg := false
		if proto == layers.IPProtocolUDP && !laterFragment && udp.DecodeFromBytes(l4, df) == nil {
			wg = int(udp.SrcPort) == wgPort || int(udp.DstPort) == wgPort
		}
		if wg {
			r.WireGuard++
		} else {
			r.NonWireGuard++
			r.NonWireGuardSamples = sample(r.NonWireGuardSamples, desc)
		}
	}
	return r, nil
}

// sample appends s to list unless the list is full.
func sample(list []string, s string) []string {
	if len(list) < maxSamples {
		list = append(list, s)
	}
	return list
}
