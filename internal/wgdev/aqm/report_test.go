package aqm

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestReportDrops: a line for an interval with drops, with the drops of
// that interval alone; none for an interval without.
func TestReportDrops(t *testing.T) {
	var cmu sync.Mutex // both counters move together
	var tx, rx uint64
	add := func(t, r uint64) { cmu.Lock(); tx, rx = tx+t, rx+r; cmu.Unlock() }
	var mu sync.Mutex
	var lines []string
	logf := func(f string, a ...any) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, fmt.Sprintf(f, a...))
	}
	got := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), lines...)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		reportDrops("fed0", 20*time.Millisecond, func() (uint64, uint64) { cmu.Lock(); defer cmu.Unlock(); return tx, rx }, logf, stop)
	}()
	time.Sleep(70 * time.Millisecond)
	if l := got(); len(l) != 0 {
		t.Fatalf("lines without drops: %q", l)
	}
	add(7, 2)
	for range 200 {
		if len(got()) > 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	add(3, 0)
	for range 200 {
		if len(got()) > 1 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(stop)
	<-done
	l := got()
	if len(l) != 2 || !strings.Contains(l[0], "dropped 7 packets leaving and 2 arriving") || !strings.Contains(l[1], "dropped 3 packets leaving and 0 arriving") {
		t.Fatalf("lines %q; want one for 7 and 2, then one for 3 and 0", l)
	}
}
