package plandelta

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/cespare/xxhash/v2"

	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/spec"
)

// SumVersion is the version of the sums Digest makes, which deltas carry
// (Delta.SumVersion). Version 1 (Sum) hashes a plan's lists entry by entry
// in order: checking a delta costs the whole plan. Version 2 hashes each
// entry on its own and adds the hashes of a list together, so that a delta
// changes a list's digest by the entries it sets and drops: a manager and
// an agent that hold a plan's Digest check the next plan in the size of
// the delta. Version 3 is version 2 with the Local's sites, the rest of
// the Local and the plan's head hashed in a binary form of their JSON
// (canon.go) rather than their JSON, made in about half the time: a
// change of every site (a network added over all of them) has each agent
// hash every site of its Local again. Version 4 is version 3 with each
// site hashed in two parts: the site without its gateways' bridge ports,
// and those ports. A bridged network added to (or dropped from) every
// site changes the ports of every site and nothing else of them: each
// agent hashes a thousand small maps, which the sites patched share,
// rather than a thousand sites (the ports of one site are all that
// hashing touches). An agent says which versions it checks with the
// request header SumHeader (fednet's sends 2, 3 and 4); a manager sends
// deltas with sums of the version it stores, and whole plans to an agent
// that does not check that version.
const SumVersion = 4

// KnownSumVersion reports whether sums of version v are checked here
// through a Digest (versions 2 to SumVersion; version 1 is Sum).
func KnownSumVersion(v int) bool { return v >= 2 && v <= SumVersion }

// SumHeader is the request header with which a plan watch says which sum
// versions (2, 3, 4: one a value, or a comma-separated list) it checks
// deltas against.
const SumHeader = "Fednet-Plan-Sum"

// Checks reports whether the values of a request's SumHeader name
// version v.
func Checks(header []string, v int) bool {
	want := strconv.Itoa(v)
	for _, h := range header {
		for f := range strings.SplitSeq(h, ",") {
			if strings.TrimSpace(f) == want {
				return true
			}
		}
	}
	return false
}

// Digest is the sum of version 2, 3 or 4 of a plan with what updating it
// needs: per long list (peers, routes, flows, remote prefixes) the sum,
// modulo 2^64, of the 64-bit xxHash of each entry's binary form (that of
// Sum); Sum is SHA-256 over the version, the plan's head (as JSON in
// version 2, in its binary form from version 3), each list's length and
// digest, and when the plan has a Local, the LocalDigest's Sum. It
// detects a delta applied to the wrong base or rebuilt wrongly (a chance
// of 2^-64 per list to miss), not forgery: the manager is authenticated
// by TLS.
type Digest struct {
	// Version is the sum version, 2, 3 or 4.
	Version int
	Lists   [4]uint64
	Sum     [sha256.Size]byte
	// Local is the digest of the plan's Local, nil when it has none.
	// Plans of one planning share theirs; it is never written to.
	Local *LocalDigest
}

// LocalDigest is the digest of a plan's Local: the 64-bit xxHash of each
// site (its JSON in version 2, its binary form in version 3, its binary
// form without bridge ports in version 4, with Ports the hash of each
// site's ports), in the federation's order, and Sum, SHA-256 over the
// Local without its sites (in the same form) and those hashes. A
// LocalDelta changes it by the sites it inserts or patches (the sites it
// copies keep their hashes, and in version 4 a site whose patch sets only
// bridge ports keeps its hash of the rest), so an agent checks a Local
// rebuilt from a delta without encoding the whole federation again.
type LocalDigest struct {
	Version int
	Sites   []uint64
	// Ports, in version 4, are the hashes of the sites' bridge ports
	// (appendSitePorts); nil in versions 2 and 3.
	Ports []uint64
	Sum   [sha256.Size]byte
}

// NewLocalDigest returns the digest of l in sums of version SumVersion
// (nil for a nil l), encoding it whole.
func NewLocalDigest(l *plan.Local) *LocalDigest {
	return newLocalDigest(l, SumVersion)
}

// newLocalDigest is NewLocalDigest in sums of version v.
func newLocalDigest(l *plan.Local, v int) *LocalDigest {
	if l == nil {
		return nil
	}
	ld := &LocalDigest{Version: v}
	if l.Federation != nil {
		n := len(l.Federation.Sites)
		ld.Sites = make([]uint64, 0, n)
		if v >= 4 {
			ld.Ports = make([]uint64, 0, n)
		}
		h := newSiteHasher(v)
		for i := range l.Federation.Sites {
			h.site(ld, &l.Federation.Sites[i])
		}
	}
	ld.Sum = localSum(l, ld.Sites, ld.Ports, v)
	return ld
}

// A siteHasher hashes the sites of a Local, in sums of one version, into
// a buffer of its own (taking one from canonBuffers for each site of a
// thousand cost a third as much as writing the site); one goroutine uses
// it.
type siteHasher struct {
	v   int
	buf []byte
	// lastPorts and lastPortsHash remember the bridge ports of the last
	// site of one gateway hashed (version 4): a network added over every
	// site gives each gateway the same ports, one map that the sites
	// patched share, hashed once. The map is held, so that no other map
	// takes its address while it is remembered.
	lastPorts     map[string]string
	lastPortsHash uint64
}

func newSiteHasher(v int) *siteHasher { return &siteHasher{v: v} }

// site appends the hashes of s to ld's lists: its hash (in version 2 the
// xxHash of its JSON, in version 3 of its binary form, canon.go; in
// version 4 of its binary form without bridge ports) and in version 4 the
// hash of its ports.
func (h *siteHasher) site(ld *LocalDigest, s *spec.Site) {
	switch {
	case h.v == 2:
		ld.Sites = append(ld.Sites, siteHash(s))
	case h.v == 3:
		h.buf = appendSiteCanon(h.buf[:0], s)
		ld.Sites = append(ld.Sites, xxhash.Sum64(h.buf))
	default:
		h.buf = appendSiteRest(h.buf[:0], s)
		ld.Sites = append(ld.Sites, xxhash.Sum64(h.buf))
		ld.Ports = append(ld.Ports, h.ports(s))
	}
}

// ports returns the hash of s's bridge ports (version 4).
func (h *siteHasher) ports(s *spec.Site) uint64 {
	shared := len(s.Gateways) == 1 && s.Gateways[0].BridgePorts != nil
	if shared && h.lastPorts != nil && reflect.ValueOf(s.Gateways[0].BridgePorts).UnsafePointer() == reflect.ValueOf(h.lastPorts).UnsafePointer() {
		return h.lastPortsHash
	}
	h.buf = appendSitePorts(h.buf[:0], s)
	sum := xxhash.Sum64(h.buf)
	if shared {
		h.lastPorts, h.lastPortsHash = s.Gateways[0].BridgePorts, sum
	}
	return sum
}

// canonBuffers are buffers the binary forms hashed are written into: a
// change hashes a head and a Local's rest per plan, on managers and
// agents alike.
var canonBuffers = sync.Pool{New: func() any { return new([]byte) }}

// siteHash is the xxHash of a site's JSON (every field JSON has, as
// SumLocal covers it): sums of version 2.
func siteHash(s *spec.Site) uint64 {
	b := encoders.Get().(*siteEncoder)
	defer encoders.Put(b)
	b.buf.Reset()
	// By pointer: the same JSON, without copying the site into an
	// interface (an allocation of the whole struct per site hashed).
	if err := b.enc.Encode(s); err != nil {
		return xxhash.Sum64String(encode(s)) // as encode has it
	}
	js := b.buf.Bytes()
	return xxhash.Sum64(js[:len(js)-1]) // less the newline Encode adds
}

// siteEncoder encodes sites as json.Marshal does, into a buffer reused
// (a delta of a thousand sites hashes a thousand of them).
type siteEncoder struct {
	buf bytes.Buffer
	enc *json.Encoder
}

var encoders = sync.Pool{New: func() any {
	e := &siteEncoder{}
	e.enc = json.NewEncoder(&e.buf)
	return e
}}

// localSum is LocalDigest.Sum of l with its sites' hashes (and in
// version 4 their ports'), in sums of version v.
func localSum(l *plan.Local, sites, ports []uint64, v int) [sha256.Size]byte {
	rest := *l
	if l.Federation != nil {
		f := *l.Federation
		f.Sites = nil
		rest.Federation = &f
	}
	buf := canonBuffers.Get().(*[]byte)
	defer canonBuffers.Put(buf)
	b := (*buf)[:0]
	if v == 2 {
		b = append(append(b, "fednet local sum 2\n"...), encode(rest)...)
	} else {
		b = appendCanon(fmt.Appendf(b, "fednet local sum %d\n", v), reflect.ValueOf(&rest).Elem())
	}
	b = binary.AppendUvarint(b, uint64(len(sites)))
	for _, h := range sites {
		b = binary.LittleEndian.AppendUint64(b, h)
	}
	if v >= 4 {
		b = binary.AppendUvarint(b, uint64(len(ports)))
		for _, h := range ports {
			b = binary.LittleEndian.AppendUint64(b, h)
		}
	}
	*buf = b
	return sha256.Sum256(b)
}

// edited returns the digest of l, which ld's Local became by d (l's
// sites are those d.Sites rebuilt): the sites d copies keep their hashes,
// those it patches or inserts are hashed; in version 4 a site whose patch
// sets nothing but bridge ports (portsOnly) keeps its hash of the rest,
// and only its ports are hashed.
func (ld *LocalDigest) edited(l *plan.Local, d *LocalDelta) (*LocalDigest, error) {
	var list []spec.Site
	if l.Federation != nil {
		list = l.Federation.Sites
	}
	out := &LocalDigest{Version: ld.Version}
	n, err := d.Sites.check(len(ld.Sites))
	switch {
	case err != nil:
		return nil, fmt.Errorf("sites: %w", err)
	case ld.Version >= 4 && len(ld.Ports) != len(ld.Sites):
		return nil, fmt.Errorf("%w: a digest of version %d without the hashes of its sites' ports", ErrMismatch, ld.Version)
	case n != len(list):
		return nil, fmt.Errorf("sites: %w: edits of %d entries for a list of %d", ErrMismatch, n, len(list))
	}
	if !d.Sites.Nil {
		out.Sites = make([]uint64, 0, n)
		if ld.Version >= 4 {
			out.Ports = make([]uint64, 0, n)
		}
	}
	h := newSiteHasher(ld.Version)
	var last *Patch // the patch portsOnly was last asked of (a patch repeated is one)
	var lastOnly bool
	for _, op := range d.Sites.Ops {
		out.Sites = append(out.Sites, ld.Sites[op.From:op.From+op.Count]...)
		if out.Ports != nil {
			out.Ports = append(out.Ports, ld.Ports[op.From:op.From+op.Count]...)
		}
		var p *Patch
		for i := range op.patches() {
			p = op.patchAt(i, p)
			s := &list[len(out.Sites)]
			if out.Ports != nil && p != nil {
				if p != last {
					last, lastOnly = p, portsOnly(p)
				}
				if lastOnly {
					out.Sites = append(out.Sites, ld.Sites[op.From+op.Count+i])
					out.Ports = append(out.Ports, h.ports(s))
					continue
				}
			}
			h.site(out, s)
		}
		for range op.Insert {
			h.site(out, &list[len(out.Sites)])
		}
	}
	out.Sum = localSum(l, out.Sites, out.Ports, ld.Version)
	return out, nil
}

// portsOnly reports whether patch p of a site sets nothing but the bridge
// ports of some of its gateways: a site it patches keeps all else of its
// base, and its hash of the rest (version 4).
func portsOnly(p *Patch) bool {
	if !siteCanonKnown || len(p.Set) > 0 || len(p.Elems) > 0 || len(p.Edit) != 1 {
		return false
	}
	gws := p.Edit["gateways"]
	if gws == nil || len(gws.Set) > 0 || len(gws.Edit) > 0 {
		return false
	}
	for _, e := range gws.Elems {
		if e == nil || len(e.Edit) > 0 || len(e.Elems) > 0 || len(e.Set) != 1 || e.Set["bridgePorts"] == nil {
			return false
		}
	}
	return true
}

// The lists of a plan, in Digest.Lists.
const (
	listPeers = iota
	listRoutes
	listFlows
	listRemote
)

// NewDigest returns the digest of g in sums of version SumVersion,
// hashing every entry (and encoding its Local).
func NewDigest(g plan.Gateway) Digest {
	return NewDigestWithLocal(g, NewLocalDigest(g.Local))
}

// NewDigestOf is NewDigest in sums of version v (2, 3 or 4): a client
// checks the deltas of a manager that sends sums of an older version.
func NewDigestOf(g plan.Gateway, v int) Digest {
	d := NewDigestWithLocal(g, newLocalDigest(g.Local, v))
	if v != SumVersion {
		d.Version = v
		d.Sum = digestSum(g, lengths(g), d.Lists, d.Local, nil, v)
	}
	return d
}

// NewDigestWithLocal is NewDigest for a caller that has the digest of
// g.Local at hand (NewLocalDigest; the plans of one planning share it).
func NewDigestWithLocal(g plan.Gateway, local *LocalDigest) Digest {
	return NewDigestWithHead(g, local, nil)
}

// NewDigestWithHead is NewDigestWithLocal for a caller that has g's
// HeadJSON at hand (nil: encoded here when the sum version needs it): a
// manager encodes each head once, for the sum and for the delta it sends
// (Delta.MarshalWithHead).
func NewDigestWithHead(g plan.Gateway, local *LocalDigest, headJSON []byte) Digest {
	d := Digest{Version: SumVersion, Local: local}
	var buf []byte
	for _, p := range g.Peers {
		d.Lists[listPeers] += hashOf(&buf, p, appendPeer)
	}
	for _, r := range g.Routes {
		d.Lists[listRoutes] += hashOf(&buf, r, appendRoute)
	}
	for _, f := range g.Firewall.Flows {
		d.Lists[listFlows] += hashOf(&buf, f, appendFlow)
	}
	for _, p := range g.Firewall.Remote {
		d.Lists[listRemote] += hashOf(&buf, p, appendPrefix)
	}
	d.Sum = digestSum(g, lengths(g), d.Lists, local, headJSON, d.Version)
	return d
}

// NewDigestHeld is NewDigestWithHead of the plan h holds, its lists read
// in their chunks.
func NewDigestHeld(h plan.Held, local *LocalDigest, headJSON []byte) Digest {
	d := Digest{Version: SumVersion, Local: local}
	var buf []byte
	for p := range h.Peers.All() {
		d.Lists[listPeers] += hashOf(&buf, p, appendPeer)
	}
	for r := range h.Routes.All() {
		d.Lists[listRoutes] += hashOf(&buf, r, appendRoute)
	}
	for f := range h.Flows.All() {
		d.Lists[listFlows] += hashOf(&buf, f, appendFlow)
	}
	for _, p := range h.Head.Firewall.Remote {
		d.Lists[listRemote] += hashOf(&buf, p, appendPrefix)
	}
	d.Sum = digestSum(h.Head, heldLengths(h), d.Lists, local, headJSON, d.Version)
	return d
}

// Same reports whether d and o are the digests of the same plan.
func (d Digest) Same(o Digest) bool { return d.Sum == o.Sum && d.Lists == o.Lists }

// Bare returns the Sum of d's plan g without its Local (as a delta to an
// agent that does not take Local carries it), without hashing the lists.
func (d Digest) Bare(g plan.Gateway) [sha256.Size]byte {
	g.Local = nil
	return digestSum(g, lengths(g), d.Lists, nil, nil, d.Version)
}

// BareHeld is Bare of the plan h holds.
func (d Digest) BareHeld(h plan.Held) [sha256.Size]byte {
	g := h.Head
	g.Local = nil
	return digestSum(g, heldLengths(h), d.Lists, nil, nil, d.Version)
}

// lengths returns the lengths of g's four lists, in Digest.Lists' order.
func lengths(g plan.Gateway) [4]int {
	return [4]int{len(g.Peers), len(g.Routes), len(g.Firewall.Flows), len(g.Firewall.Remote)}
}

// heldLengths is lengths of the plan h holds.
func heldLengths(h plan.Held) [4]int {
	return [4]int{h.Peers.Len(), h.Routes.Len(), h.Flows.Len(), len(h.Head.Firewall.Remote)}
}

// hashOf is the xxHash of x's binary form, encoded into *buf.
func hashOf[T any](buf *[]byte, x T, enc func([]byte, T) []byte) uint64 {
	*buf = enc((*buf)[:0], x)
	return xxhash.Sum64(*buf)
}

// digestSum is Digest.Sum of version v of plan g, whose lists have the
// lengths lens and the digests lists, and local, the digest of g's Local
// (read only when g has one); js is g's HeadJSON, nil to encode it here
// (version 2 alone reads it). Only g's head and Local are read.
func digestSum(g plan.Gateway, lens [4]int, lists [4]uint64, local *LocalDigest, js []byte, v int) [sha256.Size]byte {
	buf := canonBuffers.Get().(*[]byte)
	defer canonBuffers.Put(buf)
	b := (*buf)[:0]
	if v == 2 {
		if js == nil {
			var err error
			if js, err = HeadJSON(g); err != nil {
				js = []byte("unencodable: " + err.Error()) // as sumOf
			}
		}
		b = append(b, "fednet plan sum 2\n"...)
		b = appendBytes(b, js)
	} else {
		h := head(g)
		b = appendCanon(fmt.Appendf(b, "fednet plan sum %d\n", v), reflect.ValueOf(&h).Elem())
	}
	for i, n := range lens {
		b = binary.AppendUvarint(b, uint64(n))
		b = binary.LittleEndian.AppendUint64(b, lists[i])
	}
	if g.Local != nil {
		b = append(b, 'L')
		if local != nil {
			b = append(b, local.Sum[:]...)
		}
	}
	*buf = b
	return sha256.Sum256(b)
}

// Edited returns the digest of new, which d's plan old became by setting
// and dropping entries of its lists as delta e says (the entries of new
// it sets, the keys of old it drops; Remote and RemoteGone included; Head
// and Sum are not read); local is the digest of new.Local, read only when
// new has a Local. It hashes only the entries named, finding old's by key.
func (d Digest) Edited(old, new plan.Gateway, e Delta, local *LocalDigest) Digest {
	return d.EditedWithHead(old, new, e, local, nil)
}

// EditedWithHead is Edited for a caller that has new's HeadJSON at hand
// (nil: encoded here).
func (d Digest) EditedWithHead(old, new plan.Gateway, e Delta, local *LocalDigest, headJSON []byte) Digest {
	return d.edited(lists{
		peers:  inSlice(old.Peers, peerKey, comparePeerKey),
		routes: inSlice(old.Routes, routeKey, comparePrefix),
		flows:  inSlice(old.Firewall.Flows, flowKey, compareFlowKey),
		remote: inSlice(old.Firewall.Remote, prefixKey, comparePrefix),
	}, new, lengths(new), e, local, headJSON)
}

// EditedHeld is EditedWithHead for plans held in chunks (plan.Held), as a
// manager holds them.
func (d Digest) EditedHeld(old, new plan.Held, e Delta, local *LocalDigest, headJSON []byte) Digest {
	return d.edited(lists{
		peers:  inChunks(old.Peers, peerKey, comparePeerKey),
		routes: inChunks(old.Routes, routeKey, comparePrefix),
		flows:  inChunks(old.Flows, flowKey, compareFlowKey),
		remote: inSlice(old.Head.Firewall.Remote, prefixKey, comparePrefix),
	}, new.Head, heldLengths(new), e, local, headJSON)
}

// lists finds the entries of a plan's four lists by key.
type lists struct {
	peers  func(string) (plan.Peer, bool)
	routes func(netip.Prefix) (plan.Route, bool)
	flows  func(FlowKey) (plan.Flow, bool)
	remote func(netip.Prefix) (netip.Prefix, bool)
}

// edited is Edited with old's lists found through old, and new's head
// and list lengths.
func (d Digest) edited(old lists, new plan.Gateway, lens [4]int, e Delta, local *LocalDigest, headJSON []byte) Digest {
	var buf []byte
	out := d
	out.Local = local
	out.Lists[listPeers] = editList(&buf, out.Lists[listPeers], old.peers, e.Peers, e.PeersGone, peerKey, appendPeer)
	out.Lists[listRoutes] = editList(&buf, out.Lists[listRoutes], old.routes, e.Routes, e.RoutesGone, routeKey, appendRoute)
	out.Lists[listFlows] = editList(&buf, out.Lists[listFlows], old.flows, e.Flows, e.FlowsGone, flowKey, appendFlow)
	out.Lists[listRemote] = editList(&buf, out.Lists[listRemote], old.remote, e.Remote, e.RemoteGone, prefixKey, appendPrefix)
	out.Sum = digestSum(new, lens, out.Lists, local, headJSON, out.Version)
	return out
}

// inSlice finds the entries of list (sorted by key) by key.
func inSlice[T, K any](list []T, key func(T) K, compare func(a, b K) int) func(K) (T, bool) {
	return func(k K) (T, bool) {
		i, ok := slices.BinarySearchFunc(list, k, func(x T, k K) int { return compare(key(x), k) })
		if !ok {
			var zero T
			return zero, false
		}
		return list[i], true
	}
}

// inChunks is inSlice for a list held in chunks.
func inChunks[T, K any](list plan.Chunks[T], key func(T) K, compare func(a, b K) int) func(K) (T, bool) {
	return func(k K) (T, bool) {
		i, ok := plan.SearchChunks(list, k, func(x T, k K) int { return compare(key(x), k) })
		if !ok {
			var zero T
			return zero, false
		}
		return list.At(i), true
	}
}

// editList updates the digest sum of a list, whose entries find finds by
// key, for the entries set (replacing those with their key) and the keys
// gone.
func editList[T, K any](buf *[]byte, sum uint64, find func(K) (T, bool), set []T, gone []K, key func(T) K, enc func([]byte, T) []byte) uint64 {
	for _, k := range gone {
		if x, ok := find(k); ok {
			sum -= hashOf(buf, x, enc)
		}
	}
	for _, x := range set {
		if o, ok := find(key(x)); ok {
			sum -= hashOf(buf, o, enc)
		}
		sum += hashOf(buf, x, enc)
	}
	return sum
}

// ApplyDigest is Apply for a delta of sum version 2 or 3 to a base whose
// digest the caller holds (from NewDigest or an earlier ApplyDigest): it
// checks the rebuilt plan against d's sum from the digest, in the size of
// the delta (but for copying the lists), and returns the new plan's
// digest. The base must be keyed (as every plan Apply or plan.Compute
// returns). A digest of another version than the delta's is made again
// (once: the digest returned is of the delta's version). A delta of sum
// version 1 is checked as Apply does, and the digest returned is computed
// whole.
func ApplyDigest(base plan.Gateway, bd Digest, d Delta) (plan.Gateway, Digest, error) {
	if !KnownSumVersion(d.SumVersion) {
		g, err := Apply(base, d)
		if err != nil {
			return g, Digest{}, err
		}
		return g, NewDigest(g), nil
	}
	if err := d.wellFormed(); err != nil {
		return plan.Gateway{}, Digest{}, err
	}
	if bd.Version != d.SumVersion {
		bd = NewDigestOf(base, d.SumVersion)
	}
	g, err := rebuild(base, d)
	if err != nil {
		return plan.Gateway{}, Digest{}, err
	}
	var local *LocalDigest
	switch {
	case g.Local == nil:
	case d.Local != nil && bd.Local != nil:
		if local, err = bd.Local.edited(g.Local, d.Local); err != nil {
			return plan.Gateway{}, Digest{}, err
		}
	default:
		local = newLocalDigest(g.Local, d.SumVersion)
	}
	nd := bd.Edited(base, g, d, local)
	if fmt.Sprintf("%x", nd.Sum) != d.Sum {
		return plan.Gateway{}, Digest{}, ErrMismatch
	}
	return g, nd, nil
}

// wellFormed checks that each list of d sets a key at most once and never
// both sets and drops one (which the digest's update assumes).
func (d Delta) wellFormed() error {
	if !setAndGone(d.Peers, d.PeersGone, peerKey, comparePeerKey) || !setAndGone(d.Routes, d.RoutesGone, routeKey, comparePrefix) ||
		!setAndGone(d.Flows, d.FlowsGone, flowKey, compareFlowKey) || !setAndGone(d.Remote, d.RemoteGone, prefixKey, comparePrefix) {
		return fmt.Errorf("%w: the delta names an entry twice", ErrMismatch)
	}
	return nil
}

// setAndGone reports whether the keys of set and gone are all different.
func setAndGone[T, K any](set []T, gone []K, key func(T) K, compare func(a, b K) int) bool {
	keys := make([]K, 0, len(set)+len(gone))
	for _, x := range set {
		keys = append(keys, key(x))
	}
	keys = append(keys, gone...)
	slices.SortFunc(keys, compare)
	for i := 1; i < len(keys); i++ {
		if compare(keys[i-1], keys[i]) == 0 {
			return false
		}
	}
	return true
}

func prefixKey(p netip.Prefix) netip.Prefix { return p }

// appendRoute encodes every field of a route.
func appendRoute(b []byte, r plan.Route) []byte {
	b = appendPrefix(b, r.Destination)
	b = appendString(b, r.Device)
	return appendString(b, r.Via)
}

// appendFlow encodes every field of a flow.
func appendFlow(b []byte, f plan.Flow) []byte {
	b = appendString(b, f.Network)
	b = appendPrefix(b, f.Source)
	return appendPrefix(b, f.Destination)
}
