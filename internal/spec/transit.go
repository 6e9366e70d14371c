package spec

import (
	"fmt"
	"hash/fnv"
	"net/netip"
	"sort"
)

// transitGateway is one gateway as seen by transit allocation.
type transitGateway struct {
	g    *Gateway
	path string
}

// transit validates overlay.transit and every pinned transitAddress, then
// gives every other gateway its stable address (see Parse for the rule).
func (c *checker) transit() {
	f := c.f
	t := f.Overlay.Transit
	if !t.IsValid() {
		return // undecodable; already reported
	}
	var all []transitGateway
	for i := range f.Sites {
		for j := range f.Sites[i].Gateways {
			all = append(all, transitGateway{&f.Sites[i].Gateways[j], fmt.Sprintf("sites[%d].gateways[%d]", i, j)})
		}
	}
	if !t.Addr().Is4() {
		c.add("overlay.transit", "%s is not IPv4; want an IPv4 prefix like %s", t, DefaultTransit)
		return
	}
	if t.Bits() > 30 {
		c.add("overlay.transit", "%s is too small: a transit prefix needs its network and broadcast addresses plus one address per gateway; want /30 or bigger, like %s", t, DefaultTransit)
		return
	}
	size := uint64(1) << (32 - t.Bits())
	if usable := size - 2; uint64(len(all)) > usable {
		c.add("overlay.transit", "%s holds %d gateway addresses but the spec has %d gateways; want a bigger prefix, like %s", t, usable, len(all), DefaultTransit)
		return
	}
	base := addrToUint32(t.Addr())
	used := map[uint64]string{} // offset -> path of the gateway holding it
	var free []transitGateway
	for _, tg := range all {
		a := tg.g.TransitAddress
		path := tg.path + ".transitAddress"
		if !a.IsValid() {
			if !c.ps.isBad(path) {
				free = append(free, tg)
			}
			continue
		}
		if !a.Is4() || !t.Contains(a) {
			c.add(path, "%s is not inside overlay.transit %s; want an address between %s and %s, or leave transitAddress out", a, t, t.Addr().Next(), lastAddr(t).Prev())
			continue
		}
		off := uint64(addrToUint32(a) - base)
		if off == 0 || off == size-1 {
			what := "network"
			if off != 0 {
				what = "broadcast"
			}
			c.add(path, "%s is the %s address of overlay.transit %s; want an address between %s and %s, or leave transitAddress out", a, what, t, t.Addr().Next(), lastAddr(t).Prev())
			continue
		}
		if other, dup := used[off]; dup {
			c.add(path, "%s is already the transitAddress of %s (line %d); each gateway needs its own", a, other, f.Line(other+".transitAddress"))
			continue
		}
		used[off] = tg.path
	}
	sort.SliceStable(free, func(i, j int) bool { return free[i].g.Name < free[j].g.Name })
	n := size - 2
	for _, tg := range free {
		h := fnv.New32a()
		h.Write([]byte(tg.g.Name))
		start := uint64(h.Sum32()) % n
		for k := uint64(0); k < n; k++ {
			off := 1 + (start+k)%n
			if _, taken := used[off]; taken {
				continue
			}
			used[off] = tg.path
			tg.g.TransitAddress = uint32ToAddr(base + uint32(off))
			break
		}
	}
}

func addrToUint32(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func uint32ToAddr(v uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}
