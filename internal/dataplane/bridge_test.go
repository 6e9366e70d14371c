package dataplane

import (
	"net/netip"
	"testing"

	"github.com/fednet/fednet/internal/plan"
)

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, x := range s {
		out = append(out, netip.MustParseAddr(x))
	}
	return out
}

// bridged returns plan A with the bridged network "lan" (VNI 100) on port
// eth1, flooding to b and c.
func bridged() plan.Gateway {
	p := planA()
	p.Bridges = []plan.Bridge{{
		Network: "lan", VNI: 100, Name: "fbr100", Port: "eth1", MTU: 1370,
		VXLANs: []plan.VXLAN{{Name: "fvx100", Kind: plan.ToGateways, Local: netip.MustParseAddr("10.255.0.1"),
			Remotes: addrs("10.255.0.2", "10.255.0.3"), UDPPort: 4789, To: "members"}},
	}}
	return p
}

// twoBridged adds the network "lab" (VNI 200, port eth2) to bridged.
func twoBridged() plan.Gateway {
	p := bridged()
	p.Bridges = append(p.Bridges, plan.Bridge{
		Network: "lab", VNI: 200, Name: "fbr200", Port: "eth2", MTU: 1370,
		VXLANs: []plan.VXLAN{{Name: "fvx200", Kind: plan.ToGateways, Local: netip.MustParseAddr("10.255.0.1"),
			Remotes: addrs("10.255.0.3"), UDPPort: 4789, To: "members"}},
	})
	return p
}

// Steps of a bridged network's life; each changes one thing.
var bridgePlans = map[string]func() plan.Gateway{
	"1-add": bridged,
	"2-remotes": func() plan.Gateway { // c leaves, d joins
		p := bridged()
		p.Bridges[0].VXLANs[0].Remotes = addrs("10.255.0.2", "10.255.0.4")
		return p
	},
	"3-mtu": func() plan.Gateway {
		p := bridged()
		p.Bridges[0].MTU = 1330
		return p
	},
	"4-no-port": func() plan.Gateway {
		p := bridged()
		p.Bridges[0].Port = ""
		return p
	},
	"5-second": twoBridged,
	"6-vni": func() plan.Gateway { // lan's VNI changes: its VXLAN device is recreated
		p := bridged()
		p.Bridges[0].VNI = 101
		return p
	},
	"7-move-port": func() plan.Gateway { // eth1 moves from lan to lab, lan goes
		p := twoBridged()
		p.Bridges = p.Bridges[1:]
		p.Bridges[0].Port = "eth1"
		return p
	},
	"8-none": planA,
	"9-tree": func() plan.Gateway { // lan relays along a tree: one device per neighbor
		p := bridged()
		local := p.Bridges[0].VXLANs[0].Local
		p.Bridges[0].VXLANs = []plan.VXLAN{
			{Name: "fvx100-0", Kind: plan.ToGateways, Local: local, Remotes: addrs("10.255.0.2"), UDPPort: 4790, To: "b"},
			{Name: "fvx100-1", Kind: plan.ToGateways, Local: local, Remotes: addrs("10.255.0.3"), UDPPort: 4791, To: "c"},
		}
		return p
	},
	"9-tree-relay": func() plan.Gateway { // a relays for lan without a port of its own
		p := bridged()
		local := p.Bridges[0].VXLANs[0].Local
		p.Bridges[0].Port, p.Bridges[0].Relay = "", true
		p.Bridges[0].VXLANs = []plan.VXLAN{
			{Name: "fvx100-0", Kind: plan.ToGateways, Local: local, Remotes: addrs("10.255.0.2"), UDPPort: 4790, To: "b"},
			{Name: "fvx100-2", Kind: plan.ToGateways, Local: local, Remotes: addrs("10.255.0.4"), UDPPort: 4792, To: "d"},
		}
		return p
	},
}

func TestFakeBridgeTransitions(t *testing.T) {
	checkTransitions(t, bridgePlans, "5-second", "bridges.golden")
}

func TestFakeBridgeSamePlanTwiceAndRandomOrder(t *testing.T) {
	checkSamePlanTwiceAndRandomOrder(t, bridgePlans)
}

// Only all-zero entries fednet wants change; an existing device keeps its
