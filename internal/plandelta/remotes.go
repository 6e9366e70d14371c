package plandelta

import (
	"fmt"
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

// RemotesEdit turns the remotes of a VXLAN port of the base's head (the
// port of the same name in the bridge of the same VNI) into the new
// head's: the addresses Set are added, those Gone dropped (both sorted).
type RemotesEdit struct {
	VNI  int          `json:"vni"`
	Port string       `json:"port"`
	Set  []netip.Addr `json:"set,omitempty"`
	Gone []netip.Addr `json:"gone,omitempty"`
}

// minRemotesEdited is how many remotes a port has for a delta to edit
// them rather than send them.
const minRemotesEdited = 16

// WithRemotesEdits returns d, made from base, with the remotes of each
// VXLAN port of its head that base's head has too (and both have sorted,
// with at least minRemotesEdited addresses) left out of the head and
// edited instead; d itself is not changed (its head's lists are copied
// where they change).
func (d Delta) WithRemotesEdits(base plan.Gateway) Delta {
	var edits []RemotesEdit
	var bridges []plan.Bridge
	for bi, b := range d.Head.Bridges {
		var vxlans []plan.VXLAN
		for vi, v := range b.VXLANs {
			old, ok := portOf(base, b.VNI, v.Name)
			if !ok || len(v.Remotes) < minRemotesEdited || !sortedAddrs(v.Remotes) || !sortedAddrs(old.Remotes) {
				continue
			}
			set, gone := diffList(old.Remotes, v.Remotes, func(a netip.Addr) netip.Addr { return a }, netip.Addr.Compare, func(a, b netip.Addr) bool { return a == b })
			edits = append(edits, RemotesEdit{VNI: b.VNI, Port: v.Name, Set: set, Gone: gone})
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

// editRemotes returns head with the remotes of the ports edits name made
// from base's (head's lists copied where they change).
func editRemotes(base, head plan.Gateway, edits []RemotesEdit) (plan.Gateway, error) {
	head.Bridges = slices.Clone(head.Bridges)
	for _, e := range edits {
		old, ok := portOf(base, e.VNI, e.Port)
		if !ok {
			return plan.Gateway{}, fmt.Errorf("%w: the base has no VXLAN port %s of VNI %d", ErrMismatch, e.Port, e.VNI)
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
