package bench

import (
	"errors"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// The testdata reports are iperf3 3.12's, from runs on a loopback
// interface.
func TestParseIperf(t *testing.T) {
	read := func(name string) []byte {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	tcp, err := parseIperf(read("iperf3-tcp.json"), false)
	if err != nil {
		t.Fatal(err)
	}
	if tcp.Bytes <= 0 || tcp.Mbps < 1000 || tcp.Seconds < 0.9 || tcp.Seconds > 1.1 {
		t.Errorf("TCP report: %+v", tcp)
	}
	udp, err := parseIperf(read("iperf3-udp.json"), true)
	if err != nil {
		t.Fatal(err)
	}
	if udp.SentMbps < 9.9 || udp.SentMbps > 10.1 || udp.Mbps < 9.9 || udp.LostPercent != 0 || udp.JitterMs <= 0 || udp.Bytes != 1249200 {
		t.Errorf("UDP report: %+v", udp)
	}
	if _, err := parseIperf(read("iperf3-error.json"), false); err == nil || !strings.Contains(err.Error(), "Connection refused") {
		t.Errorf("error report: got %v, want iperf3's error", err)
	}
	for _, bad := range []string{"", "{", `{"end":{}}`} {
		if _, err := parseIperf([]byte(bad), false); err == nil {
			t.Errorf("parseIperf(%q): no error", bad)
		}
	}
	// A report with only the sender's UDP summary: received = sent less loss.
	old := []byte(`{"end":{"sum":{"seconds":1,"bytes":1000,"bits_per_second":100e6,"lost_percent":10,"jitter_ms":0.5}}}`)
	r, err := parseIperf(old, true)
	if err != nil || r.Mbps != 90 || r.SentMbps != 100 {
		t.Errorf("sender-only UDP report: %+v, %v", r, err)
	}
}

func TestTransferArgs(t *testing.T) {
	to := netip.MustParseAddr("10.2.0.1")
	for _, c := range []struct {
		tr   transfer
		want []string
	}{
		{transfer{to: to, port: 5201, duration: 1500 * time.Millisecond, streams: 1}, []string{"-c", "10.2.0.1", "-p", "5201", "-J", "--connect-timeout", "3000", "-t", "2"}},
		{transfer{to: to, port: 5201, duration: 0, streams: 4}, []string{"-c", "10.2.0.1", "-p", "5201", "-J", "--connect-timeout", "3000", "-t", "1", "-P", "4"}},
		{transfer{to: to, port: 5201, bytes: 1000, streams: 1}, []string{"-c", "10.2.0.1", "-p", "5201", "-J", "--connect-timeout", "3000", "-n", "1000"}},
		{transfer{to: to, port: 5201, duration: time.Second, udpMbps: 500}, []string{"-c", "10.2.0.1", "-p", "5201", "-J", "--connect-timeout", "3000", "-t", "1", "-u", "-b", "500M", "-l", "1200"}},
	} {
		if got := c.tr.args(); !slices.Equal(got, c.want) {
			t.Errorf("args of %+v = %v, want %v", c.tr, got, c.want)
		}
	}
}

// TestTransient: a server still finishing the previous test (busy,
// resetting, or refusing while it opens its listening socket again) is
// tried again; anything else is reported at once.
func TestTransient(t *testing.T) {
	for _, tc := range []struct {
		msg  string
		want bool
	}{
		{"iperf3: error - the server is busy running a test. try again later", true},
		{"iperf3: unable to receive control message: Connection reset by peer", true},
		{"iperf3: error - unable to connect to server: Connection refused", true},
		{"iperf3: error - unable to connect to server: No route to host", false},
		{"iperf3 output is not JSON", false},
	} {
		if got := transient(errors.New(tc.msg)); got != tc.want {
			t.Errorf("transient(%q) = %v, want %v", tc.msg, got, tc.want)
		}
	}
}
