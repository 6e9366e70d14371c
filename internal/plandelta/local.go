package plandelta

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"

	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/spec"
)

// A plan's Local (plan.Local) is the whole federation and the planner's
// inputs: the same for every gateway at one revision, and as large as
// every plan's peers together. A Delta carries what changed in it as a
// LocalDelta, which the manager computes once for all the gateways whose
// plans moved from one Local to the next (DiffLocal) and shares between
// their deltas.

// LocalDelta turns the Local of a delta's base into the new plan's.
type LocalDelta struct {
	// Federation is the new federation without its sites, networks and
	// links (Topology.Links), which Sites, Networks and Links rebuild.
	Federation spec.Federation  `json:"federation"`
	Sites      Edits[spec.Site] `json:"sites"`
	Links      Edits[spec.Link] `json:"links"`
	// Networks rebuild the networks without their sites, which
	// NetworkSites edit by network name from the sites of the base's
	// network of that name (none: those sites unchanged), so that a site
	// joining a network over a thousand sites is one name, not a
	// thousand.
	Networks     Edits[spec.Network]      `json:"networks"`
	NetworkSites map[string]Edits[string] `json:"networkSites,omitempty"`
	// NetworkSitesFrom names, for a network whose NetworkSites edit the
	// sites of another network of the base than its own (in a compact
	// delta: a network added over the sites of one the base has is a copy
	// of that one's thousand names, not the names), that other network.
	NetworkSitesFrom map[string]string `json:"networkSitesFrom,omitempty"`
	// Hosts and Removed rebuild the inputs of the same name.
	Hosts   Edits[plan.LocalHost] `json:"hosts"`
	Removed Edits[string]         `json:"removed"`
	// PublicKeys and Active are the entries of the maps of the same name
	// that are new or changed; PublicKeysGone and ActiveGone name those
	// dropped.
	PublicKeys     map[string]plan.Key `json:"publicKeys,omitempty"`
	PublicKeysGone []string            `json:"publicKeysGone,omitempty"`
	Active         map[string]string   `json:"active,omitempty"`
	ActiveGone     []string            `json:"activeGone,omitempty"`
}

// EncodeLocal returns l as JSON, as a plan carries it, and SumLocal(l).
func EncodeLocal(l *plan.Local) ([]byte, [sha256.Size]byte, error) {
	js, err := json.Marshal(l)
	if err != nil {
		return nil, [sha256.Size]byte{}, fmt.Errorf("encoding the plan's local inputs: %w", err)
	}
	return js, sha256.Sum256(js), nil
}

// SumLocal returns the digest of l that Sum covers a plan's Local by:
// SHA-256 of l as JSON (every field JSON has). A nil l sums to zeros.
func SumLocal(l *plan.Local) [sha256.Size]byte {
	if l == nil {
		return [sha256.Size]byte{}
	}
	_, sum, err := EncodeLocal(l)
	if err != nil {
		// Unencodable cannot be sent either; match nothing real.
		return sha256.Sum256([]byte("unencodable: " + err.Error()))
	}
	return sum
}

// DiffLocal returns the LocalDelta from old to new, or false when either
// has no federation or names a network twice (then send the whole plan).
// Its cost is one encoding of both (the caller shares the result between
// plans). Entries that changed in a few fields are patched (Edit.Patch):
// send it only to an agent that announces it applies patches
// (api.PlanFeaturePatch); see DiffLocalWhole.
func DiffLocal(old, new *plan.Local) (*LocalDelta, bool) {
	return diffLocal(old, new, true, false)
}

// DiffLocalWhole is DiffLocal without patches: an entry that changed is
// inserted whole, as agents that do not announce api.PlanFeaturePatch
// (which ignore Edit.Patch) rebuild the Local.
func DiffLocalWhole(old, new *plan.Local) (*LocalDelta, bool) {
	return diffLocal(old, new, false, false)
}

// DiffLocalCompact is DiffLocal in its compact form: a patch repeated at
// the end of an edit is a count (Edit.Repeat), not one null per entry,
// and a network the base lacks edits the sites of the base's network
// nearest to its own (NetworkSitesFrom). Send it only to an agent that
// announces it reads them (api.PlanFeatureCompact): at 1000 sites, a
// bridged network added over every site is 14 kB of JSON to decode on
// every agent, 0.3 ms of its CPU, in the other form, and 0.7 kB in this.
func DiffLocalCompact(old, new *plan.Local) (*LocalDelta, bool) {
	return diffLocal(old, new, true, true)
}

func diffLocal(old, new *plan.Local, patches, compact bool) (*LocalDelta, bool) {
	if old == nil || new == nil || old.Federation == nil || new.Federation == nil {
		return nil, false
	}
	oldSites, ok := networkSites(old.Federation.Networks)
	if !ok {
		return nil, false
	}
	if _, ok := networkSites(new.Federation.Networks); !ok {
		return nil, false
	}
	d := &LocalDelta{Federation: *new.Federation}
	d.Federation.Sites, d.Federation.Networks, d.Federation.Topology.Links = nil, nil, nil
	d.Sites = diffEdits(old.Federation.Sites, new.Federation.Sites, patches)
	d.Networks = diffEdits(withoutSites(old.Federation.Networks), withoutSites(new.Federation.Networks), patches)
	for _, n := range new.Federation.Networks {
		if was := oldSites[n.Name]; !slices.Equal(n.Sites, was) || (n.Sites == nil) != (was == nil) {
			if d.NetworkSites == nil {
				d.NetworkSites = map[string]Edits[string]{}
			}
			d.NetworkSites[n.Name] = diffEdits(oldSites[n.Name], n.Sites, patches)
			if _, had := oldSites[n.Name]; compact && !had {
				d.networkSitesFrom(n, old.Federation.Networks)
			}
		}
	}
	d.Links = diffEdits(old.Federation.Topology.Links, new.Federation.Topology.Links, patches)
	d.Hosts = diffEdits(old.Hosts, new.Hosts, patches)
	d.Removed = diffEdits(old.Removed, new.Removed, patches)
	d.PublicKeys, d.PublicKeysGone = diffMap(old.PublicKeys, new.PublicKeys)
	d.Active, d.ActiveGone = diffMap(old.Active, new.Active)
	if compact {
		d.Sites = d.Sites.repeats()
		d.Networks = d.Networks.repeats()
		d.Links = d.Links.repeats()
		d.Hosts = d.Hosts.repeats()
	}
	return d, true
}

// networkSitesFrom edits the sites of n, a network the base lacks, from
// those of the base's network (of base) whose edit is smallest, when it
// is smaller than n's sites inserted.
func (d *LocalDelta) networkSitesFrom(n spec.Network, base []spec.Network) {
	best, size := "", len(encode(d.NetworkSites[n.Name]))
	for _, b := range base {
		e := diffEdits(b.Sites, n.Sites, false)
		if s := len(encode(e)); s < size {
			best, size = b.Name, s
			d.NetworkSites[n.Name] = e
		}
	}
	if best != "" {
		if d.NetworkSitesFrom == nil {
			d.NetworkSitesFrom = map[string]string{}
		}
		d.NetworkSitesFrom[n.Name] = best
	}
}

// applyLocal rebuilds the Local d was made for from base.
func applyLocal(base *plan.Local, d *LocalDelta) (*plan.Local, error) {
	if base == nil || base.Federation == nil {
		return nil, fmt.Errorf("%w: the base plan has no local inputs", ErrMismatch)
	}
	f := d.Federation
	var err error
	if f.Sites, err = d.Sites.apply(base.Federation.Sites); err != nil {
		return nil, fmt.Errorf("sites: %w", err)
	}
	baseSites, ok := networkSites(base.Federation.Networks)
	if !ok {
		return nil, fmt.Errorf("%w: the base names a network twice", ErrMismatch)
	}
	if f.Networks, err = d.Networks.apply(withoutSites(base.Federation.Networks)); err != nil {
		return nil, fmt.Errorf("networks: %w", err)
	}
	for name, from := range d.NetworkSitesFrom {
		if _, ok := d.NetworkSites[name]; !ok {
			return nil, fmt.Errorf("%w: the sites of network %s edited from network %s, with no edit", ErrMismatch, name, from)
		}
		if _, ok := baseSites[from]; !ok {
			return nil, fmt.Errorf("%w: the sites of network %s edited from network %s, which the base lacks", ErrMismatch, name, from)
		}
	}
	for i, n := range f.Networks {
		f.Networks[i].Sites = baseSites[n.Name]
		if e, ok := d.NetworkSites[n.Name]; ok {
			from := n.Name
			if src, ok := d.NetworkSitesFrom[n.Name]; ok {
				from = src
			}
			if f.Networks[i].Sites, err = e.apply(baseSites[from]); err != nil {
				return nil, fmt.Errorf("sites of network %s: %w", n.Name, err)
			}
		}
	}
	if f.Topology.Links, err = d.Links.apply(base.Federation.Topology.Links); err != nil {
		return nil, fmt.Errorf("links: %w", err)
	}
	l := &plan.Local{Federation: &f}
	if l.Hosts, err = d.Hosts.apply(base.Hosts); err != nil {
		return nil, fmt.Errorf("hosts: %w", err)
	}
	if l.Removed, err = d.Removed.apply(base.Removed); err != nil {
		return nil, fmt.Errorf("removed: %w", err)
	}
	l.PublicKeys = applyMap(base.PublicKeys, d.PublicKeys, d.PublicKeysGone)
	l.Active = applyMap(base.Active, d.Active, d.ActiveGone)
	return l, nil
}

// networkSites returns the sites of each network by name, or false when
// a name is there twice.
func networkSites(ns []spec.Network) (map[string][]string, bool) {
	out := make(map[string][]string, len(ns))
	for _, n := range ns {
		if _, dup := out[n.Name]; dup {
			return nil, false
		}
		out[n.Name] = n.Sites
	}
	return out, true
}

// withoutSites returns a copy of ns without their sites.
func withoutSites(ns []spec.Network) []spec.Network {
	if ns == nil {
		return nil
	}
	out := make([]spec.Network, len(ns))
	for i, n := range ns {
		n.Sites = nil
		out[i] = n
	}
	return out
}

// Edits rebuild a list from the base's version of it, keeping its order:
// each Edit copies a run of the base's entries, patches the ones after
// it, then inserts new ones. A list that keeps most of its entries takes
// an Edit per change; one whose entries all change in the same field (a
// bridge port given to every site's gateway) takes one Edit of patches.
type Edits[T any] struct {
	Ops []Edit[T] `json:"ops,omitempty"`
	// Nil says the new list is absent (JSON null), not empty.
	Nil bool `json:"nil,omitempty"`
}

// Edit copies base[From:From+Count], then appends base[From+Count+i]
// patched by Patch[i] for each i, then the Repeat entries after those
// patched by the last patch again, then appends Insert. A nil Patch[i]
// (JSON null) is Patch[i-1] again: a field changed alike in every site
// is sent, and decoded, once; Repeat (in a compact delta,
// DiffLocalCompact) says so of the entries after them in one number.
type Edit[T any] struct {
	From   int      `json:"from,omitempty"`
	Count  int      `json:"count,omitempty"`
	Patch  []*Patch `json:"patch,omitempty"`
	Repeat int      `json:"repeat,omitempty"`
	Insert []T      `json:"insert,omitempty"`
}

// patches returns how many entries op patches: those of Patch and those
// it repeats the last patch on.
func (op Edit[T]) patches() int { return len(op.Patch) + op.Repeat }

// patchAt returns the patch of the i-th entry op patches, given the one
// of the entry before (nil for the first): Patch[i], or that one again.
func (op Edit[T]) patchAt(i int, prev *Patch) *Patch {
	if i < len(op.Patch) && op.Patch[i] != nil {
		return op.Patch[i]
	}
	return prev
}

// repeats returns e with each run of a patch and its repeats (nulls) an
// edit of one patch and a Repeat count.
func (e Edits[T]) repeats() Edits[T] {
	var ops []Edit[T]
	for _, op := range e.Ops {
		if len(op.Patch) == 0 || op.Patch[0] == nil {
			ops = append(ops, op)
			continue
		}
		out := Edit[T]{From: op.From, Count: op.Count, Patch: op.Patch[:1:1]}
		for i, p := range op.Patch[1:] {
			if p == nil {
				out.Repeat++
				continue
			}
			ops = append(ops, out)
			out = Edit[T]{From: op.From + op.Count + 1 + i, Patch: []*Patch{p}}
		}
		out.Insert = op.Insert
		ops = append(ops, out)
	}
	e.Ops = ops
	return e
}

// diffEdits returns the edits from old to new: each entry of new that
// equals (as JSON) the entry of old after the one copied or patched last
// extends the run copied; one equal to another entry of old starts a run
// there; one that differs from the entry of old after the last one in a
// few fields (a Patch smaller than the entry) patches it, when patches is
// set; any other is inserted. Entries are compared in their binary form
// (canon.go), equal exactly when their JSON is and made several times
// faster: a manager diffs a thousand sites at each change of the Local.
func diffEdits[T any](old, new []T, patches bool) Edits[T] {
	if new == nil {
		return Edits[T]{Nil: true}
	}
	var buf []byte
	form := func(x *T) string {
		buf = appendCanon(buf[:0], reflect.ValueOf(x).Elem())
		return string(buf)
	}
	oldForm := make([]string, len(old))
	at := make(map[string]int, len(old))
	for i := range old {
		oldForm[i] = form(&old[i])
		if _, dup := at[oldForm[i]]; !dup {
			at[oldForm[i]] = i
		}
	}
	var e Edits[T]
	var prevJS string // the JSON of the last patch made, when there is one
	next := 0         // the base index after the last one copied or patched
	for _, x := range new {
		xForm := form(&x)
		var last *Edit[T]
		if len(e.Ops) > 0 {
			last = &e.Ops[len(e.Ops)-1]
		}
		if next < len(old) && oldForm[next] == xForm {
			if last != nil && len(last.Patch) == 0 && len(last.Insert) == 0 && last.From+last.Count == next {
				last.Count++
			} else {
				e.Ops = append(e.Ops, Edit[T]{From: next, Count: 1})
			}
			next++
			continue
		}
		if i, ok := at[xForm]; ok {
			e.Ops = append(e.Ops, Edit[T]{From: i, Count: 1})
			next = i + 1
			continue
		}
		if patches && next < len(old) {
			if p, ok := diffPatch(old[next], x); ok {
				// The entry's binary form is about as long as its JSON
				// or shorter: a patch shorter than it is taken without
				// encoding the entry (size only chooses between two
				// correct deltas).
				if pjs := encode(p); len(pjs) < len(xForm) || len(pjs) < len(encode(x)) {
					if last != nil && len(last.Insert) == 0 && last.From+last.Count+len(last.Patch) == next {
						if lastPatch(last.Patch) != nil && prevJS == pjs {
							p = nil // the same again
						}
						last.Patch = append(last.Patch, p)
					} else {
						e.Ops = append(e.Ops, Edit[T]{From: next, Patch: []*Patch{p}})
					}
					prevJS = pjs
					next++
					continue
				}
			}
		}
		if last != nil {
			last.Insert = append(last.Insert, x)
		} else {
			e.Ops = append(e.Ops, Edit[T]{Insert: []T{x}})
		}
	}
	if len(new) == 0 {
		// An empty list, not an absent one: one empty edit says so.
		e.Ops = []Edit[T]{{}}
	}
	return e
}

// lastPatch returns the patch the last of ps repeats (nil for none).
func lastPatch(ps []*Patch) *Patch {
	for i := len(ps) - 1; i >= 0; i-- {
		if ps[i] != nil {
			return ps[i]
		}
	}
	return nil
}

// check returns an error when e copies or patches entries outside a base
// of n entries; else the length of the list it rebuilds.
func (e Edits[T]) check(n int) (int, error) {
	if e.Nil {
		if len(e.Ops) > 0 {
			return 0, fmt.Errorf("%w: an absent list with edits", ErrMismatch)
		}
		return 0, nil
	}
	total := 0
	for _, op := range e.Ops {
		if op.Repeat < 0 || op.Repeat > n || op.Repeat > 0 && len(op.Patch) == 0 {
			return 0, fmt.Errorf("%w: an edit repeats a patch %d times after %d patches", ErrMismatch, op.Repeat, len(op.Patch))
		}
		if op.From < 0 || op.Count < 0 || op.From > n || op.Count > n-op.From || op.patches() > n-op.From-op.Count {
			return 0, fmt.Errorf("%w: copying entries %d to %d of a base of %d", ErrMismatch, op.From, op.From+op.Count+op.patches(), n)
		}
		total += op.Count + op.patches() + len(op.Insert)
	}
	return total, nil
}

// apply rebuilds the list e was made for from base. The result shares the
// entries copied with base; it is base itself when e copies it whole.
func (e Edits[T]) apply(base []T) ([]T, error) {
	n, err := e.check(len(base))
	if err != nil || e.Nil {
		return nil, err
	}
	if len(e.Ops) == 1 && e.Ops[0].From == 0 && e.Ops[0].Count == len(base) && e.Ops[0].patches()+len(e.Ops[0].Insert) == 0 && base != nil {
		return base, nil
	}
	out := make([]T, 0, n)
	pc := patchCache{}
	var ports portsPatches
	for _, op := range e.Ops {
		out = append(out, base[op.From:op.From+op.Count]...)
		var p *Patch
		for i := range op.patches() {
			if p = op.patchAt(i, p); p == nil {
				return nil, fmt.Errorf("%w: an edit's first patch repeats none", ErrMismatch)
			}
			out = append(out, base[op.From+op.Count+i])
			var err error
			if site, ok := any(&out[len(out)-1]).(*spec.Site); ok && ports.of(p) != nil {
				err = ports.of(p).apply(site, &ports)
			} else {
				err = applyPatchTo(&out[len(out)-1], p, pc)
			}
			if err != nil {
				return nil, fmt.Errorf("patching entry %d: %w", op.From+op.Count+i, err)
			}
		}
		out = append(out, op.Insert...)
	}
	return out, nil
}

// encode returns x as JSON (the form the sum covers), or a string that
// equals no encoding when x has none.
func encode(x any) string {
	js, err := json.Marshal(x)
	if err != nil {
		return "\x00" + err.Error()
	}
	return string(js)
}

// diffMap returns the entries of new that old lacks or holds otherwise,
// and the keys of old that new lacks, sorted.
func diffMap[V comparable](old, new map[string]V) (set map[string]V, gone []string) {
	for k, v := range new {
		if o, ok := old[k]; !ok || o != v {
			if set == nil {
				set = map[string]V{}
			}
			set[k] = v
		}
	}
	for k := range old {
		if _, ok := new[k]; !ok {
			gone = append(gone, k)
		}
	}
	slices.Sort(gone)
	return set, gone
}

// applyMap returns base less the keys gone, with set's entries.
func applyMap[V any](base, set map[string]V, gone []string) map[string]V {
	if len(base) == 0 && len(set) == 0 {
		return nil
	}
	out := maps.Clone(base)
	if out == nil {
		out = map[string]V{}
	}
	for _, k := range gone {
		delete(out, k)
	}
	maps.Copy(out, set)
	return out
}
