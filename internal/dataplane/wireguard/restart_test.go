package wireguard

import (
	"testing"
	"time"
)

// TestRestartPolicy: on a fake clock, the first Burst deaths within the
// window restart at once, the next ones wait Delay doubling up to
// MaxDelay, and a device that stayed up for the window starts afresh.
func TestRestartPolicy(t *testing.T) {
	p := RestartPolicy{Burst: 3, Window: time.Minute, Delay: time.Second, MaxDelay: 8 * time.Second}
	r := restarts{policy: p}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var got []time.Duration
	for range 8 {
		delay, _ := r.next(now)
		got = append(got, delay)
		now = now.Add(delay + 100*time.Millisecond) // dies 100 ms after each restart
	}
	want := []time.Duration{0, 0, 0, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 8 * time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("delays %v, want %v", got, want)
		}
	}
	// Up for a whole window since the last restart: at once again.
	now = now.Add(time.Minute)
	if delay, n := r.next(now); delay != 0 || n != 1 {
		t.Errorf("after a minute up: delay %v, restart %d; want at once, the first", delay, n)
	}
	// Deaths spread wider than the window never wait.
	r = restarts{policy: p}
	for i := range 10 {
		if delay, _ := r.next(now); delay != 0 {
			t.Fatalf("death %d, 25 s after the one before: delay %v", i, delay)
		}
		now = now.Add(25 * time.Second)
	}
}

func TestRestartPolicyValidate(t *testing.T) {
	if _, err := New(Config{Restart: RestartPolicy{Burst: 0, Window: time.Minute, Delay: time.Second, MaxDelay: time.Second}}); err == nil {
		t.Error("Burst 0 accepted")
	}
	if _, err := New(Config{Restart: RestartPolicy{Burst: 1, Window: time.Minute, Delay: 2 * time.Second, MaxDelay: time.Second}}); err == nil {
		t.Error("MaxDelay below Delay accepted")
	}
	d, err := New(Config{})
	if err != nil || d.cfg.Restart != DefaultRestartPolicy {
		t.Errorf("zero policy: %v, %+v", err, d.cfg.Restart)
	}
}
