package plandelta

import (
	"fmt"
	"iter"
	"net/netip"
	"slices"

	"github.com/fednet/fednet/internal/plan"
)

// A bridged network over every site of a full mesh gives each gateway's
// bridge a VXLAN port whose remotes are every other gateway's transit
// address: a head of a thousand addresses (45 kB of JSON at 1000 sites),
// sent again with every change once the network exists, though a site
// added or removed changes it by one address. A delta for an agent that
// takes it (api.PlanFeatureRemotes) leaves such a port's remotes out of
// its head and edits those of the base's port instead.

// A port the base does not have (a bridged network added over every
// site) has no remotes to edit; but its remotes are, but for the
// standby gateways and the sites outside the network, the transit
// addresses of the plan's peers, which the agent holds once it has
// rebuilt them. A delta for an agent that takes it
// (api.PlanFeaturePeerRemotes) edits those instead: at 1000 sites, about 15 kB
// of head that each agent no longer decodes and the manager no longer
// encodes, for a network added.

// RemotesEdit turns the remotes of a VXLAN port of the base's head (the
// port of the same name in the bridge of the same VNI), or with Peers the
// transit addresses of the new plan's peers (PeerTransits), into the new
// head's: the addresses Set are added, those Gone dropped (both sorted).
type RemotesEdit struct {
	VNI   int          `json:"vni"`
	Port  string       `json:"port"`
	Peers bool         `json:"peers,omitempty"`
	Set   []netip.Addr `json:"set,omitempty"`
	Gone  []netip.Addr `json:"gone,omitempty"`
}

// PeerTransits returns the transit addresses of peers, sorted, each
// once: the allowed IPs of a single address inside transit. parts yields
// the peers in lists read in place (a plan's list, or the chunks a
// manager holds it in: plan.Chunks.Parts), not a copy of each peer; n is
// how many there are, the room made for their addresses at once (growing
// the list as it fills was most of the cost, a manager finding these for
// a thousand plans).
func PeerTransits(transit netip.Prefix, parts iter.Seq[[]plan.Peer], n int) []netip.Addr {
	out := make([]netip.Addr, 0, n)
	for part := range parts {
		for i := range part {
			for _, a := range part[i].AllowedIPs {
				if a.IsSingleIP() && transit.Contains(a.Addr()) {
					out = append(out, a.Addr())
				}
			}
		}
	}
	if !sortedAddrs(out) { // sorted already when names sort as transit addresses
		sortAddrs(out)
		out = slices.Compact(out)
	}
	return out
}

// sortAddrs sorts a: IPv4 addresses alone (a transit prefix's) as
// numbers, which is faster than by netip.Addr.Compare (BenchmarkPeerTransits).
func sortAddrs(a []netip.Addr) {
	if !slices.ContainsFunc(a, func(x netip.Addr) bool { return !x.Is4() }) {
		v4 := make([]uint32, len(a))
		for i, x := range a {
			b := x.As4()
			v4[i] = uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
		}
		radixSort(v4)
		for i, x := range v4 {
			a[i] = netip.AddrFrom4([4]byte{byte(x >> 24), byte(x >> 16), byte(x >> 8), byte(x)})
		}
		return
	}
	slices.SortFunc(a, netip.Addr.Compare)
}

// radixSort sorts a by its bytes, lowest first (four passes of a
// counting sort through one buffer): for a thousand transit addresses,
// every manager and agent sorting them once per plan, a fraction of a
// comparison sort's time (BenchmarkPeerTransits).
func radixSort(a []uint32) {
	if len(a) < 64 {
		slices.Sort(a)
		return
	}
	buf := make([]uint32, len(a))
	src, dst := a, buf
	for shift := 0; shift < 32; shift += 8 {
		var count [256]int
		for _, x := range src {
			count[byte(x>>shift)]++
		}
		if count[byte(src[0]>>shift)] == len(src) {
			continue // every key has this byte: the pass would copy
		}
		at := 0
		for i, c := range count {
			count[i] = at
			at += c
		}
		for _, x := range src {
			b := byte(x >> shift)
			dst[count[b]] = x
			count[b]++
		}
		src, dst = dst, src
	}
	if &src[0] != &a[0] {
		copy(a, src)
	}
}

// minRemotesEdited is how many remotes a port has for a delta to edit
// them rather than send them.
const minRemotesEdited = 16

// WithRemotesEdits returns d, made from base, with the remotes of each
// VXLAN port of its head that base's head has too (and both have sorted,
// with at least minRemotesEdited addresses) left out of the head and
// edited instead; d itself is not changed (its head's lists are copied
// where they change). With transits, which returns the transit addresses
// of the new plan's peers (PeerTransits; called when a port needs them),
// the remotes of a port the base lacks are edited from them, when that
// edit is at most half their number.
func (d Delta) WithRemotesEdits(base plan.Gateway, transits func() []netip.Addr) Delta {
	var edits []RemotesEdit
	var bridges []plan.Bridge
	self := func(a netip.Addr) netip.Addr { return a }
	same := func(a, b netip.Addr) bool { return a == b }
	for bi, b := range d.Head.Bridges {
		var vxlans []plan.VXLAN
		for vi, v := range b.VXLANs {
			if len(v.Remotes) < minRemotesEdited || !sortedAddrs(v.Remotes) {
				continue
			}
			var e RemotesEdit
			if old, ok := portOf(base, b.VNI, v.Name); ok {
				if !sortedAddrs(old.Remotes) {
					continue
				}
				e.Set, e.Gone = diffList(old.Remotes, v.Remotes, self, netip.Addr.Compare, same)
			} else {
				if transits == nil {
					continue
				}
				e.Peers = true
				e.Set, e.Gone = diffList(transits(), v.Remotes, self, netip.Addr.Compare, same)
				if 2*(len(e.Set)+len(e.Gone)) > len(v.Remotes) {
					continue
				}
			}
			e.VNI, e.Port = b.VNI, v.Name
			edits = append(edits, e)
			if vxlans == nil {
				vxlans = slices.Clone(b.VXLANs)
			}
			vxlans[vi].Remotes = nil
		}
		if vxlans != nil {
			if bridges == nil {
				bridges = slices.Clone(d.Head.Bridges)
			}
			bridges[bi].VXLANs = vxlans
		}
	}
	if edits == nil {
		return d
	}
	d.Head.Bridges = bridges
	d.RemotesEdits = edits
	return d
}

// FromPeers reports whether d edits the remotes of a port from the
// peers' transit addresses.
func (d Delta) FromPeers() bool {
	return slices.ContainsFunc(d.RemotesEdits, func(e RemotesEdit) bool { return e.Peers })
}

// editRemotes returns head with the remotes of the ports edits name made
// from base's, or from the transit addresses of head's peers (head's
// lists copied where they change).
func editRemotes(base, head plan.Gateway, edits []RemotesEdit) (plan.Gateway, error) {
	head.Bridges = slices.Clone(head.Bridges)
	var transits []netip.Addr
	for _, e := range edits {
		var old plan.VXLAN
		switch {
		case e.Peers:
			if transits == nil {
				transits = PeerTransits(head.Firewall.Transit, slices.Values([][]plan.Peer{head.Peers}), len(head.Peers))
			}
			old.Remotes = transits
		default:
			var ok bool
			if old, ok = portOf(base, e.VNI, e.Port); !ok {
				return plan.Gateway{}, fmt.Errorf("%w: the base has no VXLAN port %s of VNI %d", ErrMismatch, e.Port, e.VNI)
			}
		}
		bi := slices.IndexFunc(head.Bridges, func(b plan.Bridge) bool { return b.VNI == e.VNI })
		vi := -1
		if bi >= 0 {
			vi = slices.IndexFunc(head.Bridges[bi].VXLANs, func(v plan.VXLAN) bool { return v.Name == e.Port })
		}
		if vi < 0 || head.Bridges[bi].VXLANs[vi].Remotes != nil {
			return plan.Gateway{}, fmt.Errorf("%w: the delta edits the remotes of VXLAN port %s of VNI %d, which its head lacks or has", ErrMismatch, e.Port, e.VNI)
		}
		if !sortedAddrs(old.Remotes) {
			return plan.Gateway{}, fmt.Errorf("%w: the base's remotes of VXLAN port %s are not sorted", ErrMismatch, e.Port)
		}
		b := &head.Bridges[bi]
		b.VXLANs = slices.Clone(b.VXLANs)
		b.VXLANs[vi].Remotes = applyList(old.Remotes, e.Set, e.Gone, func(a netip.Addr) netip.Addr { return a }, netip.Addr.Compare)
	}
	return head, nil
}

// portOf returns g's VXLAN port name of the bridge of VNI vni.
func portOf(g plan.Gateway, vni int, name string) (plan.VXLAN, bool) {
	for _, b := range g.Bridges {
		if b.VNI != vni {
			continue
		}
		for _, v := range b.VXLANs {
			if v.Name == name {
				return v, true
			}
		}
	}
	return plan.VXLAN{}, false
}

// sortedAddrs reports whether a is sorted with no address twice.
func sortedAddrs(a []netip.Addr) bool {
	for i := 1; i < len(a); i++ {
		if a[i-1].Compare(a[i]) >= 0 {
			return false
		}
	}
	return true
}
