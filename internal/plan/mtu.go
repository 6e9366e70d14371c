package plan

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/fednet/fednet/internal/backend"
)

// Family is the IP version of an encapsulating (outer) header.
type Family uint8

// Families. The zero Family means none, e.g. a segment without neighbor
// tunnels.
const (
	IPv4 Family = 4
	IPv6 Family = 6
)

func (f Family) String() string {
	switch f {
	case 0:
		return "none"
	case IPv4:
		return "IPv4"
	case IPv6:
		return "IPv6"
	}
	return fmt.Sprintf("Family(%d)", uint8(f))
}

// header is the outer IP header size; any family but IPv4 counts as IPv6,
// the worst case.
func (f Family) header() int {
	if f == IPv4 {
		return ipv4Header
	}
	return ipv6Header
}

// Encapsulation overheads of VXLAN, in bytes.
const (
	ethernetHeader = 14 // the inner frame's Ethernet header (no 802.1Q tag)
	vxlanHeader    = 8
)

// DefaultSegmentMTU is the MTU assumed for a segment whose MTU is not known:
// Ethernet's 1500.
const DefaultSegmentMTU = 1500

// VXLANOverhead is what VXLAN adds to an IP packet of a bridged network:
// the inner Ethernet header 14, VXLAN 8, UDP 8 and the outer IP header of
// family f (20 for IPv4, 40 for IPv6; any family but IPv4 counts as IPv6).
// That is 50 bytes over IPv4 and 70 over IPv6.
func VXLANOverhead(f Family) int {
	return ethernetHeader + vxlanHeader + udpHeader + f.header()
}

// Segment is what the MTU of a network needs to know about one member
// site's segment.
type Segment struct {
	// Site names the member site.
	Site string
	// MTU is the segment's MTU; 0 means not known, and DefaultSegmentMTU
	// is assumed (the reason says so).
	MTU int
	// Neighbors is the underlay family of the site's neighbor tunnels (VXLAN
	// from hosts to the gateway over the site's LAN), or 0 when the
	// network's hosts at this site sit on the segment directly.
	Neighbors Family
}

// MTUInputs are the terms of a network's MTU besides the tunnel.
type MTUInputs struct {
	// Bridged says the network carries Ethernet frames in VXLAN between
	// transit addresses inside the tunnel; the transit is IPv4 (spec
	// validation requires it), so that costs VXLANOverhead(IPv4) = 50.
	// A routed network's IP packets go into the tunnel as they are.
	Bridged bool
	// Segments are the member sites' segments, in any order.
	Segments []Segment
}

// NetworkMTU returns the MTU of a network whose traffic crosses a WireGuard
// interface of MTU tunnel, and a reason that writes the computation out for
// humans and names the limiting term (or terms, on a tie).
//
// The rule is NetFed §5.1's, with VXLAN in place of GRE: the network MTU is
// the smallest of
//   - the tunnel MTU, less VXLANOverhead(IPv4) = 50 when the network is
//     bridged;
//   - the MTU of every member segment;
//   - for every segment with neighbor tunnels, its MTU less
//     VXLANOverhead of the neighbor tunnels' family (50 for IPv4, 70 for
//     IPv6).
//
// NetworkMTU applies every term it is given; which segments have neighbor
// tunnels is the caller's decision (today: bridged networks at sites whose
// fabric drops unknown MACs). It does not check the result against any
// minimum (IPv6 needs 1280): that is the caller's to reject. Pure and safe
// to call concurrently.
func NetworkMTU(tunnel int, in MTUInputs) (int, string) {
	return networkMTU(tunnel, fmt.Sprintf("tunnel %d", tunnel), in)
}

// NetworkMTUFromUnderlay is NetworkMTU for the whole chain over WireGuard:
// the tunnel MTU is computed first from the underlay MTU and the family of
// WireGuard's outer header (any family but IPv4 counts as IPv6), the same
// way the planner computes a tunnel's MTU, and the reason shows that step
// too.
func NetworkMTUFromUnderlay(underlay int, outer Family, in MTUInputs) (int, string) {
	wg, _ := backend.Lookup(backend.WireGuard)
	tunnel, why := tunnelMTU(underlay, outer != IPv4, wg)
	return networkMTU(tunnel, "tunnel ("+why+")", in)
}

// maxSegmentTerms is how many plain segments of one MTU a reason names
// one by one; more are one term.
const maxSegmentTerms = 8

type mtuTerm struct {
	label string // names the term in "limited by"
	text  string // the term written out
	mtu   int
}

func networkMTU(tunnel int, tunnelText string, in MTUInputs) (int, string) {
	t := mtuTerm{label: "tunnel", text: tunnelText, mtu: tunnel}
	if in.Bridged {
		o := VXLANOverhead(IPv4)
		t.mtu -= o
		t.text = fmt.Sprintf("%s - VXLAN/%s %d = %d", tunnelText, IPv4, o, t.mtu)
	}
	terms := []mtuTerm{t}

	segs := slices.Clone(in.Segments)
	slices.SortStableFunc(segs, func(a, b Segment) int { return cmp.Compare(a.Site, b.Site) })
	// Plain segments of one MTU are one term when there are many (a
	// network over a thousand sites would otherwise name each in every
	// gateway's plan).
	type plain struct {
		mtu int
		def string
	}
	var alike map[plain][]string
	for _, s := range segs {
		if s.Neighbors == 0 {
			if alike == nil {
				alike = map[plain][]string{}
			}
			k := plain{s.MTU, ""}
			if s.MTU == 0 {
				k = plain{DefaultSegmentMTU, " (default)"}
			}
			alike[k] = append(alike[k], s.Site)
		}
	}
	for _, s := range segs {
		mtu, def := s.MTU, ""
		if mtu == 0 {
			mtu, def = DefaultSegmentMTU, " (default)"
		}
		if s.Neighbors == 0 {
			if sites := alike[plain{mtu, def}]; len(sites) > maxSegmentTerms {
				if sites[0] == s.Site {
					label := fmt.Sprintf("%d segments (%s to %s)", len(sites), sites[0], sites[len(sites)-1])
					terms = append(terms, mtuTerm{label: label, text: fmt.Sprintf("%s %d%s", label, mtu, def), mtu: mtu})
				}
				continue
			}
			terms = append(terms, mtuTerm{
				label: "segment " + s.Site,
				text:  fmt.Sprintf("segment %s %d%s", s.Site, mtu, def),
				mtu:   mtu,
			})
			continue
		}
		// The plain segment term is never smaller than this one, so it is
		// left out.
		o := VXLANOverhead(s.Neighbors)
		terms = append(terms, mtuTerm{
			label: "neighbor tunnels at " + s.Site,
			text:  fmt.Sprintf("neighbor tunnels at %s: segment %d%s - VXLAN/%s %d = %d", s.Site, mtu, def, s.Neighbors, o, mtu-o),
			mtu:   mtu - o,
		})
	}

	best := terms[0].mtu
	for _, t := range terms[1:] {
		best = min(best, t.mtu)
	}
	var texts, limits []string
	for _, t := range terms {
		texts = append(texts, t.text)
		if t.mtu == best {
			limits = append(limits, t.label)
		}
	}
	return best, fmt.Sprintf("min(%s) = %d, limited by %s", strings.Join(texts, ", "), best, strings.Join(limits, " and "))
}
