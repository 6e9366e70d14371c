package agent

import (
	"cmp"
	"errors"
	"net/netip"
	"slices"
	"strings"
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
//     that the applied plan lacks are made at the start of the lead
//     (newWayBack). Where a relay tree gives way to the full mesh, the
//     mesh's port fvx<ID> floods to every member at once, beside the
//     tree's ports fvx<ID>-<n>: a bridge-family nftables table
//     (dataplane.SeparateShapes) drops every frame between the two
//     shapes, so each carries frames on its own, and the tree's ports
//     stop learning and forget what they learned (from then on unicast
//     takes the mesh, the tree only floods). Every frame then reaches every
//     member through the mesh, whatever the other gateways still do, and
//     the tree's ports can go in any order: no gateway waits for another.
//     Any other new port (one relay tree giving way to another) floods to
//     nobody and learns nothing until the switch (dataplane.SetPortLearning):
//     a port that floods to nobody and learned nothing sends nothing, so it
//     adds no path a frame could loop on; it forgets what it learned
//     SwitchForget after the switch, in case a gateway that had not
//     switched relayed a frame between its old and new ports. At the end of
//     the lead the bridges switch first, alone (withBridgesOf), so that the
//     gateways switch within milliseconds of one another; the data plane
//     releases an old port from its bridge before it adds the new ports'
//     flood entries, and deletes it last;
//   - after any apply that reshapes a bridged network here (a failover or a
//     way back: ports to gateways made or deleted), the
//     ports of the new shape forget what they and their bridge learned, at
//     each of SwitchForget: while the gateways reshape they disagree for a
//     moment on the tree, a frame can come back around and teach a bridge a
//     site's own host behind a port to gateways, or a VXLAN device a wrong
//     gateway for a host, and a host that only answers never teaches it
//     better (its requests do not arrive). Forgetting costs a flooded frame
//     per host; a wrong entry lasts at most until the next forgetting.

// SwitchForget are the delays after an apply that reshaped a bridged
// network at which the new shape's ports forget what they and their bridge
// learned (dataplane.ForgetLearned, dataplane.ForgetPort): by then every
// gateway has switched (they switch within milliseconds of one another on
// a quiet machine; the last, for a loaded one).
var SwitchForget = []time.Duration{100 * time.Millisecond, 300 * time.Millisecond, time.Second, 3 * time.Second}

// bridgedOps are the changes of bridged ports the way back makes outside
// the data plane's Apply; tests replace them (kernelBridged calls the
// data plane's functions).
type bridgedOps interface {
	ForgetLearned(dev string) error
	SetPortLearning(dev string, on bool) error
	ForgetPort(dev string) error
	SeparateShapes(shapes []dataplane.Shapes) error
}

// kernelBridged is bridgedOps on this machine's kernel.
type kernelBridged struct{}

func (kernelBridged) ForgetLearned(dev string) error { return dataplane.ForgetLearned(dev) }
func (kernelBridged) SetPortLearning(dev string, on bool) error {
	return dataplane.SetPortLearning(dev, on)
}
func (kernelBridged) ForgetPort(dev string) error               { return dataplane.ForgetPort(dev) }
func (kernelBridged) SeparateShapes(s []dataplane.Shapes) error { return dataplane.SeparateShapes(s) }

// l2 returns the bridgedOps to use, nil for none (a quiet source in unit
// tests changes nothing).
func (h *haSource) l2() bridgedOps {
	switch {
	case h.bridged != nil:
		return h.bridged
	case h.quiet:
		return nil
	}
	return kernelBridged{}
}

// each runs f on every port, logging errors.
func (h *haSource) each(ports []string, f func(string) error) {
	for _, p := range ports {
		if err := f(p); err != nil {
			h.logf("failover: %v", err)
		}
	}
}

// forgetAfterReshape makes the VXLAN ports ports, and their bridges,
// forget what they learned at each of SwitchForget (in the background).
func (h *haSource) forgetAfterReshape(ports []string) {
	ops := h.l2()
	if ops == nil || len(ports) == 0 {
		return
	}
	after := h.after
	if after == nil {
		after = func(d time.Duration, f func()) { time.AfterFunc(d, f) }
	}
	for _, d := range SwitchForget {
		after(d, func() {
			h.each(ports, func(p string) error { return errors.Join(ops.ForgetLearned(p), ops.ForgetPort(p)) })
		})
	}
}

// reshaped returns the ports to gateways of next's bridges whose ports to
// gateways (by name) differ from the same bridge's in prev, or that prev
// lacks: the network changed shape here (mesh and trees). A port that
// only floods elsewhere (a site's active gateway moved) is no reshape:
// the data plane forgets what its VXLAN device learned behind the old
// gateway, and forgetting everything would flood every frame to every
// gateway while the old active drains, whose bridge can forward such a
// frame from its LAN to a third site (a 174 ms gap on unconcerned pairs
// in a handover). Draining bridges keep what they learned and are left
// out. Sorted.
func reshaped(prev, next plan.Gateway) []string {
	var out []string
	for _, nb := range next.Bridges {
		if nb.Drain {
			continue
		}
		i := slices.IndexFunc(prev.Bridges, func(b plan.Bridge) bool { return b.Name == nb.Name })
		if i >= 0 && slices.Equal(portNames(prev.Bridges[i].Ports(plan.ToGateways)), portNames(nb.Ports(plan.ToGateways))) {
			continue
		}
		for _, v := range nb.Ports(plan.ToGateways) {
			out = append(out, v.Name)
		}
	}
	slices.Sort(out)
	return out
}

// separate keeps shapes apart (nil: no more) and, when it starts, makes
// the bridge forget and stop learning behind the old shape's ports: from
// then on its unicast goes through the new shape, and the old one only
// floods until its ports go.
func (h *haSource) separate(shapes []dataplane.Shapes, old []string) {
	ops := h.l2()
	if ops == nil {
		return
	}
	if err := ops.SeparateShapes(shapes); err != nil {
		h.logf("failover: %v", err)
	}
	h.each(old, func(p string) error {
		return errors.Join(ops.SetPortLearning(p, false), ops.ForgetPort(p))
	})
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

// wayBack is what a way back's lead changes of the bridges: the lead's
// plan, and the shapes it separates.
type wayBack struct {
	// lead is applied with the VXLAN ports that next's bridges have and
	// applied's same bridges (by name) lack. Where a relay tree gives way
	// to the full mesh (the bridge's ports fvx<ID>-<n> become fvx<ID>),
	// the mesh's port floods to its remotes at once (shapes keeps it
	// apart from the tree's); any other new port floods to nobody (quiet).
	// Bridges of next that applied lacks are left out (a gateway that
	// joins a network as a new relay has nothing to keep working
	// meanwhile).
	lead plan.Gateway
	// shapes are the separated networks; old their tree's ports, quiet
	// the new ports that flood to nobody until the switch. Sorted.
	shapes     []dataplane.Shapes
	old, quiet []string
}

// newWayBack returns the lead of the way back from applied to next.
// applied is not changed.
func newWayBack(applied, next plan.Gateway) wayBack {
	w := wayBack{lead: applied}
	out := &w.lead
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
			if old, ok := treePorts(*b, v.Name); ok {
				w.shapes = append(w.shapes, dataplane.Shapes{Mesh: v.Name, TreePrefix: v.Name + "-"})
				w.old = append(w.old, old...)
				v.Remotes = slices.Clone(v.Remotes)
				b.VXLANs = slices.Clone(b.VXLANs)
				for j := range b.VXLANs {
					if slices.Contains(old, b.VXLANs[j].Name) {
						b.VXLANs[j].NoLearning = true
					}
				}
			} else {
				v.Remotes = []netip.Addr{}
				w.quiet = append(w.quiet, v.Name)
			}
			v.NoLearning = true
			added = append(added, v)
		}
		if len(added) == 0 {
			continue
		}
		b.VXLANs = append(slices.Clone(b.VXLANs), added...)
		slices.SortFunc(b.VXLANs, func(x, y plan.VXLAN) int { return cmp.Compare(x.Name, y.Name) })
		addTunnelPorts(out, added)
	}
	slices.Sort(w.old)
	slices.Sort(w.quiet)
	return w
}

// treePorts returns the ports to gateways of b when they are all a relay
// tree's ports of the mesh port mesh (mesh + "-" + a number), at least
// one, and mesh is not among them.
func treePorts(b plan.Bridge, mesh string) ([]string, bool) {
	var out []string
	for _, v := range b.VXLANs {
		if v.Kind != plan.ToGateways {
			continue
		}
		if !strings.HasPrefix(v.Name, mesh+"-") {
			return nil, false
		}
		out = append(out, v.Name)
	}
	return out, len(out) > 0
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

// portNames returns the names of ports.
func portNames(ports []plan.VXLAN) []string {
	out := make([]string, len(ports))
	for i, v := range ports {
		out[i] = v.Name
	}
	return out
}
