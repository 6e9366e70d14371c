package probe

import (
	"math"
	"testing"
	"time"
)

// synthetic returns the sample of second i: every tenth probe is lost, and
// the RTT cycles through 10..69 ms with the second of the minute.
func synthetic(t0 time.Time, i int) Sample {
	s := Sample{Seq: uint32(i), Sent: t0.Add(time.Duration(i)*time.Second + 250*ms)}
	if i%10 == 0 {
		s.Lost = true
		return s
	}
	s.RTT = time.Duration(10+i%60) * ms
	s.Jitter = time.Duration(i) * time.Microsecond
	return s
}

func TestHistoryRollover(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	h := NewHistory()
	var all []Sample
	const n = 2 * 3600
	for i := range n {
		s := synthetic(t0, i)
		all = append(all, s)
		h.Add(s)
	}
	now := t0.Add(2 * time.Hour) // just after the last sample (at 1:59:59.25)

	t.Run("1-s samples older than an hour are gone", func(t *testing.T) {
		got := h.Samples(now, 2*time.Hour)
		if len(got) != 3600 {
			t.Fatalf("len(Samples(2h)) = %d, want 3600", len(got))
		}
		for _, s := range got {
			if !s.Sent.After(now.Add(-time.Hour)) {
				t.Fatalf("sample sent at %v is older than an hour before %v", s.Sent, now)
			}
		}
		if got[0] != all[3600] || got[3599] != all[n-1] {
			t.Errorf("Samples span %v..%v, want %v..%v", got[0].Sent, got[3599].Sent, all[3600].Sent, all[n-1].Sent)
		}
	})

	t.Run("minute aggregates", func(t *testing.T) {
		mins := h.Minutes(now, 2*time.Hour)
		if len(mins) != 120 {
			t.Fatalf("len(Minutes(2h)) = %d, want 120", len(mins))
		}
		for k, m := range mins {
			exact := Summarize(all[k*60 : (k+1)*60])
			if !m.Start.Equal(t0.Add(time.Duration(k) * time.Minute)) {
				t.Errorf("minute %d starts %v", k, m.Start)
			}
			if m.Count != 60 || m.Lost != 6 || m.RTTMin != exact.RTTMin || m.RTTMax != exact.RTTMax ||
				m.RTTMean != exact.RTTMean || m.Jitter != exact.Jitter {
				t.Errorf("minute %d = %+v, want count 60 lost 6 and %+v", k, m, exact)
			}
			if !within(m.RTTP99, exact.RTTP99, 0.09) {
				t.Errorf("minute %d p99 = %v, exact %v", k, m.RTTP99, exact.RTTP99)
			}
		}
		// Spelled out for the first minute: RTTs 11..69 ms without 20,30,...,60.
		if m := mins[0]; m.RTTMin != 11*ms || m.RTTMax != 69*ms || m.RTTP99 != 69*ms {
			t.Errorf("first minute = %+v", m)
		}
	})

	t.Run("windows", func(t *testing.T) {
		tests := []struct {
			d    time.Duration
			from int // first sample index in the window
		}{
			{time.Minute, n - 60},
			{10 * time.Minute, n - 600},
			{time.Hour, n - 3600},
			{90 * time.Minute, n - 5400},
			{2 * time.Hour, 0},
			{24 * time.Hour, 0},
		}
		for _, tt := range tests {
			got := h.Window(now, tt.d)
			exact := Summarize(all[tt.from:])
			if got.Sent != exact.Sent || got.Lost != exact.Lost || got.Loss != exact.Loss ||
				got.RTTMin != exact.RTTMin || got.RTTMax != exact.RTTMax || got.RTTMean != exact.RTTMean ||
				got.Jitter != exact.Jitter {
				t.Errorf("Window(%v) = %+v, want %+v", tt.d, got, exact)
			}
			tol := 0.0
			if tt.d > SecondSpan {
				tol = 0.09
			}
			if !within(got.RTTP50, exact.RTTP50, tol) || !within(got.RTTP99, exact.RTTP99, tol) {
				t.Errorf("Window(%v) p50/p99 = %v/%v, exact %v/%v", tt.d, got.RTTP50, got.RTTP99, exact.RTTP50, exact.RTTP99)
			}
		}
	})

	t.Run("late lost sample lands in its minute", func(t *testing.T) {
		h := NewHistory()
		h.Add(synthetic(t0, 61))
		h.Add(Sample{Seq: 59, Sent: t0.Add(59 * time.Second), Lost: true}) // decided after minute 1 began
		mins := h.Minutes(t0.Add(2*time.Minute), time.Hour)
		if len(mins) != 2 || mins[0].Count != 1 || mins[0].Lost != 1 || mins[1].Count != 1 || mins[1].Lost != 0 {
			t.Errorf("minutes = %+v", mins)
		}
	})

	t.Run("everything is gone after a day", func(t *testing.T) {
		later := now.Add(25 * time.Hour)
		if got := h.Window(later, 24*time.Hour); got != (Stats{}) {
			t.Errorf("Window a day later = %+v, want zero", got)
		}
		if got := h.Samples(later, time.Hour); len(got) != 0 {
			t.Errorf("Samples a day later = %d, want 0", len(got))
		}
		h.Add(synthetic(later.Add(-2*time.Second), 0)) // a new sample evicts nothing it should keep
		h.Add(synthetic(t0, 5))                        // a sample a day too old is dropped
		if got := h.Window(later, 24*time.Hour); got.Sent != 1 {
			t.Errorf("Window after a day = %+v, want 1 sample", got)
		}
	})
}

func TestBucket(t *testing.T) {
	for _, d := range []time.Duration{0, time.Microsecond, 37 * time.Microsecond, ms, 123 * ms, time.Second, 10 * time.Second} {
		b := bucket(d)
		lo := float64(histBase) * math.Exp2(float64(b)/histPerOct)
		hi := float64(histBase) * math.Exp2(float64(b+1)/histPerOct)
		if d > histBase && (float64(d) < lo || float64(d) >= hi) {
			t.Errorf("bucket(%v) = %d covering [%v, %v)", d, b, time.Duration(lo), time.Duration(hi))
		}
	}
	if b := bucket(time.Hour); b != histBuckets-1 {
		t.Errorf("bucket(1h) = %d, want last", b)
	}
}

func within(got, want time.Duration, tol float64) bool {
	return math.Abs(float64(got-want)) <= tol*float64(want)
}
