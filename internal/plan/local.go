package plan

import (
	"maps"
	"net/netip"
	"slices"

	"github.com/fednet/fednet/internal/spec"
)

// Local is what a gateway needs to compute its own plan under failures it
// sees, without the manager: the federation and the planner's inputs the
// plan was computed with. The agent adds the failures it detects (a
// gateway down, a site's active gateway, links down) to Inputs() and calls
// ForGateway: the plan with the failure as input, exactly the plan the
// manager would compute if it knew the failure, so when the manager
// later sends that plan, the two agree (docs/resilience.md).
//
// A plan carries Local when the manager attaches it (AttachLocal); plans
// from `fednet plan` do not, and their agents do not reroute.
type Local struct {
	// Federation is the parsed spec (defaults filled).
	Federation *spec.Federation `json:"federation"`
	// PublicKeys, Removed and Hosts are the inputs of the same name,
	// PublicKeys without the keys the federation gives its gateways
	// (publicKey) itself: planning takes the spec's key where PublicKeys
	// has none, so such an entry changes no plan, and a gateway enrolled
	// with the key of its spec (static keys) costs no entry.
	PublicKeys map[string]Key `json:"publicKeys,omitempty"`
	Removed    []string       `json:"removed,omitempty"`
	Hosts      []LocalHost    `json:"hosts,omitempty"`
	// Active names, by site, the gateway an operator made active (fednet
	// gateway activate); the agents' election starts from it.
	Active map[string]string `json:"active,omitempty"`
}

// LocalHost is a Host in a plan's JSON.
type LocalHost struct {
	Name    string     `json:"name"`
	Site    string     `json:"site"`
	Network string     `json:"network"`
	Address netip.Addr `json:"address"`
	Slot    int        `json:"slot"`
}

// NewLocal returns the Local of f planned with in; Down and LinksDown are
// not carried (the agents detect failures themselves).
func NewLocal(f *spec.Federation, in Inputs) *Local {
	l := &Local{Federation: f, PublicKeys: maps.Clone(in.PublicKeys), Active: maps.Clone(in.Active)}
	if f != nil && len(l.PublicKeys) > 0 {
		for _, s := range f.Sites {
			for _, g := range s.Gateways {
				if k, ok := l.PublicKeys[g.Name]; ok && g.PublicKey != "" {
					if sk, err := ParseKey(g.PublicKey); err == nil && sk == k {
						delete(l.PublicKeys, g.Name)
					}
				}
			}
		}
		if len(l.PublicKeys) == 0 {
			l.PublicKeys = nil
		}
	}
	for name, removed := range in.Removed {
		if removed {
			l.Removed = append(l.Removed, name)
		}
	}
	slices.Sort(l.Removed)
	for _, h := range sortedHosts(in.Hosts) {
		l.Hosts = append(l.Hosts, LocalHost{Name: h.Name, Site: h.Site, Network: h.Network, Address: h.Address, Slot: h.Slot})
	}
	return l
}

// Inputs returns the planner's inputs l carries.
func (l *Local) Inputs() Inputs {
	in := Inputs{PublicKeys: maps.Clone(l.PublicKeys), Active: maps.Clone(l.Active), Removed: map[string]bool{}}
	for _, name := range l.Removed {
		in.Removed[name] = true
	}
	for _, h := range l.Hosts {
		in.Hosts = append(in.Hosts, Host{Name: h.Name, Site: h.Site, Network: h.Network, Address: h.Address, Slot: h.Slot})
	}
	return in
}

// AttachLocal sets the Local of every plan of gs to the one of f and in
// (one value shared by all).
func AttachLocal(gs []Gateway, f *spec.Federation, in Inputs) {
	l := NewLocal(f, in)
	for i := range gs {
		gs[i].Local = l
	}
}

// Equal reports whether a and b are the same plan, Local aside.
func Equal(a, b Gateway) bool {
	a.Local, b.Local = nil, nil
	return string(a.JSON()) == string(b.JSON())
}

// SendsTo returns, for each site of f other than g's whose prefixes g's
// peers carry, the peer gateway whose allowed IPs hold them: where g sends
// that site's traffic and whom its WireGuard accepts it from. Transit
// addresses do not count. Sites g does not reach are absent.
func SendsTo(g Gateway, f *spec.Federation) map[string]string {
	out := map[string]string{}
	for _, p := range g.Peers {
		for _, a := range p.AllowedIPs {
			if a.IsSingleIP() && g.Firewall.Transit.Contains(a.Addr()) {
				continue
			}
			for _, s := range f.Sites {
				if s.Name == g.Site {
					continue
				}
				for _, sp := range s.Prefixes {
					if sp.Overlaps(a) {
						out[s.Name] = p.Gateway
					}
				}
			}
		}
	}
	return out
}
