package console

import (
	"cmp"
	"net/netip"
	"slices"
	"time"

	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/plan"
)

// Snapshot is what the console is built from: the manager's read models at
// one moment. Source.Snapshot fills it; Build turns it into a View.
type Snapshot struct {
	Federation string
	Revision   int
	Generation int64
	Sites      []api.Site
	Networks   []api.Network
	// Gateways are the spec's gateways (api.Gateway, as GET /v1/gateways).
	Gateways []api.Gateway
	// Links are the links as their From gateways last reported them (as
	// GET /v1/links: up or down judged by the manager).
	Links []api.Link
	// Revisions are the stored spec revisions, any order.
	Revisions []api.Revision
	// Plans are the manager's current plans, by gateway name.
	Plans map[string]plan.Gateway
	// Now is the manager's clock when the snapshot was taken.
	Now time.Time
}

// View is what the page shows, sent to it as JSON (docs/console.md). Build
// makes it from a Snapshot; the hub adds Events and Now.
type View struct {
	Federation string `json:"federation"`
	Revision   int    `json:"revision"`
	Generation int64  `json:"generation"`
	// Now is the manager's clock at the last look (the page shows ages
	// against it, not against the browser's clock).
	Now       time.Time      `json:"now"`
	Summary   Summary        `json:"summary"`
	Sites     []Site         `json:"sites"`
	Gateways  []Gateway      `json:"gateways"`
	Links     []Link         `json:"links"`
	Relays    []Relay        `json:"relays"`
	Networks  []api.Network  `json:"networks"`
	Revisions []api.Revision `json:"revisions"` // newest first
	Events    []Event        `json:"events"`    // newest first
}

// Summary counts what the header shows.
type Summary struct {
	Sites         int `json:"sites"`
	Gateways      int `json:"gateways"`
	Enrolled      int `json:"enrolled"`
	LinksUp       int `json:"linksUp"`
	LinksDown     int `json:"linksDown"`
	LinksDegraded int `json:"linksDegraded"`
	LinksUnknown  int `json:"linksUnknown"`
}

// Site is a site and what it takes part in.
type Site struct {
	Name     string         `json:"name"`
	Provider string         `json:"provider"`
	Region   string         `json:"region,omitempty"`
	Prefixes []netip.Prefix `json:"prefixes"`
	Gateways []string       `json:"gateways"`
	// Networks are the networks the site is a member of, by name.
	Networks []string `json:"networks"`
	// RelayFor are the bridged networks whose frames the site only
	// forwards (it is on their relay tree but not a member).
	RelayFor []string `json:"relayFor,omitempty"`
}

// Role is a gateway's part at its site.
type Role string

// Roles. A site with one gateway has it active.
const (
	RoleActive  Role = "active"  // carries the site's traffic, holds the virtual address
	RoleStandby Role = "standby" // keeps its tunnels up, ready to take over
	RoleNone    Role = ""        // no plan (not in the current spec's plans)
)

// Health sums up a gateway's state for the page's colour.
type Health string

// Gateway health, worst first.
const (
	HealthError   Health = "error"   // its last apply failed
	HealthRemoved Health = "removed" // removed from the federation
	HealthPending Health = "pending" // not enrolled yet, or never reported
	HealthSilent  Health = "silent"  // no report for SilentAfter
	HealthBehind  Health = "behind"  // has not applied its current plan yet
	HealthOK      Health = "ok"
)

// SilentAfter is how long a gateway may go without a status report before
// the page marks it silent: three report periods of the agent.
const SilentAfter = 15 * time.Second

// Gateway is a gateway as the page shows it.
type Gateway struct {
	api.Gateway
	// Role is active or standby, from the manager's plan.
	Role Role `json:"role"`
	// RoleSource says who decided Role. "plan": the manager's plan (the
	// spec's order of gateways). When agents report a local failover
	// (issue 11), roleOf takes it from their reports and says "report".
	RoleSource string `json:"roleSource,omitempty"`
	// LAN is the gateway's address on its site's segment.
	LAN    netip.Prefix `json:"lan,omitzero"`
	Health Health       `json:"health"`
}

// LinkState is the state of a link (both directions together).
type LinkState string

// Link states.
const (
	// LinkUp: every reported direction is up.
	LinkUp LinkState = "up"
	// LinkDegraded: up, but a direction lost more than DegradedLoss of its
	// probes over the last minute.
	LinkDegraded LinkState = "degraded"
	// LinkDown: a direction is reported down.
	LinkDown LinkState = "down"
	// LinkUnknown: neither side has reported the link yet.
	LinkUnknown LinkState = "unknown"
)

// DegradedLoss is the minute's probe loss above which an up link shows as
// degraded.
const DegradedLoss = 0.01

// Link is one link between two gateways, with what each side reports.
type Link struct {
	// ID is "A|B", the gateways in name order.
	ID           string    `json:"id"`
	A            string    `json:"a"`
	B            string    `json:"b"`
	SiteA, SiteB string    `json:"-"`
	State        LinkState `json:"state"`
	// Directions are the reports of A's side and of B's side, as far as
	// they exist (0 to 2), A's first.
	Directions []api.Link `json:"directions"`
}

// Relay is routed traffic between two sites that have no link of their
// own: it crosses the sites of Via, in order.
type Relay struct {
	ID   string   `json:"id"` // "From|To"
	From string   `json:"from"`
	To   string   `json:"to"`
	Via  []string `json:"via"`
}

// Build computes the View of s (without Events). It is pure: the same
// snapshot gives the same view.
func Build(s Snapshot) View {
	v := View{
		Federation: s.Federation, Revision: s.Revision, Generation: s.Generation, Now: s.Now,
		Sites: []Site{}, Gateways: []Gateway{}, Links: []Link{}, Relays: []Relay{},
		Networks: append([]api.Network{}, s.Networks...), Revisions: append([]api.Revision{}, s.Revisions...),
		Events: []Event{},
	}
	slices.SortFunc(v.Revisions, func(a, b api.Revision) int { return cmp.Compare(b.Revision, a.Revision) })
	siteOf := map[string]string{} // gateway -> site
	for _, st := range s.Sites {
		site := Site{Name: st.Name, Provider: st.Provider, Region: st.Region, Prefixes: st.Prefixes, Gateways: append([]string{}, st.Gateways...), Networks: []string{}}
		for _, n := range s.Networks {
			if slices.Contains(n.Sites, st.Name) {
				site.Networks = append(site.Networks, n.Name)
			}
		}
		for _, g := range st.Gateways {
			siteOf[g] = st.Name
			if p, ok := s.Plans[g]; ok && p.LAN.Active {
				for _, b := range p.Bridges {
					if b.Relay {
						site.RelayFor = append(site.RelayFor, b.Network)
					}
				}
			}
		}
		v.Sites = append(v.Sites, site)
	}
	for _, g := range s.Gateways {
		p, planned := s.Plans[g.Name]
		gw := Gateway{Gateway: g, Health: health(g, s.Now)}
		if planned {
			gw.Role, gw.RoleSource = roleOf(p), "plan"
			gw.LAN = p.LAN.Address
		}
		v.Gateways = append(v.Gateways, gw)
	}
	v.Links = links(s, siteOf)
	v.Relays = relays(s, siteOf)
	v.Summary = summarize(v)
	return v
}

// roleOf is the gateway's role as its plan has it. This is the hook for
// failover status (issue 11): once agents report which gateway of a site
// took over, the report wins over the plan here.
func roleOf(p plan.Gateway) Role {
	if p.LAN.Active {
		return RoleActive
	}
	return RoleStandby
}

// health sums up a gateway's read model at now.
func health(g api.Gateway, now time.Time) Health {
	switch {
	case g.Removed:
		return HealthRemoved
	case g.ApplyError != "":
		return HealthError
	case !g.Enrolled || g.LastReport.IsZero():
		return HealthPending
	case now.Sub(g.LastReport) > SilentAfter:
		return HealthSilent
	case g.AppliedGeneration < g.PlanGeneration:
		return HealthBehind
	}
	return HealthOK
}

// links pairs the planned links of s with their reported directions.
func links(s Snapshot, siteOf map[string]string) []Link {
	byID := map[string]*Link{}
	pair := func(a, b string) *Link {
		if b < a {
			a, b = b, a
		}
		id := a + "|" + b
		l, ok := byID[id]
		if !ok {
			l = &Link{ID: id, A: a, B: b, SiteA: siteOf[a], SiteB: siteOf[b]}
			byID[id] = l
		}
		return l
	}
	for name, p := range s.Plans {
		if _, ok := siteOf[name]; !ok {
			continue
		}
		for _, peer := range p.Peers {
			if _, ok := siteOf[peer.Gateway]; ok {
				pair(name, peer.Gateway)
			}
		}
	}
	for _, rep := range s.Links {
		if l, ok := byID[pairID(rep.From, rep.To)]; ok {
			l.Directions = append(l.Directions, rep)
		}
	}
	out := make([]Link, 0, len(byID))
	for _, l := range byID {
		slices.SortFunc(l.Directions, func(x, y api.Link) int {
			return cmp.Compare(boolInt(x.From != l.A), boolInt(y.From != l.A))
		})
		if l.Directions == nil {
			l.Directions = []api.Link{}
		}
		l.State = linkState(l.Directions)
		out = append(out, *l)
	}
	slices.SortFunc(out, func(x, y Link) int { return cmp.Compare(x.ID, y.ID) })
	return out
}

func pairID(a, b string) string {
	if b < a {
		a, b = b, a
	}
	return a + "|" + b
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// linkState judges a link from the reports of its directions.
func linkState(dirs []api.Link) LinkState {
	if len(dirs) == 0 {
		return LinkUnknown
	}
	state := LinkUp
	for _, d := range dirs {
		if !d.Up {
			return LinkDown
		}
		if d.Probe != nil && d.Probe.Loss > DegradedLoss {
			state = LinkDegraded
		}
	}
	return state
}

// relays finds the routed traffic that crosses a third site: a route of a
// site's active gateway whose next hop is a gateway of another site than
// the destination's. The chain follows the next hops of the relay sites'
// own plans.
func relays(s Snapshot, siteOf map[string]string) []Relay {
	owner := func(p netip.Prefix) string {
		for _, st := range s.Sites {
			for _, sp := range st.Prefixes {
				if sp.Overlaps(p) {
					return st.Name
				}
			}
		}
		return ""
	}
	// next[a][d] is the site after a on the way from a to d.
	next := map[string]map[string]string{}
	for name, p := range s.Plans {
		a := siteOf[name]
		if a == "" || !p.LAN.Active {
			continue
		}
		for _, r := range p.Routes {
			d, via := owner(r.Destination), siteOf[r.Via]
			if d == "" || via == "" || d == a {
				continue
			}
			if next[a] == nil {
				next[a] = map[string]string{}
			}
			next[a][d] = via
		}
	}
	out := []Relay{}
	for _, a := range sortedKeys(next) {
		for _, d := range sortedKeys(next[a]) {
			if next[a][d] == d || d < a && next[d][a] != "" {
				continue // direct, or listed from d's side already
			}
			r := Relay{ID: a + "|" + d, From: a, To: d, Via: []string{}}
			for hop, n := next[a][d], 0; hop != "" && hop != d && n < len(next)+1; hop, n = next[hop][d], n+1 {
				r.Via = append(r.Via, hop)
			}
			out = append(out, r)
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// summarize counts what the header shows.
func summarize(v View) Summary {
	s := Summary{Sites: len(v.Sites), Gateways: len(v.Gateways)}
	for _, g := range v.Gateways {
		if g.Enrolled && !g.Removed {
			s.Enrolled++
		}
	}
	for _, l := range v.Links {
		switch l.State {
		case LinkUp:
			s.LinksUp++
		case LinkDown:
			s.LinksDown++
		case LinkDegraded:
			s.LinksDegraded++
		default:
			s.LinksUnknown++
		}
	}
	return s
}
