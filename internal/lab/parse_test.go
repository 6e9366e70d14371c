package lab

import (
	"strings"
	"testing"
	"time"
)

func TestParsePing(t *testing.T) {
	for _, tc := range []struct {
		name, out      string
		sent, received int
		rtts           []time.Duration
		min, avg, max  time.Duration
		wantErr        string
	}{
		{
			name: "all replies",
			out: `PING 10.1.0.254 (10.1.0.254) 56(84) bytes of data.
64 bytes from 10.1.0.254: icmp_seq=1 ttl=64 time=0.061 ms
64 bytes from 10.1.0.254: icmp_seq=2 ttl=64 time=0.043 ms
64 bytes from 10.1.0.254: icmp_seq=2 ttl=64 time=0.044 ms (DUP!)
64 bytes from 10.1.0.254: icmp_seq=3 ttl=64 time=1.5 ms

--- 10.1.0.254 ping statistics ---
3 packets transmitted, 3 received, +1 duplicates, 0% packet loss, time 2030ms
rtt min/avg/max/mdev = 0.043/0.534/1.500/0.007 ms
`,
			sent: 3, received: 3,
			rtts: []time.Duration{61 * time.Microsecond, 43 * time.Microsecond, 1500 * time.Microsecond},
			min:  43 * time.Microsecond, avg: 534 * time.Microsecond, max: 1500 * time.Microsecond,
		},
		{
			name: "no reply",
			out: `PING 10.2.0.1 (10.2.0.1) 56(84) bytes of data.

--- 10.2.0.1 ping statistics ---
3 packets transmitted, 0 received, 100% packet loss, time 2047ms

`,
			sent: 3,
		},
		{
			name: "errors",
			out: `PING 10.2.0.1 (10.2.0.1) 56(84) bytes of data.
From 10.1.0.254 icmp_seq=1 Destination Net Unreachable
From 10.1.0.254 icmp_seq=2 Destination Net Unreachable

--- 10.2.0.1 ping statistics ---
2 packets transmitted, 0 received, +2 errors, 100% packet loss, time 1001ms
`,
			sent: 2,
		},
		{name: "cannot run", out: "ping: connect: Network is unreachable\n", wantErr: "no summary"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := parsePing(tc.out)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.Sent != tc.sent || r.Received != tc.received || r.Min != tc.min || r.Avg != tc.avg || r.Max != tc.max {
				t.Errorf("got %+v", r)
			}
			if len(r.RTTs) != len(tc.rtts) {
				t.Fatalf("RTTs = %v, want %v", r.RTTs, tc.rtts)
			}
			for i := range r.RTTs {
				if r.RTTs[i] != tc.rtts[i] {
					t.Errorf("RTTs = %v, want %v", r.RTTs, tc.rtts)
				}
			}
		})
	}
	if l := (PingResult{Sent: 4, Received: 3}).Loss(); l != 0.25 {
		t.Errorf("Loss = %v", l)
	}
}

func TestParseIperf3(t *testing.T) {
	ok := `{"start":{},"intervals":[],"end":{
	  "sum_sent":{"start":0,"end":1.0,"seconds":1.0,"bytes":125000000,"bits_per_second":1000000000,"retransmits":7,"sender":true},
	  "sum_received":{"start":0,"end":1.0,"seconds":1.0004,"bytes":123000000,"bits_per_second":984000000.5,"sender":true}}}`
	tp, err := parseIperf3([]byte(ok))
	if err != nil {
		t.Fatal(err)
	}
	if tp.Mbps < 983.9 || tp.Mbps > 984.1 || tp.SentMbps != 1000 || tp.Retransmits != 7 || tp.Duration != 1000400*time.Microsecond {
		t.Errorf("got %+v", tp)
	}
	for _, bad := range []struct{ in, want string }{
		{`{"start":{},"intervals":[],"end":{},"error":"unable to connect to server: Connection refused"}`, "unable to connect"},
		{`{"end":{}}`, "no received data"},
		{`iperf3: error`, "reading iperf3 JSON"},
	} {
		if _, err := parseIperf3([]byte(bad.in)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("parseIperf3(%s) err = %v, want %q", bad.in, err, bad.want)
		}
	}
}
