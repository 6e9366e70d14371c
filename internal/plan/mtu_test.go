package plan_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/fednet/fednet/internal/plan"
)

func TestVXLANOverhead(t *testing.T) {
	if got := plan.VXLANOverhead(plan.IPv4); got != 50 {
		t.Errorf("VXLANOverhead(IPv4) = %d, want 14+8+8+20 = 50", got)
	}
	if got := plan.VXLANOverhead(plan.IPv6); got != 70 {
		t.Errorf("VXLANOverhead(IPv6) = %d, want 14+8+8+40 = 70", got)
	}
}

// TestNetworkMTUFromUnderlay covers every combination of outer family ×
// routed/bridged × neighbor tunnels (none, IPv4, IPv6) × segment MTU below
// or above the tunnel's, over a 1500-byte underlay: tunnel 1440 over IPv4,
// 1420 over IPv6; bridged 50 less.
func TestNetworkMTUFromUnderlay(t *testing.T) {
	const small, large = 1300, 9000
	tests := []struct {
		outer     plan.Family
		bridged   bool
		neighbors plan.Family
		segment   int
		want      int
		limit     string
	}{
		{plan.IPv4, false, 0, small, 1300, "segment b"},
		{plan.IPv4, false, 0, large, 1440, "tunnel"},
		{plan.IPv4, false, plan.IPv4, small, 1250, "neighbor tunnels at b"},
		{plan.IPv4, false, plan.IPv4, large, 1440, "tunnel"},
		{plan.IPv4, false, plan.IPv6, small, 1230, "neighbor tunnels at b"},
		{plan.IPv4, false, plan.IPv6, large, 1440, "tunnel"},
		{plan.IPv4, true, 0, small, 1300, "segment b"},
		{plan.IPv4, true, 0, large, 1390, "tunnel"},
		{plan.IPv4, true, plan.IPv4, small, 1250, "neighbor tunnels at b"},
		{plan.IPv4, true, plan.IPv4, large, 1390, "tunnel"},
		{plan.IPv4, true, plan.IPv6, small, 1230, "neighbor tunnels at b"},
		{plan.IPv4, true, plan.IPv6, large, 1390, "tunnel"},
		{plan.IPv6, false, 0, small, 1300, "segment b"},
		{plan.IPv6, false, 0, large, 1420, "tunnel"},
		{plan.IPv6, false, plan.IPv4, small, 1250, "neighbor tunnels at b"},
		{plan.IPv6, false, plan.IPv4, large, 1420, "tunnel"},
		{plan.IPv6, false, plan.IPv6, small, 1230, "neighbor tunnels at b"},
		{plan.IPv6, false, plan.IPv6, large, 1420, "tunnel"},
		{plan.IPv6, true, 0, small, 1300, "segment b"},
		{plan.IPv6, true, 0, large, 1370, "tunnel"},
		{plan.IPv6, true, plan.IPv4, small, 1250, "neighbor tunnels at b"},
		{plan.IPv6, true, plan.IPv4, large, 1370, "tunnel"},
		{plan.IPv6, true, plan.IPv6, small, 1230, "neighbor tunnels at b"},
		{plan.IPv6, true, plan.IPv6, large, 1370, "tunnel"},
	}
	for _, tt := range tests {
		mode := "routed"
		if tt.bridged {
			mode = "bridged"
		}
		t.Run(fmt.Sprintf("outer %s/%s/neighbors %s/segment %d", tt.outer, mode, tt.neighbors, tt.segment), func(t *testing.T) {
			in := plan.MTUInputs{Bridged: tt.bridged, Segments: []plan.Segment{
				{Site: "b", MTU: tt.segment, Neighbors: tt.neighbors},
				{Site: "a", MTU: large}, // never the limit
			}}
			got, why := plan.NetworkMTUFromUnderlay(1500, tt.outer, in)
			if got != tt.want {
				t.Errorf("MTU = %d, want %d (%s)", got, tt.want, why)
			}
			wantWhy := []string{
				fmt.Sprintf("= %d, limited by %s", tt.want, tt.limit),
				fmt.Sprintf("underlay 1500 - outer %s", tt.outer),
				fmt.Sprintf("segment a %d", large),
			}
			if tt.bridged {
				wantWhy = append(wantWhy, "VXLAN/IPv4 50")
			}
			if tt.neighbors != 0 {
				wantWhy = append(wantWhy, fmt.Sprintf("neighbor tunnels at b: segment %d - VXLAN/%s %d = ", tt.segment, tt.neighbors, plan.VXLANOverhead(tt.neighbors)))
			}
			for _, w := range wantWhy {
				if !strings.Contains(why, w) {
					t.Errorf("reason %q does not contain %q", why, w)
				}
			}
			// The chain agrees with NetworkMTU on the tunnel MTU it computed.
			tunnel := 1440
			if tt.outer == plan.IPv6 {
				tunnel = 1420
			}
			if m, _ := plan.NetworkMTU(tunnel, in); m != got {
				t.Errorf("NetworkMTU(%d) = %d, NetworkMTUFromUnderlay = %d", tunnel, m, got)
			}
		})
	}
}

func TestNetworkMTU(t *testing.T) {
	tests := []struct {
		name   string
		tunnel int
		in     plan.MTUInputs
		want   int
		reason string
	}{
		{
			name: "routed, no segments", tunnel: 1440,
			want: 1440, reason: "min(tunnel 1440) = 1440, limited by tunnel",
		},
		{
			name: "bridged, no segments", tunnel: 1440, in: plan.MTUInputs{Bridged: true},
			want: 1390, reason: "min(tunnel 1440 - VXLAN/IPv4 50 = 1390) = 1390, limited by tunnel",
		},
		{
			name: "NetFed's lab: 1500 segments, IPv6 neighbor tunnels", tunnel: 1420,
			in: plan.MTUInputs{Bridged: true, Segments: []plan.Segment{
				{Site: "onprem", MTU: 1500}, {Site: "aws", MTU: 1500, Neighbors: plan.IPv6},
			}},
			want:   1370,
			reason: "min(tunnel 1420 - VXLAN/IPv4 50 = 1370, neighbor tunnels at aws: segment 1500 - VXLAN/IPv6 70 = 1430, segment onprem 1500) = 1370, limited by tunnel",
		},
		{
			name: "routed: neighbor tunnels on a 1500 segment beat the tunnel", tunnel: 1440,
			in:   plan.MTUInputs{Segments: []plan.Segment{{Site: "aws", MTU: 1500, Neighbors: plan.IPv6}}},
			want: 1430, reason: "= 1430, limited by neighbor tunnels at aws",
		},
		{
			name: "unknown segment MTU is Ethernet's", tunnel: 1440,
			in:   plan.MTUInputs{Segments: []plan.Segment{{Site: "a"}, {Site: "b", Neighbors: plan.IPv4}}},
			want: 1440, reason: "min(tunnel 1440, segment a 1500 (default), neighbor tunnels at b: segment 1500 (default) - VXLAN/IPv4 50 = 1450) = 1440, limited by tunnel",
		},
		{
			name: "the smallest segment wins", tunnel: 1440,
			in:   plan.MTUInputs{Bridged: true, Segments: []plan.Segment{{Site: "c", MTU: 1380}, {Site: "a", MTU: 1360}, {Site: "b", MTU: 1400}}},
			want: 1360, reason: "= 1360, limited by segment a",
		},
		{
			name: "many segments of one MTU are one term", tunnel: 1440,
			in:   plan.MTUInputs{Bridged: true, Segments: manySegments(12, 1380, plan.Segment{Site: "s05", MTU: 1500}, plan.Segment{Site: "s99"})},
			want: 1380, reason: "min(tunnel 1440 - VXLAN/IPv4 50 = 1390, 11 segments (s00 to s11) 1380, segment s05 1500, segment s99 1500 (default)) = 1380, limited by 11 segments (s00 to s11)",
		},
		{
			name: "a tie names every limiting term", tunnel: 1440,
			in:   plan.MTUInputs{Bridged: true, Segments: []plan.Segment{{Site: "b", MTU: 1390}, {Site: "a", MTU: 1440, Neighbors: plan.IPv4}}},
			want: 1390, reason: "= 1390, limited by tunnel and neighbor tunnels at a and segment b",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, why := plan.NetworkMTU(tt.tunnel, tt.in)
			if got != tt.want {
				t.Errorf("MTU = %d, want %d (%s)", got, tt.want, why)
			}
			if !strings.Contains(why, tt.reason) {
				t.Errorf("reason %q does not contain %q", why, tt.reason)
			}
		})
	}
}

func TestFamilyString(t *testing.T) {
	for f, want := range map[plan.Family]string{0: "none", plan.IPv4: "IPv4", plan.IPv6: "IPv6", 5: "Family(5)"} {
		if got := f.String(); got != want {
			t.Errorf("Family(%d).String() = %q, want %q", uint8(f), got, want)
		}
	}
}

// manySegments returns n segments s00, s01, ... of MTU mtu, but where
// other names one.
func manySegments(n, mtu int, other ...plan.Segment) []plan.Segment {
	var out []plan.Segment
	for i := range n {
		name := fmt.Sprintf("s%02d", i)
		if j := slices.IndexFunc(other, func(s plan.Segment) bool { return s.Site == name }); j >= 0 {
			out = append(out, other[j])
			continue
		}
		out = append(out, plan.Segment{Site: name, MTU: mtu})
	}
	for _, s := range other {
		if !slices.ContainsFunc(out, func(o plan.Segment) bool { return o.Site == s.Site }) {
			out = append(out, s)
		}
	}
	return out
}
