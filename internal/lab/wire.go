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
	// IPsec counts the Gateway packets that are IKE or ESP: UDP from or to
	// port 500 or 4500, or IP protocol ESP (backend ipsec's links).
	IPsec int
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
	return fmt.Sprintf("%d IP packets, %d between gateways (%d WireGuard, %d IPsec, %d other), %d control plane, %d plaintext overlay",
		r.Packets, r.Gateway, r.WireGuard, r.IPsec, r.NonWireGuard, r.Control, r.Plaintext)
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
	overlay = overlay.Masked()
	var (
		ip4 layers.IPv4
		ip6 layers.IPv6
		udp layers.UDP
	)
	df := gopacket.NilDecodeFeedback
	err := eachIP(pcapPath, func(etype layers.EthernetType, payload []byte) {
		var src, dst netip.Addr
		var proto layers.IPProtocol
		var l4 []byte
		laterFragment := false
		switch etype {
		case layers.EthernetTypeIPv4:
			r.Packets++
			if ip4.DecodeFromBytes(payload, df) != nil {
				r.Undecodable++
				return
			}
			src, _ = netip.AddrFromSlice(ip4.SrcIP.To4())
			dst, _ = netip.AddrFromSlice(ip4.DstIP.To4())
			proto, l4 = ip4.Protocol, ip4.Payload
			laterFragment = ip4.FragOffset != 0
		case layers.EthernetTypeIPv6:
			r.Packets++
			if ip6.DecodeFromBytes(payload, df) != nil {
				r.Undecodable++
				return
			}
			src, _ = netip.AddrFromSlice(ip6.SrcIP)
			dst, _ = netip.AddrFromSlice(ip6.DstIP)
			proto, l4 = ip6.NextHeader, ip6.Payload
		default:
			return
		}
		src, dst = src.Unmap(), dst.Unmap()
		desc := fmt.Sprintf("%v %s > %s", proto, src, dst)
		if overlay.Contains(src) || overlay.Contains(dst) {
			r.Plaintext++
			r.PlaintextSamples = sample(r.PlaintextSamples, desc)
		}
		if slices.Contains(control, src) || slices.Contains(control, dst) {
			r.Control++
			return
		}
		if !isGatewayAddr(src) || !isGatewayAddr(dst) {
			return
		}
		r.Gateway++
		wg, ipsec := false, proto == layers.IPProtocolESP && !laterFragment
		if proto == layers.IPProtocolUDP && !laterFragment && udp.DecodeFromBytes(l4, df) == nil {
			wg = int(udp.SrcPort) == wgPort || int(udp.DstPort) == wgPort
			ipsec = isIKEPort(udp.SrcPort) || isIKEPort(udp.DstPort)
		}
		switch {
		case wg:
			r.WireGuard++
		case ipsec:
			r.IPsec++
		default:
			r.NonWireGuard++
			r.NonWireGuardSamples = sample(r.NonWireGuardSamples, desc)
		}
	})
	return r, err
}

// isIKEPort reports whether p is IKE's port (500) or NAT-T's (4500, IKE
// and ESP in UDP).
func isIKEPort(p layers.UDPPort) bool { return p == 500 || p == 4500 }

// packetSource is a pcap or pcapng reader.
type packetSource interface {
	ReadPacketData() ([]byte, gopacket.CaptureInfo, error)
}

// openPcap opens a pcap or pcapng file of Ethernet, Linux cooked or raw IP
// frames.
func openPcap(path string) (packetSource, layers.LinkType, func(), error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("reading capture: %w", err)
	}
	fail := func(err error) (packetSource, layers.LinkType, func(), error) {
		f.Close()
		return nil, 0, nil, fmt.Errorf("reading capture %s: %w", path, err)
	}
	br := bufio.NewReader(f)
	magic, err := br.Peek(4)
	if err != nil {
		return fail(err)
	}
	var src packetSource
	var link layers.LinkType
	if bytes.Equal(magic, []byte{0x0a, 0x0d, 0x0d, 0x0a}) {
		ng, err := pcapgo.NewNgReader(br, pcapgo.DefaultNgReaderOptions)
		if err != nil {
			return fail(err)
		}
		src, link = ng, ng.LinkType()
	} else {
		pr, err := pcapgo.NewReader(br)
		if err != nil {
			return fail(err)
		}
		src, link = pr, pr.LinkType()
	}
	switch link {
	case layers.LinkTypeEthernet, layers.LinkTypeLinuxSLL, layers.LinkTypeRaw, layers.LinkTypeIPv4, layers.LinkTypeIPv6:
	default:
		return fail(fmt.Errorf("link type %v not supported (want Ethernet, Linux cooked or raw IP)", link))
	}
	return src, link, func() { f.Close() }, nil
}

// DuplicateReport counts the IPv4 packets of a capture on an Ethernet
// segment and how many of them were seen before, byte for byte from the IP
// header on. Every IPv4 packet a host sends carries its own IP id (and a
// ping its own sequence number), so a second copy means the network
// delivered one packet twice: a loop or a double flood.
type DuplicateReport struct {
	Frames     int
	IPv4       int
	Duplicates int
	// Samples describe the first few duplicates.
	Samples []string
}

// CountDuplicates reads a capture of Ethernet frames and counts duplicate
// IPv4 packets.
func CountDuplicates(pcapPath string) (DuplicateReport, error) {
	var r DuplicateReport
	src, link, closeFn, err := openPcap(pcapPath)
	if err != nil {
		return r, err
	}
	defer closeFn()
	if link != layers.LinkTypeEthernet {
		return r, fmt.Errorf("capture %s: link type %v, want Ethernet", pcapPath, link)
	}
	seen := map[string]bool{}
	var eth layers.Ethernet
	var ip4 layers.IPv4
	for {
		data, _, err := src.ReadPacketData()
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return r, nil
		}
		if err != nil {
			return r, fmt.Errorf("reading capture %s after %d frames: %w", pcapPath, r.Frames, err)
		}
		r.Frames++
		if eth.DecodeFromBytes(data, gopacket.NilDecodeFeedback) != nil || eth.EthernetType != layers.EthernetTypeIPv4 {
			continue
		}
		r.IPv4++
		k := string(eth.Payload)
		if seen[k] {
			r.Duplicates++
			if ip4.DecodeFromBytes(eth.Payload, gopacket.NilDecodeFeedback) == nil {
				r.Samples = sample(r.Samples, fmt.Sprintf("%v %s > %s id %d", ip4.Protocol, ip4.SrcIP, ip4.DstIP, ip4.Id))
			}
		}
		seen[k] = true
	}
}

// sample appends s to list unless the list is full.
func sample(list []string, s string) []string {
	if len(list) < maxSamples {
		list = append(list, s)
	}
	return list
}

// ipOf finds the IP header in a captured frame of link type link, decoding
// into eth or sll; ok is false for a frame that does not parse.
func ipOf(link layers.LinkType, data []byte, eth *layers.Ethernet, sll *layers.LinuxSLL) (etype layers.EthernetType, payload []byte, ok bool) {
	df := gopacket.NilDecodeFeedback
	switch link {
	case layers.LinkTypeEthernet:
		if eth.DecodeFromBytes(data, df) != nil {
			return 0, nil, false
		}
		return eth.EthernetType, eth.Payload, true
	case layers.LinkTypeLinuxSLL:
		if sll.DecodeFromBytes(data, df) != nil {
			return 0, nil, false
		}
		return sll.EthernetType, sll.Payload, true
	}
	if len(data) == 0 {
		return 0, nil, false
	}
	switch data[0] >> 4 {
	case 4:
		etype = layers.EthernetTypeIPv4
	case 6:
		etype = layers.EthernetTypeIPv6
	}
	return etype, data, true
}

// eachIP calls fn with the ethertype and the bytes from the IP header on of
// every frame of the capture that parses (Ethernet, Linux cooked or raw
// IP). A capture cut short in its last frame is read up to that frame.
// eachIPv4 calls fn for each IPv4 packet of the capture that decodes, with
// its source and destination; ip is reused between calls.
func eachIPv4(pcapPath string, fn func(s, d netip.Addr, ip *layers.IPv4)) error {
	var ip4 layers.IPv4
	return eachIP(pcapPath, func(etype layers.EthernetType, payload []byte) {
		if etype != layers.EthernetTypeIPv4 || ip4.DecodeFromBytes(payload, gopacket.NilDecodeFeedback) != nil {
			return
		}
		s, _ := netip.AddrFromSlice(ip4.SrcIP.To4())
		d, _ := netip.AddrFromSlice(ip4.DstIP.To4())
		fn(s, d, &ip4)
	})
}

func eachIP(pcapPath string, fn func(etype layers.EthernetType, ip []byte)) error {
	src, link, closeFn, err := openPcap(pcapPath)
	if err != nil {
		return err
	}
	defer closeFn()
	var (
		eth   layers.Ethernet
		sll   layers.LinuxSLL
		count int
	)
	for {
		data, _, err := src.ReadPacketData()
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading capture %s after %d frames: %w", pcapPath, count, err)
		}
		count++
		if etype, payload, ok := ipOf(link, data, &eth, &sll); ok {
			fn(etype, payload)
		}
	}
}
