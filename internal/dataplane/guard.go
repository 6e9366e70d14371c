package dataplane

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fednet/fednet/internal/plan"
)

// The site's hosts are never behind a tunnel. A bridged network's frames
// can come back to the site they left: while the gateways reshape a
// network (a relay tree to another, or to the full mesh, after a failure
// or a repair) they disagree on its shape for tens of milliseconds, and a
// frame a host of the site sent can return to the site's gateway through
// another gateway. Delivered, it teaches the gateway's bridge and the
// site's own LAN switch that the host is behind the gateway's tunnel
// port; the switch then sends the host's traffic to the gateway, which
// sends it back into the LAN port it came in by — dropped — until the
// host itself speaks again. A host that only answers never does: in the
// fault suite's relay-down, two lab hosts stayed cut for 3.5 and 5.7 s
// after the way back had settled everywhere.
//
// So each gateway remembers the source addresses its bridge hears on its
// own ports (the site segment's port and the ports to the site's hosts)
// and drops, before the bridge learns from it, a frame from a port to
// other gateways whose source it heard there in the last GuardMemory.
// That is a host of this site, coming back: a loop. A host that moves to
// another site (a VM migrated over a stretched network) is taken from
// the tunnels once it has been silent on this site for GuardMemory.

// GuardTable is the bridge-family nftables table of the guard.
const GuardTable = "fednet-guard"

// GuardMemory is how long a source heard on a site's own ports is
// refused from the tunnels: longer than any frame takes to come back
// round (a few milliseconds per hop, hundreds on a starved gateway),
// short enough for a host that moved to another site.
const GuardMemory = 2 * time.Second

// guard is one bridge's part of the guard table.
type guard struct {
	bridge string
	local  []string // its ports on the site: the segment's, and to hosts
	// tunnels names its ports to other gateways: the full mesh's port
	// (tunnels) and the relay trees' (tunnels-N). By name, not by the
	// plan's list of ports, so that the guard stays as it is (with what
	// it heard) while the network changes shape.
	tunnels string
}

// guardsOf returns the guards of p's bridges, sorted by bridge: one for
// each bridge with a port on the site and ports to other gateways (a
// relay's bridge has no port on the site).
func guardsOf(p plan.Gateway) []guard {
	var out []guard
	for _, b := range p.Bridges {
		g := guard{bridge: b.Name}
		if b.Port != "" {
			g.local = append(g.local, b.Port)
		}
		for _, v := range b.Ports(plan.ToHost) {
			g.local = append(g.local, v.Name)
		}
		if ports := b.Ports(plan.ToGateways); len(ports) > 0 {
			g.tunnels, _, _ = strings.Cut(ports[0].Name, "-")
		}
		if len(g.local) > 0 && g.tunnels != "" {
			slices.Sort(g.local)
			out = append(out, g)
		}
	}
	slices.SortFunc(out, func(a, b guard) int { return strings.Compare(a.bridge, b.bridge) })
	return out
}

// guardSet is the name of the set of sources heard on bridge's own ports.
func guardSet(bridge string) string { return "local-" + bridge }

// guardText is the guard table as nft prints it (its fingerprint).
func guardText(gs []guard) string {
	var b strings.Builder
	fmt.Fprintf(&b, "table bridge %s {\n", GuardTable)
	for _, g := range gs {
		fmt.Fprintf(&b, "\tset %s { type ether_addr; flags dynamic,timeout; timeout %s; }\n", guardSet(g.bridge), GuardMemory)
	}
	b.WriteString("\tchain prerouting { type filter hook prerouting priority filter;\n")
	for _, g := range gs {
		for _, port := range g.local {
			fmt.Fprintf(&b, "\t\tiifname %q update @%s { ether saddr } accept\n", port, guardSet(g.bridge))
		}
		for _, port := range []string{g.tunnels, g.tunnels + "-*"} {
			fmt.Fprintf(&b, "\t\tiifname %q ether saddr @%s counter drop\n", port, guardSet(g.bridge))
		}
	}
	b.WriteString("\t}\n}\n")
	return b.String()
}
