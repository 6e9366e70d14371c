package offload

import (
	"bytes"
	"encoding/binary"
)

// Offloads says which super-packets the device takes, as negotiated with
// TUNSETOFFLOAD.
type Offloads struct {
	// TCP: TCP super-packets over IPv4 and IPv6 (TUN_F_TSO4|TSO6).
	TCP bool
	// UDP: UDP super-packets (TUN_F_USO4|USO6).
	UDP bool
	// Tunnel: TCP super-packets inside a UDP tunnel (TUN_F_UDP_TUNNEL_GSO),
	// which also needs the TunnelHeaderLen header.
	Tunnel bool
}

// Config configures a Coalescer.
type Config struct {
	Offloads
	// HeaderLen is the virtio-net header length the device is set to
	// (HeaderLen or TunnelHeaderLen); Tunnel needs TunnelHeaderLen.
	HeaderLen int
	// TunnelPort reports whether UDP packets to port are VXLAN that this
	// machine decapsulates (a VXLAN device listens on it). Only those are
	// merged as tunnel packets; nil: none are. It is called for every UDP
	// packet and must be cheap and safe for concurrent use.
	TunnelPort func(port uint16) bool
	// MaxSize bounds a merged packet's length (at most and by default
	// 65535, the IP limit).
	MaxSize int
}

// Write is one packet for the device: Head, then Parts, in order (one
// writev). Head starts with the virtio-net header. A merged packet's
// transport checksum is left for the kernel to complete (FlagNeedsCsum);
// a merged VXLAN packet carries no outer UDP checksum, which IPv4 allows
// and which the kernel does not check on a packet whose inner checksum is
// marked to be completed.
type Write struct {
	Head  []byte
	Parts [][]byte
	// Packets lists the indexes of the input packets it carries: one for
	// a packet passed through, several for a merged one.
	Packets []int
}

// Merged reports whether w carries more than one input packet.
func (w *Write) Merged() bool { return len(w.Packets) > 1 }

// kind is what a packet can be merged as.
type kind uint8

const (
	kindNone   kind = iota // passed through alone
	kindTCP                // plain TCP segment
	kindUDP                // plain UDP datagram
	kindTunnel             // TCP segment inside VXLAN over IPv4
)

// flowKey tells flows apart. Packets with equal keys are of one flow; for
// tunnel packets it holds the outer addresses and ports and the VNI too.
type flowKey struct {
	outer  [8]byte
	oports [4]byte
	vni    [3]byte
	tunnel bool
	proto  uint8
	src    [16]byte
	dst    [16]byte
	ports  [4]byte
}

// item is one packet being built: the first input packet and those
// appended to it.
type item struct {
	kind kind
	key  flowKey
	l    layout
	// pkts are the input packets, first first; gso is the first's
	// payload length, last the last one's.
	pkts     []int
	gso      int
	last     int
	size     int // bytes of the merged packet so far, without options
	nextSeq  uint32
	nextID   uint16
	addFlags uint8 // PSH or FIN of the last packet
	open     bool
	// verified: the first packet's checksums were checked (done when the
	// second packet comes, not before).
	verified bool
}

// A Coalescer merges batches of packets (see the package doc). It keeps
// its buffers from batch to batch; it is not safe for concurrent use.
type Coalescer struct {
	cfg   Config
	items []item
	open  []int // indexes of open items
	pkts  [][]byte
	// heads are the buffers merged headers are built in; chunk is the one
	// being filled.
	heads  [][]byte
	chunk  int
	writes []Write
	parts  [][]byte
	idx    []int
}

// NewCoalescer returns a Coalescer for a device with cfg's offloads.
func NewCoalescer(cfg Config) *Coalescer {
	if cfg.HeaderLen < HeaderLen {
		cfg.HeaderLen = HeaderLen
	}
	if cfg.HeaderLen < TunnelHeaderLen || cfg.TunnelPort == nil {
		cfg.Tunnel = false
	}
	if cfg.MaxSize <= 0 || cfg.MaxSize > maxIPv4Total {
		cfg.MaxSize = maxIPv4Total
	}
	return &Coalescer{cfg: cfg}
}

// Coalesce merges pkts (each a whole IP packet, without virtio-net
// header) into writes, in the order of each write's first packet;
// packets of one flow keep their order. The writes, and the buffers they
// point to, are valid until the next call; Parts point into pkts, which
// must not change meanwhile. pkts are not modified.
func (c *Coalescer) Coalesce(pkts [][]byte) []Write {
	c.reset(pkts)
	for i, p := range pkts {
		var l layout
		k, key, ok := c.classify(p, &l)
		if !ok {
			c.start(i, kindNone, flowKey{}, l)
			continue
		}
		if it := c.openItem(key); it != nil {
			if k != kindNone && c.appendTo(it, i, p, k, &l) {
				continue
			}
			c.close(it)
		}
		c.start(i, k, key, l)
	}
	return c.build()
}

// Singles returns one write per packet of w, for a merged write the device
// refused. The writes are valid until the next Coalesce.
func (c *Coalescer) Singles(w Write) []Write {
	out := make([]Write, 0, len(w.Packets))
	for j := range w.Packets {
		i := w.Packets[j : j+1]
		out = append(out, Write{Head: c.zeroHead(), Parts: [][]byte{c.pkts[i[0]]}, Packets: i})
	}
	return out
}

func (c *Coalescer) reset(pkts [][]byte) {
	c.pkts = pkts
	c.items = c.items[:0]
	c.open = c.open[:0]
	c.writes = c.writes[:0]
	c.chunk = 0
	for i := range c.heads {
		c.heads[i] = c.heads[i][:0]
	}
	if cap(c.parts) < len(pkts) {
		c.parts = make([][]byte, 0, len(pkts))
		c.idx = make([]int, 0, len(pkts))
	}
	c.parts = c.parts[:0]
	c.idx = c.idx[:0]
}

// classify parses p. ok is false for a packet whose flow cannot be told
// (not TCP or UDP, fragments, lengths that disagree); k is the kind it
// can be merged as, kindNone if none.
func (c *Coalescer) classify(p []byte, l *layout) (k kind, key flowKey, ok bool) {
	if !parseIP(p, 0, len(p), l) {
		return kindNone, key, false
	}
	if l.proto == protoUDP && c.cfg.Tunnel && l.ip4 && l.l4 == ipv4HeaderLen &&
		c.cfg.TunnelPort(binary.BigEndian.Uint16(p[l.l4+2:])) {
		if k, key, ok := c.classifyTunnel(p, l); ok {
			return k, key, true
		}
		// Not TCP inside: a plain UDP packet.
	}
	key.proto = l.proto
	src, dst := l.srcDst(p)
	copy(key.src[:], src)
	copy(key.dst[:], dst)
	copy(key.ports[:], p[l.l4:l.l4+4])
	payload := len(p) - l.hdrEnd
	switch l.proto {
	case protoTCP:
		if c.cfg.TCP && payload > 0 && tcpMergeable(p[l.l4+tcpFlagsAt]) && plainIP(p, l) {
			k = kindTCP
		}
	case protoUDP:
		if c.cfg.UDP && payload > 0 && plainIP(p, l) {
			k = kindUDP
		}
	}
	return k, key, true
}

// classifyTunnel parses the VXLAN packet p (outer IPv4 without options,
// UDP at l.l4). ok is false unless it carries TCP.
func (c *Coalescer) classifyTunnel(p []byte, l *layout) (k kind, key flowKey, ok bool) {
	vx := l.l4 + udpHeaderLen
	eth := vx + vxlanHeaderLen
	if len(p) < eth+ethHeaderLen {
		return kindNone, key, false
	}
	// Standard VXLAN: the I flag only, reserved bytes zero.
	if p[vx] != 0x08 || p[vx+1]|p[vx+2]|p[vx+3]|p[vx+7] != 0 {
		return kindNone, key, false
	}
	at := eth + 12
	etype := binary.BigEndian.Uint16(p[at:])
	for n := 0; (etype == etherTypeVLAN || etype == etherTypeQinQ) && n < maxVLANTags; n++ {
		at += vlanTagLen
		if at+2 > len(p) {
			return kindNone, key, false
		}
		etype = binary.BigEndian.Uint16(p[at:])
	}
	if etype != etherTypeIPv4 && etype != etherTypeIPv6 {
		return kindNone, key, false
	}
	var in layout
	if !parseIP(p, at+2, len(p), &in) || in.proto != protoTCP || in.ip4 != (etype == etherTypeIPv4) {
		return kindNone, key, false
	}
	in.tunnel, in.outer4, in.outerL4 = true, true, l.l4
	*l = in
	key.tunnel = true
	key.proto = protoTCP
	copy(key.outer[:], p[12:20])
	copy(key.oports[:], p[l.outerL4:l.outerL4+4])
	copy(key.vni[:], p[vx+4:vx+7])
	src, dst := l.srcDst(p)
	copy(key.src[:], src)
	copy(key.dst[:], dst)
	copy(key.ports[:], p[l.l4:l.l4+4])
	if len(p) > l.hdrEnd && tcpMergeable(p[l.l4+tcpFlagsAt]) && plainIP(p, l) {
		k = kindTunnel
	}
	return k, key, true
}

// parseIP parses the IP packet p[off:end] and its TCP or UDP header into
// l (l3, ip4, l4, proto, hdrEnd). It fails for anything else, and for
// lengths that disagree with end.
func parseIP(p []byte, off, end int, l *layout) bool {
	if off+ipv4HeaderLen > end {
		return false
	}
	l.l3 = off
	switch p[off] >> 4 {
	case 4:
		ihl := int(p[off]&0x0f) * 4
		if ihl < ipv4HeaderLen || off+ihl > end || int(binary.BigEndian.Uint16(p[off+2:])) != end-off || frag(p, off) {
			return false
		}
		l.ip4, l.l4, l.proto = true, off+ihl, p[off+9]
	case 6:
		if off+ipv6HeaderLen > end || int(binary.BigEndian.Uint16(p[off+4:]))+ipv6HeaderLen != end-off {
			return false
		}
		l.ip4, l.l4, l.proto = false, off+ipv6HeaderLen, p[off+6]
	default:
		return false
	}
	if l.proto != protoTCP && l.proto != protoUDP {
		return false
	}
	n, err := l4HeaderLen(p[:end], l.l4, l.proto)
	if err != nil {
		return false
	}
	if l.proto == protoUDP && int(binary.BigEndian.Uint16(p[l.l4+4:])) != end-l.l4 {
		return false
	}
	l.hdrEnd = l.l4 + n
	return true
}

// frag reports whether the IPv4 header at off is a fragment's.
func frag(p []byte, off int) bool {
	return binary.BigEndian.Uint16(p[off+6:])&0x3fff != 0
}

// plainIP reports whether the (inner) IP header of p is one that merges:
// IPv4 without options, IPv6 without extension headers.
func plainIP(p []byte, l *layout) bool {
	if l.ip4 {
		return l.l4 == l.l3+ipv4HeaderLen
	}
	return l.l4 == l.l3+ipv6HeaderLen
}

// tcpMergeable reports whether a segment with these flags may be merged:
// ACK, maybe ECE, maybe PSH or FIN (which end a merged packet); never SYN,
// RST, URG or CWR.
func tcpMergeable(flags uint8) bool {
	return flags&tcpACK != 0 && flags&(tcpSYN|tcpRST|tcpURG|tcpCWR) == 0
}

// openItem returns the open item of key's flow, nil if none.
func (c *Coalescer) openItem(key flowKey) *item {
	for j := len(c.open) - 1; j >= 0; j-- {
		if it := &c.items[c.open[j]]; it.key == key {
			return it
		}
	}
	return nil
}

// close closes it for appending.
func (c *Coalescer) close(it *item) {
	it.open = false
	for j, n := range c.open {
		if &c.items[n] == it {
			c.open = append(c.open[:j], c.open[j+1:]...)
			return
		}
	}
}

// start begins a new item with packet i.
func (c *Coalescer) start(i int, k kind, key flowKey, l layout) {
	p := c.pkts[i]
	it := item{kind: k, key: key, l: l, pkts: c.itemPkts(), size: len(p)}
	it.pkts = append(it.pkts, i)
	if k != kindNone {
		it.gso = len(p) - l.hdrEnd
		it.last = it.gso
		if l.ip4 {
			it.nextID = binary.BigEndian.Uint16(p[l.l3+4:]) + 1
		}
		if k != kindUDP {
			it.nextSeq = binary.BigEndian.Uint32(p[l.l4+4:]) + uint32(it.gso)
			it.open = p[l.l4+tcpFlagsAt]&(tcpPSH|tcpFIN) == 0
		} else {
			it.open = true
		}
	}
	c.items = append(c.items, it)
	if it.open {
		c.open = append(c.open, len(c.items)-1)
	}
}

// itemPkts returns an empty slice for an item's packet indexes, reusing
// the backing array of an item from an earlier batch.
func (c *Coalescer) itemPkts() []int {
	if n := len(c.items); n < cap(c.items) {
		return c.items[:n+1][n].pkts[:0]
	}
	return nil
}

// appendTo appends packet i (kind k, layout l) to it if the kernel's GRO
// would, and reports whether it did.
func (c *Coalescer) appendTo(it *item, i int, p []byte, k kind, l *layout) bool {
	if k != it.kind || *l != it.l {
		return false
	}
	first := c.pkts[it.pkts[0]]
	payload := len(p) - l.hdrEnd
	if payload > it.gso || it.last != it.gso {
		return false
	}
	extra := 0
	if k == kindTunnel {
		extra = tunnelOptionsLen
	}
	if it.size+payload+extra > c.cfg.MaxSize {
		return false
	}
	if !sameIP(first, p, l.l3, l.ip4, it.nextID) {
		return false
	}
	if k != kindUDP && (binary.BigEndian.Uint32(p[l.l4+4:]) != it.nextSeq || !sameTCP(first, p, l)) {
		return false
	}
	if k == kindTunnel && !sameTunnel(first, p, l) {
		return false
	}
	if !it.verified {
		if !checksumsValid(first, &it.l) {
			return false
		}
		it.verified = true
	}
	if !checksumsValid(p, l) {
		return false
	}
	it.pkts = append(it.pkts, i)
	it.size += payload
	it.last = payload
	it.nextID++
	if k == kindUDP {
		if payload < it.gso {
			c.close(it)
		}
		return true
	}
	it.nextSeq += uint32(payload)
	if f := p[l.l4+tcpFlagsAt] & (tcpPSH | tcpFIN); f != 0 {
		it.addFlags = f
		c.close(it)
	}
	return true
}

// sameIP reports whether the IP headers at off of a and b agree in all
// but length, ID and checksum; for IPv4 without DF, b's ID must be id.
func sameIP(a, b []byte, off int, v4 bool, id uint16) bool {
	if v4 {
		// version/IHL, TOS (with ECN), flags, TTL, protocol, addresses.
		if a[off] != b[off] || a[off+1] != b[off+1] || a[off+6] != b[off+6] || a[off+8] != b[off+8] ||
			a[off+9] != b[off+9] || !bytes.Equal(a[off+12:off+20], b[off+12:off+20]) {
			return false
		}
		const df = 0x40
		return a[off+6]&df != 0 || binary.BigEndian.Uint16(b[off+4:]) == id
	}
	// version, traffic class, flow label; next header, hop limit; addresses.
	return bytes.Equal(a[off:off+4], b[off:off+4]) && bytes.Equal(a[off+6:off+40], b[off+6:off+40])
}

// sameTCP reports whether the TCP headers agree in ports, ACK number,
// header length, flags but PSH and FIN, window and options.
func sameTCP(a, b []byte, l *layout) bool {
	t := l.l4
	if !bytes.Equal(a[t:t+4], b[t:t+4]) || !bytes.Equal(a[t+8:t+13], b[t+8:t+13]) ||
		a[t+13]&^(tcpPSH|tcpFIN) != b[t+13]&^(tcpPSH|tcpFIN) || !bytes.Equal(a[t+14:t+16], b[t+14:t+16]) {
		return false
	}
	return bytes.Equal(a[t+tcpHeaderLen:l.hdrEnd], b[t+tcpHeaderLen:l.hdrEnd])
}

// sameTunnel reports whether two VXLAN packets agree in their outer
// headers (but length, ID and checksums), VXLAN header and inner Ethernet
// header.
func sameTunnel(a, b []byte, l *layout) bool {
	// Outer IPv4: version/IHL, TOS, flags, TTL, protocol, addresses.
	if a[0] != b[0] || a[1] != b[1] || a[6] != b[6] || a[8] != b[8] || a[9] != b[9] || !bytes.Equal(a[12:20], b[12:20]) {
		return false
	}
	// UDP ports; VXLAN header and inner Ethernet header with VLAN tags.
	return bytes.Equal(a[l.outerL4:l.outerL4+4], b[l.outerL4:l.outerL4+4]) &&
		bytes.Equal(a[l.outerL4+udpHeaderLen:l.l3], b[l.outerL4+udpHeaderLen:l.l3])
}

// checksumsValid verifies the IPv4 header checksums of p (the outer one of
// a tunnel packet and the inner one), its transport checksum and a tunnel
// packet's outer UDP checksum, if it has one: a merged packet goes to the
// kernel with fresh IPv4 header checksums and its transport checksum
// marked as to be computed, so a packet the kernel would drop for a bad
// checksum must not be merged (merging would mend it).
func checksumsValid(p []byte, l *layout) bool {
	if l.tunnel && Checksum(p[:l.outerL4], 0) != 0 {
		return false
	}
	if l.ip4 && Checksum(p[l.l3:l.l4], 0) != 0 {
		return false
	}
	if l.tunnel {
		if uh := p[l.outerL4:]; uh[udpChecksumAt]|uh[udpChecksumAt+1] != 0 {
			src, dst := l.outerSrcDst(p)
			if fold(sum(uh, pseudoSum(src, dst, protoUDP, len(uh)))) != 0xffff {
				return false
			}
		}
	}
	th := p[l.l4:]
	if l.proto == protoUDP && l.ip4 && th[udpChecksumAt]|th[udpChecksumAt+1] == 0 {
		return true // IPv4 UDP without checksum
	}
	src, dst := l.srcDst(p)
	return fold(sum(th, pseudoSum(src, dst, l.proto, len(th)))) == 0xffff
}

// tunnelOptionsLen is the IPv4 options a merged VXLAN packet's outer
// header gets (see the package doc): 16 bytes of NOPs, so that the outer
// UDP header is at 36, past the 14+20 bytes the kernel wants before it.
const tunnelOptionsLen = 16

const ipOptNOP = 1

// build turns the items into writes.
func (c *Coalescer) build() []Write {
	for n := range c.items {
		it := &c.items[n]
		first := c.pkts[it.pkts[0]]
		w := Write{Packets: it.pkts}
		start := len(c.parts)
		if len(it.pkts) == 1 {
			w.Head = c.zeroHead()
			c.parts = append(c.parts, first)
		} else {
			w.Head = c.mergedHead(it, first)
			for _, i := range it.pkts {
				c.parts = append(c.parts, c.pkts[i][it.l.hdrEnd:])
			}
		}
		w.Parts = c.parts[start:len(c.parts):len(c.parts)]
		c.writes = append(c.writes, w)
	}
	return c.writes
}

// zeroHead returns a virtio-net header saying "nothing to do".
func (c *Coalescer) zeroHead() []byte {
	b := c.alloc(c.cfg.HeaderLen)
	clear(b)
	return b
}

// mergedHead builds the virtio-net header and the packet headers of a
// merged item.
func (c *Coalescer) mergedHead(it *item, first []byte) []byte {
	l := it.l
	hl := c.cfg.HeaderLen
	shift := 0
	if it.kind == kindTunnel {
		shift = tunnelOptionsLen
	}
	b := c.alloc(hl + l.hdrEnd + shift)
	vh, pkt := b[:hl], b[hl:]
	total := it.size + shift // the merged packet's length
	if it.kind == kindTunnel {
		copy(pkt, first[:ipv4HeaderLen])
		for j := range tunnelOptionsLen {
			pkt[ipv4HeaderLen+j] = ipOptNOP
		}
		copy(pkt[ipv4HeaderLen+shift:], first[ipv4HeaderLen:l.hdrEnd])
		pkt[0] = 0x40 | (ipv4HeaderLen+tunnelOptionsLen)/4
		l.outerL4 += shift
		l.l3 += shift
		l.l4 += shift
		l.hdrEnd += shift
		setIPLength(pkt, 0, true, total)
		ipv4Checksum(pkt, 0)
		binary.BigEndian.PutUint16(pkt[l.outerL4+4:], uint16(total-l.outerL4))
		pkt[l.outerL4+udpChecksumAt], pkt[l.outerL4+udpChecksumAt+1] = 0, 0
	} else {
		copy(pkt, first[:l.hdrEnd])
	}
	setIPLength(pkt, l.l3, l.ip4, total)
	if l.ip4 {
		ipv4Checksum(pkt, l.l3)
	}
	h := Header{Flags: FlagNeedsCsum, HdrLen: uint16(l.hdrEnd), GSOSize: uint16(it.gso), CsumStart: uint16(l.l4)}
	src, dst := l.srcDst(pkt)
	th := pkt[l.l4:]
	l4len := total - l.l4
	if l.proto == protoTCP {
		th[tcpFlagsAt] |= it.addFlags
		h.CsumOffset = tcpChecksumAt
		h.GSOType = GSOTCPv6
		if l.ip4 {
			h.GSOType = GSOTCPv4
		}
	} else {
		binary.BigEndian.PutUint16(th[4:], uint16(l4len))
		h.CsumOffset = udpChecksumAt
		h.GSOType = GSOUDPL4
	}
	if it.kind == kindTunnel {
		h.GSOType |= GSOTunnelIPv4
		h.OuterTransport = uint16(l.outerL4)
		h.InnerNetwork = uint16(l.l3)
	}
	// The checksum field holds the pseudo-header sum (CHECKSUM_PARTIAL).
	binary.BigEndian.PutUint16(th[h.CsumOffset:], fold(pseudoSum(src, dst, l.proto, l4len)))
	h.Encode(vh)
	return b
}

// headChunk is the size of the buffers merged headers are built in.
const headChunk = 16 << 10

// alloc returns n bytes of header space, valid until the next reset.
func (c *Coalescer) alloc(n int) []byte {
	for ; c.chunk < len(c.heads); c.chunk++ {
		h := c.heads[c.chunk]
		if len(h)+n <= cap(h) {
			c.heads[c.chunk] = h[:len(h)+n]
			return h[len(h) : len(h)+n : len(h)+n]
		}
	}
	c.heads = append(c.heads, make([]byte, n, max(headChunk, n)))
	return c.heads[c.chunk][:n:n]
}
