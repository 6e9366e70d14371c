package spec

import (
	"errors"
	"math"
	"strings"
	"testing"
)

// withPrices is base with an egressPrices list of the given entries (one
// line each, from line 21).
func withPrices(entries ...string) string {
	s := base + "egressPrices:\n"
	for _, e := range entries {
		s += "  - " + e + "\n"
	}
	return s
}

func TestEgressPrices(t *testing.T) {
	y := strings.Replace(withPrices("{provider: aws, usdPerGB: 0.09}", "{provider: aws, region: eu-west-1, usdPerGB: 0.02}", "{provider: azure, usdPerGB: 0}"),
		"    provider: aws\n", "    provider: aws\n    region: eu-west-1\n", 1)
	f, err := Parse([]byte(y))
	if err != nil {
		t.Fatalf("spec with prices rejected:\n%v", err)
	}
	if p, ok := f.EgressPrice("a"); !ok || p != 0.02 {
		t.Errorf("price of site a (aws eu-west-1) = %v, %v; want the region's 0.02", p, ok)
	}
	if p, ok := f.EgressPrice("b"); !ok || p != 0 {
		t.Errorf("price of site b (azure) = %v, %v; want 0 (free, but priced)", p, ok)
	}
	if _, ok := f.EgressPrice("nowhere"); ok {
		t.Error("an unknown site has a price")
	}
	// Without the region row, the provider's row applies to every region.
	y = strings.Replace(withPrices("{provider: aws, usdPerGB: 0.09}"), "    provider: aws\n", "    provider: aws\n    region: us-east-1\n", 1)
	if f, err = Parse([]byte(y)); err != nil {
		t.Fatal(err)
	}
	if p, ok := f.EgressPrice("a"); !ok || p != 0.09 {
		t.Errorf("price of site a = %v, %v; want the provider's 0.09", p, ok)
	}
	if _, ok := f.EgressPrice("b"); ok {
		t.Error("site b (azure) has a price though the table has no azure row")
	}
	// No table: no prices.
	if f, err = Parse([]byte(base)); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.EgressPrice("a"); ok {
		t.Error("a price without a price table")
	}
	// A site provider outside the numbering plan may be priced.
	y = strings.Replace(withPrices("{provider: hetzner, usdPerGB: 0.001}"), "    provider: azure\n", "    provider: hetzner\n    prefixes: [10.30.0.0/24]\n", 1)
	if f, err = Parse([]byte(y)); err != nil {
		t.Fatalf("a price for a site's own provider rejected:\n%v", err)
	}
	if p, _ := f.EgressPrice("b"); p != 0.001 {
		t.Errorf("price of the hetzner site = %v", p)
	}
}

func TestEgressCost(t *testing.T) {
	for _, tc := range []struct {
		bytes int64
		price float64
		want  float64
	}{
		{0, 0.09, 0},
		{BytesPerGB, 0.09, 0.09},
		{10 * BytesPerGB, 0.02, 0.2},
		{BytesPerGB / 2, 0.1, 0.05},
		{-5, 0.09, 0}, // a counter never goes negative; if it did, no refund
	} {
		if got := EgressCost(tc.bytes, tc.price); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("EgressCost(%d, %v) = %v, want %v", tc.bytes, tc.price, got, tc.want)
		}
	}
}

func TestEgressPriceRejections(t *testing.T) {
	for _, tc := range []struct {
		name, spec, path string
		line             int
		msg              string
	}{
		{"unknown provider", withPrices("{provider: awz, usdPerGB: 0.09}"), "egressPrices[0].provider", 21, `unknown provider "awz" (did you mean aws?)`},
		{"no provider", withPrices("{usdPerGB: 0.09}"), "egressPrices[0].provider", 21, "the price has no provider"},
		{"no price", withPrices("{provider: aws}"), "egressPrices[0]", 21, "no usdPerGB; want the provider's price per GB out in US dollars"},
		{"negative price", withPrices("{provider: aws, usdPerGB: -0.01}"), "egressPrices[0].usdPerGB", 21, "-0.01 is negative"},
		{"price in cents", withPrices("{provider: aws, usdPerGB: 900}"), "egressPrices[0].usdPerGB", 21, "not cents, not per TB"},
		{"price is text", withPrices("{provider: aws, usdPerGB: cheap}"), "egressPrices[0].usdPerGB", 21, `"cheap" is not a number`},
		{"price quoted", withPrices(`{provider: aws, usdPerGB: "0.09"}`), "egressPrices[0].usdPerGB", 21, "quoted text, not a number"},
		{"price infinite", withPrices("{provider: aws, usdPerGB: .inf}"), "egressPrices[0].usdPerGB", 21, "not a finite number"},
		{"same row twice", withPrices("{provider: aws, usdPerGB: 0.09}", "{provider: azure, usdPerGB: 0.08}", "{provider: aws, usdPerGB: 0.05}"),
			"egressPrices[2]", 23, "a second price for provider aws without a region (the first is egressPrices[0], line 21)"},
		{"same region twice", withPrices("{provider: aws, region: r1, usdPerGB: 0.09}", "{provider: aws, region: r1, usdPerGB: 0.05}"),
			"egressPrices[1]", 22, "a second price for provider aws region r1"},
		{"unknown field", withPrices("{provider: aws, usdPerGb: 0.09}"), "egressPrices[0].usdPerGb", 21, "did you mean usdPerGB?"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.spec))
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Parse = %v, want a *Error", err)
			}
			for _, p := range e.Problems {
				if p.Path == tc.path && p.Line == tc.line && strings.Contains(p.Message, tc.msg) {
					return
				}
			}
			t.Errorf("no problem at line %d %s with %q; got:\n%v", tc.line, tc.path, tc.msg, err)
		})
	}
}
