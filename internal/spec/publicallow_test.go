package spec

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

// withAllow returns base with overlay.publicAllow entries fed (flow
// mappings, one a line, from line 4; "" for none) and a-gw's publicAllow
// entries gw (one a line, after a-gw's endpoint).
func withAllow(t *testing.T, fed []string, gw []string) string {
	t.Helper()
	s := base
	if len(gw) > 0 {
		s = edit(t, "endpoint: 198.51.100.1:51820\n", "endpoint: 198.51.100.1:51820\n        publicAllow:\n          - "+strings.Join(gw, "\n          - ")+"\n")
	}
	if len(fed) > 0 {
		s = strings.Replace(s, "name: t\n", "name: t\noverlay:\n  publicAllow:\n    - "+strings.Join(fed, "\n    - ")+"\n", 1)
	}
	return s
}

func TestPublicAllow(t *testing.T) {
	f, err := Parse([]byte(withAllow(t,
		[]string{"{protocol: tcp, port: 22, sources: [203.0.113.0/24, \"2001:db8::/32\"]}"},
		[]string{"{protocol: udp, port: 161, sources: [192.0.2.7/32]}"})))
	if err != nil {
		t.Fatalf("spec rejected:\n%v", err)
	}
	a, _, _ := f.Gateway("a-gw")
	b, _, _ := f.Gateway("b-gw")
	ssh := Admission{Protocol: "tcp", Port: 22, Sources: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("2001:db8::/32")}}
	snmp := Admission{Protocol: "udp", Port: 161, Sources: []netip.Prefix{netip.MustParsePrefix("192.0.2.7/32")}}
	if got := f.PublicAllowOf(a); !reflect.DeepEqual(got, []Admission{ssh, snmp}) {
		t.Errorf("a-gw admits %+v, want the federation's ssh then its own snmp", got)
	}
	if got := f.PublicAllowOf(b); !reflect.DeepEqual(got, []Admission{ssh}) {
		t.Errorf("b-gw admits %+v, want the federation's ssh only", got)
	}
	if got := f.Line("sites[0].gateways[0].publicAllow[0].port"); got != 14 {
		t.Errorf("line of a-gw's first publicAllow = %d, want 14", got)
	}
}

func TestPublicAllowRejects(t *testing.T) {
	for _, tc := range []struct {
		name    string
		fed, gw []string
		want    string
	}{
		{"no protocol", []string{"{port: 22, sources: [203.0.113.0/24]}"}, nil,
			"line 6: overlay.publicAllow[0].protocol: protocol is missing; want tcp or udp"},
		{"icmp", []string{"{protocol: icmp, port: 22, sources: [203.0.113.0/24]}"}, nil,
			`line 6: overlay.publicAllow[0].protocol: "icmp" is not a protocol fednet admits; want tcp or udp`},
		{"no port", []string{"{protocol: tcp, sources: [203.0.113.0/24]}"}, nil,
			"line 6: overlay.publicAllow[0].port: port is missing"},
		{"port out of range", nil, []string{"{protocol: tcp, port: 0, sources: [203.0.113.0/24]}", "{protocol: tcp, port: 70000, sources: [203.0.113.0/24]}"},
			"line 12: sites[0].gateways[0].publicAllow[1].port: 70000 is not a port; want 1..65535"},
		{"the tunnel port", nil, []string{"{protocol: udp, port: 51820, sources: [0.0.0.0/0]}"},
			"line 11: sites[0].gateways[0].publicAllow[0].port: udp 51820 is overlay.listenPort"},
		{"no sources", nil, []string{"{protocol: tcp, port: 22}"},
			"line 11: sites[0].gateways[0].publicAllow[0].sources: sources is missing or empty"},
		{"empty sources", nil, []string{"{protocol: tcp, port: 22, sources: []}"},
			"line 11: sites[0].gateways[0].publicAllow[0].sources: sources is missing or empty"},
		{"not a prefix", nil, []string{"{protocol: tcp, port: 22, sources: [my-laptop]}"},
			`line 11: sites[0].gateways[0].publicAllow[0].sources[0]: "my-laptop" is not an IP prefix`},
		{"host bits", nil, []string{"{protocol: tcp, port: 22, sources: [203.0.113.9/24]}"},
			"sites[0].gateways[0].publicAllow[0].sources[0]: 203.0.113.9/24 has bits set after the /24; want 203.0.113.0/24"},
		{"twice", nil, []string{"{protocol: tcp, port: 22, sources: [203.0.113.0/24, 203.0.113.0/24]}"},
			"sites[0].gateways[0].publicAllow[0].sources[1]: 203.0.113.0/24 is listed twice (also sources[0])"},
		{"unknown field", nil, []string{"{protocol: tcp, port: 22, from: [203.0.113.0/24]}"},
			`line 11: sites[0].gateways[0].publicAllow[0].from: unknown field "from"; valid fields here: protocol, port, sources`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(withAllow(t, tc.fed, tc.gw)))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got error:\n%v\nwant one containing %q", err, tc.want)
			}
		})
	}
}
