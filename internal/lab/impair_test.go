package lab

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func TestParseRate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want float64
	}{{"100mbit", 100e6}, {"1.5Gbit", 1.5e9}, {"800kbit", 800e3}, {"20M", 20e6}, {"5000", 5000}, {"64bit", 64}} {
		got, err := ParseRate(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
		if back, err := ParseRate(FormatRate(tc.want)); err != nil || back != tc.want {
			t.Errorf("ParseRate(FormatRate(%v)) = %v, %v", tc.want, back, err)
		}
	}
	for _, in := range []string{"", "fast", "-1mbit", "10mbps", "1e999"} {
		if _, err := ParseRate(in); err == nil || !strings.Contains(err.Error(), "100mbit") {
			t.Errorf("ParseRate(%q): %v, want an error showing an example", in, err)
		}
	}
}

func TestParseLoss(t *testing.T) {
	for in, want := range map[string]float64{"1%": 0.01, "0.5%": 0.005, "100": 1, "0": 0} {
		if got, err := ParseLoss(in); err != nil || got != want {
			t.Errorf("ParseLoss(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"-1%", "101%", "x"} {
		if _, err := ParseLoss(in); err == nil {
			t.Errorf("ParseLoss(%q) accepted", in)
		}
	}
}

func TestImpairmentValidate(t *testing.T) {
	ok := Impairment{Rate: 100e6, Delay: 50 * time.Millisecond, Jitter: 5 * time.Millisecond, Loss: 0.01}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := ok.String(); got != "rate 100mbit, delay 50ms, jitter 5ms, loss 1%" {
		t.Errorf("String() = %q", got)
	}
	for field, im := range map[string]Impairment{
		"rate":   {Rate: -1},
		"loss":   {Loss: 1.5},
		"delay":  {Delay: -time.Second},
		"jitter": {Jitter: time.Hour},
		"burst":  {Burst: -1},
	} {
		if err := im.Validate(); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%+v: %v, want an error naming %s", im, err, field)
		}
	}
	if b := (Impairment{Rate: 20e6}).burst(); b != minBurst {
		t.Errorf("burst at 20mbit = %d, want the minimum %d", b, minBurst)
	}
	if b := (Impairment{Rate: 400e6}).burst(); b != 5000 {
		t.Errorf("burst at 400mbit = %d, want 100 µs worth (5000)", b)
	}
}

func TestScheduleKeepsOrderAndBounds(t *testing.T) {
	s := &schedule{delay: 20 * time.Millisecond, jitter: 10 * time.Millisecond, loss: 0.25, rng: rand.New(rand.NewPCG(1, 2))}
	start := time.Unix(1000, 0)
	var last time.Time
	lost := 0
	const n = 10000
	for i := range n {
		now := start.Add(time.Duration(i) * 100 * time.Microsecond)
		due, ok := s.next(now)
		if !ok {
			lost++
			continue
		}
		if due.Before(last) {
			t.Fatalf("packet %d leaves at %v, before the previous one (%v)", i, due, last)
		}
		if d := due.Sub(now); d < 10*time.Millisecond || d > 30*time.Millisecond+100*time.Microsecond*10 {
			t.Fatalf("packet %d held %v, outside delay ± jitter", i, d)
		}
		last = due
	}
	if frac := float64(lost) / n; frac < 0.2 || frac > 0.3 {
		t.Errorf("lost %.3f of packets, want about 0.25", frac)
	}
}
