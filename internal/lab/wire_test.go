package lab

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

var (
	macA = net.HardwareAddr{2, 0, 0, 0, 0, 1}
	macB = net.HardwareAddr{2, 0, 0, 0, 0, 2}
)

// frame is one test packet: an IP header and a transport layer.
type frame struct {
	src, dst          string
	proto             layers.IPProtocol
	sport, dport      int
	fragOffset        uint16
	arp, ipv6, nolink bool
	// payload follows a TCP header.
	payload []byte
}

// serialize builds the packet bytes, with an Ethernet header unless
// f.nolink.
func (f frame) serialize(t *testing.T) []byte {
	t.Helper()
	var ls []gopacket.SerializableLayer
	eth := &layers.Ethernet{SrcMAC: macA, DstMAC: macB, EthernetType: layers.EthernetTypeIPv4}
	switch {
	case f.arp:
		eth.EthernetType = layers.EthernetTypeARP
		ls = append(ls, eth, &layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4,
			HwAddressSize: 6, ProtAddressSize: 4, Operation: layers.ARPRequest,
			SourceHwAddress: macA, SourceProtAddress: net.IP{198, 51, 100, 10}.To4(),
			DstHwAddress: make(net.HardwareAddr, 6), DstProtAddress: net.IP{198, 51, 100, 1}.To4()})
	case f.ipv6:
		eth.EthernetType = layers.EthernetTypeIPv6
		ip := &layers.IPv6{Version: 6, HopLimit: 255, NextHeader: layers.IPProtocolICMPv6,
			SrcIP: net.ParseIP(f.src), DstIP: net.ParseIP(f.dst)}
		icmp := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeRouterSolicitation, 0)}
		if err := icmp.SetNetworkLayerForChecksum(ip); err != nil {
			t.Fatal(err)
		}
		ls = append(ls, eth, ip, icmp, gopacket.Payload(make([]byte, 4)))
	default:
		ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: f.proto, SrcIP: net.ParseIP(f.src).To4(), DstIP: net.ParseIP(f.dst).To4(), FragOffset: f.fragOffset}
		if !f.nolink {
			ls = append(ls, eth)
		}
		ls = append(ls, ip)
		switch {
		case f.fragOffset != 0:
			ls = append(ls, gopacket.Payload(make([]byte, 64)))
		case f.proto == layers.IPProtocolUDP:
			u := &layers.UDP{SrcPort: layers.UDPPort(f.sport), DstPort: layers.UDPPort(f.dport)}
			if err := u.SetNetworkLayerForChecksum(ip); err != nil {
				t.Fatal(err)
			}
			ls = append(ls, u, gopacket.Payload(make([]byte, 32)))
		case f.proto == layers.IPProtocolTCP:
			tc := &layers.TCP{SrcPort: layers.TCPPort(f.sport), DstPort: layers.TCPPort(f.dport), SYN: true, Window: 1000}
			if err := tc.SetNetworkLayerForChecksum(ip); err != nil {
				t.Fatal(err)
			}
			ls = append(ls, tc)
			if f.payload != nil {
				tc.SYN, tc.ACK = false, true
				ls = append(ls, gopacket.Payload(f.payload))
			}
		default:
			ls = append(ls, &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(layers.ICMPv4TypeEchoRequest, 0), Id: 1, Seq: 1},
				gopacket.Payload(make([]byte, 56)))
		}
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// writePcap writes frames to a pcap file with the given link type.
func writePcap(t *testing.T, link layers.LinkType, frames []frame) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "wire.pcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := pcapgo.NewWriter(f)
	if err := w.WriteFileHeader(65535, link); err != nil {
		t.Fatal(err)
	}
	ts := time.Unix(1700000000, 0)
	for i, fr := range frames {
		b := fr.serialize(t)
		ci := gopacket.CaptureInfo{Timestamp: ts.Add(time.Duration(i) * time.Millisecond), CaptureLength: len(b), Length: len(b)}
		if err := w.WritePacket(ci, b); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

const (
	gwA = "198.51.100.10"
	gwB = "203.0.113.20"
	gwC = "198.51.100.30"
)

var overlay = netip.MustParsePrefix("10.0.0.0/8")

func TestAnalyzeWire(t *testing.T) {
	udp, tcp, icmp := layers.IPProtocolUDP, layers.IPProtocolTCP, layers.IPProtocolICMPv4
	frames := []frame{
		// WireGuard between gateways: counted as such, both directions and
		// with the port on either side.
		{src: gwA, dst: gwB, proto: udp, sport: 51820, dport: 51820},
		{src: gwB, dst: gwA, proto: udp, sport: 51820, dport: 51820},
		{src: gwC, dst: gwB, proto: udp, sport: 40000, dport: 51820},
		{src: gwB, dst: gwC, proto: udp, sport: 51820, dport: 40000},
		// Between gateways but not WireGuard.
		{src: gwA, dst: gwC, proto: icmp},
		{src: gwA, dst: gwB, proto: tcp, sport: 40001, dport: 5201},
		{src: gwA, dst: gwB, proto: udp, sport: 53, dport: 53},
		{src: gwA, dst: gwB, proto: udp, fragOffset: 185},
		// The leak: overlay addresses in clear on the internet.
		{src: "10.1.0.1", dst: "10.2.0.1", proto: icmp},
		// A gateway sending to an overlay address: a leak, not a gateway pair.
		{src: gwA, dst: "10.2.0.1", proto: udp, sport: 51820, dport: 51820},
		// The router is not a gateway.
		{src: "198.51.100.1", dst: gwA, proto: icmp},
		// Not IPv4: an IPv6 packet counts as IP, ARP does not.
		{ipv6: true, src: "fe80::1", dst: "ff02::2"},
		{arp: true},
	}
	path := writePcap(t, layers.LinkTypeEthernet, frames)
	r, err := AnalyzeWire(path, overlay, 51820)
	if err != nil {
		t.Fatal(err)
	}
	want := WireReport{Packets: 12, Gateway: 8, WireGuard: 4, NonWireGuard: 4, Plaintext: 2}
	if r.Packets != want.Packets || r.Gateway != want.Gateway || r.WireGuard != want.WireGuard ||
		r.NonWireGuard != want.NonWireGuard || r.Plaintext != want.Plaintext || r.Undecodable != 0 {
		t.Errorf("report %v (undecodable %d)\nwant %v", r, r.Undecodable, want)
	}
	if got := strings.Join(r.PlaintextSamples, ", "); got != "ICMPv4 10.1.0.1 > 10.2.0.1, UDP 198.51.100.10 > 10.2.0.1" {
		t.Errorf("plaintext samples: %s", got)
	}
	if got := strings.Join(r.NonWireGuardSamples, ", "); got != "ICMPv4 198.51.100.10 > 198.51.100.30, TCP 198.51.100.10 > 203.0.113.20, UDP 198.51.100.10 > 203.0.113.20, UDP 198.51.100.10 > 203.0.113.20" {
		t.Errorf("non-WireGuard samples: %s", got)
	}

	// A different WireGuard port turns the WireGuard packets into others.
	r, err = AnalyzeWire(path, overlay, 51821)
	if err != nil {
		t.Fatal(err)
	}
	if r.WireGuard != 0 || r.NonWireGuard != 8 {
		t.Errorf("with port 51821: %v", r)
	}

	// A control-plane address (the manager) takes its packets out of the
	// gateway pairs: gwC's ICMP is then control traffic, not a gateway
	// packet that is not WireGuard.
	r, err = AnalyzeWire(path, overlay, 51820, netip.MustParseAddr(gwC))
	if err != nil {
		t.Fatal(err)
	}
	if r.Control != 3 || r.Gateway != 5 || r.NonWireGuard != 3 || r.Plaintext != 2 {
		t.Errorf("with %s as control address: %v, want 3 control, 5 gateway, 3 other, 2 plaintext", gwC, r)
	}

	// A capture cut inside its last packet (the ARP frame) is read up to
	// that packet.
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b[:len(b)-10], 0o600); err != nil {
		t.Fatal(err)
	}
	if r, err = AnalyzeWire(path, overlay, 51820); err != nil || r.Packets != 12 {
		t.Errorf("truncated capture: %v, %v; want 12 IP packets", r, err)
	}
}

func TestAnalyzeWireRawIP(t *testing.T) {
	path := writePcap(t, layers.LinkTypeRaw, []frame{
		{nolink: true, src: gwA, dst: gwB, proto: layers.IPProtocolUDP, sport: 51820, dport: 51820},
		{nolink: true, src: "10.5.0.1", dst: gwB, proto: layers.IPProtocolICMPv4},
	})
	r, err := AnalyzeWire(path, overlay, 51820)
	if err != nil {
		t.Fatal(err)
	}
	if r.Packets != 2 || r.WireGuard != 1 || r.Plaintext != 1 || r.NonWireGuard != 0 {
		t.Errorf("raw IP capture: %v", r)
	}
}

func TestAnalyzeWireErrors(t *testing.T) {
	if _, err := AnalyzeWire(filepath.Join(t.TempDir(), "none.pcap"), overlay, 51820); err == nil {
		t.Error("missing file: no error")
	}
	bad := filepath.Join(t.TempDir(), "bad.pcap")
	if err := os.WriteFile(bad, []byte("not a capture at all"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := AnalyzeWire(bad, overlay, 51820); err == nil {
		t.Error("garbage file: no error")
	}
}

// TestCountDuplicates: two different IPv4 packets are not duplicates, a
// second copy of one is, ARP repeats do not count (a host repeats the same
// request on its own), and a capture that is not Ethernet is refused.
func TestCountDuplicates(t *testing.T) {
	echo := frame{src: "192.168.50.1", dst: "192.168.50.2", proto: layers.IPProtocolICMPv4}
	udp := frame{src: "192.168.50.1", dst: "192.168.50.2", proto: layers.IPProtocolUDP, sport: 1000, dport: 2000}
	arp := frame{arp: true}
	for _, tc := range []struct {
		name        string
		frames      []frame
		ipv4, dupes int
		wantSamples bool
	}{
		{"distinct", []frame{echo, udp, arp}, 2, 0, false},
		{"one twice", []frame{echo, udp, echo}, 3, 1, true},
		{"arp repeated", []frame{arp, arp, arp, udp}, 1, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := CountDuplicates(writePcap(t, layers.LinkTypeEthernet, tc.frames))
			if err != nil {
				t.Fatal(err)
			}
			if r.Frames != len(tc.frames) || r.IPv4 != tc.ipv4 || r.Duplicates != tc.dupes || (len(r.Samples) > 0) != tc.wantSamples {
				t.Errorf("got %+v, want %d frames, %d IPv4, %d duplicates", r, len(tc.frames), tc.ipv4, tc.dupes)
			}
		})
	}
	if _, err := CountDuplicates(writePcap(t, layers.LinkTypeRaw, []frame{{src: "10.0.0.1", dst: "10.0.0.2", proto: layers.IPProtocolICMPv4, nolink: true}})); err == nil {
		t.Error("a raw IP capture was accepted")
	}
}
