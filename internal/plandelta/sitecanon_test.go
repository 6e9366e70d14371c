package plandelta

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"testing"

	"github.com/fednet/fednet/internal/spec"
)

// TestSiteCanonKnowsTheSpec: appendSiteCanon knows every field of
// spec.Site and spec.Gateway. When this fails, a field was added to the
// spec: write it in appendSiteCanon (in order, as its JSON tag says) and
// update siteShape; until then sites are hashed through appendCanon.
func TestSiteCanonKnowsTheSpec(t *testing.T) {
	if !siteCanonKnown {
		t.Fatalf("appendSiteCanon does not know the spec's sites; they are now\n%s", shapeOf(reflect.TypeFor[spec.Site](), reflect.TypeFor[spec.Gateway]()))
	}
}

// TestSiteCanonIsCanon: appendSiteCanon writes the bytes appendCanon
// writes, for random sites with every field set or left out, empty or
// nil, and strings with invalid UTF-8.
func TestSiteCanonIsCanon(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	pick := func(s ...string) string { return s[r.IntN(len(s))] }
	addr := func() netip.Addr {
		switch r.IntN(3) {
		case 0:
			return netip.Addr{}
		case 1:
			return netip.AddrFrom4([4]byte{10, byte(r.IntN(3)), 0, byte(r.IntN(3))})
		}
		return netip.MustParseAddr("fd00::" + fmt.Sprint(r.IntN(9)))
	}
	for i := range 2000 {
		s := spec.Site{Name: pick("s1", "", "a\xffb", "ü"), Provider: pick("onprem", ""), Region: pick("", "eu"), Index: r.IntN(5) - 2,
			VirtualAddress: addr(), Fabric: spec.Fabric(pick("", string(spec.FabricDropsUnknownMACs)))}
		switch r.IntN(3) {
		case 1:
			s.Prefixes = []netip.Prefix{}
		case 2:
			s.Prefixes = []netip.Prefix{netip.MustParsePrefix("10.1.0.0/24"), netip.MustParsePrefix("fd00::/64")}
		}
		if r.IntN(4) > 0 {
			s.Gateways = []spec.Gateway{}
		}
		for j := range r.IntN(3) {
			g := spec.Gateway{Name: fmt.Sprint("g", i, j), Endpoint: pick("", "1.2.3.4:51820"), BehindNAT: r.IntN(2) == 0,
				PublicKey: pick("", "k="), TransitAddress: addr(), LANAddress: addr()}
			switch r.IntN(3) {
			case 1:
				g.BridgePorts = map[string]string{}
			case 2:
				g.BridgePorts = map[string]string{"lan": "eth1", pick("b", "a\xfe"): pick("eth2", "")}
			}
			switch r.IntN(3) {
			case 1:
				g.PublicAllow = []spec.Admission{}
			case 2:
				g.PublicAllow = []spec.Admission{{Protocol: "tcp", Port: 22, Sources: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}}}
			}
			s.Gateways = append(s.Gateways, g)
		}
		if r.IntN(4) == 0 {
			s.Cloud = &spec.Cloud{}
			if r.IntN(2) == 0 {
				s.Cloud.AWS = &spec.AWSCloud{}
			}
		}
		if r.IntN(4) == 0 {
			s.External = &spec.External{Profile: spec.ProfileAWS, Endpoint: addr(), Via: pick("", "g"), IKE: []string{"aes256-sha256-modp2048"}}
		}
		got := appendSiteCanon(nil, &s)
		if want := appendCanon(nil, reflect.ValueOf(&s).Elem()); string(got) != string(want) {
			t.Fatalf("site %d (%s): appendSiteCanon wrote\n%q\nappendCanon\n%q", i, encode(s), got, want)
		}
	}
}

func BenchmarkSiteCanonWritten(b *testing.B) {
	s := spec.Site{Name: "s0001", Provider: "onprem", Gateways: []spec.Gateway{{Name: "g0001", Endpoint: "100.64.1.1:51820", BridgePorts: map[string]string{"lan": "eth1"}}}}
	var buf []byte
	for b.Loop() {
		buf = appendSiteCanon(buf[:0], &s)
	}
}

// BenchmarkSiteHashesOfPorts: the sites of a Local of 1000 that a bridged
// network added gave one bridge-port map, hashed whole (as a new Local is).
func BenchmarkSiteHashesOfPorts(b *testing.B) {
	ports := map[string]string{"lan": "eth1", "bnet": "eth2"}
	sites := make([]spec.Site, 1000)
	for i := range sites {
		sites[i] = spec.Site{Name: fmt.Sprintf("s%04d", i), Provider: "onprem", Prefixes: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 0}), 24)},
			Gateways: []spec.Gateway{{Name: fmt.Sprintf("g%04d", i), Endpoint: fmt.Sprintf("100.64.%d.%d:51820", i>>8, i&255), PublicKey: "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcdefg=",
				TransitAddress: netip.AddrFrom4([4]byte{100, 96, byte(i >> 8), byte(i)}), LANAddress: netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 254}), BridgePorts: ports}}}
	}
	for b.Loop() {
		h, ld := newSiteHasher(SumVersion), &LocalDigest{}
		for i := range sites {
			h.site(ld, &sites[i])
		}
	}
}

// TestSiteHasherRemembersPorts: a siteHasher of version 4 hashes the
// ports of sites that share one map (hashed once) as it hashes them one
// by one, and those of a site with other ports, no ports, or two
// gateways, between them, as their own.
func TestSiteHasherRemembersPorts(t *testing.T) {
	shared := map[string]string{"lan": "eth1"}
	var sites []spec.Site
	for i, ports := range []map[string]string{shared, shared, {"lan": "eth2"}, shared, nil, {}, shared, {"lan": "eth1"}} {
		sites = append(sites, spec.Site{Name: fmt.Sprint("s", i), Gateways: []spec.Gateway{{Name: fmt.Sprint("g", i), BridgePorts: ports}}})
	}
	sites = append(sites, spec.Site{Name: "two", Gateways: []spec.Gateway{{Name: "a", BridgePorts: shared}, {Name: "b"}}})
	h, all := newSiteHasher(4), &LocalDigest{}
	for i := range sites {
		h.site(all, &sites[i])
	}
	for i := range sites {
		one := &LocalDigest{}
		newSiteHasher(4).site(one, &sites[i])
		if all.Ports[i] != one.Ports[0] || all.Sites[i] != one.Sites[0] {
			t.Errorf("site %d (%s): hashed after the others %x/%x, alone %x/%x", i, encode(sites[i]), all.Sites[i], all.Ports[i], one.Sites[0], one.Ports[0])
		}
	}
	if all.Ports[0] != all.Ports[7] || all.Ports[0] == all.Ports[2] || all.Ports[0] == all.Ports[8] {
		t.Errorf("ports hashes %x: equal ports should hash alike, others not", all.Ports)
	}
}
