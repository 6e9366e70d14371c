package plandelta

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"testing"

	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/spec"
)

// canonKinds has a field of every kind the binary form covers, with and
// without omitempty and omitzero.
type canonKinds struct {
	S      string            `json:"s"`
	SE     string            `json:"se,omitempty"`
	I      int               `json:"i,omitempty"`
	U      uint16            `json:"u"`
	F      float64           `json:"f,omitempty"`
	B      bool              `json:"b,omitempty"`
	L      []string          `json:"l"`
	LE     []string          `json:"le,omitempty"`
	Bytes  []byte            `json:"bytes"`
	M      map[string]int    `json:"m"`
	ME     map[string]int    `json:"me,omitempty"`
	MI     map[int]string    `json:"mi,omitempty"`
	P      *canonKinds       `json:"p,omitempty"`
	A      netip.Addr        `json:"a,omitzero"`
	AE     netip.Addr        `json:"ae,omitempty"`
	Pre    netip.Prefix      `json:"pre"`
	K      plan.Key          `json:"k,omitzero"`
	Kind   plan.PortKind     `json:"kind,omitempty"`
	Arr    [2]int            `json:"arr"`
	Any    any               `json:"any,omitempty"`
	Nested struct{ X int }   `json:"nested,omitzero"`
	Keyed  map[plan.Key]bool `json:"keyed,omitempty"`
	Addrs  []netip.Addr      `json:"addrs"`
	Pres   []netip.Prefix    `json:"pres,omitempty"`
	skip   int
	Dash   int `json:"-"`
	Plain  int
}

// TestCanonFollowsJSON: two values have the same binary form exactly when
// they have the same JSON, for pairs that differ in Go but not in JSON
// (nil and empty lists under omitempty, a field JSON skips), pairs that
// differ in JSON only (nil and empty without omitempty), and random
// values, each against itself rebuilt from its JSON and against another.
func TestCanonFollowsJSON(t *testing.T) {
	k := plan.Key{1}
	cases := []struct {
		name string
		a, b canonKinds
	}{
		{"zero", canonKinds{}, canonKinds{}},
		{"empty list omitted", canonKinds{LE: nil}, canonKinds{LE: []string{}}},
		{"nil and empty list", canonKinds{L: nil}, canonKinds{L: []string{}}},
		{"empty map omitted", canonKinds{ME: nil}, canonKinds{ME: map[string]int{}}},
		{"nil and empty map", canonKinds{M: nil}, canonKinds{M: map[string]int{}}},
		{"unexported and skipped fields", canonKinds{}, canonKinds{skip: 1, Dash: 2}},
		{"zero address omitted", canonKinds{}, canonKinds{A: netip.Addr{}}},
		{"zero address under omitempty", canonKinds{AE: netip.Addr{}}, canonKinds{AE: netip.MustParseAddr("10.0.0.1")}},
		{"address", canonKinds{A: netip.MustParseAddr("10.0.0.1")}, canonKinds{A: netip.MustParseAddr("10.0.0.2")}},
		{"mapped address", canonKinds{A: netip.MustParseAddr("10.0.0.1")}, canonKinds{A: netip.MustParseAddr("::ffff:10.0.0.1")}},
		{"prefix bits", canonKinds{Pre: netip.MustParsePrefix("10.0.0.0/8")}, canonKinds{Pre: netip.MustParsePrefix("10.0.0.0/16")}},
		{"key", canonKinds{K: k}, canonKinds{}},
		{"kind", canonKinds{Kind: plan.ToHost}, canonKinds{Kind: plan.ToGateways}},
		{"invalid UTF-8 alike in JSON", canonKinds{S: "a\xffb"}, canonKinds{S: "a\xfeb"}},
		{"invalid UTF-8 against U+FFFD", canonKinds{S: "a\xffb"}, canonKinds{S: "a\ufffdb"}},
		{"strings that would run together", canonKinds{S: "ab", L: []string{"c"}}, canonKinds{S: "a", L: []string{"bc"}}},
		{"list of two against one", canonKinds{L: []string{"a", "b"}}, canonKinds{L: []string{"ab"}}},
		{"bytes", canonKinds{Bytes: []byte{}}, canonKinds{Bytes: nil}},
		{"map keys", canonKinds{MI: map[int]string{1: "a", 10: "b", 2: "c"}}, canonKinds{MI: map[int]string{1: "a", 10: "b", 2: "d"}}},
		{"key map", canonKinds{Keyed: map[plan.Key]bool{k: true}}, canonKinds{Keyed: map[plan.Key]bool{{2}: true}}},
		{"any", canonKinds{Any: []int{1}}, canonKinds{Any: []any{1.0}}},
		{"any differs", canonKinds{Any: "x"}, canonKinds{Any: 1}},
		{"nested zero omitted", canonKinds{}, canonKinds{Nested: struct{ X int }{0}}},
		{"nested", canonKinds{Nested: struct{ X int }{1}}, canonKinds{}},
		{"pointer", canonKinds{P: &canonKinds{}}, canonKinds{}},
		{"float", canonKinds{F: 0.1}, canonKinds{F: 0.2}},
		{"nil and empty addresses", canonKinds{Addrs: nil}, canonKinds{Addrs: []netip.Addr{}}},
		{"addresses", canonKinds{Addrs: []netip.Addr{netip.MustParseAddr("10.0.0.1"), {}}}, canonKinds{Addrs: []netip.Addr{netip.MustParseAddr("10.0.0.1")}}},
		{"empty prefixes omitted", canonKinds{Pres: nil}, canonKinds{Pres: []netip.Prefix{}}},
		{"prefixes", canonKinds{Pres: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}, canonKinds{Pres: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/9")}}},
		{"array", canonKinds{Arr: [2]int{1, 2}}, canonKinds{Arr: [2]int{2, 1}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			checkCanon(t, c.a, c.b)
		})
	}
}

// TestCanonOfSites compares random sites (and their Locals' other
// parts), against themselves rebuilt from JSON and against each other.
func TestCanonOfSites(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var sites []spec.Site
	for i := range 300 {
		s := spec.Site{Name: fmt.Sprint("s", r.IntN(5)), Provider: []string{"onprem", "aws", ""}[r.IntN(3)], Index: r.IntN(3)}
		if r.IntN(2) == 0 {
			s.Prefixes = []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(r.IntN(3)), 0, 0}), 24)}
		}
		for j := range r.IntN(3) {
			g := spec.Gateway{Name: fmt.Sprint("g", i%7, j), Endpoint: []string{"", "1.2.3.4:51820"}[r.IntN(2)], BehindNAT: r.IntN(2) == 0}
			switch r.IntN(3) {
			case 1:
				g.BridgePorts = map[string]string{}
			case 2:
				g.BridgePorts = map[string]string{"lan": "eth1", "b": fmt.Sprint("eth", r.IntN(3))}
			}
			if r.IntN(2) == 0 {
				g.LANAddress = netip.AddrFrom4([4]byte{10, 0, 0, byte(r.IntN(3))})
			}
			s.Gateways = append(s.Gateways, g)
		}
		if r.IntN(4) == 0 {
			s.Cloud = &spec.Cloud{}
		}
		sites = append(sites, s)
	}
	for i := range sites {
		checkCanon(t, sites[i], sites[(i*7+3)%len(sites)])
	}
}

// checkCanon checks a and b against each other (same binary form
// exactly when they are the same once through JSON, which is how an
// agent gets them) and each against itself rebuilt from its JSON.
func checkCanon[T any](t *testing.T, a, b T) {
	t.Helper()
	back := func(x T) T {
		var y T
		if err := json.Unmarshal([]byte(encode(x)), &y); err != nil {
			t.Fatal(err)
		}
		return y
	}
	for _, x := range []T{a, b} {
		if string(canonOf(x)) != string(canonOf(back(x))) {
			t.Fatalf("%s: the binary form of a value rebuilt from its JSON differs", encode(x))
		}
	}
	sameJSON := encode(back(a)) == encode(back(b))
	sameCanon := string(canonOf(a)) == string(canonOf(b))
	if sameJSON != sameCanon {
		t.Fatalf("same JSON %v, same binary form %v:\n%s\n%s", sameJSON, sameCanon, encode(a), encode(b))
	}
}

func canonOf[T any](x T) []byte {
	return appendCanon(nil, reflect.ValueOf(&x).Elem())
}

func BenchmarkSiteCanon(b *testing.B) {
	s := spec.Site{Name: "s0001", Provider: "onprem", Gateways: []spec.Gateway{{Name: "g0001", Endpoint: "100.64.1.1:51820", BridgePorts: map[string]string{"lan": "eth1"}}}}
	var buf []byte
	for b.Loop() {
		buf = appendCanon(buf[:0], reflect.ValueOf(&s).Elem())
	}
}

// TestCanonNetipLists: lists of netip values and of strings, which
// canonNetips and canonStrings encode without reflection per entry, have
// the bytes of canonList (as a named list type, which takes the general
// path, has them).
func TestCanonNetipLists(t *testing.T) {
	type addrs []netip.Addr
	type prefixes []netip.Prefix
	type strs []string
	a := []netip.Addr{netip.MustParseAddr("10.0.0.1"), {}, netip.MustParseAddr("fd00::1")}
	p := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/64")}
	for _, c := range []struct{ fast, general any }{
		{a, addrs(a)}, {[]netip.Addr(nil), addrs(nil)}, {[]netip.Addr{}, addrs{}},
		{p, prefixes(p)}, {[]netip.Prefix(nil), prefixes(nil)},
		{[]string{"a", "", "b\xff"}, strs{"a", "", "b\xff"}}, {[]string(nil), strs(nil)}, {[]string{}, strs{}},
	} {
		fast := appendCanon(nil, reflect.ValueOf(c.fast))
		general := appendCanon(nil, reflect.ValueOf(c.general))
		if string(fast) != string(general) {
			t.Errorf("%v: %q, the general path %q", c.fast, fast, general)
		}
	}
}
