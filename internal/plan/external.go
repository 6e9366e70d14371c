package plan

import (
	"net/netip"
	"slices"

	"github.com/fednet/fednet/internal/backend"
	"github.com/fednet/fednet/internal/spec"
)

// An external site (spec.External) has no gateway: its provider's VPN
// gateway holds one IPsec connection to the fednet gateway the spec names
// (via). To the planner the site is a leaf whose only link goes to the via
// gateway's site, on backend ipsec: the relay plan routes its prefixes
// through that site like any relayed destination, and forwards only the
// flows its networks allow. The site is up while its via gateway is its
// site's active gateway; a failover away from it cuts the site off.

// ChildSA is one CHILD_SA of a connection, with its own traffic
// selectors.
type ChildSA struct {
	LocalTS  []netip.Prefix `json:"localTS"`
	RemoteTS []netip.Prefix `json:"remoteTS"`
}

var anyIPv4 = netip.MustParsePrefix("0.0.0.0/0")

// externalsUp marks external sites up whose via gateway is active.
func (v *view) externalsUp() {
	for si := range v.f.Sites {
		s := &v.f.Sites[si]
		if s.External == nil || v.isUp[s.Name] {
			continue
		}
		viaSite := v.idx.vias[s.Name]
		if g := v.active[viaSite]; g != nil && g.Name == s.External.Via {
			v.up = append(v.up, s.Name)
			v.isUp[s.Name] = true
		}
	}
}

// externalPeer is gateway a.self's peer for external site remote (index
// ri in the spec), when a.self terminates it and the site routes
// anything: the connection's IPsec block, its allowed IPs (the site's
// prefixes this gateway routes to it, from via), one CHILD_SA per
// prefix pair (a policy-based provider: the local selectors are the
// prefixes the site may reach) or one route-based CHILD_SA (local
// selector 0.0.0.0/0, as fednet's own IPsec links), as the profile
// needs.
func externalPeer(a planArgs, remote *spec.Site, via [][]netip.Prefix, ri int) (Peer, bool) {
	x := remote.External
	if x.Via != a.self.Name || !a.v.siteUp(remote.Name) || via == nil {
		return Peer{}, false
	}
	remoteTS := sortedPrefixes(via[a.v.idx.first[ri]])
	localTS := externalReach(a.v, a.rt, remote.Name)
	if len(remoteTS) == 0 || len(localTS) == 0 {
		return Peer{}, false
	}
	lim, _ := spec.ProfileLimitsOf(x.Profile)
	ip := IPsecPeer{
		Initiator:       true,
		LocalID:         endpointHost(a.self.Endpoint),
		RemoteID:        x.Endpoint.String(),
		RemoteAddress:   x.Endpoint.String(),
		LocalTS:         localTS,
		IKE:             slices.Clone(x.IKE),
		ESP:             slices.Clone(x.ESP),
		PSKFile:         x.PSK.File,
		DPDSeconds:      x.DPDSeconds,
		RekeySeconds:    x.ESPLifetimeSeconds,
		IKERekeySeconds: x.IKELifetimeSeconds,
		IKEVersion:      x.IKEVersion,
		Profile:         string(x.Profile),
	}
	if lim.ChildPerPair {
		for _, l := range localTS {
			for _, r := range remoteTS {
				ip.Children = append(ip.Children, ChildSA{LocalTS: []netip.Prefix{l}, RemoteTS: []netip.Prefix{r}})
			}
		}
	} else {
		// Route-based, as fednet's own IPsec links: the local selector
		// is any address; the gateway's routes and forward filter (the
		// flows of the site's networks) decide what crosses.
		ip.LocalTS = []netip.Prefix{anyIPv4}
		ip.Children = []ChildSA{{LocalTS: ip.LocalTS, RemoteTS: remoteTS}}
	}
	return Peer{
		Gateway:    remote.Name,
		Site:       remote.Name,
		Backend:    backend.IPsec,
		Endpoint:   netip.AddrPortFrom(x.Endpoint, 500).String(),
		AllowedIPs: remoteTS,
		IPsec:      &ip,
	}, true
}

// externalReach is the prefixes external site ext may reach: those of
// every site it routes (shares a routed network with, over links that
// are up), sorted.
func externalReach(v view, rt routing, ext string) []netip.Prefix {
	self, ok := rt.pos[ext]
	if !ok {
		return nil
	}
	var out []netip.Prefix
	for ti := range v.f.Sites {
		t := &v.f.Sites[ti]
		if t.Name != ext && rt.routes(self, ti) && len(v.sharedRouted(ext, t.Name)) > 0 {
			out = append(out, t.Prefixes...)
		}
	}
	return sortedPrefixes(out)
}

// ExternalReach returns the prefixes external site name may reach under
// the inputs (its networks' other sites, over links that are up), sorted:
// the remote prefixes the provider's side must route into the tunnel.
func ExternalReach(f *spec.Federation, in Inputs, name string) []netip.Prefix {
	v := newView(f, in)
	return externalReach(v, computeRouting(v), name)
}
