package abw

// search is Pathload's rate adjustment: a binary search over the probing
// rate that keeps the highest rate seen flat (lo), the lowest seen
// increasing (hi) and the grey region between (greyLo..greyHi), and ends
// when the range [lo, hi] is narrower than the resolution or the grey
// region reaches to within the grey resolution of both ends. Rates are
// bit/s. Not safe for concurrent use.
type search struct {
	lo, hi         float64
	greyLo, greyHi float64 // 0 when no fleet was grey
	// hiTested is false while hi is only the first guess (from the packet
	// train), which a flat fleet near it may push up.
	hiTested bool
	// resolution and greyResolution are fractions of hi.
	resolution, greyResolution float64
	// next is the rate of the next fleet.
	next float64
}

// newSearch starts a search at the upper guess hi (bit/s): the first
// fleet tests it.
func newSearch(hi, resolution, greyResolution float64) *search {
	return &search{hi: hi, resolution: resolution, greyResolution: greyResolution, next: hi}
}

// rate returns the rate of the next fleet.
func (s *search) rate() float64 { return s.next }

// record takes the trend of the fleet sent at rate r and picks the next
// rate.
func (s *search) record(r float64, t Trend) {
	grey := s.greyHi > 0
	switch t {
	case Increasing:
		s.hi, s.hiTested = min(s.hi, r), true
		if grey && s.greyHi >= s.hi {
			// The grey region lay above a rate now known to be too high.
			s.greyLo, s.greyHi, grey = 0, 0, false
		}
		if grey {
			s.next = (s.greyHi + s.hi) / 2
		} else {
			s.next = (s.lo + s.hi) / 2
		}
	case Flat:
		s.lo = max(s.lo, r)
		// Rates are rounded to whole packet sizes: a flat fleet at about
		// the grey region's bottom clears it.
		if grey && s.greyLo <= s.lo*1.02 {
			s.greyLo, s.greyHi, grey = 0, 0, false
		}
		if grey {
			s.next = (s.lo + s.greyLo) / 2
		} else {
			s.next = (s.lo + s.hi) / 2
		}
	default:
		if !grey {
			s.greyLo, s.greyHi = r, r
		} else {
			s.greyLo, s.greyHi = min(s.greyLo, r), max(s.greyHi, r)
		}
		// Probe the wider gap next: above the grey region or below it.
		if s.hi-s.greyHi > s.greyLo-s.lo {
			s.next = (s.greyHi + s.hi) / 2
		} else {
			s.next = (s.lo + s.greyLo) / 2
		}
	}
	s.widen(r, t)
}

// widen raises an upper guess that no fleet has confirmed when a fleet
// near it was flat: the initial train underestimated (cross
// traffic makes its dispersion noisy), so the search probes above.
func (s *search) widen(r float64, t Trend) {
	if s.hiTested || t != Flat || r < 0.9*s.hi {
		return
	}
	s.hi = 1.5 * max(s.hi, r)
	s.next = s.hi
}

// done reports whether the range is narrow enough.
func (s *search) done() bool {
	if !s.hiTested {
		return false
	}
	if s.hi-s.lo <= s.resolution*s.hi {
		return true
	}
	if s.greyHi > 0 {
		g := s.greyResolution * s.hi
		return s.greyLo-s.lo <= g && s.hi-s.greyHi <= g
	}
	return false
}

// bounds returns the current range [lo, hi].
func (s *search) bounds() (lo, hi float64) { return s.lo, s.hi }
