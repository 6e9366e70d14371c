package controlplane

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestGCCPU reads the garbage collections of the manager's current
// process (after logFrom) in a window from its log.
func TestGCCPU(t *testing.T) {
	log := "gc 1 @0.500s 1%: 1+2+3 ms clock, 100+1/1/1+1 ms cpu, 3->4->1 MB, 4 MB goal, 2 P\n" // an earlier process
	from := int64(len(log))
	log += "2026/11/24 07:00:00 planned 20 gateways in 3.0 ms (generation 2): 20 edited, 1 whole\n" +
		"gc 1 @0.500s 1%: 1+2+3 ms clock, 2.5+1/2.5/0+0.5 ms cpu, 3->4->1 MB, 4 MB goal, 2 P\n" +
		"gc 2 @1.500s 2%: 1+2+3 ms clock, 0.25+0/0.5/0.25+0 ms cpu, 3->4->1 MB, 4 MB goal, 2 P (forced)\n" +
		"gc 3 @9.000s 2%: 1+2+3 ms clock, 50+0/0/0+0 ms cpu, 3->4->1 MB, 4 MB goal, 2 P\n"
	path := filepath.Join(t.TempDir(), "manager.log")
	if err := os.WriteFile(path, []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	m := &managerProc{log: path, started: start, logFrom: from}
	if got, want := m.gcCPU(start, start.Add(2*time.Second)), 7500*time.Microsecond; got != want {
		t.Errorf("GC CPU in the first 2 s: %v, want %v", got, want)
	}
	if got, want := m.gcCPU(start.Add(time.Second), start.Add(2*time.Second)), time.Millisecond; got != want {
		t.Errorf("GC CPU from 1 s to 2 s: %v, want %v", got, want)
	}
	if p := plannings(path)[2]; p.ms != 3 || p.how != "20 edited, 1 whole" {
		t.Errorf("planning of generation 2: %+v", p)
	}
}
