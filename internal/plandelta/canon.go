package plandelta

import (
	"encoding"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// Sums of version 3 hash what sums of version 2 hash as JSON (a Local's
// sites and the rest of it, a plan's head) in a binary form of the same
// value instead, made in about half the time encoding/json takes for the
// JSON: a network added over a thousand sites has each of a thousand
// agents hash every site of its Local again.
//
// The binary form follows the JSON form: two values have the same binary
// form exactly when they have the same JSON (as encoding/json writes it),
// so a value rebuilt from a delta, which travels as JSON, hashes as the
// manager's. Like JSON it names struct fields (by their JSON names) and
// leaves out the fields JSON leaves out (omitempty, omitzero), so a field
// added in a newer fednet and left empty changes no sum; it tells null
// from an empty list where JSON does, and length-prefixes what it writes,
// so no two JSON values share a binary form. Values JSON encodes through
// their own methods (MarshalJSON, MarshalText) go in as those methods
// write them, but for netip's types (in their binary form, one to one
// with their text).

// appendCanon appends the binary form of v to b.
func appendCanon(b []byte, v reflect.Value) []byte {
	return canonEncoder(v.Type())(b, v)
}

// canonFunc appends the binary form of a value of one type.
type canonFunc func(b []byte, v reflect.Value) []byte

// canonFuncs caches canonEncoder's answers by type.
var canonFuncs sync.Map // reflect.Type → canonFunc

// Tags of the binary form.
const (
	tagNull   = 'n'
	tagFalse  = 'f'
	tagTrue   = 't'
	tagInt    = 'i'
	tagUint   = 'u'
	tagFloat  = 'd'
	tagString = 's'
	tagBytes  = 'y'
	tagList   = 'a'
	tagObject = 'o'
	tagEnd    = 'e'
	tagMap    = 'm'
	tagText   = 'x' // a MarshalText's text
	tagJSON   = 'j' // JSON, for what the binary form does not cover
	tagAddr   = 'A' // netip.Addr, AddrPort, Prefix in their binary forms
)

var (
	canonJSONMarshaler = reflect.TypeFor[json.Marshaler]()
	canonTextMarshaler = reflect.TypeFor[encoding.TextMarshaler]()
	canonIsZeroer      = reflect.TypeFor[interface{ IsZero() bool }]()
)

// canonEncoder returns the encoder of type t.
func canonEncoder(t reflect.Type) canonFunc {
	if f, ok := canonFuncs.Load(t); ok {
		return f.(canonFunc)
	}
	// A type that contains itself finds this indirection while its
	// encoder is made.
	var (
		wg sync.WaitGroup
		f  canonFunc
	)
	wg.Add(1)
	if g, loaded := canonFuncs.LoadOrStore(t, canonFunc(func(b []byte, v reflect.Value) []byte {
		wg.Wait()
		return f(b, v)
	})); loaded {
		return g.(canonFunc)
	}
	f = newCanonEncoder(t)
	wg.Done()
	canonFuncs.Store(t, f)
	return f
}

func newCanonEncoder(t reflect.Type) canonFunc {
	switch t {
	case reflect.TypeFor[netip.Addr]():
		return func(b []byte, v reflect.Value) []byte {
			a, _ := reflect.TypeAssert[netip.Addr](v)
			return appendNetip(b, 0, a)
		}
	case reflect.TypeFor[netip.Prefix]():
		return func(b []byte, v reflect.Value) []byte {
			p, _ := reflect.TypeAssert[netip.Prefix](v)
			return appendNetip(b, 1, p)
		}
	case reflect.TypeFor[netip.AddrPort]():
		return func(b []byte, v reflect.Value) []byte {
			p, _ := reflect.TypeAssert[netip.AddrPort](v)
			return appendNetip(b, 2, p)
		}
	case reflect.TypeFor[[]netip.Addr]():
		// A bridge's remotes: a thousand addresses in every head of a
		// thousand gateways, read as one slice rather than by reflection
		// entry by entry.
		return canonNetips[netip.Addr](0)
	case reflect.TypeFor[[]netip.Prefix]():
		return canonNetips[netip.Prefix](1)
	case reflect.TypeFor[[]string]():
		// A network's sites: a thousand names in the rest of every Local.
		return canonStrings
	}
	if t.Implements(canonJSONMarshaler) || reflect.PointerTo(t).Implements(canonJSONMarshaler) ||
		reflect.PointerTo(t).Implements(canonTextMarshaler) && !t.Implements(canonTextMarshaler) {
		return canonByJSON
	}
	if t.Implements(canonTextMarshaler) {
		return func(b []byte, v reflect.Value) []byte {
			if v.Kind() == reflect.Pointer && v.IsNil() {
				return append(b, tagNull)
			}
			m, _ := reflect.TypeAssert[encoding.TextMarshaler](v)
			text, err := m.MarshalText()
			if err != nil {
				return canonByJSON(b, v)
			}
			return appendString(append(b, tagText), string(text))
		}
	}
	switch t.Kind() {
	case reflect.Bool:
		return func(b []byte, v reflect.Value) []byte {
			if v.Bool() {
				return append(b, tagTrue)
			}
			return append(b, tagFalse)
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return func(b []byte, v reflect.Value) []byte { return binary.AppendVarint(append(b, tagInt), v.Int()) }
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return func(b []byte, v reflect.Value) []byte { return binary.AppendUvarint(append(b, tagUint), v.Uint()) }
	case reflect.Float32, reflect.Float64:
		return func(b []byte, v reflect.Value) []byte {
			return binary.LittleEndian.AppendUint64(append(b, tagFloat), math.Float64bits(v.Float()))
		}
	case reflect.String:
		return func(b []byte, v reflect.Value) []byte { return appendCanonString(b, v.String()) }
	case reflect.Pointer:
		elem := canonEncoder(t.Elem())
		return func(b []byte, v reflect.Value) []byte {
			if v.IsNil() {
				return append(b, tagNull)
			}
			return elem(b, v.Elem())
		}
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 && !reflect.PointerTo(t.Elem()).Implements(canonJSONMarshaler) && !reflect.PointerTo(t.Elem()).Implements(canonTextMarshaler) {
			return func(b []byte, v reflect.Value) []byte { // JSON has it in base64
				if v.IsNil() {
					return append(b, tagNull)
				}
				return appendString(append(b, tagBytes), string(v.Bytes()))
			}
		}
		elem := canonEncoder(t.Elem())
		return func(b []byte, v reflect.Value) []byte {
			if v.IsNil() {
				return append(b, tagNull)
			}
			return canonList(b, v, elem)
		}
	case reflect.Array:
		elem := canonEncoder(t.Elem())
		return func(b []byte, v reflect.Value) []byte { return canonList(b, v, elem) }
	case reflect.Map:
		return canonMap(t)
	case reflect.Struct:
		return canonStruct(t)
	}
	return canonByJSON // interfaces, complex numbers, channels, functions
}

// canonNetips returns the encoder of a list of netip values of kind k:
// canonList's bytes.
func canonNetips[T interface{ AppendBinary([]byte) ([]byte, error) }](k byte) canonFunc {
	return func(b []byte, v reflect.Value) []byte {
		list, _ := reflect.TypeAssert[[]T](v)
		if list == nil {
			return append(b, tagNull)
		}
		b = binary.AppendUvarint(append(b, tagList), uint64(len(list)))
		for _, x := range list {
			b = appendNetip(b, k, x)
		}
		return b
	}
}

// canonStrings is the encoder of a list of strings: canonList's bytes.
func canonStrings(b []byte, v reflect.Value) []byte {
	list, _ := reflect.TypeAssert[[]string](v)
	if list == nil {
		return append(b, tagNull)
	}
	b = binary.AppendUvarint(append(b, tagList), uint64(len(list)))
	for _, s := range list {
		b = appendCanonString(b, s)
	}
	return b
}

// canonByJSON is the binary form of what JSON encodes through its own
// methods, or in a form the binary form does not follow: the JSON itself.
func canonByJSON(b []byte, v reflect.Value) []byte {
	var x any
	if v.CanAddr() {
		x = v.Addr().Interface()
	} else {
		x = v.Interface()
	}
	js, err := json.Marshal(x)
	if err != nil {
		js = []byte("unencodable: " + err.Error())
	}
	return appendString(append(b, tagJSON), string(js))
}

// appendNetip is the binary form of a netip value of kind k: its own
// binary form (one to one with its text, which JSON writes), with its
// length.
func appendNetip[T interface{ AppendBinary([]byte) ([]byte, error) }](b []byte, k byte, x T) []byte {
	n := len(b)
	b, _ = x.AppendBinary(append(b, tagAddr, k, 0)) // cannot fail
	b[n+2] = byte(len(b) - n - 3)
	return b
}

// appendCanonString is a string's binary form: as JSON, which writes
// each byte of an invalid UTF-8 sequence as U+FFFD (so the string an
// agent decodes has them).
func appendCanonString(b []byte, s string) []byte {
	if !ascii(s) && !utf8.ValidString(s) {
		valid := make([]byte, 0, len(s)+8)
		for _, r := range s {
			valid = utf8.AppendRune(valid, r) // RuneError for each invalid byte
		}
		s = string(valid)
	}
	return appendString(append(b, tagString), s)
}

// ascii reports whether s is all ASCII (then valid UTF-8): the names
// and addresses of a spec, checked without a call.
func ascii(s string) bool {
	for i := range len(s) {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// canonList is a list's binary form: its length and entries.
func canonList(b []byte, v reflect.Value, elem canonFunc) []byte {
	n := v.Len()
	b = binary.AppendUvarint(append(b, tagList), uint64(n))
	for i := range n {
		b = elem(b, v.Index(i))
	}
	return b
}

// canonMap returns the encoder of map type t: the entries sorted by key
// as JSON writes the key, as JSON sorts them.
func canonMap(t reflect.Type) canonFunc {
	kt := t.Key()
	var keyText func(reflect.Value) (string, bool)
	switch {
	case kt.Kind() == reflect.String: // before MarshalText, as JSON
		keyText = func(k reflect.Value) (string, bool) { return k.String(), true }
	case kt.Implements(canonTextMarshaler):
		keyText = func(k reflect.Value) (string, bool) {
			m, _ := reflect.TypeAssert[encoding.TextMarshaler](k)
			s, err := m.MarshalText()
			return string(s), err == nil
		}
	case kt.Kind() >= reflect.Int && kt.Kind() <= reflect.Int64:
		keyText = func(k reflect.Value) (string, bool) { return strconv.FormatInt(k.Int(), 10), true }
	case kt.Kind() >= reflect.Uint && kt.Kind() <= reflect.Uintptr:
		keyText = func(k reflect.Value) (string, bool) { return strconv.FormatUint(k.Uint(), 10), true }
	default:
		return canonByJSON
	}
	if t == reflect.TypeFor[map[string]string]() {
		return canonStringMap // a gateway's bridge ports: without reflection
	}
	elem := canonEncoder(t.Elem())
	type entry struct {
		key string
		v   reflect.Value
	}
	return func(b []byte, v reflect.Value) []byte {
		if v.IsNil() {
			return append(b, tagNull)
		}
		entries := make([]entry, 0, v.Len())
		for it := v.MapRange(); it.Next(); {
			k, ok := keyText(it.Key())
			if !ok {
				return canonByJSON(b, v)
			}
			entries = append(entries, entry{k, it.Value()})
		}
		slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.key, b.key) })
		b = binary.AppendUvarint(append(b, tagMap), uint64(len(entries)))
		for _, e := range entries {
			b = elem(appendCanonString(b, e.key), e.v)
		}
		return b
	}
}

// canonStringMap is canonMap's encoder of a map[string]string.
func canonStringMap(b []byte, v reflect.Value) []byte {
	m, _ := reflect.TypeAssert[map[string]string](v)
	return appendStringMap(b, m)
}

// canonField is a field of a struct as JSON writes it.
type canonField struct {
	index int
	// name is the field's JSON name, length-prefixed.
	name      []byte
	omitEmpty bool
	omitZero  bool
	// isZero is the type's IsZero method, when it has one (omitzero).
	isZero bool
	enc    canonFunc
}

// canonStruct returns the encoder of struct type t: the fields JSON
// writes, by name, in order.
func canonStruct(t reflect.Type) canonFunc {
	var fields []canonField
	for i := range t.NumField() {
		sf := t.Field(i)
		if sf.Anonymous {
			return canonByJSON // JSON promotes an embedded struct's fields
		}
		if !sf.IsExported() {
			continue
		}
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			name = sf.Name
		}
		f := canonField{index: i, name: appendString(nil, name), enc: canonEncoder(sf.Type)}
		for o := range strings.SplitSeq(opts, ",") {
			switch o {
			case "omitempty":
				f.omitEmpty = true
			case "omitzero":
				f.omitZero = true
				f.isZero = sf.Type.Implements(canonIsZeroer)
				if !f.isZero && reflect.PointerTo(sf.Type).Implements(canonIsZeroer) {
					return canonByJSON // IsZero on a pointer: as JSON decides
				}
			case "string":
				return canonByJSON // numbers and bools written as strings
			}
		}
		fields = append(fields, f)
	}
	return func(b []byte, v reflect.Value) []byte {
		b = append(b, tagObject)
		for i := range fields {
			f := &fields[i]
			fv := v.Field(f.index)
			if f.omitEmpty && emptyForJSON(fv) || f.omitZero && zeroForJSON(fv, f.isZero) {
				continue
			}
			b = f.enc(append(b, f.name...), fv)
		}
		return append(b, tagEnd)
	}
}

// emptyForJSON reports whether JSON's omitempty leaves v out.
func emptyForJSON(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return v.Len() == 0
	case reflect.Bool:
		return !v.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return v.Int() == 0
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return v.Uint() == 0
	case reflect.Float32, reflect.Float64:
		return v.Float() == 0
	case reflect.Interface, reflect.Pointer:
		return v.IsNil()
	}
	return false
}

// zeroForJSON reports whether JSON's omitzero leaves v out: by its IsZero
// method when it has one (isZero), else when it is its type's zero.
func zeroForJSON(v reflect.Value, isZero bool) bool {
	if isZero {
		if v.Kind() == reflect.Pointer && v.IsNil() {
			return true
		}
		z, _ := reflect.TypeAssert[interface{ IsZero() bool }](v)
		return z.IsZero()
	}
	return v.IsZero()
}
