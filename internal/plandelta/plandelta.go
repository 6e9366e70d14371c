// Package plandelta turns one plan of a gateway into the next with what
// changed rather than the whole plan, and sums plans so that both sides
// can check they hold the same one.
//
// A gateway's plan in a federation of N sites lists N-1 peers, as many
// routes, twice as many forwarded flows and every remote prefix: a
// thousand sites make a plan of about 370 kB of JSON, and adding one site
// changes every plan by one peer, one route and a few flows. The manager
// sends such a change as a Delta (Diff): the plan without those four long
// lists (its head, a few kilobytes), and the entries of each list that are
// new, changed or gone. The agent's client rebuilds the plan (Apply) and
// checks it against the delta's Sum, falling back to the whole plan on any
// mismatch.
//
// A plan the manager sends carries its Local (the federation and the
// planner's inputs, the same for every gateway): a delta carries the
// change of it as a LocalDelta (local.go), which is as small as the
// change and is computed once for every gateway whose plan moves from one
// Local to the next.
//
// Sum covers every field of a plan: the head as JSON, the four lists
// entry by entry in a fixed binary form, and the Local by its digest
// (SumLocal, SHA-256 of its JSON). The package's tests fail when a field
// is added to the list entries' types without being summed here. A plan
// without Local sums as it did before Local existed, so agents that do
// not take Local check deltas as they always have.
package plandelta

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/fednet/fednet/internal/plan"
)

// Delta turns the plan it was made from (its base) into another one.
type Delta struct {
	// Head is the new plan without Peers, Routes, Firewall.Remote,
	// Firewall.Flows and Local.
	Head plan.Gateway `json:"head"`
	// Peers are the new plan's peers that the base lacks or has
	// otherwise; PeersGone names the base's peers the new plan drops.
	Peers     []plan.Peer `json:"peers,omitempty"`
	PeersGone []string    `json:"peersGone,omitempty"`
	// Routes and RoutesGone are the same for routes, by destination.
	Routes     []plan.Route   `json:"routes,omitempty"`
	RoutesGone []netip.Prefix `json:"routesGone,omitempty"`
	// Flows and FlowsGone are the same for flows, by source and
	// destination.
	Flows     []plan.Flow `json:"flows,omitempty"`
	FlowsGone []FlowKey   `json:"flowsGone,omitempty"`
	// Remote and RemoteGone are the remote prefixes added and dropped.
	Remote     []netip.Prefix `json:"remote,omitempty"`
	RemoteGone []netip.Prefix `json:"remoteGone,omitempty"`
	// Local turns the base's Local into the new plan's; absent when the
	// new plan has no Local.
	Local *LocalDelta `json:"local,omitempty"`
	// RemotesEdits edit the remotes of VXLAN ports of the base's head
	// (or the transit addresses of the new plan's peers) into those of
	// the new head, whose ports they name have no remotes
	// (WithRemotesEdits); only for a watch that announces it takes them
	// (api.PlanFeatureRemotes, api.PlanFeaturePeerRemotes).
	RemotesEdits []RemotesEdit `json:"remotesEdits,omitempty"`
	// Sum is the sum of the new plan, in hex: Sum (version 1) when
	// SumVersion is 0, Digest.Sum of that version when it is 2 or more.
	Sum        string `json:"sum"`
	SumVersion int    `json:"sumVersion,omitempty"`
}

// FlowKey names a flow of a plan.
type FlowKey struct {
	Source      netip.Prefix `json:"source"`
	Destination netip.Prefix `json:"destination"`
}

// ErrMismatch is returned by Apply when the plan it rebuilt does not have
// the delta's sum: the base was not the plan the delta was made from.
var ErrMismatch = errors.New("the plan rebuilt from the delta does not match its sum")

// head returns g without its four long lists and its Local.
func head(g plan.Gateway) plan.Gateway {
	g.Peers, g.Routes, g.Firewall.Remote, g.Firewall.Flows, g.Local = nil, nil, nil, nil, nil
	return g
}

// HeadJSON returns the JSON of g's head (g without its four long lists
// and its Local): what a Delta's head is, and what sums cover of it. At
// 1000 sites with a bridged network over all of them a head is 45 kB,
// so a manager encodes each once (NewDigestWithHead, MarshalWithHead).
func HeadJSON(g plan.Gateway) ([]byte, error) {
	return json.Marshal(head(g))
}

// MarshalWithHead returns json.Marshal(d) for a caller that has
// HeadJSON(d.Head) at hand (headJSON; nil: encoded here), without encoding
// the head again.
func (d Delta) MarshalWithHead(headJSON []byte) ([]byte, error) {
	if headJSON == nil {
		return json.Marshal(d)
	}
	// The head, Delta's first field, is encoded as 0 and replaced after:
	// json.Marshal would scan a RawMessage of 45 kB to compact it. The
	// outer Head shadows the embedded Delta's, and the rest is Delta's
	// own fields in their order (the round-trip tests compare the bytes
	// with json.Marshal's).
	js, err := json.Marshal(struct {
		Head json.RawMessage `json:"head"`
		*Delta
	}{json.RawMessage("0"), &d})
	if err != nil {
		return nil, err
	}
	const placeholder = `{"head":0`
	out := make([]byte, 0, len(js)+len(headJSON))
	out = append(append(append(out, placeholder[:len(placeholder)-1]...), headJSON...), js[len(placeholder):]...)
	return out, nil
}

// Diff returns the delta from old to new, whose Sum is sum (Sum(new), which
// the caller may have at hand), or false when the plans' lists are not
// keyed uniquely (sorted with no key twice, as plan.Compute makes them) or
// new has a Local that old lacks: then send the whole plan.
func Diff(old, new plan.Gateway, sum [sha256.Size]byte) (Delta, bool) {
	if !Keyed(old) || !Keyed(new) {
		return Delta{}, false
	}
	var local *LocalDelta
	if new.Local != nil {
		var ok bool
		if local, ok = DiffLocal(old.Local, new.Local); !ok {
			return Delta{}, false
		}
	}
	return DiffKeyed(old, new, sum, local), true
}

// DiffKeyed is Diff for plans the caller knows to be Keyed (a caller that
// diffs each plan against the next checks each only once), with local,
// DiffLocal(old.Local, new.Local), made by the caller (once for every
// plan that moves between the same two Locals). A nil local makes a delta
// to new without its Local, whose sum is then Sum of new without Local.
func DiffKeyed(old, new plan.Gateway, sum [sha256.Size]byte, local *LocalDelta) Delta {
	d := Delta{Head: head(new), Local: local, Sum: hex.EncodeToString(sum[:])}
	d.Peers, d.PeersGone = diffList(old.Peers, new.Peers, peerKey, comparePeerKey, peerEqual)
	d.Routes, d.RoutesGone = diffList(old.Routes, new.Routes, routeKey, comparePrefix, func(a, b plan.Route) bool { return a == b })
	d.Flows, d.FlowsGone = diffList(old.Firewall.Flows, new.Firewall.Flows, flowKey, compareFlowKey, func(a, b plan.Flow) bool { return a == b })
	d.Remote, d.RemoteGone = diffList(old.Firewall.Remote, new.Firewall.Remote, func(p netip.Prefix) netip.Prefix { return p }, comparePrefix, func(a, b netip.Prefix) bool { return a == b })
	return d
}

// FromEdit returns the delta from old to new, whose Sum is sum, when new is
// the plan plan.Update made from old with edit e: the entries e holds are
// sent (some may be unchanged), the keys it drops are gone, and the remote
// prefixes are compared. It costs the size of the edit, not of the plans'
// lists (but for the remote prefixes), and checks nothing: Update's plans
// are keyed when the plans before were. The delta has no Local (the
// caller adds the LocalDelta, which is the same for every plan).
func FromEdit(old, new plan.Gateway, e plan.Edit, sum [sha256.Size]byte) Delta {
	d := Delta{Head: head(new), Sum: hex.EncodeToString(sum[:]), Peers: e.Peers, Routes: e.Routes, Flows: e.Flows}
	d.PeersGone = keys(e.PeersGone, peerKey)
	d.RoutesGone = keys(e.RoutesGone, routeKey)
	d.FlowsGone = keys(e.FlowsGone, flowKey)
	d.Remote, d.RemoteGone = diffList(old.Firewall.Remote, new.Firewall.Remote, prefixKey, comparePrefix, func(a, b netip.Prefix) bool { return a == b })
	return d
}

// keys returns the keys of list, nil for none.
func keys[T, K any](list []T, key func(T) K) []K {
	var out []K
	for _, x := range list {
		out = append(out, key(x))
	}
	return out
}

// Apply rebuilds the plan d was made for from base, the plan d was made
// from, and checks it against d's sum of either version (ErrMismatch).
// A caller that keeps the digest of its plans checks deltas of sum version
// 2 for less with ApplyDigest.
func Apply(base plan.Gateway, d Delta) (plan.Gateway, error) {
	if !Keyed(base) {
		return plan.Gateway{}, fmt.Errorf("%w: the base plan's lists are not sorted by key", ErrMismatch)
	}
	if KnownSumVersion(d.SumVersion) {
		g, _, err := ApplyDigest(base, NewDigestOf(base, d.SumVersion), d)
		return g, err
	}
	if d.SumVersion != 0 {
		return plan.Gateway{}, fmt.Errorf("%w: sum version %d is not known here (known: 1 to %d)", ErrMismatch, d.SumVersion, SumVersion)
	}
	g, err := rebuild(base, d)
	if err != nil {
		return plan.Gateway{}, err
	}
	if hex.EncodeToString(sumOf(g, SumLocal(g.Local))) != d.Sum {
		return plan.Gateway{}, ErrMismatch
	}
	return g, nil
}

// rebuild returns d's head with base's lists and Local as d changes them.
func rebuild(base plan.Gateway, d Delta) (plan.Gateway, error) {
	g := d.Head
	g.Peers = applyList(base.Peers, d.Peers, d.PeersGone, peerKey, comparePeerKey)
	if len(d.RemotesEdits) > 0 {
		// After the peers: an edit may start from their transit addresses.
		var err error
		if g, err = editRemotes(base, g, d.RemotesEdits); err != nil {
			return plan.Gateway{}, err
		}
	}
	g.Routes = applyList(base.Routes, d.Routes, d.RoutesGone, routeKey, comparePrefix)
	g.Firewall.Flows = applyList(base.Firewall.Flows, d.Flows, d.FlowsGone, flowKey, compareFlowKey)
	g.Firewall.Remote = applyList(base.Firewall.Remote, d.Remote, d.RemoteGone, prefixKey, comparePrefix)
	if d.Local != nil {
		l, err := applyLocal(base.Local, d.Local)
		if err != nil {
			return plan.Gateway{}, fmt.Errorf("rebuilding the local inputs: %w", err)
		}
		g.Local = l
	}
	return g, nil
}

// Sum returns the digest of g: SHA-256 over its head as JSON, its four
// long lists entry by entry and, when g has a Local, SumLocal of it.
func Sum(g plan.Gateway) [sha256.Size]byte {
	return [sha256.Size]byte(sumOf(g, SumLocal(g.Local)))
}

// SumWithLocal is Sum(g) for a caller that has local, SumLocal(g.Local),
// at hand: the manager sums every plan of one planning, which share one
// Local, with one encoding of it.
func SumWithLocal(g plan.Gateway, local [sha256.Size]byte) [sha256.Size]byte {
	return [sha256.Size]byte(sumOf(g, local))
}

// SumString is Sum in hex, as Delta.Sum holds it.
func SumString(g plan.Gateway) string { return hex.EncodeToString(sumOf(g, SumLocal(g.Local))) }

// sumOf sums g with local as its Local's digest (ignored when g has no
// Local: such a plan sums as before plans had one).
func sumOf(g plan.Gateway, local [sha256.Size]byte) []byte {
	h := sha256.New()
	js, err := HeadJSON(g)
	if err != nil {
		// A plan that does not encode (a bad port kind) cannot be sent
		// either; sum the error so that it matches nothing else.
		js = []byte("unencodable: " + err.Error())
	}
	buf := make([]byte, 0, 64<<10)
	buf = appendBytes(buf, js)
	flush := func() {
		if len(buf) > 48<<10 {
			h.Write(buf)
			buf = buf[:0]
		}
	}
	buf = binary.AppendUvarint(buf, uint64(len(g.Peers)))
	for _, p := range g.Peers {
		buf = appendPeer(buf, p)
		flush()
	}
	buf = binary.AppendUvarint(buf, uint64(len(g.Routes)))
	for _, r := range g.Routes {
		buf = appendRoute(buf, r)
		flush()
	}
	buf = binary.AppendUvarint(buf, uint64(len(g.Firewall.Flows)))
	for _, f := range g.Firewall.Flows {
		buf = appendFlow(buf, f)
		flush()
	}
	buf = binary.AppendUvarint(buf, uint64(len(g.Firewall.Remote)))
	for _, p := range g.Firewall.Remote {
		buf = appendPrefix(buf, p)
		flush()
	}
	if g.Local != nil {
		buf = append(buf, 'L')
		buf = append(buf, local[:]...)
	}
	h.Write(buf)
	return h.Sum(nil)
}

// appendPeer encodes every field of a peer (see TestSumCoversEveryField).
func appendPeer(b []byte, p plan.Peer) []byte {
	b = appendString(b, p.Gateway)
	b = appendString(b, p.Site)
	b = appendString(b, string(p.Backend))
	b = appendString(b, p.Endpoint)
	b = binary.AppendUvarint(b, uint64(len(p.AllowedIPs)))
	for _, a := range p.AllowedIPs {
		b = appendPrefix(b, a)
	}
	b = append(b, p.WireGuard.PublicKey[:]...)
	b = binary.AppendVarint(b, int64(p.WireGuard.PersistentKeepalive))
	return appendIPsec(b, p.IPsec)
}

// appendIPsec encodes every field of a peer's IPsec block; none encodes
// as the zero block (the form does not tell them apart, as JSON does not
// in a plan: nil is left out, and a zero block is never planned).
func appendIPsec(b []byte, p *plan.IPsecPeer) []byte {
	var s plan.IPsecPeer
	if p != nil {
		s = *p
	}
	if s.Initiator {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	b = appendString(b, s.LocalID)
	b = appendString(b, s.RemoteID)
	b = appendString(b, s.RemoteAddress)
	b = binary.AppendUvarint(b, uint64(len(s.LocalTS)))
	for _, p := range s.LocalTS {
		b = appendPrefix(b, p)
	}
	for _, list := range [][]string{s.IKE, s.ESP} {
		b = binary.AppendUvarint(b, uint64(len(list)))
		for _, x := range list {
			b = appendString(b, x)
		}
	}
	b = appendString(b, s.PSKFile)
	b = binary.AppendVarint(b, int64(s.DPDSeconds))
	b = binary.AppendVarint(b, int64(s.RekeySeconds))
	b = binary.AppendVarint(b, int64(s.IKERekeySeconds))
	b = binary.AppendVarint(b, int64(s.IKEVersion))
	b = appendString(b, s.Profile)
	b = binary.AppendUvarint(b, uint64(len(s.Children)))
	for _, c := range s.Children {
		for _, ts := range [][]netip.Prefix{c.LocalTS, c.RemoteTS} {
			b = binary.AppendUvarint(b, uint64(len(ts)))
			for _, p := range ts {
				b = appendPrefix(b, p)
			}
		}
	}
	return b
}

func ipsecEqual(pa, pb *plan.IPsecPeer) bool {
	if pa == pb {
		return true
	}
	var a, b plan.IPsecPeer
	if pa != nil {
		a = *pa
	}
	if pb != nil {
		b = *pb
	}
	return a.Initiator == b.Initiator && a.LocalID == b.LocalID && a.RemoteID == b.RemoteID && a.RemoteAddress == b.RemoteAddress &&
		slices.Equal(a.LocalTS, b.LocalTS) && slices.Equal(a.IKE, b.IKE) && slices.Equal(a.ESP, b.ESP) &&
		a.PSKFile == b.PSKFile && a.DPDSeconds == b.DPDSeconds && a.RekeySeconds == b.RekeySeconds &&
		a.IKERekeySeconds == b.IKERekeySeconds && a.IKEVersion == b.IKEVersion && a.Profile == b.Profile &&
		slices.EqualFunc(a.Children, b.Children, func(x, y plan.ChildSA) bool {
			return slices.Equal(x.LocalTS, y.LocalTS) && slices.Equal(x.RemoteTS, y.RemoteTS)
		})
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendBytes(b, s []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendPrefix(b []byte, p netip.Prefix) []byte {
	b, _ = p.AppendBinary(b) // cannot fail
	return b
}

func peerKey(p plan.Peer) string         { return p.Gateway }
func routeKey(r plan.Route) netip.Prefix { return r.Destination }
func flowKey(f plan.Flow) FlowKey        { return FlowKey{f.Source, f.Destination} }

func comparePeerKey(a, b string) int { return cmp.Compare(a, b) }

func comparePrefix(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return cmp.Compare(a.Bits(), b.Bits())
}

func compareFlowKey(a, b FlowKey) int {
	if c := comparePrefix(a.Source, b.Source); c != 0 {
		return c
	}
	return comparePrefix(a.Destination, b.Destination)
}

func peerEqual(a, b plan.Peer) bool {
	return a.Gateway == b.Gateway && a.Site == b.Site && a.Backend == b.Backend && a.Endpoint == b.Endpoint &&
		slices.Equal(a.AllowedIPs, b.AllowedIPs) && a.WireGuard == b.WireGuard && ipsecEqual(a.IPsec, b.IPsec)
}

// Keyed reports whether g's four lists are sorted by key with no key twice
// (as plan.Compute makes them), which Diff and Apply need.
func Keyed(g plan.Gateway) bool {
	return strictly(g.Peers, peerKey, comparePeerKey) && strictly(g.Routes, routeKey, comparePrefix) &&
		strictly(g.Firewall.Flows, flowKey, compareFlowKey) && strictly(g.Firewall.Remote, func(p netip.Prefix) netip.Prefix { return p }, comparePrefix)
}

func strictly[T, K any](list []T, key func(T) K, compare func(a, b K) int) bool {
	for i := 1; i < len(list); i++ {
		if compare(key(list[i-1]), key(list[i])) >= 0 {
			return false
		}
	}
	return true
}

// diffList merges two lists sorted by key: the entries of new that old
// lacks or holds otherwise, and the keys of old that new lacks. Entries
// that equal reports equal have the same key.
func diffList[T, K any](old, new []T, key func(T) K, compare func(a, b K) int, equal func(a, b T) bool) (set []T, gone []K) {
	if len(old) == len(new) && len(old) > 0 && &old[0] == &new[0] {
		return nil, nil // one list (a plan's remote prefixes kept)
	}
	i, j := 0, 0
	for i < len(old) || j < len(new) {
		switch {
		case j == len(new):
			gone = append(gone, key(old[i]))
			i++
		case i == len(old):
			set = append(set, new[j])
			j++
		case equal(old[i], new[j]):
			// The same entry (so the same key): most of two versions
			// of a long list, found without comparing keys.
			i++
			j++
		default:
			switch c := compare(key(old[i]), key(new[j])); {
			case c < 0:
				gone = append(gone, key(old[i]))
				i++
			case c > 0:
				set = append(set, new[j])
				j++
			default:
				if !equal(old[i], new[j]) {
					set = append(set, new[j])
				}
				i++
				j++
			}
		}
	}
	return set, gone
}

// applyList merges base with set (replacing or adding by key) less the
// keys in gone, sorted by key, copying base in runs between the entries
// it finds by key. It never returns nil (the plans' lists are empty, not
// absent). When set and gone are empty it returns base itself: plans are
// values, never written into, and a delta that leaves a list as it was
// (a network added leaves every plan's peers, routes and flows) so costs
// no copy of a thousand entries.
func applyList[T, K any](base, set []T, gone []K, key func(T) K, compare func(a, b K) int) []T {
	if len(set) == 0 && len(gone) == 0 && base != nil {
		return base
	}
	set = slices.Clone(set)
	slices.SortFunc(set, func(a, b T) int { return compare(key(a), key(b)) })
	find := func(k K) (int, bool) {
		return slices.BinarySearchFunc(base, k, func(x T, k K) int { return compare(key(x), k) })
	}
	var drop []int // indexes of base replaced or gone
	for _, k := range gone {
		if i, ok := find(k); ok {
			drop = append(drop, i)
		}
	}
	for _, x := range set {
		if i, ok := find(key(x)); ok {
			drop = append(drop, i)
		}
	}
	slices.Sort(drop)
	drop = slices.Compact(drop)
	out := make([]T, 0, len(base)-len(drop)+len(set))
	d, from := 0, 0
	// keep appends base[from:to] less the dropped entries.
	keep := func(to int) {
		for ; d < len(drop) && drop[d] < to; d++ {
			out = append(out, base[from:drop[d]]...)
			from = drop[d] + 1
		}
		out = append(out, base[from:to]...)
		from = to
	}
	goneKey := slices.Clone(gone)
	slices.SortFunc(goneKey, compare)
	for j, x := range set {
		if j > 0 && compare(key(set[j-1]), key(x)) == 0 {
			continue // a key set twice: the first (as a merge would)
		}
		i, _ := find(key(x))
		keep(i)
		if _, dropped := slices.BinarySearchFunc(goneKey, key(x), compare); !dropped {
			out = append(out, x)
		}
	}
	keep(len(base))
	return out
}
