package plandelta

import (
	"cmp"
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/fednet/fednet/internal/spec"
)

// Patch is the change of one struct value (a site of a Local, say) by
// field, for the entries of a list that a LocalDelta keeps but changes:
// a bridged network added over every site gives each site's gateway a
// bridge port, which a Patch sends as that one field rather than the whole
// site again. Fields are named by their JSON names; the value built is
// equal to the new one as JSON (the form sums cover).
type Patch struct {
	// Set holds the fields replaced whole, as their new value's JSON.
	Set map[string]json.RawMessage `json:"set,omitempty"`
	// Edit holds the fields changed in part: a struct field by a Patch of
	// it, a list of structs that kept its length by Elems.
	Edit map[string]*Patch `json:"edit,omitempty"`
	// Elems, in a Patch of a list, patches its entries by index.
	Elems map[int]*Patch `json:"elems,omitempty"`
}

// diffPatch returns the Patch from a to b (values of one struct type), or
// false when T is not a struct whose fields all have JSON names that a
// Patch can set.
func diffPatch[T any](a, b T) (*Patch, bool) {
	return diffStruct(reflect.ValueOf(a), reflect.ValueOf(b))
}

// diffStruct is diffPatch of two struct values. Fields are compared in
// their binary form (canon.go), equal exactly when their JSON is; only
// those set are encoded as JSON.
func diffStruct(a, b reflect.Value) (*Patch, bool) {
	fields, ok := jsonFields(a.Type())
	if !ok {
		return nil, false
	}
	p := &Patch{}
	for _, f := range fields {
		fa, fb := a.Field(f.index), b.Field(f.index)
		if sameForm(fa, fb) {
			continue
		}
		if sub, ok := diffPart(fa, fb); ok {
			if p.Edit == nil {
				p.Edit = map[string]*Patch{}
			}
			p.Edit[f.name] = sub
			continue
		}
		jb, err := json.Marshal(fb.Interface())
		if err != nil {
			return nil, false
		}
		if p.Set == nil {
			p.Set = map[string]json.RawMessage{}
		}
		p.Set[f.name] = jb
	}
	return p, true
}

// formBufs are the buffers sameForm encodes into.
var formBufs = sync.Pool{New: func() any { return new([2][]byte) }}

// sameForm reports whether a and b, values of one type, have the same
// binary form (so the same JSON).
func sameForm(a, b reflect.Value) bool {
	bufs := formBufs.Get().(*[2][]byte)
	enc := canonEncoder(a.Type())
	bufs[0], bufs[1] = enc(bufs[0][:0], a), enc(bufs[1][:0], b)
	same := string(bufs[0]) == string(bufs[1])
	formBufs.Put(bufs)
	return same
}

// diffPart returns a Patch of a field changed in part: a struct, or a list
// of structs of the same length; false when it is to be set whole.
func diffPart(a, b reflect.Value) (*Patch, bool) {
	switch {
	case a.Kind() == reflect.Struct && !marshals(a.Type()):
		return diffStruct(a, b)
	case a.Kind() == reflect.Slice && a.Len() == b.Len() && !a.IsNil() && !b.IsNil() &&
		a.Type().Elem().Kind() == reflect.Struct && !marshals(a.Type().Elem()) && !marshals(a.Type()):
		p := &Patch{Elems: map[int]*Patch{}}
		for i := range a.Len() {
			ea, eb := a.Index(i), b.Index(i)
			if sameForm(ea, eb) {
				continue
			}
			sub, ok := diffStruct(ea, eb)
			if !ok {
				return nil, false
			}
			p.Elems[i] = sub
		}
		return p, true
	}
	return nil, false
}

// applyPatchTo applies p to *dst, a copy of the base entry (the base is
// not changed: lists p edits are copied, not written into); pc keeps what
// applying p again needs (a patch repeated over a thousand sites is
// checked and decoded once). Patching in place, not a copy boxed into an
// interface and out again, saves three copies of the entry per entry
// patched. On an error *dst is partly patched: the caller drops it.
func applyPatchTo[T any](dst *T, p *Patch, pc patchCache) error {
	v := reflect.ValueOf(dst).Elem()
	c, ok := pc[p]
	if !ok {
		var err error
		if c, err = compilePatch(v.Type(), p); err != nil {
			return err
		}
		pc[p] = c
	}
	return c.apply(v)
}

// patchCache holds the patches applied so far, compiled.
type patchCache map[*Patch]*compiledPatch

// compiledPatch is a Patch of a struct type checked against it: its
// fields found, the values it sets decoded, the patches of its fields
// compiled in turn. Applying it looks nothing up: a patch repeated over
// a thousand sites is compiled once and applied a thousand times.
type compiledPatch struct {
	set  []setField
	edit []editField
}

type setField struct {
	index int
	// value is the decoded value, given to each use as it is: values
	// without references, or maps and lists of such values, which the
	// entries patched share (plans are values: nobody writes into them,
	// as nobody writes into the entries a rebuilt list shares with its
	// base); when not reusable, raw is decoded at each use.
	value reflect.Value
	reuse bool
	raw   json.RawMessage
	name  string
}

// editField is a field changed in part: a struct (sub), or a list of
// structs whose entries elems patch.
type editField struct {
	index int
	name  string
	sub   *compiledPatch
	list  bool
	elems []elemPatch
}

// elemPatch patches the entry of a list at index.
type elemPatch struct {
	index int
	patch *compiledPatch
}

// compilePatch checks p against struct type t, decodes what it sets and
// compiles the patches of its fields.
func compilePatch(t reflect.Type, p *Patch) (*compiledPatch, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: an empty patch", ErrMismatch)
	}
	if len(p.Elems) > 0 {
		return nil, fmt.Errorf("%w: a patch of a list's entries for a %s", ErrMismatch, t)
	}
	byName, ok := jsonFieldsByName(t)
	if !ok {
		return nil, fmt.Errorf("%w: a %s cannot be patched", ErrMismatch, t)
	}
	c := &compiledPatch{}
	for name, raw := range p.Set {
		i, ok := byName[name]
		if !ok {
			return nil, fmt.Errorf("%w: a %s has no field %q", ErrMismatch, t, name)
		}
		ft := t.Field(i).Type
		nv := reflect.New(ft)
		if err := json.Unmarshal(raw, nv.Interface()); err != nil {
			return nil, fmt.Errorf("%w: field %q: %v", ErrMismatch, name, err)
		}
		c.set = append(c.set, setField{index: i, value: nv.Elem(), reuse: copyable(ft), raw: raw, name: name})
	}
	for name, sub := range p.Edit {
		i, ok := byName[name]
		if !ok {
			return nil, fmt.Errorf("%w: a %s has no field %q", ErrMismatch, t, name)
		}
		if _, set := p.Set[name]; set {
			return nil, fmt.Errorf("%w: field %q both set and edited", ErrMismatch, name)
		}
		f, err := compileEdit(t.Field(i).Type, sub)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		f.index, f.name = i, name
		c.edit = append(c.edit, f)
	}
	return c, nil
}

// compileEdit compiles p, the patch of a field of type t changed in part:
// a struct, or a list of structs patched by entry.
func compileEdit(t reflect.Type, p *Patch) (editField, error) {
	switch {
	case t.Kind() == reflect.Struct && !marshals(t):
		sub, err := compilePatch(t, p)
		return editField{sub: sub}, err
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct && !marshals(t.Elem()) && !marshals(t):
		if p == nil || len(p.Set) > 0 || len(p.Edit) > 0 {
			return editField{}, fmt.Errorf("%w: a patch of fields for a list", ErrMismatch)
		}
		f := editField{list: true}
		for i, sub := range p.Elems {
			if i < 0 {
				return editField{}, fmt.Errorf("%w: patching entry %d of a list", ErrMismatch, i)
			}
			c, err := compilePatch(t.Elem(), sub)
			if err != nil {
				return editField{}, fmt.Errorf("entry %d: %w", i, err)
			}
			f.elems = append(f.elems, elemPatch{index: i, patch: c})
		}
		slices.SortFunc(f.elems, func(a, b elemPatch) int { return cmp.Compare(a.index, b.index) })
		return f, nil
	}
	return editField{}, fmt.Errorf("%w: a %s cannot be patched in part", ErrMismatch, t)
}

// apply patches the addressable struct v.
func (c *compiledPatch) apply(v reflect.Value) error {
	for _, f := range c.set {
		if f.reuse {
			v.Field(f.index).Set(f.value)
			continue
		}
		nv := reflect.New(f.value.Type())
		if err := json.Unmarshal(f.raw, nv.Interface()); err != nil {
			return fmt.Errorf("%w: field %q: %v", ErrMismatch, f.name, err)
		}
		v.Field(f.index).Set(nv.Elem())
	}
	for _, f := range c.edit {
		fv := v.Field(f.index)
		var err error
		if f.list {
			err = f.applyList(fv)
		} else {
			err = f.sub.apply(fv)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
	}
	return nil
}

// applyList patches the entries of the addressable list v: a copy of it
// (the base's list is shared with the base), set in its place.
func (f editField) applyList(v reflect.Value) error {
	n := v.Len()
	if len(f.elems) > 0 && f.elems[len(f.elems)-1].index >= n {
		return fmt.Errorf("%w: patching entry %d of a list of %d", ErrMismatch, f.elems[len(f.elems)-1].index, n)
	}
	out := reflect.MakeSlice(v.Type(), n, n)
	reflect.Copy(out, v)
	for _, e := range f.elems {
		if err := e.patch.apply(out.Index(e.index)); err != nil {
			return fmt.Errorf("entry %d: %w", e.index, err)
		}
	}
	v.Set(out)
	return nil
}

// copyable reports whether a value of t can be given to several structs
// as it is: no pointers, interfaces or channels inside, maps and lists
// only of such values (shared: a bridge port given to every site of a
// thousand is one map, not a thousand copies).
func copyable(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.String:
		return true
	case reflect.Map:
		return scalar(t.Key()) && scalar(t.Elem())
	case reflect.Slice:
		return scalar(t.Elem())
	}
	return false
}

// scalar reports whether t is a number, a bool or a string.
func scalar(t reflect.Type) bool {
	return t.Kind() != reflect.Map && t.Kind() != reflect.Slice && copyable(t)
}

var (
	jsonMarshaler = reflect.TypeFor[json.Marshaler]()
	textMarshaler = reflect.TypeFor[encoding.TextMarshaler]()
)

// marshals reports whether t encodes itself (netip.Addr, say): such a
// value is set whole. Answers are cached by type (a patch repeated over
// a thousand sites asks a thousand times).
func marshals(t reflect.Type) bool {
	if m, ok := marshalsCache.Load(t); ok {
		return m.(bool)
	}
	pt := reflect.PointerTo(t)
	m := t.Implements(jsonMarshaler) || t.Implements(textMarshaler) || pt.Implements(jsonMarshaler) || pt.Implements(textMarshaler)
	marshalsCache.Store(t, m)
	return m
}

var marshalsCache sync.Map // reflect.Type → bool

// jsonField is a struct field with its JSON name.
type jsonField struct {
	name  string
	index int
}

// fieldsCache holds jsonFields' answers by type.
var fieldsCache sync.Map // reflect.Type → fieldsOf

type fieldsOf struct {
	list   []jsonField
	byName map[string]int
	ok     bool
}

// jsonFields returns the fields of struct type t that JSON encodes, by
// their JSON names, or false when t is not a struct or embeds one (whose
// fields JSON promotes). Unexported fields are not encoded: a patched
// value keeps the base's.
func jsonFields(t reflect.Type) ([]jsonField, bool) {
	f := fieldsFor(t)
	return f.list, f.ok
}

func jsonFieldsByName(t reflect.Type) (map[string]int, bool) {
	f := fieldsFor(t)
	return f.byName, f.ok
}

func fieldsFor(t reflect.Type) fieldsOf {
	if f, ok := fieldsCache.Load(t); ok {
		return f.(fieldsOf)
	}
	f := fieldsOf{byName: map[string]int{}, ok: t.Kind() == reflect.Struct && !marshals(t)}
	if f.ok {
		for i := range t.NumField() {
			sf := t.Field(i)
			if sf.Anonymous {
				f.ok = false
				break
			}
			if !sf.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
			if name == "-" {
				continue
			}
			if name == "" {
				name = sf.Name
			}
			f.list = append(f.list, jsonField{name: name, index: i})
			f.byName[name] = i
		}
	}
	fieldsCache.Store(t, f)
	return f
}

// portsPatch is a patch of a site that sets nothing but the bridge ports
// of some of its gateways (portsOnly), decoded: a bridged network added
// over a thousand sites patches each site so, and every agent applies the
// thousand patches. Applied without reflection, in under half the time
// (BenchmarkApplyRepeatedPatch).
type portsPatch struct {
	elems []portsElem
}

type portsElem struct {
	index int
	ports map[string]string // shared by the sites patched, as plans share values
}

// portsPatches keeps the last patch asked of (a patch repeated is one
// patch) as a portsPatch, nil when it is not one.
type portsPatches struct {
	last     *Patch
	compiled *portsPatch
	// arena is room for the gateway lists of the sites patched: one
	// allocation for many sites rather than one per site (a thousand,
	// for a bridged network added over every site of 1000).
	arena []spec.Gateway
}

// arenaChunk is how many gateways' room an arena takes at a time.
const arenaChunk = 256

// gateways returns a copy of list, in the arena's room; its capacity is
// its length, so that appending to it never writes into another site's.
func (pp *portsPatches) gateways(list []spec.Gateway) []spec.Gateway {
	n := len(list)
	if n == 0 {
		return []spec.Gateway{}
	}
	if n > len(pp.arena) {
		pp.arena = make([]spec.Gateway, max(n, arenaChunk))
	}
	out := pp.arena[:n:n]
	pp.arena = pp.arena[n:]
	copy(out, list)
	return out
}

// of returns p as a portsPatch, or nil when p patches more than bridge
// ports or does not decode (the general path then reports it).
func (pp *portsPatches) of(p *Patch) *portsPatch {
	if p == pp.last {
		return pp.compiled
	}
	pp.last, pp.compiled = p, nil
	if !portsOnly(p) {
		return nil
	}
	c := &portsPatch{}
	for i, e := range p.Edit["gateways"].Elems {
		var m map[string]string
		if i < 0 || json.Unmarshal(e.Set["bridgePorts"], &m) != nil {
			return nil
		}
		c.elems = append(c.elems, portsElem{index: i, ports: m})
	}
	slices.SortFunc(c.elems, func(a, b portsElem) int { return cmp.Compare(a.index, b.index) })
	pp.compiled = c
	return c
}

// apply patches s, whose gateway list is copied (it is shared with the
// base) into pp's arena.
func (c *portsPatch) apply(s *spec.Site, pp *portsPatches) error {
	if n := len(s.Gateways); len(c.elems) > 0 && c.elems[len(c.elems)-1].index >= n {
		return fmt.Errorf("%w: gateways: patching entry %d of a list of %d", ErrMismatch, c.elems[len(c.elems)-1].index, n)
	}
	s.Gateways = pp.gateways(s.Gateways) // never nil, as the general path
	for _, e := range c.elems {
		s.Gateways[e.index].BridgePorts = e.ports
	}
	return nil
}
