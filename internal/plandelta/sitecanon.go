package plandelta

import (
	"encoding/binary"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/fednet/fednet/internal/spec"
)

// A site's binary form (appendCanon of a spec.Site) written out field by
// field rather than through reflection, in about a third of the time: a
// network added over every site has each agent hash every site of its
// Local again (a million sites at a thousand gateways). It is the same
// bytes as appendCanon's, by construction where it can be (nested types
// it does not write out go through appendCanon) and checked by
// TestSiteCanonIsCanon on random sites. It is used only while spec.Site
// and spec.Gateway have exactly the fields it knows (siteShape): a field
// added to either falls back to appendCanon, and fails
// TestSiteCanonKnowsTheSpec until this file writes it too.

// siteShape is every field of spec.Site and spec.Gateway as appendSiteCanon
// writes them: name, type and JSON tag, in order.
const siteShape = `Site{Name string "name"; Provider string "provider"; Region string "region,omitempty"; Index int "index"; ` +
	`Prefixes []netip.Prefix "prefixes,omitempty"; Gateways []spec.Gateway "gateways"; VirtualAddress netip.Addr "virtualAddress,omitempty"; ` +
	`Fabric spec.Fabric "fabric,omitempty"; Cloud *spec.Cloud "cloud,omitempty"; External *spec.External "external,omitempty"} ` +
	`Gateway{Name string "name"; Endpoint string "endpoint,omitempty"; BehindNAT bool "behindNAT,omitempty"; PublicKey string "publicKey,omitempty"; ` +
	`TransitAddress netip.Addr "transitAddress,omitempty"; LANAddress netip.Addr "lanAddress,omitempty"; BridgePorts map[string]string "bridgePorts,omitempty"; ` +
	`PublicAllow []spec.Admission "publicAllow,omitempty"}`

// shapeOf describes the fields of struct types as siteShape does.
func shapeOf(types ...reflect.Type) string {
	var parts []string
	for _, t := range types {
		var fields []string
		for i := range t.NumField() {
			f := t.Field(i)
			fields = append(fields, fmt.Sprintf("%s %s %q", f.Name, f.Type, f.Tag.Get("json")))
		}
		parts = append(parts, t.Name()+"{"+strings.Join(fields, "; ")+"}")
	}
	return strings.Join(parts, " ")
}

// siteCanonKnown reports whether appendSiteCanon knows every field of the
// spec's sites and gateways (and none of their fields' types encodes
// itself: such a type is encoded by its own method).
var siteCanonKnown = shapeOf(reflect.TypeFor[spec.Site](), reflect.TypeFor[spec.Gateway]()) == siteShape &&
	!marshals(reflect.TypeFor[spec.Site]()) && !marshals(reflect.TypeFor[spec.Gateway]()) && !marshals(reflect.TypeFor[spec.Fabric]())

// The JSON names of the fields, length-prefixed as canonStruct writes
// them.
var (
	nameName, nameProvider, nameRegion, nameIndex, namePrefixes, nameGateways = canonName("name"), canonName("provider"), canonName("region"), canonName("index"), canonName("prefixes"), canonName("gateways")
	nameVirtual, nameFabric, nameCloud, nameExternal                          = canonName("virtualAddress"), canonName("fabric"), canonName("cloud"), canonName("external")
	nameEndpoint, nameBehindNAT, namePublicKey, nameTransit, nameLAN          = canonName("endpoint"), canonName("behindNAT"), canonName("publicKey"), canonName("transitAddress"), canonName("lanAddress")
	nameBridgePorts, namePublicAllow                                          = canonName("bridgePorts"), canonName("publicAllow")
)

func canonName(s string) []byte { return appendString(nil, s) }

// appendSiteCanon appends the binary form of s: appendCanon's.
func appendSiteCanon(b []byte, s *spec.Site) []byte {
	return appendSiteForm(b, s, true)
}

// appendSiteRest appends the binary form of s with no bridge ports on its
// gateways (as if each had none), which sums of version 4 hash apart from
// the ports (appendSitePorts).
func appendSiteRest(b []byte, s *spec.Site) []byte {
	return appendSiteForm(b, s, false)
}

// appendSitePorts appends the bridge ports of s's gateways: their number,
// then each gateway's map (sorted by key) or null.
func appendSitePorts(b []byte, s *spec.Site) []byte {
	b = binary.AppendUvarint(append(b, tagList), uint64(len(s.Gateways)))
	for i := range s.Gateways {
		b = appendStringMap(b, s.Gateways[i].BridgePorts)
	}
	return b
}

// appendSiteForm appends the binary form of s, with its gateways' bridge
// ports when ports is set.
func appendSiteForm(b []byte, s *spec.Site, ports bool) []byte {
	if !siteCanonKnown {
		if !ports {
			c := *s
			c.Gateways = slices.Clone(s.Gateways)
			for i := range c.Gateways {
				c.Gateways[i].BridgePorts = nil // omitempty: as if it had none
			}
			s = &c
		}
		return appendCanon(b, reflect.ValueOf(s).Elem())
	}
	b = append(b, tagObject)
	b = appendCanonString(append(b, nameName...), s.Name)
	b = appendCanonString(append(b, nameProvider...), s.Provider)
	if s.Region != "" {
		b = appendCanonString(append(b, nameRegion...), s.Region)
	}
	b = binary.AppendVarint(append(append(b, nameIndex...), tagInt), int64(s.Index))
	if len(s.Prefixes) > 0 {
		b = binary.AppendUvarint(append(append(b, namePrefixes...), tagList), uint64(len(s.Prefixes)))
		for _, p := range s.Prefixes {
			b = appendNetip(b, 1, p)
		}
	}
	b = append(b, nameGateways...)
	if s.Gateways == nil {
		b = append(b, tagNull)
	} else {
		b = binary.AppendUvarint(append(b, tagList), uint64(len(s.Gateways)))
		for i := range s.Gateways {
			b = appendGatewayCanon(b, &s.Gateways[i], ports)
		}
	}
	b = appendNetip(append(b, nameVirtual...), 0, s.VirtualAddress)
	if s.Fabric != "" {
		b = appendCanonString(append(b, nameFabric...), string(s.Fabric))
	}
	if s.Cloud != nil {
		b = appendCanon(append(b, nameCloud...), reflect.ValueOf(&s.Cloud).Elem())
	}
	if s.External != nil {
		b = appendCanon(append(b, nameExternal...), reflect.ValueOf(&s.External).Elem())
	}
	return append(b, tagEnd)
}

// appendGatewayCanon appends the binary form of a site's gateway, with
// its bridge ports when ports is set.
func appendGatewayCanon(b []byte, g *spec.Gateway, ports bool) []byte {
	b = append(b, tagObject)
	b = appendCanonString(append(b, nameName...), g.Name)
	if g.Endpoint != "" {
		b = appendCanonString(append(b, nameEndpoint...), g.Endpoint)
	}
	if g.BehindNAT {
		b = append(append(b, nameBehindNAT...), tagTrue)
	}
	if g.PublicKey != "" {
		b = appendCanonString(append(b, namePublicKey...), g.PublicKey)
	}
	b = appendNetip(append(b, nameTransit...), 0, g.TransitAddress)
	b = appendNetip(append(b, nameLAN...), 0, g.LANAddress)
	if ports && len(g.BridgePorts) > 0 {
		b = appendStringMap(append(b, nameBridgePorts...), g.BridgePorts)
	}
	if len(g.PublicAllow) > 0 {
		b = appendCanon(append(b, namePublicAllow...), reflect.ValueOf(&g.PublicAllow).Elem())
	}
	return append(b, tagEnd)
}

// appendStringMap is the binary form of a map[string]string: its entries
// sorted by key, as JSON writes them.
func appendStringMap(b []byte, m map[string]string) []byte {
	if m == nil {
		return append(b, tagNull)
	}
	type entry struct{ k, v string }
	var array [8]entry
	entries := array[:0]
	for k, v := range m {
		entries = append(entries, entry{k, v})
	}
	slices.SortFunc(entries, func(x, y entry) int { return strings.Compare(x.k, y.k) })
	b = binary.AppendUvarint(append(b, tagMap), uint64(len(entries)))
	for _, e := range entries {
		b = appendCanonString(appendCanonString(b, e.k), e.v)
	}
	return b
}
