package wgdev

import "testing"

func TestParseProcs(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
		ok   bool
	}{
		{"", 0, true}, {"0", ProcsPerCPU, true}, {"1", 1, true}, {"256", 256, true},
		{"-1", 0, false}, {"257", 0, false}, {"two", 0, false}, {"1.5", 0, false},
	} {
		got, err := ParseProcs(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseProcs(%q) = %d, %v; want %d, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestParseBind(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Bind
		ok   bool
	}{
		{"", BindBatch, true}, {"batch", BindBatch, true}, {"wireguard-go", BindWireGuardGo, true},
		{"std", "", false}, {"Batch", "", false},
	} {
		got, err := ParseBind(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseBind(%q) = %q, %v; want %q, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestDefaultProcs(t *testing.T) {
	for _, tc := range []struct{ cpus, want int }{{1, 1}, {2, 1}, {3, 1}, {4, 2}, {8, 4}, {64, 32}} {
		if got := DefaultProcs(tc.cpus); got != tc.want {
			t.Errorf("DefaultProcs(%d) = %d, want %d", tc.cpus, got, tc.want)
		}
	}
}
