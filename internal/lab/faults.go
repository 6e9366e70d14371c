package lab

import (
	"fmt"
	"net/netip"
	"strings"
)

// Faults are injected in the lab's own namespaces only, each undone by the
// same call with the opposite flag (see faults_linux.go):
//
//   - SetCables unplugs a node: the far ends of its veths (its ports on the
//     internet bridge and on switches) go down, so the node's own
//     interfaces lose their carrier and nothing reaches or leaves it.
//     Together with (*Node).KillAll it is a machine that went down; the
//     node keeps its kernel state (addresses, routes, nftables), as a
//     machine that hung and came back does.
//   - SetUplink unplugs one gateway's internet link, its LAN staying up.
//   - Block drops, in the internet's router, what one node sends to
//     another's public address: one direction of an inter-site link.
//   - Separate drops, in every switch two nodes share, the frames between
//     their ports: the two lose sight of each other on the LAN while every
//     other node still reaches both.
//
// Block and Separate keep their rules in an nftables table named
// faultTable in the internet and switch namespaces, one rule per blocked
// direction, told apart by the rule's user data (see faultKey); the
// namespaces go with the lab, so Down removes them.
const faultTable = "faults"

// faultKey is the user data of the rule that blocks traffic from a to b
// (kind "block") or frames between a and b (kind "separate").
func faultKey(kind string, a, b *Node) []byte {
	return []byte("fednet-lab " + kind + " " + a.Name + " " + b.Name)
}

// CommandMatches reports whether a process's command line (as ProcessInfo
// holds it: arguments joined by spaces) runs the given fednet subcommand:
// an argument equal to sub, e.g. "wgdev" or "agent".
func (p ProcessInfo) CommandMatches(sub string) bool {
	for _, arg := range strings.Fields(p.Command) {
		if arg == sub {
			return true
		}
	}
	return false
}

// virtualAddress returns the virtual address of gw's site with the length
// of gw's LAN prefix, or an error naming the fix when the site has none.
func (l *Lab) virtualAddress(gw *Node) (netip.Prefix, error) {
	if gw == nil || gw.Role != RoleGateway {
		return netip.Prefix{}, fmt.Errorf("virtual address: %v is not a gateway", gw)
	}
	s, ok := l.Federation.Site(gw.Site)
	if !ok || !s.VirtualAddress.IsValid() || !gw.LAN.IsValid() {
		return netip.Prefix{}, fmt.Errorf("site %s has no virtual address (sites[].virtualAddress)", gw.Site)
	}
	if !gw.LAN.Masked().Contains(s.VirtualAddress) {
		return netip.Prefix{}, fmt.Errorf("site %s: virtual address %s is not on %s's segment %s", gw.Site, s.VirtualAddress, gw.Name, gw.LAN.Masked())
	}
	return netip.PrefixFrom(s.VirtualAddress, gw.LAN.Bits()), nil
}
