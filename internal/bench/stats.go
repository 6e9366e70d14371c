package bench

import (
	"math"
	"slices"
)

// Summary describes a sample of values (milliseconds, Mbit/s, ...).
type Summary struct {
	N      int     `json:"n"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	Mean   float64 `json:"mean"`
	StdDev float64 `json:"stddev"`
	P50    float64 `json:"p50"`
	P90    float64 `json:"p90"`
	P99    float64 `json:"p99"`
}

// Summarize returns the summary of values; the zero Summary for none. The
// standard deviation is the sample's (n-1); percentiles interpolate
// linearly between closest ranks (see Percentile).
func Summarize(values []float64) Summary {
	if len(values) == 0 {
		return Summary{}
	}
	s := slices.Clone(values)
	slices.Sort(s)
	sum := 0.0
	for _, v := range s {
		sum += v
	}
	mean := sum / float64(len(s))
	sq := 0.0
	for _, v := range s {
		sq += (v - mean) * (v - mean)
	}
	sd := 0.0
	if len(s) > 1 {
		sd = math.Sqrt(sq / float64(len(s)-1))
	}
	return Summary{
		N: len(s), Min: s[0], Max: s[len(s)-1], Mean: mean, StdDev: sd,
		P50: percentileSorted(s, 50), P90: percentileSorted(s, 90), P99: percentileSorted(s, 99),
	}
}

// Percentile returns the p-th percentile (0..100) of values, interpolating
// linearly between the closest ranks (the "R-7" definition of R and
// NumPy's default): the 0th is the minimum, the 100th the maximum. NaN for
// no values.
func Percentile(values []float64, p float64) float64 {
	if len(values) == 0 {
		return math.NaN()
	}
	s := slices.Clone(values)
	slices.Sort(s)
	return percentileSorted(s, p)
}

func percentileSorted(s []float64, p float64) float64 {
	p = math.Max(0, math.Min(100, p))
	pos := p / 100 * float64(len(s)-1)
	lo := int(math.Floor(pos))
	hi := int(math.Ceil(pos))
	if lo == hi {
		return s[lo]
	}
	return s[lo] + (s[hi]-s[lo])*(pos-float64(lo))
}

// CDFPoint is one step of an empirical distribution function: the
// fraction of values at most Value.
type CDFPoint struct {
	Value    float64 `json:"value"`
	Fraction float64 `json:"fraction"`
}

// CDF returns the empirical cumulative distribution of values: one point
// per distinct value, ascending, the last at fraction 1.
func CDF(values []float64) []CDFPoint {
	s := slices.Clone(values)
	slices.Sort(s)
	var out []CDFPoint
	for i, v := range s {
		f := float64(i+1) / float64(len(s))
		if n := len(out); n > 0 && out[n-1].Value == v {
			out[n-1].Fraction = f
			continue
		}
		out = append(out, CDFPoint{Value: v, Fraction: f})
	}
	return out
}

// Ratio returns a/b, or 0 when either is not a positive number (a ratio
// of a figure that was not measured is no figure).
func Ratio(a, b float64) float64 {
	if !(a > 0) || !(b > 0) || math.IsInf(a, 0) || math.IsInf(b, 0) {
		return 0
	}
	return a / b
}

// round returns v rounded to digits decimals.
func round(v float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}
