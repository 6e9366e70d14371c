package await

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// recorder is a testing.TB whose Fatalf records the message and ends the
// goroutine, as the real one does.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls f with a recorder on its own goroutine (Fatalf ends it) and
// returns the failure message, "" when f returned normally.
func run(f func(t testing.TB)) string {
	r := &recorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r.failed
}

func TestUntilReturnsOnceDone(t *testing.T) {
	calls := 0
	msg := run(func(tb testing.TB) {
		Until(tb, 5*time.Second, func() (bool, string) {
			calls++
			return calls == 3, fmt.Sprintf("call %d", calls)
		})
	})
	if msg != "" || calls != 3 {
		t.Errorf("Until failed with %q after %d calls; want success at the third call", msg, calls)
	}
}

func TestUntilFailsWithLastReason(t *testing.T) {
	calls := 0
	start := time.Now()
	msg := run(func(tb testing.TB) {
		Until(tb, 100*time.Millisecond, func() (bool, string) {
			calls++
			return false, fmt.Sprintf("%d links up, want 6", calls)
		})
	})
	took := time.Since(start)
	want := fmt.Sprintf("not within 100ms: %d links up, want 6", calls)
	if !strings.Contains(msg, want) {
		t.Errorf("failure %q, want it to contain %q (the last reason)", msg, want)
	}
	if took < 100*time.Millisecond {
		t.Errorf("gave up after %v, before the 100ms timeout", took)
	}
	if calls < 2 {
		t.Errorf("cond called %d times; want a first look and at least one more at the deadline", calls)
	}
}

// TestPollLooksAtTheDeadline: a condition that holds only from the
// deadline on is seen; Poll does not give up on the strength of an old
// look.
func TestPollLooksAtTheDeadline(t *testing.T) {
	deadline := time.Now().Add(80 * time.Millisecond)
	err := Poll(80*time.Millisecond, func() (bool, string) {
		return !time.Now().Before(deadline), "before the deadline"
	})
	if err != nil {
		t.Errorf("Poll = %v, want nil: the condition held at the deadline", err)
	}
	if err := Poll(0, func() (bool, string) { return false, "" }); err == nil || !strings.Contains(err.Error(), "did not hold") {
		t.Errorf("Poll of a condition with no reason = %v; want an error that says it did not hold", err)
	}
}

func TestHolds(t *testing.T) {
	calls := 0
	if msg := run(func(tb testing.TB) {
		Holds(tb, 50*time.Millisecond, 5*time.Millisecond, func() (bool, string) { calls++; return true, "" })
	}); msg != "" || calls < 2 {
		t.Errorf("Holds of a steady condition failed with %q after %d calls", msg, calls)
	}
	calls = 0
	msg := run(func(tb testing.TB) {
		Holds(tb, 5*time.Second, time.Millisecond, func() (bool, string) {
			calls++
			return calls < 4, "link down"
		})
	})
	if !strings.Contains(msg, "stopped holding") || !strings.Contains(msg, "link down") || calls != 4 {
		t.Errorf("Holds of a condition that broke at the 4th call: %q after %d calls", msg, calls)
	}
}

func TestNoError(t *testing.T) {
	err := Poll(20*time.Millisecond, NoError(func() error { return fmt.Errorf("socket still exists") }))
	if err == nil || !strings.HasSuffix(err.Error(), ": socket still exists") {
		t.Errorf("Poll(NoError(failing)) = %v; want the function's error as the reason", err)
	}
	if err := Poll(time.Second, NoError(func() error { return nil })); err != nil {
		t.Errorf("Poll(NoError(nil)) = %v", err)
	}
}
