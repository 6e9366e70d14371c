package agent

import (
	"cmp"
	"net/netip"
	"slices"
	"time"

	"github.com/fednet/fednet/internal/dataplane"
	"github.com/fednet/fednet/internal/plan"
)

// Bridged networks move without loss (docs/resilience.md, "The bridged
// handover" and "The way back"). Routed moves are covered by the transit
// device (transit.go); bridged frames need two more things, both plans
// derived here from the planner's, with no change of the plans the
// manager computes:
//
//   - a gateway that steps down keeps its bridges for a while, draining
//     (plan.Bridge.Drain): remote gateways send the site's frames to it
//     until they moved the site, and their ports, which forget what they
//     learned behind it, forget again later (ha.DrainOver says when the
//     drain ends). A draining bridge floods to nobody, so the site's
//     broadcasts leave through the new active gateway alone;
//   - on the way back to a repaired link, the ports of the coming plan
//     that the applied plan lacks (the full mesh's fvx<ID> when a relay
//     tree gives way to the mesh, another tree's link) are made at the
//     start of the lead, with no flood entries: every gateway can then
//     receive what the others send in the new shape before any of them
//     sends it. The bridge learns nothing on them until the switch
//     (dataplane.SetPortLearning): a port that floods to nobody and has
//     learned nothing sends nothing, so the extra ports add no path a
//     frame could loop on, and a gateway that has not switched yet never
//     relays a frame from its old ports out of its new one. At the end of the
//     lead the bridges switch first, alone (withBridgesOf), so that every
//     gateway switches within milliseconds of the others; the data plane
//     releases an old port from its bridge before it adds the new port's
//     flood entries, and deletes it last. While the gateways switch, one
//     that has not switched yet may relay a frame between its old and new
//     ports and teach the others a wrong gateway for its source (the
//     first lab runs of this design lost a pair for 3.5 s so): the new
//     ports forget what they learned SwitchForget after the switch.

// SwitchForget are the delays after a way back's bridge switch at which
// the new ports forget what they learned (dataplane.ForgetLearned): by
// then every gateway has switched (they switch within milliseconds of one
// another; a loaded one later).
var SwitchForget = []time.Duration{100 * time.Millisecond, 300 * time.Millisecond, time.Second}

// forgetAfterSwitch makes the VXLAN ports ports forget what they learned
// at each of SwitchForget (in the background).
func (h *haSource) forgetAfterSwitch(ports []string) {
	forget := h.forget
	if forget == nil {
		if h.quiet {
			return
		}
		forget = dataplane.ForgetLearned
	}
	for _, d := range SwitchForget {
		time.AfterFunc(d, func() {
			for _, p := range ports {
				if err := forget(p); err != nil {
					h.logf("failover: %v", err)
				}
			}
		})
	}
}

// setLearning turns the bridge's learning on ports on or off (tests
// replace dataplane.SetPortLearning with h.learning).
func (h *haSource) setLearning(ports []string, on bool) {
	set := h.learning
	if set == nil {
		if h.quiet {
			return
		}
		set = dataplane.SetPortLearning
	}
	for _, p := range ports {
		if err := set(p, on); err != nil {
			h.logf("failover: %v", err)
		}
	}
}

// newPorts returns the names of the VXLAN ports to gateways that next's
// bridges have and applied's lack, sorted.
func newPorts(applied, next plan.Gateway) []string {
	var out []string
	for _, b := range next.Bridges {
		for _, v := range b.VXLANs {
			if v.Kind == plan.ToGateways && !hasPort(applied, v.Name) {
				out = append(out, v.Name)
			}
		}
	}
	slices.Sort(out)
	return out
}

// hasPort reports whether a bridge of p has the VXLAN port name.
func hasPort(p plan.Gateway, name string) bool {
	for _, b := range p.Bridges {
		if slices.ContainsFunc(b.VXLANs, func(v plan.VXLAN) bool { return v.Name == name }) {
			return true
		}
	}
	return false
}

// drainState is a step-down's bridges, kept draining since.
type drainState struct {
	bridges []plan.Bridge
	since   time.Time
}

// endDrainLocked ends the drain, if any, once ha.DrainOver says so, and
// reports whether it did: the caller then puts the plan in force again
// (without the drained bridges). h.mu must be held.
func (h *haSource) endDrainLocked(now time.Time) bool {
	if h.drain == nil || h.state == nil {
		return false
	}
	if over, _ := h.state.DrainOver(h.drain.since, now); !over {
		return false
	}
	h.drain = nil
	return true
}

// withDraining returns p with each bridge of kept that p lacks (by name)
// added, draining, and its ports to gateways in the firewall's tunnel
// ports (they still take frames from the tunnels only). p is not changed.
func withDraining(p plan.Gateway, kept []plan.Bridge) plan.Gateway {
	out := p
	out.Bridges = slices.Clone(p.Bridges)
	out.Firewall.TunnelPorts = slices.Clone(p.Firewall.TunnelPorts)
	for _, b := range kept {
		if slices.ContainsFunc(out.Bridges, func(x plan.Bridge) bool { return x.Name == b.Name || x.VNI == b.VNI }) {
			continue
		}
		b.VXLANs = slices.Clone(b.VXLANs)
		b.Drain = true
		out.Bridges = append(out.Bridges, b)
		addTunnelPorts(&out, b.VXLANs)
	}
	slices.SortFunc(out.Bridges, func(a, b plan.Bridge) int { return cmp.Compare(a.VNI, b.VNI) })
	return out
}

// withNewPorts returns applied with the VXLAN ports that next's bridges
// have and applied's same bridges (by name) lack, each with no flood
// entries: the plan of a way back's lead. Bridges of next that applied
// lacks are left out (a gateway that joins a network as a new relay has
// nothing to keep working meanwhile). applied is not changed.
func withNewPorts(applied, next plan.Gateway) plan.Gateway {
	out := applied
	out.Bridges = slices.Clone(applied.Bridges)
	out.Firewall.TunnelPorts = slices.Clone(applied.Firewall.TunnelPorts)
	for _, nb := range next.Bridges {
		i := slices.IndexFunc(out.Bridges, func(b plan.Bridge) bool { return b.Name == nb.Name })
		if i < 0 {
			continue
		}
		b := &out.Bridges[i]
		var added []plan.VXLAN
		for _, v := range nb.VXLANs {
			if v.Kind != plan.ToGateways || slices.ContainsFunc(b.VXLANs, func(x plan.VXLAN) bool { return x.Name == v.Name }) {
				continue
			}
			v.Remotes = []netip.Addr{}
			added = append(added, v)
		}
		if len(added) == 0 {
			continue
		}
		b.VXLANs = append(slices.Clone(b.VXLANs), added...)
		slices.SortFunc(b.VXLANs, func(x, y plan.VXLAN) int { return cmp.Compare(x.Name, y.Name) })
		addTunnelPorts(&out, added)
	}
	return out
}

// withBridgesOf returns lead with next's bridges, its firewall's tunnel
// ports taking those of both: the plan that switches the bridges at the
// end of a way back's lead, before the rest of next applies. lead is not
// changed.
func withBridgesOf(lead, next plan.Gateway) *plan.Gateway {
	out := lead
	out.Bridges = slices.Clone(next.Bridges)
	out.Firewall.TunnelPorts = slices.Clone(lead.Firewall.TunnelPorts)
	for _, b := range next.Bridges {
		addTunnelPorts(&out, b.VXLANs)
	}
	return &out
}

// addTunnelPorts adds the UDP ports of ports to gateways to p's firewall's
// tunnel ports, sorted and unique.
func addTunnelPorts(p *plan.Gateway, ports []plan.VXLAN) {
	for _, v := range ports {
		if v.Kind == plan.ToGateways {
			p.Firewall.TunnelPorts = append(p.Firewall.TunnelPorts, v.UDPPort)
		}
	}
	slices.Sort(p.Firewall.TunnelPorts)
	p.Firewall.TunnelPorts = slices.Compact(p.Firewall.TunnelPorts)
}
