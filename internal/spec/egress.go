package spec

import (
	"fmt"
	"math"
	"strings"
)

// EgressPrice is one row of the egress price table: what a provider (in
// one region, or in any) charges per GB of traffic leaving a site.
type EgressPrice struct {
	Provider string `yaml:"provider" json:"provider"`
	// Region, when set, limits the row to the sites of that region; a row
	// without one matches every region of the provider that has no row of
	// its own.
	Region string `yaml:"region,omitempty" json:"region,omitempty"`
	// USDPerGB is the price in US dollars per GB (BytesPerGB bytes).
	USDPerGB float64 `yaml:"usdPerGB" json:"usdPerGB"`
}

// BytesPerGB is the GB of the price table: 2^30 bytes, the unit the large
// clouds meter egress in.
const BytesPerGB = 1 << 30

// MaxUSDPerGB bounds a price: above it the value is surely in the wrong
// unit (cents, or per TB).
const MaxUSDPerGB = 100

// EgressPrice returns the price per GB of traffic leaving the named site:
// the row of its provider and region, else the row of its provider
// without a region. ok is false when the site is unknown or no row
// applies.
func (f *Federation) EgressPrice(site string) (usdPerGB float64, ok bool) {
	s, found := f.Site(site)
	if !found {
		return 0, false
	}
	for _, p := range f.EgressPrices {
		if p.Provider == s.Provider && p.Region != "" && p.Region == s.Region {
			return p.USDPerGB, true
		}
	}
	for _, p := range f.EgressPrices {
		if p.Provider == s.Provider && p.Region == "" {
			return p.USDPerGB, true
		}
	}
	return 0, false
}

// EgressCost is the estimated cost in US dollars of sending bytes at
// usdPerGB.
func EgressCost(bytes int64, usdPerGB float64) float64 {
	return float64(max(bytes, 0)) / BytesPerGB * usdPerGB
}

// egressPrices checks the price table: known providers, a price for every
// row, no row twice.
func (c *checker) egressPrices() {
	// A price may name a provider of the numbering plan or of any site
	// (sites with explicit prefixes may name any provider).
	known := map[string]bool{}
	for name := range c.providers {
		known[name] = true
	}
	for _, s := range c.f.Sites {
		if s.Provider != "" {
			known[s.Provider] = true
		}
	}
	names := sortedKeys(known)
	first := map[[2]string]int{}
	for i, p := range c.f.EgressPrices {
		path := fmt.Sprintf("egressPrices[%d]", i)
		switch {
		case p.Provider == "":
			c.add(path+".provider", "the price has no provider; want provider: followed by a site's provider (%s)", strings.Join(names, ", "))
		case !known[p.Provider]:
			hint := ""
			if s := suggest(p.Provider, names); s != "" {
				hint = fmt.Sprintf(" (did you mean %s?)", s)
			}
			c.add(path+".provider", "unknown provider %q%s; want a site's provider or one of the numbering plan's: %s", p.Provider, hint, strings.Join(names, ", "))
		}
		switch v := p.USDPerGB; {
		case !c.set[path+".usdPerGB"]:
			c.add(path, "the price has no usdPerGB; want the provider's price per GB out in US dollars, e.g. usdPerGB: 0.09")
		case v < 0 || math.IsNaN(v):
			c.add(path+".usdPerGB", "%v is negative; want the price per GB out in US dollars, 0 or more, e.g. 0.09", v)
		case v > MaxUSDPerGB:
			c.add(path+".usdPerGB", "%v dollars per GB is more than %d; want dollars per GB (not cents, not per TB), e.g. 0.09", v, MaxUSDPerGB)
		}
		key := [2]string{p.Provider, p.Region}
		if j, dup := first[key]; dup {
			where := "provider " + p.Provider
			if p.Region != "" {
				where += " region " + p.Region
			} else {
				where += " without a region"
			}
			c.add(path, "a second price for %s (the first is egressPrices[%d], line %d); keep one", where, j, c.f.Line(fmt.Sprintf("egressPrices[%d]", j)))
			continue
		}
		first[key] = i
	}
}
