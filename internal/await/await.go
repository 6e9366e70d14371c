// Package await waits in tests for something another goroutine, process or
// network namespace brings about: a counter that reaches a value, a link
// that comes up, a process that exits. It is the one way fednet's tests
// wait: they poll a condition with a deadline instead of sleeping and
// hoping, so a fast machine does not wait for nothing and a slow one does
// not fail for nothing, and a failure says what was still missing.
//
// A condition is a func() (done bool, reason string): done reports whether
// what the test waits for has happened; reason, when it has not, says what
// is still missing ("3 of 6 links up"), and ends up in the failure
// message. Conditions are called from the caller's goroutine, one at a
// time, so they may call t.Errorf and read test state without locks of
// their own (the state other goroutines write still needs its locks).
//
// This package is for tests only: it imports testing, and the architecture
// test keeps it out of every production package.
package await

import (
	"fmt"
	"testing"
	"time"
)

// Cond is a condition: done reports whether it holds; reason, when it does
// not, says what is still missing.
type Cond func() (done bool, reason string)

// NoError is the condition "f returns nil"; f's error is the reason while
// it does not.
func NoError(f func() error) Cond {
	return func() (bool, string) {
		if err := f(); err != nil {
			return false, err.Error()
		}
		return true, ""
	}
}

// Polling intervals: the first retry comes after firstInterval, each next
// one after twice the last, up to maxInterval. Cheap conditions that hold
// soon are seen at once; expensive ones (a process per call, an API
// round trip) run at most 1/maxInterval times a second.
const (
	firstInterval = time.Millisecond
	maxInterval   = 50 * time.Millisecond
)

// Poll calls cond at once and then at growing intervals (1 ms up to 50 ms)
// until it is done or timeout has passed since the call, and calls it one
// last time at or after the deadline. It returns nil when cond was done,
// else an error carrying timeout and cond's last reason. It is for code
// that decides itself what a timeout means (a cleanup that goes on, a
// check that reports with t.Errorf); tests that cannot go on use Until.
func Poll(timeout time.Duration, cond Cond) error {
	deadline := time.Now().Add(timeout)
	interval := firstInterval
	for {
		done, reason := cond()
		if done {
			return nil
		}
		if !time.Now().Before(deadline) {
			if reason == "" {
				reason = "the condition did not hold"
			}
			return fmt.Errorf("not within %v: %s", timeout, reason)
		}
		time.Sleep(min(interval, time.Until(deadline)))
		interval = min(2*interval, maxInterval)
	}
}

// Until is Poll for a test that cannot go on without cond: it fails t with
// t.Fatalf, naming timeout and cond's last reason, when cond is not done
// in time. It returns how long cond took to be done. Call it from the
// goroutine running the test.
func Until(t testing.TB, timeout time.Duration, cond Cond) time.Duration {
	t.Helper()
	start := time.Now()
	if err := Poll(timeout, cond); err != nil {
		t.Fatalf("waited in vain: %v", err)
	}
	return time.Since(start)
}

// Holds checks that cond stays done for the whole of d: it calls cond at
// once and then every interval until d has passed, and fails t with
// t.Fatalf, naming cond's reason and how long it held, at the first call
// that is not done. It is for "still true ten seconds later" checks, which
// a sleep followed by one look would pass when the condition broke and
// recovered in between. Call it from the goroutine running the test.
func Holds(t testing.TB, d, interval time.Duration, cond Cond) {
	t.Helper()
	start := time.Now()
	for {
		done, reason := cond()
		if !done {
			t.Fatalf("stopped holding after %v (of %v): %s", time.Since(start).Round(time.Millisecond), d, reason)
		}
		left := d - time.Since(start)
		if left <= 0 {
			return
		}
		time.Sleep(min(interval, left))
	}
}
