package spec

import (
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// transitHome is the address a gateway gets when nothing collides with it:
// offset 1 + FNV-1a-32(name) mod (size-2) in the transit prefix.
func transitHome(transit netip.Prefix, name string) netip.Addr {
	h := fnv.New32a()
	h.Write([]byte(name))
	size := uint32(1) << (32 - transit.Bits())
	a := transit.Addr()
	for range 1 + h.Sum32()%(size-2) {
		a = a.Next()
	}
	return a
}

// gatewaySpec returns a valid spec with one site holding the named gateways,
// and the given transit prefix.
func gatewaySpec(transit string, names []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: fednet/v1\nkind: Federation\nname: t\noverlay: {transit: %s}\nsites:\n", transit)
	fmt.Fprintf(&b, "  - name: s\n    prefixes: [10.0.0.0/16]\n    gateways:\n")
	for i, n := range names {
		fmt.Fprintf(&b, "      - {name: %s, endpoint: \"198.51.%d.%d:51820\"}\n", n, i/250, i%250+1)
	}
	return b.String()
}

func transitAddresses(t *testing.T, transit string, names []string) map[string]netip.Addr {
	t.Helper()
	f := mustParse(t, gatewaySpec(transit, names))
	got := map[string]netip.Addr{}
	for _, g := range f.Sites[0].Gateways {
		got[g.Name] = g.TransitAddress
	}
	return got
}

func gatewayNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("gw-%02d", i)
	}
	return names
}

func TestTransitFormula(t *testing.T) {
	names := gatewayNames(10)
	for _, transit := range []string{"10.255.0.0/16", "192.168.77.0/24", "100.64.0.0/10"} {
		p := netip.MustParsePrefix(transit)
		got := transitAddresses(t, transit, names)
		for _, n := range names {
			if want := transitHome(p, n); got[n] != want {
				t.Errorf("%s: gateway %s = %v, want its hash slot %v", transit, n, got[n], want)
			}
		}
	}
}

func TestTransitStableWhenRemoving(t *testing.T) {
	names := gatewayNames(10)
	all := transitAddresses(t, "10.255.0.0/16", names)
	for i, gone := range names {
		rest := slices.Delete(slices.Clone(names), i, i+1)
		got := transitAddresses(t, "10.255.0.0/16", rest)
		for _, n := range rest {
			if got[n] != all[n] {
				t.Errorf("removing %s moved %s from %v to %v", gone, n, all[n], got[n])
			}
		}
	}
}

func TestTransitStableWhenAdding(t *testing.T) {
	names := gatewayNames(10)
	before := transitAddresses(t, "10.255.0.0/16", names)
	after := transitAddresses(t, "10.255.0.0/16", append(slices.Clone(names), "aaa-new", "zzz-new"))
	for _, n := range names {
		if after[n] != before[n] {
			t.Errorf("adding gateways moved %s from %v to %v", n, before[n], after[n])
		}
	}
}

// TestTransitCollisions uses a transit prefix so small that gateways collide,
// and checks the rule: every address is unique and usable, and removing a
// gateway moves only gateways that had been pushed off their hash slot.
func TestTransitCollisions(t *testing.T) {
	const transit = "10.255.0.0/28" // 14 usable addresses
	p := netip.MustParsePrefix(transit)
	names := gatewayNames(14)
	all := transitAddresses(t, transit, names)
	seen := map[netip.Addr]string{}
	collided := 0
	for _, n := range names {
		a := all[n]
		if !p.Contains(a) || a == p.Addr() || a == lastAddr(p) {
			t.Errorf("%s got %v, not a usable address of %v", n, a, p)
		}
		if other, dup := seen[a]; dup {
			t.Errorf("%s and %s share %v", n, other, a)
		}
		seen[a] = n
		if a != transitHome(p, n) {
			collided++
		}
	}
	if collided == 0 {
		t.Fatal("no collisions in a full /28; the test does not exercise probing")
	}
	for i, gone := range names {
		rest := slices.Delete(slices.Clone(names), i, i+1)
		got := transitAddresses(t, transit, rest)
		for _, n := range rest {
			if got[n] != all[n] && all[n] == transitHome(p, n) {
				t.Errorf("removing %s moved %s off its own hash slot %v to %v", gone, n, all[n], got[n])
			}
		}
	}
}

func TestTransitPinned(t *testing.T) {
	names := gatewayNames(5)
	p := netip.MustParsePrefix("10.255.0.0/16")
	// Pin gw-03 to the hash slot of gw-01: gw-01 must probe onwards.
	home := transitHome(p, "gw-01")
	src := strings.Replace(gatewaySpec("10.255.0.0/16", names), "{name: gw-03,", "{name: gw-03, transitAddress: "+home.String()+",", 1)
	f := mustParse(t, src)
	got := map[string]netip.Addr{}
	for _, g := range f.Sites[0].Gateways {
		got[g.Name] = g.TransitAddress
	}
	if got["gw-03"] != home {
		t.Errorf("pinned gw-03 = %v, want %v", got["gw-03"], home)
	}
	if got["gw-01"] != home.Next() {
		t.Errorf("gw-01 = %v, want the next address %v after the pinned one", got["gw-01"], home.Next())
	}
}

func TestTransitWrapsAround(t *testing.T) {
	// In a /30 the two usable offsets are 1 and 2; whatever the hashes, two
	// gateways must get both, never the network or broadcast address.
	got := transitAddresses(t, "10.255.0.0/30", []string{"x", "y"})
	if got["x"] == got["y"] {
		t.Fatalf("x and y share %v", got["x"])
	}
	for n, a := range got {
		if a != netip.MustParseAddr("10.255.0.1") && a != netip.MustParseAddr("10.255.0.2") {
			t.Errorf("%s = %v, want 10.255.0.1 or 10.255.0.2", n, a)
		}
	}
}
