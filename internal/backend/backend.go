// Package backend names the tunnel backends a link between two gateways can
// use and holds, for each, what the pure layers need to know of it: the
// bytes its encapsulation adds to a packet (so the planner computes MTU and
// MSS from the link's backend) and what the gateway's public side must
// accept for it. It is pure: no I/O, no clock.
//
// The table is built in (WireGuard and IPsec). A test, or a later backend, adds
// an entry with Register; the spec validator accepts exactly the names in
// the table, and the data plane has a driver registered under the same
// name (package dataplane). Adding a backend is therefore: an Info entry
// here, a driver package, and the driver's registration.
package backend

import (
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Name is a tunnel backend's name as the spec writes it
// (overlay.backend).
type Name string

// Backends fednet knows.
const (
	// WireGuard is WireGuard over UDP: a kernel or userspace (wireguard-go)
	// device per gateway.
	WireGuard Name = "wireguard"
	// IPsec is IKEv2 and ESP in tunnel mode (strongSwan's charon, driven
	// over its vici socket), ESP encapsulated in UDP 4500 (NAT-T).
	IPsec Name = "ipsec"
)

// Default is the backend of a spec that names none.
const Default = WireGuard

func (n Name) String() string { return string(n) }

// Transport is how the packets of a link travel between two gateways, as
// status reports and metrics name it.
type Transport string

// Transports.
const (
	// TransportUDP is the backend's own datagrams (WireGuard over UDP).
	TransportUDP Transport = "udp"
	// TransportTCP443 is WireGuard's packets framed in a TLS stream over
	// TCP (port 443 by default), the fallback of a link whose UDP is
	// blocked (docs/interop.md).
	TransportTCP443 Transport = "tcp443"
)

func (t Transport) String() string { return string(t) }

// Valid reports whether t is a transport fednet knows.
func (t Transport) Valid() bool { return t == TransportUDP || t == TransportTCP443 }

// Term is one part of a backend's encapsulation overhead, for the MTU's
// written-out reason ("UDP 8").
type Term struct {
	Label string
	Bytes int
}

// Protocol is an IP protocol a backend needs on the public side.
type Protocol uint8

// Protocols.
const (
	UDP Protocol = 17
	TCP Protocol = 6
	// ESP is IPsec's Encapsulating Security Payload (no ports).
	ESP Protocol = 50
)

func (p Protocol) String() string {
	switch p {
	case UDP:
		return "udp"
	case TCP:
		return "tcp"
	case ESP:
		return "esp"
	}
	return fmt.Sprintf("Protocol(%d)", uint8(p))
}

// MarshalText implements encoding.TextMarshaler: "udp", "tcp", "esp".
func (p Protocol) MarshalText() ([]byte, error) {
	switch p {
	case UDP, TCP, ESP:
		return []byte(p.String()), nil
	}
	return nil, fmt.Errorf("protocol %d is not one fednet uses", uint8(p))
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (p *Protocol) UnmarshalText(b []byte) error {
	for _, v := range []Protocol{UDP, TCP, ESP} {
		if string(b) == v.String() {
			*p = v
			return nil
		}
	}
	return fmt.Errorf("protocol %q is not valid; want udp, tcp or esp", b)
}

// Port is one protocol and port the public side must accept for a backend;
// Port is 0 for protocols without ports (ESP).
type Port struct {
	Protocol Protocol `json:"protocol"`
	Port     int      `json:"port,omitempty"`
}

func (p Port) String() string {
	if p.Port == 0 {
		return p.Protocol.String()
	}
	return fmt.Sprintf("%s/%d", p.Protocol, p.Port)
}

// Info is what the pure layers know of a backend.
type Info struct {
	Name Name
	// Overhead lists what the backend adds to an inner packet besides the
	// outer IP header (which depends on the link's address family), in
	// order: for WireGuard UDP 8 and WireGuard's data header and tag 32.
	Overhead []Term
	// Public returns what the gateway's public side must accept for a
	// tunnel of this backend listening on listenPort.
	Public func(listenPort int) []Port
	// Interface is the name of the backend's tunnel interface on a
	// gateway; "" takes the spec's overlay.interface (WireGuard's fed0).
	Interface string
}

// Bytes is the total of Overhead.
func (i Info) Bytes() int {
	n := 0
	for _, t := range i.Overhead {
		n += t.Bytes
	}
	return n
}

var wireGuard = Info{
	Name:     WireGuard,
	Overhead: []Term{{"UDP", 8}, {"WireGuard", 32}},
	Public:   func(port int) []Port { return []Port{{UDP, port}} },
}

// ipsec's overhead is that of the largest ESP packet fednet may send: UDP
// encapsulation (NAT-T, always on: strongSwan's userspace ESP needs it and
// it passes NAT), the ESP header (SPI, sequence), a 16-byte IV (AES-CBC;
// GCM and ChaCha20-Poly1305 use 8), up to 15 bytes of padding with the
// 2-byte trailer, and an integrity tag of up to 32 bytes (HMAC-SHA-512;
// AEAD tags are 16). The proposals allowed (package spec) stay within it.
var ipsec = Info{
	Name: IPsec,
	Overhead: []Term{{"UDP (NAT-T)", 8}, {"ESP header", 8}, {"ESP IV", 16},
		{"ESP padding and trailer", 17}, {"ESP integrity", 32}},
	// IKE on UDP 500 and 4500, ESP in UDP 4500, and ESP itself for peers
	// (routers, cloud gateways) that send it unencapsulated.
	Public:    func(int) []Port { return []Port{{UDP, 500}, {UDP, 4500}, {ESP, 0}} },
	Interface: "ipsec0",
}

var (
	mu    sync.RWMutex
	table = map[Name]Info{WireGuard: wireGuard, IPsec: ipsec}
)

// Register adds a backend to the table. It is meant for init time (and
// tests); it fails when the name is empty or taken, or Info is incomplete.
func Register(i Info) error {
	if i.Name == "" || i.Public == nil {
		return fmt.Errorf("backend: Register needs a Name and a Public function (got %q)", i.Name)
	}
	mu.Lock()
	defer mu.Unlock()
	if _, ok := table[i.Name]; ok {
		return fmt.Errorf("backend: %q is registered already", i.Name)
	}
	i.Overhead = slices.Clone(i.Overhead)
	table[i.Name] = i
	return nil
}

// Unregister removes a backend added by Register (for tests); the built-in
// ones stay.
func Unregister(n Name) {
	mu.Lock()
	defer mu.Unlock()
	if n != WireGuard && n != IPsec {
		delete(table, n)
	}
}

// Lookup returns the backend named n.
func Lookup(n Name) (Info, bool) {
	mu.RLock()
	defer mu.RUnlock()
	i, ok := table[n]
	return i, ok
}

// Names returns the names of every backend, sorted.
func Names() []Name {
	mu.RLock()
	defer mu.RUnlock()
	out := make([]Name, 0, len(table))
	for n := range table {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// List returns Names joined for messages: "ipsec, wireguard".
func List() string {
	var s []string
	for _, n := range Names() {
		s = append(s, string(n))
	}
	return strings.Join(s, ", ")
}
