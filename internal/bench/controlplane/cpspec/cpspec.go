// Package cpspec writes the federations fednet bench control-plane
// applies, so that the bench and the manager's in-process measurement of
// the same changes (internal/manager TestChangeCost) plan the same specs.
package cpspec

import (
	"fmt"
	"strings"

	"github.com/fednet/fednet/internal/plan"
)

// Federation returns the spec of n sites s0000... with one gateway each
// (g0000..., key keys[i] given, so that enrolling with it plans nothing)
// and one routed network over every site; prefix0, when set, replaces
// site 0's prefix; bridged adds a bridged network over every site (a
// bridge port on each gateway). keys must hold at least n keys.
func Federation(keys []plan.Key, n int, prefix0 string, bridged bool) string {
	var b strings.Builder
	b.WriteString("apiVersion: fednet/v1\nkind: Federation\nname: bench\nsites:\n")
	names := make([]string, n)
	for i := range n {
		names[i] = fmt.Sprintf("s%04d", i)
		prefix := fmt.Sprintf("10.%d.%d.0/24", 64+i/256, i%256)
		if i == 0 && prefix0 != "" {
			prefix = prefix0
		}
		ports := ""
		if bridged {
			ports = ", bridgePorts: {lan: eth1}"
		}
		fmt.Fprintf(&b, "  - {name: %s, provider: onprem, prefixes: [%s], gateways: [{name: g%04d, endpoint: '100.%d.%d.1:51820', publicKey: '%s'%s}]}\n",
			names[i], prefix, i, 64+i/256, i%256, keys[i], ports)
	}
	fmt.Fprintf(&b, "networks:\n  - {name: apps, id: 1, mode: routed, sites: [%s]}\n", strings.Join(names, ", "))
	if bridged {
		fmt.Fprintf(&b, "  - {name: lan, id: 100, mode: bridged, subnet: 192.168.0.0/16, sites: [%s]}\n", strings.Join(names, ", "))
	}
	return b.String()
}
