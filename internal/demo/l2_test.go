package demo_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/fednet/fednet/internal/demo"
	"github.com/fednet/fednet/internal/lab"
	"github.com/fednet/fednet/internal/spec"
)

// bridgedLab is staticLab with hosts on the given bridged networks of f
// (over the sites of the spec): it waits until the hosts of each network
// reach each other across sites.
func bridgedLab(t *testing.T, ctx context.Context, name string, f *spec.Federation, networks ...string) (*lab.Lab, *demo.Deployment) {
	t.Helper()
	var bridged []lab.BridgedNetwork
	for _, want := range networks {
		for _, n := range f.Networks {
			if n.Name == want && n.Mode == spec.Bridged {
				bridged = append(bridged, lab.BridgedNetwork{Name: n.Name, Subnet: n.Subnet, Sites: n.Sites})
			}
		}
	}
	if len(bridged) != len(networks) {
		t.Fatalf("the spec lacks some of the bridged networks %v", networks)
	}
	return staticLabOf(t, ctx, lab.Config{Federation: f, Name: name, Bridged: bridged}, func(l *lab.Lab) []demo.Pair {
		var pairs []demo.Pair
		for _, n := range networks {
			pairs = append(pairs, demo.BridgedPairs(l, n)...)
		}
		return pairs
	})
}

func readExample(t *testing.T, name string) *spec.Federation {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "examples", name))
	if err != nil {
		t.Fatal(err)
	}
	f, err := spec.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func lastAddr4(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	for i := p.Bits(); i < 32; i++ {
		b[i/8] |= 1 << (7 - i%8)
	}
	return netip.AddrFrom4(b)
}

// TestBridgedBroadcastARPNDMulticast checks that what only a shared
// Ethernet segment carries crosses the three sites of examples/bridged.yaml:
// ARP (a host resolves a remote host's MAC), IPv4 broadcast (a broadcast
// ping is answered by every other host of the network), IPv6 neighbor
// discovery (a link-local ping resolves the remote MAC) and IPv6 multicast
// (a ping to ff02::1 is answered by every other host).
func TestBridgedBroadcastARPNDMulticast(t *testing.T) {
	needRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f := readExample(t, "bridged.yaml")
	l, _ := bridgedLab(t, ctx, "e2el2", f, "lan")
	sites := l.Sites()
	if len(sites) < 3 {
		t.Fatalf("want 3 sites, have %v", sites)
	}
	from := l.BridgedHosts("lan", sites[0])[0]
	var others []*lab.Node
	for _, s := range sites {
		for _, h := range l.BridgedHosts("lan", s) {
			if h != from {
				others = append(others, h)
			}
		}
	}
	macs := map[*lab.Node]string{}
	lls := map[*lab.Node]netip.Addr{}
	for _, h := range append(others, from) {
		mac, err := demo.MAC(ctx, h)
		if err != nil {
			t.Fatal(err)
		}
		ll, err := demo.LinkLocal(ctx, h)
		if err != nil {
			t.Fatal(err)
		}
		macs[h], lls[h] = mac, ll
	}

	t.Run("ARP", func(t *testing.T) {
		if err := demo.FlushNeighbors(ctx, from); err != nil {
			t.Fatal(err)
		}
		for _, h := range others {
			if r, err := lab.Ping(ctx, from, h.LAN.Addr(), 1, 200*time.Millisecond); err != nil || r.Received != 1 {
				t.Errorf("%s -> %s %s after flushing the ARP cache: %v %v", from, h, h.LAN.Addr(), r, err)
				continue
			}
			if got, err := demo.Neighbor(ctx, from, h.LAN.Addr()); err != nil || got != macs[h] {
				t.Errorf("%s resolved %s (%s) to %q (%v), want %s's MAC %s", from, h.LAN.Addr(), h, got, err, h, macs[h])
			}
		}
	})
	t.Run("IPv4 broadcast", func(t *testing.T) {
		bcast := lastAddr4(from.LAN)
		got, err := demo.Responders(ctx, from, bcast)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range others {
			if got.By[h.LAN.Addr()] == 0 {
				t.Errorf("%s (site %s) did not answer the broadcast ping to %s from %s; answers: %v", h, h.Site, bcast, from, got)
			}
		}
	})
	t.Run("IPv6 neighbor discovery", func(t *testing.T) {
		if err := demo.FlushNeighbors(ctx, from); err != nil {
			t.Fatal(err)
		}
		for _, h := range others {
			if r, err := lab.Ping(ctx, from, lls[h], 1, 200*time.Millisecond); err != nil || r.Received != 1 {
				t.Errorf("%s -> %s %s (link-local): %v %v", from, h, lls[h], r, err)
				continue
			}
			if got, err := demo.Neighbor(ctx, from, lls[h]); err != nil || got != macs[h] {
				t.Errorf("%s resolved %s (%s) to %q (%v), want %s", from, lls[h], h, got, err, macs[h])
			}
		}
	})
	t.Run("IPv6 multicast", func(t *testing.T) {
		group := netip.MustParseAddr("ff02::1").WithZone(lab.HostInterface)
		got, err := demo.Responders(ctx, from, group)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range others {
			if got.By[lls[h].WithZone("")] == 0 {
				t.Errorf("%s (site %s, %s) did not answer the ping to %s; answers: %v", h, h.Site, lls[h], group, got)
			}
		}
	})
}

// sameSubnetSpec has two bridged networks, red and blue, with the same
// subnet over the same three sites, beside a routed network.
const sameSubnetSpec = `apiVersion: fednet/v1
kind: Federation
name: twins
sites:
  - name: aws
    provider: aws
    gateways:
      - name: aws-gw
        endpoint: 198.51.100.10:51820
        bridgePorts: {red: b1, blue: b2}
  - name: azure
    provider: azure
    gateways:
      - name: azure-gw
        endpoint: 203.0.113.11:51820
        bridgePorts: {red: b1, blue: b2}
  - name: onprem
    provider: onprem
    gateways:
      - name: onprem-gw
        endpoint: 198.51.100.12:51820
        bridgePorts: {red: b1, blue: b2}
networks:
  - name: apps
    id: 100
    mode: routed
    sites: [aws, azure, onprem]
  - name: red
    id: 301
    mode: bridged
    subnet: 192.168.50.0/24
    sites: [aws, azure, onprem]
  - name: blue
    id: 302
    mode: bridged
    subnet: 192.168.50.0/24
    sites: [aws, azure, onprem]
lab:
  hostsPerSite: 2
`

// TestBridgedSameSubnetIsolated runs two bridged networks with the same
// subnet over the same sites and tunnels: the hosts of each have the same
// addresses as the other's, yet every host reaches, resolves and hears only
// its own network's hosts. Captures on every site segment of both networks
// count the frames of the other network's hosts (zero), and a capture in
// the tunnel shows the two networks' VXLAN packets under their own VNIs.
func TestBridgedSameSubnetIsolated(t *testing.T) {
	needRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f, err := spec.Parse([]byte(sameSubnetSpec))
	if err != nil {
		t.Fatal(err)
	}
	l, _ := bridgedLab(t, ctx, "e2etwins", f, "red", "blue")
	vni := map[string]uint32{}
	for _, n := range f.Networks {
		vni[n.Name] = uint32(n.ID)
	}
	networks := []string{"red", "blue"}
	macs := map[string]map[string]bool{} // network -> its hosts' MACs
	for _, n := range networks {
		macs[n] = map[string]bool{}
		for _, s := range l.Sites() {
			for _, h := range l.BridgedHosts(n, s) {
				mac, err := demo.MAC(ctx, h)
				if err != nil {
					t.Fatal(err)
				}
				macs[n][mac] = true
			}
		}
	}

	// Captures on both networks' switch at every site and in the tunnel
	// of the first site's gateway (fed0 carries VXLAN before encryption).
	type capture struct {
		network string
		c       *lab.Capture
	}
	var caps []capture
	for _, n := range networks {
		for _, s := range l.Sites() {
			c, err := lab.StartCaptureOn(ctx, l, l.Node(n+"-"+s+"-br"), lab.BridgeInterface)
			if err != nil {
				t.Fatal(err)
			}
			caps = append(caps, capture{n, c})
		}
	}
	gw := l.SiteGateways(l.Sites()[0])[0]
	tunnel, err := lab.StartCaptureOn(ctx, l, gw, spec.DefaultInterface)
	if err != nil {
		t.Fatal(err)
	}

	for _, n := range networks {
		from := l.BridgedHosts(n, l.Sites()[0])[0]
		// Unicast to every peer address: the same addresses exist in
		// the other network. Each must resolve to its own network's MAC.
		if err := demo.FlushNeighbors(ctx, from); err != nil {
			t.Fatal(err)
		}
		for _, p := range demo.BridgedPairs(l, n) {
			if p.From != from {
				continue
			}
			if r, err := lab.Ping(ctx, from, p.To.LAN.Addr(), 2, 100*time.Millisecond); err != nil || r.Received != r.Sent {
				t.Errorf("%s: %s -> %s %s: %v %v", n, from, p.To, p.To.LAN.Addr(), r, err)
			}
			mac, err := demo.Neighbor(ctx, from, p.To.LAN.Addr())
			if err != nil || !macs[n][mac] {
				t.Errorf("%s: %s resolved %s to %q (%v), which is not a MAC of network %s", n, from, p.To.LAN.Addr(), mac, err, n)
			}
		}
		// A broadcast and an all-nodes multicast: each address of the
		// network answers, once per ping. Had the other network's twin
		// heard them, ping would see a second answer (DUP!) from that
		// address.
		lls := map[netip.Addr]bool{}
		for _, s := range l.Sites() {
			for _, h := range l.BridgedHosts(n, s) {
				ll, err := demo.LinkLocal(ctx, h)
				if err != nil {
					t.Fatal(err)
				}
				lls[ll.WithZone("")] = true
			}
		}
		for _, group := range []netip.Addr{lastAddr4(from.LAN), netip.MustParseAddr("ff02::1").WithZone(lab.HostInterface)} {
			got, err := demo.Responders(ctx, from, group)
			if err != nil {
				t.Fatal(err)
			}
			want := 0
			for _, s := range l.Sites() {
				for _, h := range l.BridgedHosts(n, s) {
					want++
					if group.Is4() && got.By[h.LAN.Addr()] == 0 {
						t.Errorf("%s: broadcast from %s: %s did not answer (answers %v)", n, from, h.LAN.Addr(), got.By)
					}
				}
			}
			for a := range got.By {
				if group.Is6() && !lls[a] {
					t.Errorf("%s: %s answered the ping to %s from %s, and is none of the network's hosts", n, a, group, from)
				}
			}
			if len(got.By) != want || got.Repeated != 0 {
				t.Errorf("%s: ping to %s from %s: %d addresses answered (want %d), %d answers repeated (want 0): %v", n, group, from, len(got.By), want, got.Repeated, got.By)
			}
		}
	}

	for _, c := range caps {
		path, err := c.c.Stop()
		if err != nil {
			t.Fatal(err)
		}
		other := "blue"
		if c.network == "blue" {
			other = "red"
		}
		own, foreign, err := countHostFrames(path, macs[c.network], macs[other])
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d frames of %s hosts, %d of %s hosts", filepath.Base(path), own, c.network, foreign, other)
		if own == 0 || foreign != 0 {
			t.Errorf("%s (network %s): %d frames of its own hosts, %d of network %s's hosts; want some and none", filepath.Base(path), c.network, own, foreign, other)
		}
	}
	path, err := tunnel.Stop()
	if err != nil {
		t.Fatal(err)
	}
	byVNI, wrong, err := vxlanFrames(path, macs, vni)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("VXLAN packets in %s's tunnel by VNI: %v; frames under the other network's VNI: %d", gw, byVNI, wrong)
	if byVNI[vni["red"]] == 0 || byVNI[vni["blue"]] == 0 || wrong != 0 {
		t.Errorf("VXLAN in the tunnel: %v packets by VNI, %d carrying a host of the other network; want both VNIs %d and %d and none crossed",
			byVNI, wrong, vni["red"], vni["blue"])
	}
}

// packets calls fn for every packet of a pcap file.
func packets(path string, fn func(gopacket.Packet)) error {
	fh, err := os.Open(path)
	if err != nil {
		return err
	}
	defer fh.Close()
	r, err := pcapgo.NewReader(fh)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	src := gopacket.NewPacketSource(r, r.LinkType())
	for p := range src.Packets() {
		fn(p)
	}
	return nil
}

// countHostFrames counts the Ethernet frames of a capture whose source or
// destination is one of own, and one of foreign.
func countHostFrames(path string, own, foreign map[string]bool) (nOwn, nForeign int, err error) {
	err = packets(path, func(p gopacket.Packet) {
		eth, _ := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
		if eth == nil {
			return
		}
		src, dst := eth.SrcMAC.String(), eth.DstMAC.String()
		if own[src] || own[dst] {
			nOwn++
		}
		if foreign[src] || foreign[dst] {
			nForeign++
		}
	})
	return nOwn, nForeign, err
}

// vxlanFrames counts the VXLAN packets of a tunnel capture by VNI, and the
// ones whose inner frame comes from or goes to a host of a network other
// than the one of its VNI.
func vxlanFrames(path string, macs map[string]map[string]bool, vni map[string]uint32) (map[uint32]int, int, error) {
	byVNI := map[uint32]int{}
	wrong := 0
	err := packets(path, func(p gopacket.Packet) {
		vx, _ := p.Layer(layers.LayerTypeVXLAN).(*layers.VXLAN)
		if vx == nil {
			return
		}
		byVNI[vx.VNI]++
		inner := gopacket.NewPacket(vx.Payload, layers.LayerTypeEthernet, gopacket.Default)
		eth, _ := inner.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
		if eth == nil {
			return
		}
		for n, set := range macs {
			if vni[n] != vx.VNI && (set[eth.SrcMAC.String()] || set[eth.DstMAC.String()]) {
				wrong++
			}
		}
	})
	return byVNI, wrong, err
}

// TestMTUBoundary checks the MTU end to end on examples/bridged.yaml: the
// bridge and VXLAN device carry the planned network MTU and so do the
// bridged hosts (the lab sets it as DHCP would); the largest unfragmented
// ping (don't fragment, MTU − 28 bytes of data) crosses sites on the routed
// and the bridged network, and one byte more is refused where the host can
// see it (an ICMP "fragmentation needed" from the gateway, or its own
// interface), never silently lost; TCP runs at full size without
// fragments because the gateways clamp the MSS; and behind a far segment
// narrower than the tunnel, the far gateway's ICMP error crosses the tunnel
// and the near gateway's firewall back to the sender.
func TestMTUBoundary(t *testing.T) {
	needRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f := readExample(t, "bridged.yaml")
	l, d := bridgedLab(t, ctx, "e2emtu", f, "lan")
	plans, err := demo.Plans(d.Federation)
	if err != nil {
		t.Fatal(err)
	}
	sites := l.Sites()
	a, b := sites[0], sites[1]
	gwA, gwB := l.SiteGateways(a)[0], l.SiteGateways(b)[0]
	pa, pb := plans[gwA.Name], plans[gwB.Name]
	if len(pa.Bridges) != 1 {
		t.Fatalf("%s: want one bridge in the plan, have %+v", gwA, pa.Bridges)
	}
	br := pa.Bridges[0]
	t.Logf("tunnel MTU %d (%s); network lan MTU %d (%s); MSS %d", pa.Tunnels[0].MTU, pa.Tunnels[0].MTUReason, br.MTU, br.MTUReason, pa.Firewall.MSS)

	t.Run("interfaces", func(t *testing.T) {
		devs := []string{spec.DefaultInterface, br.Name}
		for _, v := range br.VXLANs {
			devs = append(devs, v.Name)
		}
		for _, dev := range devs {
			want := br.MTU
			if dev == spec.DefaultInterface {
				want = pa.Tunnels[0].MTU
			}
			if got := linkMTU(t, ctx, gwA, dev); got != want {
				t.Errorf("%s %s: MTU %d, the plan says %d", gwA, dev, got, want)
			}
		}
		if got := l.BridgedMTU("lan"); got != br.MTU {
			t.Errorf("lab hosts on lan get MTU %d, the plan says %d", got, br.MTU)
		}
		for _, h := range l.BridgedHosts("lan", a) {
			if got := linkMTU(t, ctx, h, lab.HostInterface); got != br.MTU {
				t.Errorf("%s: MTU %d, want the network's %d", h, got, br.MTU)
			}
		}
	})

	routedMTU := min(pa.Tunnels[0].MTU, pb.Tunnels[0].MTU)
	cases := []struct {
		name     string
		from, to *lab.Node
		mtu      int
	}{
		{"routed", l.Hosts(a)[0], l.Hosts(b)[0], routedMTU},
		{"bridged", l.BridgedHosts("lan", a)[0], l.BridgedHosts("lan", b)[0], br.MTU},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			to := c.to.LAN.Addr()
			fit, err := demo.PingDF(ctx, c.from, to, c.mtu-28, 2)
			if err != nil {
				t.Fatal(err)
			}
			if !fit.Replied {
				t.Errorf("%s -> %s: %d-byte packets (the MTU) with DF: %s; want replies", c.from, c.to, c.mtu, fit)
			}
			over, err := demo.PingDF(ctx, c.from, to, c.mtu-27, 2)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s -> %s: %d bytes: %s; %d bytes: %s", c.from, c.to, c.mtu, fit, c.mtu+1, over)
			if over.Replied || !over.Refused {
				t.Errorf("%s -> %s: %d-byte packets (MTU + 1) with DF: %s; want an error the host sees", c.from, c.to, c.mtu+1, over)
			}
		})
	}

	t.Run("TCP MSS", func(t *testing.T) {
		src, dst := l.Hosts(a)[0], l.Hosts(b)[0]
		var caps []*lab.Capture
		for _, h := range []*lab.Node{src, dst} {
			c, err := lab.StartCaptureOn(ctx, l, h, lab.HostInterface)
			if err != nil {
				t.Fatal(err)
			}
			caps = append(caps, c)
		}
		before := snmp(t, ctx, gwA)
		tp, err := lab.Iperf3(ctx, src, dst, dst.LAN.Addr(), time.Second, 1)
		if err != nil {
			t.Fatal(err)
		}
		after := snmp(t, ctx, gwA)
		for i, h := range []*lab.Node{src, dst} {
			path, err := caps[i].Stop()
			if err != nil {
				t.Fatal(err)
			}
			// The SYN (at dst) and the SYN-ACK (at src) offer the
			// peer's MSS after crossing both gateways.
			syns, mss, err := synMSS(path, h.LAN.Addr())
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d SYNs arriving at %s, largest MSS option %d", syns, h, mss)
			if syns == 0 || mss > pa.Firewall.MSS {
				t.Errorf("SYNs arriving at %s: %d, largest MSS option %d; want the gateways' clamp %d or less", h, syns, mss, pa.Firewall.MSS)
			}
		}
		// Full-size segments cross without fragmentation and without
		// PMTU discovery: the sending gateway neither fragments nor
		// sends "fragmentation needed".
		frags := after["Ip.FragCreates"] - before["Ip.FragCreates"]
		unreach := after["Icmp.OutDestUnreachs"] - before["Icmp.OutDestUnreachs"]
		t.Logf("iperf3 %s; %s: %d fragments created, %d ICMP unreachable sent", tp, gwA, frags, unreach)
		if tp.Mbps <= 0 || frags != 0 || unreach != 0 {
			t.Errorf("TCP over the tunnel: %s, %d fragments created and %d ICMP unreachable sent by %s; want a transfer with neither", tp, frags, unreach, gwA)
		}
	})

	// A segment narrower than the tunnel at the far site: the far gateway
	// answers with "fragmentation needed", which must come back through
	// the tunnel and the near gateway's firewall (a related packet from
	// a transit address, which no flow rule admits), and TCP must adapt.
	// Runs last: it narrows gwB's LAN port for good.
	t.Run("remote ICMP", func(t *testing.T) {
		const narrow = 1300
		if _, err := gwB.Run(ctx, "ip", "link", "set", "dev", lab.LANInterface, "mtu", strconv.Itoa(narrow)); err != nil {
			t.Fatal(err)
		}
		from, to := l.Hosts(a)[1], l.Hosts(b)[1] // no path MTU cached yet
		over, err := demo.PingDF(ctx, from, to.LAN.Addr(), routedMTU-28, 2)
		if err != nil {
			t.Fatal(err)
		}
		fit, err := demo.PingDF(ctx, from, to.LAN.Addr(), narrow-28, 2)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s -> %s behind a %d-byte segment: %d bytes: %s; %d bytes: %s", from, to, narrow, routedMTU, over, narrow, fit)
		if over.Replied || !strings.Contains(over.Detail, fmt.Sprintf("mtu = %d", narrow)) || !fit.Replied {
			t.Errorf("%s -> %s: %d bytes %s, %d bytes %s; want the far gateway's \"Frag needed (mtu = %d)\" and replies at %d",
				from, to, routedMTU, over, narrow, fit, narrow, narrow)
		}
		tp, err := lab.Iperf3(ctx, from, to, to.LAN.Addr(), time.Second, 1)
		if err != nil || tp.Mbps <= 0 {
			t.Errorf("TCP to a host behind the narrower segment: %v %v", tp, err)
		}
	})
}

// snmp returns the counters of /proc/net/snmp in a node's namespace as
// "Ip.FragCreates" etc.
func snmp(t *testing.T, ctx context.Context, n *lab.Node) map[string]int {
	t.Helper()
	out, err := n.Run(ctx, "cat", "/proc/net/snmp")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	got := map[string]int{}
	for i := 0; i+1 < len(lines); i += 2 {
		names, values := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		if len(names) != len(values) || len(names) == 0 {
			continue
		}
		group := strings.TrimSuffix(names[0], ":")
		for k := 1; k < len(names); k++ {
			v, _ := strconv.Atoi(values[k])
			got[group+"."+names[k]] = v
		}
	}
	return got
}

func linkMTU(t *testing.T, ctx context.Context, n *lab.Node, dev string) int {
	t.Helper()
	out, err := n.Run(ctx, "cat", "/sys/class/net/"+dev+"/mtu")
	if err != nil {
		t.Fatal(err)
	}
	var mtu int
	if _, err := fmt.Sscan(out, &mtu); err != nil {
		t.Fatalf("%s %s mtu %q: %v", n, dev, out, err)
	}
	return mtu
}

// synMSS returns how many TCP SYNs to addr a capture holds and their
// largest MSS option.
func synMSS(path string, addr netip.Addr) (syns, mss int, err error) {
	err = packets(path, func(p gopacket.Packet) {
		ip, _ := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		tcp, _ := p.Layer(layers.LayerTypeTCP).(*layers.TCP)
		if ip == nil || tcp == nil || !tcp.SYN {
			return
		}
		if dst, _ := netip.AddrFromSlice(ip.DstIP); dst.Unmap() != addr {
			return
		}
		syns++
		for _, o := range tcp.Options {
			if o.OptionType == layers.TCPOptionKindMSS && len(o.OptionData) == 2 {
				mss = max(mss, int(o.OptionData[0])<<8|int(o.OptionData[1]))
			}
		}
	})
	return syns, mss, err
}
