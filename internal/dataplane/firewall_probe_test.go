package dataplane

import (
	"net/netip"
	"os"
	"testing"

	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/probe"
	"github.com/fednet/fednet/internal/spec"
)

// packet is what the test evaluator of a ruleset knows about a packet.
type packet struct {
	iif, oif   string
	src, dst   netip.Addr
	udpDport   int
	ctState    string // "new", "established", "related" or "invalid"
	icmpEchoV4 bool
	// fibOK says the reverse path check passes (the source is routed back
	// out of iif).
	fibOK bool
}

// verdict runs p through chain c as nft would (first matching rule with a
// verdict decides, else the policy). It knows the matches the input chain
// uses; the fib check passes when p.fibOK says so.
func (c chain) verdict(p packet) string {
	for _, r := range c.rules {
		if r.verdict != "" && allMatch(r.matches, p) {
			return r.verdict
		}
	}
	return c.policy
}

func allMatch(ms []match, p packet) bool {
	for _, m := range ms {
		ok := false
		switch m := m.(type) {
		case ifName:
			name := p.iif
			if m.out {
				name = p.oif
			}
			ok = (name == m.name) != m.negate
		case ctState:
			ok = m.established && p.ctState == "established" || m.related && p.ctState == "related" || m.invalid && p.ctState == "invalid"
		case addr:
			a := p.src
			if m.dst {
				a = p.dst
			}
			ok = m.prefix.Contains(a)
		case udpDport:
			ok = p.udpDport == m.port
		case icmpType:
			ok = !m.v6 && m.typ == 8 && p.icmpEchoV4
		case limitRate:
			ok = true
		case fibReversePath:
			ok = p.fibOK
		}
		if !ok {
			return false
		}
	}
	return true
}

// TestFirewallPassesLinkProbes: the input chain of a gateway planned from
// examples/three-sites.yaml lets link probes (UDP probe.Port) from another
// gateway's transit address in through the tunnel, and their answers back,
// but not probes that arrive in clear on another interface.
func TestFirewallPassesLinkProbes(t *testing.T) {
	plans := examplePlans(t, "three-sites.yaml")
	if len(plans) < 2 {
		t.Fatalf("%d plans", len(plans))
	}
	self, other := plans[0], plans[1]
	local := self.Tunnels[0].Address.Addr()
	remote := other.Tunnels[0].Address.Addr()
	input := buildRuleset(self.Firewall).chains[0]
	if input.name != chainInput {
		t.Fatalf("first chain is %s", input.name)
	}
	for _, tc := range []struct {
		name string
		p    packet
		want string
	}{
		{"probe request through the tunnel", packet{iif: self.Tunnels[0].Name, src: remote, dst: local, udpDport: probe.Port, ctState: "new"}, "accept"},
		{"probe reply through the tunnel", packet{iif: self.Tunnels[0].Name, src: remote, dst: local, udpDport: 40000, ctState: "established"}, "accept"},
		{"probe request in clear", packet{iif: "eth0", src: remote, dst: local, udpDport: probe.Port, ctState: "new"}, "drop"},
		{"probe from a site address through the tunnel", packet{iif: self.Tunnels[0].Name, src: netip.MustParseAddr("10.2.0.5"), dst: local, udpDport: probe.Port, ctState: "new"}, "drop"},
	} {
		if got := input.verdict(tc.p); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

// TestFirewallVXLANFromTunnelOnly: a gateway of examples/bridged.yaml takes
// VXLAN (4789) from other gateways through the tunnel, but not from a
// machine on its own LAN nor from the public side, though the LAN may reach
// the gateway otherwise: a VXLAN device listens on every address, and such
// a packet would put frames into the bridged network.
func TestFirewallVXLANFromTunnelOnly(t *testing.T) {
	plans := examplePlans(t, "bridged.yaml")
	self, other := plans[0], plans[1]
	if len(self.Firewall.TunnelPorts) != 1 || self.Firewall.TunnelPorts[0] != plan.VXLANPort {
		t.Fatalf("tunnel-only ports %v, want [%d]", self.Firewall.TunnelPorts, plan.VXLANPort)
	}
	local, remote := self.Tunnels[0].Address.Addr(), other.Tunnels[0].Address.Addr()
	lanHost := self.Firewall.Local[0].Addr().Next()
	lanAddr := self.Firewall.Local[0].Addr().Next().Next()
	input := buildRuleset(self.Firewall).chains[0]
	for _, tc := range []struct {
		name string
		p    packet
		want string
	}{
		{"VXLAN through the tunnel", packet{iif: self.Tunnels[0].Name, src: remote, dst: local, udpDport: plan.VXLANPort, ctState: "new"}, "accept"},
		{"VXLAN from the LAN", packet{iif: "b1", src: lanHost, dst: local, udpDport: plan.VXLANPort, ctState: "new", fibOK: true}, "drop"},
		{"VXLAN from the LAN to the LAN address", packet{iif: "eth1", src: lanHost, dst: lanAddr, udpDport: plan.VXLANPort, ctState: "new", fibOK: true}, "drop"},
		{"VXLAN from the public side", packet{iif: "eth0", src: netip.MustParseAddr("203.0.113.99"), dst: local, udpDport: plan.VXLANPort, ctState: "new"}, "drop"},
		{"other UDP from the LAN", packet{iif: "eth1", src: lanHost, dst: lanAddr, udpDport: 53, ctState: "new", fibOK: true}, "accept"},
	} {
		if got := input.verdict(tc.p); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

// TestForwardIsStateless: a gateway that becomes its site's active gateway
// in the middle of a TCP connection forwards the connection's packets,
// though its conntrack never saw the connection start (the kernel may call
// such packets invalid): the forward chain decides by addresses only, so
// connections survive a failover. Packets outside the flows stay dropped.
func TestForwardIsStateless(t *testing.T) {
	plans := examplePlans(t, "ha.yaml")
	var standby plan.Gateway
	for _, g := range plans {
		if g.Name == "onprem-gw2" {
			standby = g
		}
	}
	fw := buildRuleset(standby.Firewall)
	forward := fw.chains[1]
	if forward.name != chainForward {
		t.Fatalf("second chain is %s", forward.name)
	}
	tun := standby.Tunnels[0].Name
	lab, aws := netip.MustParseAddr("10.5.0.10"), netip.MustParseAddr("10.1.0.10")
	for _, tc := range []struct {
		name string
		p    packet
		want string
	}{
		{"mid-flow packet into the site", packet{iif: tun, oif: "eth1", src: aws, dst: lab, ctState: "invalid"}, "accept"},
		{"mid-flow packet out of the site", packet{iif: "eth1", oif: tun, src: lab, dst: aws, ctState: "invalid"}, "accept"},
		{"new packet out of the site", packet{iif: "eth1", oif: tun, src: lab, dst: aws, ctState: "new"}, "accept"},
		{"packet outside the flows", packet{iif: tun, oif: "eth1", src: netip.MustParseAddr("10.9.0.1"), dst: lab, ctState: "invalid"}, "drop"},
	} {
		if got := forward.verdict(tc.p); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

// examplePlans plans examples/<name> without keys.
func examplePlans(t *testing.T, name string) []plan.Gateway {
	t.Helper()
	data, err := os.ReadFile("../../examples/" + name)
	if err != nil {
		t.Fatal(err)
	}
	f, err := spec.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	plans, err := plan.Compute(f, plan.Inputs{})
	if err != nil {
		t.Fatal(err)
	}
	return plans
}
