package lab

import "testing"

func TestParseIperf3UDP(t *testing.T) {
	b := []byte(`{"end":{"sum_sent":{"seconds":2,"bits_per_second":80000000,"packets":1000},
	"sum_received":{"seconds":2,"bits_per_second":50000000,"jitter_ms":0.25,"lost_packets":375,"packets":1000}}}`)
	r, err := decodeIperf3(b)
	if err != nil {
		t.Fatal(err)
	}
	u := udpThroughput(r)
	if u.OfferedMbps != 80 || u.Mbps != 50 || u.Loss() != 0.375 || u.Jitter.Microseconds() != 250 {
		t.Errorf("parsed %+v", u)
	}
	if _, err := decodeIperf3([]byte(`{"error":"unable to connect"}`)); err == nil {
		t.Error("an iperf3 error was not reported")
	}
}
