package lab

import (
	"net/netip"
	"testing"

	"github.com/google/gopacket/layers"
)

func TestAnalyzeFallback(t *testing.T) {
	gw, peer := gwB, gwA
	hostA, hostB := netip.MustParseAddr("10.1.0.10"), netip.MustParseAddr("10.2.0.10")
	inner := append(hostA.AsSlice(), hostB.AsSlice()...)
	tcp, udp := layers.IPProtocolTCP, layers.IPProtocolUDP
	path := writePcap(t, layers.LinkTypeEthernet, []frame{
		{src: gw, dst: peer, proto: tcp, sport: 40000, dport: 443, payload: []byte{0x16, 3, 1, 0, 5, 1, 2, 3, 4, 5}},    // ClientHello record
		{src: peer, dst: gw, proto: tcp, sport: 443, dport: 40000, payload: []byte{0x17, 3, 3, 0, 2, 9, 9}},             // application data
		{src: peer, dst: gw, proto: tcp, sport: 443, dport: 40000, payload: []byte{0x55, 0x66}},                         // inside a record
		{src: gw, dst: peer, proto: udp, sport: 51820, dport: 51820},                                                    // UDP got through
		{src: gw, dst: peer, proto: tcp, sport: 40000, dport: 443, payload: append([]byte{0x17, 3, 3, 0, 8}, inner...)}, // an inner header in clear
		{src: gw, dst: peer, proto: tcp, sport: 40000, dport: 80},                                                       // another port
		{src: gwC, dst: peer, proto: udp, sport: 1, dport: 2},                                                           // not the gateway
		{src: gw, dst: "198.51.100.2", proto: tcp, sport: 40001, dport: 8443},                                           // the manager
	})
	r, err := AnalyzeFallback(path, netip.MustParseAddr(gw), 443, overlay, []netip.Addr{hostA, hostB}, netip.MustParseAddr("198.51.100.2"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s; samples %v", r, r.Samples)
	if r.Packets != 6 || r.TCP != 4 || r.TLSRecords != 3 || r.UDP != 1 || r.Other != 1 || r.Plaintext != 1 || r.Control != 1 {
		t.Errorf("report %+v, want 6 packets: 4 TCP on 443 (3 starting a TLS record), 1 UDP, 1 other, 1 plaintext; 1 control", r)
	}
}
