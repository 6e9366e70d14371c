package spec

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"

	"gopkg.in/yaml.v3"
)

// maxNodes bounds the YAML nodes the decoder visits, counting each use of an
// alias afresh, so that a document of aliases to aliases cannot make Parse
// run for ever.
const maxNodes = 200000

// readYAML parses data into the root node of its single document. It returns
// nil and records a problem when data is not one YAML document. yaml.v3 is
// third-party code: a panic inside it becomes a problem, never a crash.
func readYAML(data []byte, ps *problems) (root *yaml.Node) {
	defer func() {
		if r := recover(); r != nil {
			ps.add(0, "", "the YAML parser failed on this document (%v); check the file is plain YAML", r)
			root = nil
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			ps.add(0, "", "the spec is empty; want a YAML mapping that starts with apiVersion: %s", APIVersion)
			return nil
		}
		addYAMLError(err, ps)
		return nil
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case errors.Is(err, io.EOF):
	case err != nil:
		addYAMLError(err, ps)
		return nil
	case len(next.Content) > 0:
		ps.add(next.Line, "", "a second YAML document starts here; a spec holds exactly one federation, so remove the --- separator and what follows or move it to its own file")
		return nil
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		ps.add(0, "", "the spec is empty; want a YAML mapping that starts with apiVersion: %s", APIVersion)
		return nil
	}
	return doc.Content[0]
}

// yamlParserErrors are the yaml.v3 parser (not scanner) errors. yaml.v3
// v3.0.1 reports their line 0-based (its parser.fail adds 1 only for scanner
// errors), so addYAMLError adds 1.
var yamlParserErrors = map[string]bool{
	"did not find expected <stream-start>":   true,
	"did not find expected <document start>": true,
	"found undefined tag handle":             true,
	"did not find expected node content":     true,
	"did not find expected '-' indicator":    true,
	"did not find expected key":              true,
	"did not find expected ',' or ']'":       true,
	"did not find expected ',' or '}'":       true,
	"found duplicate %YAML directive":        true,
	"found incompatible YAML document":       true,
	"found duplicate %TAG directive":         true,
}

// addYAMLError turns a yaml.v3 syntax error ("yaml: line 3: did not find
// expected key") into a problem with a line.
func addYAMLError(err error, ps *problems) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if num, text, ok := strings.Cut(rest, ": "); ok {
			if n, err := strconv.Atoi(num); err == nil {
				line, msg = n, text
			}
		}
	}
	if yamlParserErrors[msg] {
		line++ // also right when yaml.v3 left the line out: it was line 0
	}
	ps.add(line, "", "not valid YAML: %s; check indentation, colons and quoting around this line", msg)
}

// decoder fills Go values from YAML nodes by reflection over the yaml struct
// tags, recording the line of every field it meets and a problem for every
// node that does not fit: unknown fields, duplicate keys, wrong types,
// malformed prefixes and addresses.
type decoder struct {
	ps *problems
	// lines maps a field path to the line of its key (or list item).
	lines map[string]int
	// set holds the paths whose value was given and not null.
	set   map[string]bool
	nodes int
}

var (
	prefixType = reflect.TypeFor[netip.Prefix]()
	addrType   = reflect.TypeFor[netip.Addr]()
)

// fail records a problem at n and marks path as undecodable.
func (d *decoder) fail(n *yaml.Node, path, format string, args ...any) {
	d.ps.add(n.Line, path, format, args...)
	d.ps.markBad(path)
}

// decode stores n into v, which must be settable. path names v.
func (d *decoder) decode(n *yaml.Node, path string, v reflect.Value) {
	d.nodes++
	if d.nodes > maxNodes {
		if d.nodes == maxNodes+1 {
			d.fail(n, path, "the spec expands to more than %d YAML nodes (aliases count each time they are used); split it or write it out without aliases", maxNodes)
		}
		return
	}
	if n.Kind == yaml.AliasNode {
		if n.Alias == nil {
			return
		}
		n = n.Alias
	}
	if isNull(n) {
		if v.Kind() == reflect.Pointer && v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		return
	}
	d.set[path] = true
	switch t := v.Type(); {
	case t == prefixType:
		d.prefix(n, path, v)
	case t == addrType:
		d.addr(n, path, v)
	case t.Kind() == reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(t.Elem()))
		}
		d.decode(n, path, v.Elem())
	case t.Kind() == reflect.Struct:
		d.structure(n, path, v)
	case t.Kind() == reflect.Slice:
		d.list(n, path, v)
	case t.Kind() == reflect.Map:
		d.mapping(n, path, v)
	case t.Kind() == reflect.String:
		if s, ok := d.scalar(n, path, "text"); ok {
			v.SetString(s)
		}
	case t.Kind() == reflect.Int:
		d.integer(n, path, v)
	case t.Kind() == reflect.Bool:
		d.boolean(n, path, v)
	case t.Kind() == reflect.Float64:
		d.float(n, path, v)
	default:
		// Only reachable if someone adds a field of a new kind to the types.
		d.fail(n, path, "fednet cannot read a field of Go type %s from YAML (a bug in fednet)", t)
	}
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// describe names what n is, for "is X; want Y" messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping (key: value)"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return strconv.Quote(n.Value)
	}
	return "unexpected YAML"
}

// scalar returns the text of a scalar node, or records that n is a list or
// mapping where want was expected.
func (d *decoder) scalar(n *yaml.Node, path, want string) (string, bool) {
	if n.Kind != yaml.ScalarNode {
		d.fail(n, path, "is %s; want %s", describe(n), want)
		return "", false
	}
	return n.Value, true
}

// fieldTables keeps yamlFields' answer by type: a spec of a thousand
// sites decodes thousands of structures of a few types.
var fieldTables sync.Map // reflect.Type → fieldTable

// fieldTable is what yamlFields returns: shared, never changed.
type fieldTable struct {
	byName map[string]int
	names  []string
}

// yamlFields returns the fields of struct type t by their YAML key, and the
// keys in declaration order. The caller must not change them.
func yamlFields(t reflect.Type) (map[string]int, []string) {
	if ft, ok := fieldTables.Load(t); ok {
		return ft.(fieldTable).byName, ft.(fieldTable).names
	}
	byName, names := newYAMLFields(t)
	fieldTables.Store(t, fieldTable{byName, names})
	return byName, names
}

// newYAMLFields computes yamlFields(t).
func newYAMLFields(t reflect.Type) (map[string]int, []string) {
	byName := map[string]int{}
	var names []string
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		byName[name] = i
		names = append(names, name)
	}
	return byName, names
}

func (d *decoder) structure(n *yaml.Node, path string, v reflect.Value) {
	byName, names := yamlFields(v.Type())
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, "is %s; want a mapping with fields %s", describe(n), strings.Join(names, ", "))
		return
	}
	seen := make(map[string]int, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.AliasNode && k.Alias != nil {
			k = k.Alias
		}
		if k.Kind != yaml.ScalarNode {
			d.fail(k, path, "has a key that is %s; want field names: %s", describe(k), strings.Join(names, ", "))
			continue
		}
		child := joinPath(path, k.Value)
		if k.ShortTag() == "!!merge" {
			d.fail(k, child, "YAML merge keys (<<) are not supported; write the fields out")
			continue
		}
		if line, dup := seen[k.Value]; dup {
			d.fail(k, child, "%s is given twice (first on line %d); keep one", k.Value, line)
			continue
		}
		seen[k.Value] = k.Line
		idx, ok := byName[k.Value]
		if !ok {
			msg := fmt.Sprintf("unknown field %q; valid fields here: %s", k.Value, strings.Join(names, ", "))
			if s := suggest(k.Value, names); s != "" {
				msg += fmt.Sprintf(" (did you mean %s?)", s)
			}
			d.fail(k, child, "%s", msg)
			continue
		}
		d.lines[child] = k.Line
		d.decode(val, child, v.Field(idx))
	}
}

func (d *decoder) list(n *yaml.Node, path string, v reflect.Value) {
	if n.Kind != yaml.SequenceNode {
		d.fail(n, path, "is %s; want a list (items starting with - , or [a, b])", describe(n))
		return
	}
	s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, item := range n.Content {
		child := path + "[" + strconv.Itoa(i) + "]"
		d.lines[child] = item.Line
		d.decode(item, child, s.Index(i))
	}
	v.Set(s)
}

func (d *decoder) mapping(n *yaml.Node, path string, v reflect.Value) {
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, "is %s; want a mapping (name: value)", describe(n))
		return
	}
	if v.Type().Key().Kind() != reflect.String {
		d.fail(n, path, "fednet cannot read a map with %s keys (a bug in fednet)", v.Type().Key())
		return
	}
	m := reflect.MakeMapWithSize(v.Type(), len(n.Content)/2)
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.AliasNode && k.Alias != nil {
			k = k.Alias
		}
		if k.Kind != yaml.ScalarNode || k.Value == "" {
			d.fail(k, path, "has a key that is %s; want a name", describe(k))
			continue
		}
		child := joinPath(path, k.Value)
		if k.ShortTag() == "!!merge" {
			d.fail(k, child, "YAML merge keys (<<) are not supported; write the entries out")
			continue
		}
		if line, dup := seen[k.Value]; dup {
			d.fail(k, child, "%s is given twice (first on line %d); keep one", k.Value, line)
			continue
		}
		seen[k.Value] = k.Line
		d.lines[child] = k.Line
		e := reflect.New(v.Type().Elem()).Elem()
		d.decode(val, child, e)
		m.SetMapIndex(reflect.ValueOf(k.Value).Convert(v.Type().Key()), e)
	}
	v.Set(m)
}

func (d *decoder) integer(n *yaml.Node, path string, v reflect.Value) {
	s, ok := d.scalar(n, path, "a whole number")
	if !ok {
		return
	}
	switch n.ShortTag() {
	case "!!int":
		i, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), 0, 64)
		if err != nil || i < math.MinInt32 || i > math.MaxInt32 || v.OverflowInt(i) {
			d.fail(n, path, "%s is out of range; want a whole number between %d and %d", s, math.MinInt32, math.MaxInt32)
			return
		}
		v.SetInt(i)
	case "!!float":
		if _, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), 10, 64); errors.Is(err, strconv.ErrRange) {
			d.fail(n, path, "%s is out of range; want a whole number between %d and %d", s, math.MinInt32, math.MaxInt32)
			return
		}
		d.fail(n, path, "%s is not a whole number; want e.g. 100", s)
	default:
		if n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 {
			if _, err := strconv.Atoi(s); err == nil {
				d.fail(n, path, "%q is quoted text, not a number; write it without quotes", s)
				return
			}
		}
		d.fail(n, path, "%q is not a number; want a whole number, e.g. 100", s)
	}
}

func (d *decoder) float(n *yaml.Node, path string, v reflect.Value) {
	s, ok := d.scalar(n, path, "a number")
	if !ok {
		return
	}
	tag := n.ShortTag()
	if tag != "!!int" && tag != "!!float" {
		if n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 {
			if _, err := strconv.ParseFloat(s, 64); err == nil {
				d.fail(n, path, "%q is quoted text, not a number; write it without quotes", s)
				return
			}
		}
		d.fail(n, path, "%q is not a number; want a decimal number, e.g. 0.09", s)
		return
	}
	f, err := strconv.ParseFloat(strings.ReplaceAll(s, "_", ""), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		d.fail(n, path, "%s is not a finite number; want a decimal number, e.g. 0.09", s)
		return
	}
	v.SetFloat(f)
}

func (d *decoder) boolean(n *yaml.Node, path string, v reflect.Value) {
	s, ok := d.scalar(n, path, "true or false")
	if !ok {
		return
	}
	if n.ShortTag() == "!!bool" {
		if b, err := strconv.ParseBool(strings.ToLower(s)); err == nil {
			v.SetBool(b)
			return
		}
	}
	d.fail(n, path, "%q is not true or false; want true or false", s)
}

func (d *decoder) prefix(n *yaml.Node, path string, v reflect.Value) {
	s, ok := d.scalar(n, path, "an IP prefix like 10.1.0.0/24")
	if !ok {
		return
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		d.fail(n, path, "%q is not an IP prefix; want address/length like 10.1.0.0/24", s)
		return
	}
	if p != p.Masked() {
		d.fail(n, path, "%s has bits set after the /%d; want %s", s, p.Bits(), p.Masked())
		return
	}
	v.Set(reflect.ValueOf(p))
}

func (d *decoder) addr(n *yaml.Node, path string, v reflect.Value) {
	s, ok := d.scalar(n, path, "an IP address like 10.1.0.254")
	if !ok {
		return
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		d.fail(n, path, "%q is not an IP address; want e.g. 10.1.0.254 (no prefix length, no zone)", s)
		return
	}
	v.Set(reflect.ValueOf(a))
}

// joinPath appends a mapping key to a path.
func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// parentPath strips the last element (".key" or "[i]") of a path.
func parentPath(path string) string {
	i := strings.LastIndexAny(path, ".[")
	if i < 0 {
		return ""
	}
	return path[:i]
}

// suggest returns the name in names closest to s when it is close enough to
// be a likely typo, or "".
func suggest(s string, names []string) string {
	best, bestDist := "", 3
	sorted := append([]string(nil), names...)
	sort.Strings(sorted)
	for _, name := range sorted {
		if strings.EqualFold(s, name) {
			return name
		}
		if d := editDistance(strings.ToLower(s), strings.ToLower(name)); d < bestDist {
			best, bestDist = name, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
