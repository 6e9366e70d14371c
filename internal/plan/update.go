package plan

import (
	"cmp"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"sync/atomic"

	"github.com/fednet/fednet/internal/spec"
)

// Edit is what Update changed in the peers, routes and flows of one
// gateway's plan, against the previous plan of that gateway: enough for a
// delta without comparing the two plans entry by entry.
type Edit struct {
	// Peers, Routes and Flows hold every entry of the new plan that may
	// differ from the previous plan's (those of the remote sites the
	// change touched), sorted as in the plan.
	Peers  []Peer
	Routes []Route
	Flows  []Flow
	// PeersGone, RoutesGone and FlowsGone are the previous plan's entries
	// whose key (gateway, destination, source and destination) the new
	// plan lacks, sorted.
	PeersGone  []Peer
	RoutesGone []Route
	FlowsGone  []Flow
}

// Update returns what Compute(f, in) returns, computed from prev: the
// plans Compute returned for prevF under prevIn. The plan of a gateway
// whose own site the change leaves as it was (as the planner reads it) is
// its previous plan with the entries of the sites the change touched made
// again, and edits holds what changed (nil for a plan computed whole).
// A change that concerns one site of a full mesh of N so costs O(N) per
// plan in copies, not a planning of N peers, routes and 2N flows.
//
// It computes whole plans (all edits nil), like Compute, where the
// shortcut does not hold: links named in the topology or down (paths
// through relays), federation-wide settings changed, more than half of
// the sites changed, or gateways whose own site changed. prev is not
// modified; the new plans may share the unchanged peers' allowed IPs with
// it (plans are values: nobody writes into them).
func Update(prevF *spec.Federation, prevIn Inputs, prev []Gateway, f *spec.Federation, in Inputs) (plans []Gateway, edits []*Edit, err error) {
	return UpdateOnly(prevF, prevIn, prev, f, in, nil)
}

// UpdateOnly is Update for the gateways want names alone (every one when
// want is nil): it returns their plans, as Update would, and plans no
// other (prev may lack them too). A manager that follows the changes
// another makes plans only the gateways whose agents it serves.
func UpdateOnly(prevF *spec.Federation, prevIn Inputs, prev []Gateway, f *spec.Federation, in Inputs, want func(gateway string) bool) (plans []Gateway, edits []*Edit, err error) {
	plans, edits, _, err = UpdateExplained(prevF, prevIn, prev, f, in, want)
	return plans, edits, err
}

// UpdateExplained is UpdateOnly that also says why it computed every
// plan whole, when it did (why is "" when it edited the plans it could:
// the edits of the others are nil). A manager logs it with its planning.
func UpdateExplained(prevF *spec.Federation, prevIn Inputs, prev []Gateway, f *spec.Federation, in Inputs, want func(gateway string) bool) (plans []Gateway, edits []*Edit, why string, err error) {
	held := make([]Held, len(prev))
	for i := range prev {
		held[i] = Hold(prev[i])
	}
	hs, edits, why, err := UpdateHeld(prevF, prevIn, held, f, in, want)
	if err != nil {
		return nil, nil, why, err
	}
	if hs != nil {
		plans = make([]Gateway, len(hs))
		for i := range hs {
			plans[i] = hs[i].Gateway()
		}
	}
	return plans, edits, why, nil
}

// Held is a plan as a manager holds it from one change to the next: its
// head (the plan without its peers, routes and flows, whose Local and
// remote prefixes it keeps) and those three lists as Chunks, which
// UpdateHeld shares between versions: a change that concerns one site of
// a full mesh of N copies a chunk of each list of each plan, not N
// entries. It is a value, like a Gateway.
type Held struct {
	Head   Gateway
	Peers  Chunks[Peer]
	Routes Chunks[Route]
	Flows  Chunks[Flow]
}

// Hold returns g as a Held, sharing g's lists.
func Hold(g Gateway) Held {
	h := Held{Head: g, Peers: ChunksOf(g.Peers), Routes: ChunksOf(g.Routes), Flows: ChunksOf(g.Firewall.Flows)}
	h.Head.Peers, h.Head.Routes, h.Head.Firewall.Flows = nil, nil, nil
	return h
}

// Gateway returns the plan h holds, its lists made of the chunks (a
// copy of them, but for lists of one chunk).
func (h Held) Gateway() Gateway {
	g := h.Head
	g.Peers, g.Routes, g.Firewall.Flows = h.Peers.Slice(), h.Routes.Slice(), h.Flows.Slice()
	return g
}

// Peer returns h's peer of gateway name.
func (h Held) Peer(name string) (Peer, bool) {
	i, ok := SearchChunks(h.Peers, name, func(p Peer, n string) int { return cmp.Compare(p.Gateway, n) })
	if !ok {
		return Peer{}, false
	}
	return h.Peers.At(i), true
}

// UpdateHeld is UpdateExplained on plans held as Held: the plans it
// edits share the chunks of their lists that the change left alone with
// the plans before (prev is not modified).
func UpdateHeld(prevF *spec.Federation, prevIn Inputs, prev []Held, f *spec.Federation, in Inputs, want func(gateway string) bool) (plans []Held, edits []*Edit, why string, err error) {
	whole := func(reason string) ([]Held, []*Edit, string, error) {
		out, err := ComputeOnly(f, in, want)
		var held []Held
		if out != nil {
			held = make([]Held, len(out))
			for i := range out {
				held[i] = Hold(out[i])
			}
		}
		return held, make([]*Edit, len(out)), reason, err
	}
	if prevF == nil || f == nil {
		return whole("no plans before")
	}
	if !updatable(prevF, prevIn, f, in) {
		return whole("links named or down, an external site, or federation-wide settings changed")
	}
	keys, err := publicKeys(f, in)
	if err != nil {
		return whole("keys: " + err.Error())
	}
	prevKeys, err := publicKeys(prevF, prevIn)
	if err != nil {
		return whole("keys before: " + err.Error())
	}
	v, pv := newView(f, in), newView(prevF, prevIn)
	rt := computeRouting(v)
	if len(rt.relayed) > 0 {
		return whole("paths through relays")
	}
	dirty := changedSites(pv, prevKeys, v, keys)
	if len(dirty) > len(f.Sites)/2 {
		return whole(fmt.Sprintf("%d of %d sites changed", len(dirty), len(f.Sites)))
	}
	// Where every site keeps its prefixes, every plan's remote prefixes
	// are those of the plan before (shared, not made again).
	samePrefixes := slices.Equal(pv.idx.prefixes, v.idx.prefixes)
	var only []int // the indexes in f.Sites of the sites that changed
	for i := range f.Sites {
		if dirty[f.Sites[i].Name] {
			only = append(only, i)
		}
	}
	// What of the previous plans came from the sites that changed: their
	// gateways (routes go via them) and their prefixes (flows).
	var gone touched
	for i := range prevF.Sites {
		s := &prevF.Sites[i]
		if !dirty[s.Name] {
			continue
		}
		for _, g := range s.Gateways {
			gone.gateways = append(gone.gateways, g.Name)
			gone.transit = append(gone.transit, netip.PrefixFrom(g.TransitAddress, g.TransitAddress.BitLen()))
		}
		for _, p := range s.Prefixes {
			gone.prefixes = append(gone.prefixes, p.Masked())
		}
	}
	gone.sites = dirty
	before := make(map[string]*Held, len(prev))
	for i := range prev {
		before[prev[i].Head.Name] = &prev[i]
	}

	jobs := wanted(gatewayJobs(f, in), want)
	out := make([]Held, len(jobs))
	edits = make([]*Edit, len(jobs))
	errs := make([]error, len(jobs))
	var unkeyed atomic.Bool
	inParallel(len(jobs), func(i int) {
		site, self := jobs[i].site, jobs[i].self
		a := planArgs{v: v, keys: keys, rt: rt, site: site, self: self}
		old, had := before[self.Name]
		if !had || dirty[site.Name] {
			var g Gateway
			g, errs[i] = gatewayPlan(a)
			out[i] = Hold(g)
			return
		}
		a.partial, a.only = true, only
		if samePrefixes && old.Head.Site == site.Name && old.Head.Firewall.Remote != nil {
			a.remotePrefixes = old.Head.Firewall.Remote
		}
		part, err := gatewayPlan(a)
		if err != nil {
			errs[i] = err
			return
		}
		var ok bool
		if out[i], edits[i], ok = splice(*old, part, &gone); !ok {
			unkeyed.Store(true)
		}
	})
	for _, err := range errs {
		if err != nil {
			return whole("planning error") // the same error, found in the same order
		}
	}
	if unkeyed.Load() {
		return whole("a key twice in a list")
	}
	if len(out) == 0 {
		return nil, nil, "", nil
	}
	order := make([]int, len(out))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(out[a].Head.Name, out[b].Head.Name) })
	unsorted := edits
	plans, edits = make([]Held, len(out)), make([]*Edit, len(out))
	for i, j := range order {
		plans[i], edits[i] = out[j], unsorted[j]
	}
	return plans, edits, "", nil
}

// ComputeOnly is Compute for the gateways want names alone (every one
// when want is nil).
func ComputeOnly(f *spec.Federation, in Inputs, want func(gateway string) bool) ([]Gateway, error) {
	keys, err := publicKeys(f, in)
	if err != nil {
		return nil, err
	}
	v := newView(f, in)
	rt := computeRouting(v)
	// Each gateway's plan is computed on its own; they are independent, so
	// they are computed on every CPU at once, each into its own slot.
	jobs := wanted(gatewayJobs(f, in), want)
	out := make([]Gateway, len(jobs))
	errs := make([]error, len(jobs))
	inParallel(len(jobs), func(i int) {
		out[i], errs[i] = gatewayPlan(planArgs{v: v, keys: keys, rt: rt, site: jobs[i].site, self: jobs[i].self})
	})
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	slices.SortFunc(out, func(a, b Gateway) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

// wanted returns the jobs of the gateways want names (all for a nil want).
func wanted(jobs []job, want func(gateway string) bool) []job {
	if want == nil {
		return jobs
	}
	out := jobs[:0:0]
	for _, j := range jobs {
		if want(j.self.Name) {
			out = append(out, j)
		}
	}
	return out
}

// updatable reports whether Update may edit plans rather than compute them
// whole: both federations have every link enabled and up at cost 1 and no
// external site (so every routed path is the direct link and nothing is
// relayed), and they differ in their sites and networks alone.
func updatable(prevF *spec.Federation, prevIn Inputs, f *spec.Federation, in Inputs) bool {
	if prevF == nil || f == nil || len(prevF.Topology.Links) > 0 || len(f.Topology.Links) > 0 || len(prevIn.LinksDown) > 0 || len(in.LinksDown) > 0 {
		return false
	}
	if hasExternal(prevF) || hasExternal(f) {
		return false
	}
	return sameFields(reflect.ValueOf(*prevF), reflect.ValueOf(*f), federationPerSite)
}

// hasExternal reports whether f has an external site: its prefixes are
// relayed through the gateway that terminates it, which Update's direct
// paths do not cover.
func hasExternal(f *spec.Federation) bool {
	for i := range f.Sites {
		if f.Sites[i].External != nil {
			return true
		}
	}
	return false
}

// federationPerSite are the fields of spec.Federation that Update compares
// site by site (sites, the routed networks' members) or that the planner
// does not read (the numbering plan's providers show in the sites'
// prefixes); every other field must be equal. TestUpdateKnowsEveryField
// fails when a field is added to the spec without being classified here.
var federationPerSite = map[string]bool{"APIVersion": true, "Kind": true, "Providers": true, "Sites": true, "Networks": true, "EgressPrices": true, "Lab": true}

// siteHeadOnly are the fields of spec.Site and spec.Gateway that only the
// head of a plan reads (its LAN, bridges, MTU, bounds and admissions),
// which Update computes whole for every gateway, or that the planner reads
// in another form (a site's prefixes come from its provider and index,
// a gateway's key is compared as the planner resolves it).
var siteHeadOnly = map[string]bool{
	"Provider": true, "Region": true, "Index": true, "VirtualAddress": true, "Fabric": true, "Cloud": true,
	"PublicKey": true, "LANAddress": true, "BridgePorts": true, "PublicAllow": true,
}

// sameFields reports whether the exported fields of structs a and b that
// skip does not name are deeply equal.
func sameFields(a, b reflect.Value, skip map[string]bool) bool {
	t := a.Type()
	for i := range t.NumField() {
		if fl := t.Field(i); fl.IsExported() && !skip[fl.Name] && !reflect.DeepEqual(a.Field(i).Interface(), b.Field(i).Interface()) {
			return false
		}
	}
	return true
}

// changedSites returns the names of the sites (of either federation) whose
// part in other gateways' peers, routes and flows may differ between the
// previous view pv (with its keys pk) and v: new, gone, or changed in a
// field the lists read, in their gateways' keys, removal or activity, or
// in the routed networks they are members of.
func changedSites(pv view, pk map[string]Key, v view, k map[string]Key) map[string]bool {
	out := map[string]bool{}
	for name, s := range v.idx.sites {
		if p, ok := pv.idx.sites[name]; !ok || !sameSite(pv, pk, p, v, k, s) {
			out[name] = true
		}
	}
	for name := range pv.idx.sites {
		if _, ok := v.idx.sites[name]; !ok {
			out[name] = true
		}
	}
	return out
}

// sameSite reports whether site a of pv and site b of v give the same
// entries to other gateways' lists.
func sameSite(pv view, pk map[string]Key, a *spec.Site, v view, k map[string]Key, b *spec.Site) bool {
	if !sameFields(reflect.ValueOf(*a), reflect.ValueOf(*b), siteOwnHeadOnly) {
		return false
	}
	if len(a.Gateways) != len(b.Gateways) || pv.isUp[a.Name] != v.isUp[b.Name] || !slices.Equal(pv.idx.routed[a.Name], v.idx.routed[b.Name]) {
		return false
	}
	for i := range a.Gateways {
		ga, gb := &a.Gateways[i], &b.Gateways[i]
		if !sameFields(reflect.ValueOf(*ga), reflect.ValueOf(*gb), siteHeadOnly) || pk[ga.Name] != k[gb.Name] ||
			pv.in.Removed[ga.Name] != v.in.Removed[gb.Name] || pv.in.Down[ga.Name] != v.in.Down[gb.Name] ||
			pv.isActive(a.Name, ga) != v.isActive(b.Name, gb) {
			return false
		}
	}
	return true
}

// siteOwnHeadOnly is siteHeadOnly and the site's gateways, which sameSite
// compares one by one.
var siteOwnHeadOnly = func() map[string]bool {
	m := map[string]bool{"Gateways": true}
	for name := range siteHeadOnly {
		m[name] = true
	}
	return m
}()

// touched is what of the previous plans came from the sites a change
// touched: those sites, their gateways and their (masked) prefixes, and
// the gateways' transit addresses. The lists are short (a change touches
// few sites), so they are searched for in the plans' sorted lists rather
// than the plans' lists scanned.
type touched struct {
	sites    map[string]bool
	gateways []string
	prefixes []netip.Prefix
	transit  []netip.Prefix
}

// splice returns the plan part (computed with the lists of the touched
// sites alone) with the lists of old, less the entries of the touched
// sites, merged in; ok is false when two entries of a list would have the
// same key (then the caller computes the plan whole).
func splice(old Held, part Gateway, t *touched) (Held, *Edit, bool) {
	g := Hold(part)
	e := &Edit{Peers: part.Peers, Routes: part.Routes, Flows: part.Firewall.Flows}
	comparePeer := func(a, b Peer) int { return cmp.Compare(a.Gateway, b.Gateway) }
	compareRoute := func(a, b Route) int { return comparePrefix(a.Destination, b.Destination) }

	var drop []int
	for _, name := range t.gateways {
		if i, ok := SearchChunks(old.Peers, name, func(p Peer, n string) int { return cmp.Compare(p.Gateway, n) }); ok && t.sites[old.Peers.At(i).Site] {
			drop = append(drop, i)
		}
	}
	var ok1, ok2, ok3 bool
	g.Peers, e.PeersGone, ok1 = spliceChunks(old.Peers, sortedSet(drop), part.Peers, comparePeer)

	drop = drop[:0]
	for _, list := range [][]netip.Prefix{t.prefixes, t.transit} {
		for _, p := range list {
			i, ok := SearchChunks(old.Routes, p, func(r Route, p netip.Prefix) int { return comparePrefix(r.Destination, p) })
			if ok && slices.Contains(t.gateways, old.Routes.At(i).Via) {
				drop = append(drop, i)
			}
		}
	}
	g.Routes, e.RoutesGone, ok2 = spliceChunks(old.Routes, sortedSet(drop), part.Routes, compareRoute)

	// A flow of a gateway whose site the change left alone is between one
	// of its own prefixes (Local) and a prefix of another site.
	drop = drop[:0]
	flows := old.Flows
	for _, p := range t.prefixes {
		i, _ := SearchChunks(flows, Flow{Source: p}, compareFlowKey)
		for ; i < flows.Len() && flows.At(i).Source == p; i++ {
			drop = append(drop, i)
		}
		for _, own := range part.Firewall.Local {
			if i, ok := SearchChunks(flows, Flow{Source: own, Destination: p}, compareFlowKey); ok {
				drop = append(drop, i)
			}
		}
	}
	g.Flows, e.FlowsGone, ok3 = spliceChunks(flows, sortedSet(drop), part.Firewall.Flows, compareFlowKey)
	g.Head.Forwarding = g.Routes.Len() > 0
	return g, e, ok1 && ok2 && ok3
}

// sortedSet sorts the indexes and drops repeats.
func sortedSet(x []int) []int {
	slices.Sort(x)
	return slices.Compact(x)
}

// compareFlowKey orders flows by source, then destination: their key.
func compareFlowKey(a, b Flow) int {
	if c := comparePrefix(a.Source, b.Source); c != 0 {
		return c
	}
	return comparePrefix(a.Destination, b.Destination)
}
