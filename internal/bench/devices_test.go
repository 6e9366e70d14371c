package bench

import (
	"slices"
	"strings"
	"testing"
)

func TestParseDeviceVariant(t *testing.T) {
	v, err := ParseDeviceVariant(" one: GOMAXPROCS=1 FOO=bar --tun offload --aqm target=2ms ")
	if err != nil {
		t.Fatal(err)
	}
	if v.Name != "one" || !slices.Equal(v.Env, []string{"GOMAXPROCS=1", "FOO=bar"}) ||
		!slices.Equal(v.Flags, []string{"--tun", "offload", "--aqm", "target=2ms"}) {
		t.Fatalf("parsed %+v", v)
	}
	if got := strings.Join(v.argv("/bin/fednet"), " "); got != "env GOMAXPROCS=1 FOO=bar /bin/fednet wgdev --tun offload --aqm target=2ms" {
		t.Errorf("argv %q", got)
	}
	if got := strings.Join(DeviceVariant{Name: "x"}.argv("f"), " "); got != "f wgdev" {
		t.Errorf("argv without env or flags %q", got)
	}
	for tok, want := range firewallTokens {
		v, err := ParseDeviceVariant("x: " + tok + " GOMAXPROCS=1 --aqm off")
		if err != nil || v.Firewall != want || !slices.Equal(v.Env, []string{"GOMAXPROCS=1"}) || !slices.Equal(v.Flags, []string{"--aqm", "off"}) {
			t.Errorf("%s: parsed %+v, %v; want firewall %d", tok, v, err, want)
		}
	}
	for _, bad := range []string{"", "no colon", ": --tun offload"} {
		if _, err := ParseDeviceVariant(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestDeviceTable(t *testing.T) {
	res := []DeviceResult{
		{Variant: "a", Round: 1, RTTP50Ms: 0.5, TCP: []TCPResult{{Streams: 1, Mbps: 100, Cost: Cost{WgdevCPUSecondsPerGB: 5, CPUSecondsPerGB: 9}}}},
		{Variant: "b", Round: 1, RTTP50Ms: 0.7, TCP: []TCPResult{{Streams: 1, Mbps: 300}}, LoadedP99Ms: 3, LoadedLossPct: 1, DelayMbps: 90},
		{Variant: "a", Round: 2, RTTP50Ms: 0.3, TCP: []TCPResult{{Streams: 1, Mbps: 200, Cost: Cost{WgdevCPUSecondsPerGB: 7, CPUSecondsPerGB: 11}}}},
	}
	got := DeviceTable(res, []int{1})
	for _, want := range []string{"| a | 2 | 0.400 | 150 | 6.00 | 10.00 | 0.000 | 0.0 | 0 |", "| b | 1 | 0.700 | 300 | 0.00 | 0.00 | 3.000 | 1.0 | 90 |"} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q:\n%s", want, got)
		}
	}
}

func TestDeviceTableUDP(t *testing.T) {
	udp := func(rate, got, loss float64) UDPResult {
		return UDPResult{OfferedMbps: rate, Mbps: got, LossPct: loss, Cost: Cost{WgdevCPUSecondsPerGB: 4}}
	}
	res := []DeviceResult{
		{Variant: "a", Round: 1, UDP: []UDPResult{udp(500, 480, 4), udp(100, 100, 0)}},
		{Variant: "a", Round: 2, UDP: []UDPResult{udp(500, 490, 2), udp(100, 99, 1)}},
		{Variant: "b", Round: 1},
	}
	got := DeviceTable(res, nil)
	for _, want := range []string{
		"| UDP 100 received Mbit/s | loss % | wgdev CPU s/GB | UDP 500 received Mbit/s |",
		"| a | 2 | 0.000 | 0.000 | 0.0 | 0 | 99.5 | 0.50 | 4.00 | 485.0 | 3.00 | 4.00 |",
		"| b | 1 | 0.000 | 0.000 | 0.0 | 0 | 0.0 | 0.00 | 0.00 | 0.0 | 0.00 | 0.00 |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q:\n%s", want, got)
		}
	}
}
