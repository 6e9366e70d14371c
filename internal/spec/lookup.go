package spec

// Line returns the YAML line of the field at path (as in
// "sites[1].gateways[0].endpoint"), or of its nearest enclosing field when
// the field itself was not written (a default, or a missing field). It
// returns 0 when nothing is known, e.g. for a Federation not made by Parse.
func (f *Federation) Line(path string) int {
	for {
		if l, ok := f.lines[path]; ok {
			return l
		}
		if path == "" {
			return 0
		}
		path = parentPath(path)
	}
}

// Site returns the site called name. The pointer is into f.Sites.
func (f *Federation) Site(name string) (*Site, bool) {
	for i := range f.Sites {
		if f.Sites[i].Name == name {
			return &f.Sites[i], true
		}
	}
	return nil, false
}

// Gateway returns the gateway called name and its site. The pointers are
// into f.Sites.
func (f *Federation) Gateway(name string) (*Gateway, *Site, bool) {
	for i := range f.Sites {
		s := &f.Sites[i]
		for j := range s.Gateways {
			if s.Gateways[j].Name == name {
				return &s.Gateways[j], s, true
			}
		}
	}
	return nil, nil, false
}

// link returns the topology entry for the link between sites a and b, in
// either order, or nil when there is none.
func (f *Federation) link(a, b string) *Link {
	for i := range f.Topology.Links {
		l := &f.Topology.Links[i]
		if len(l.Between) == 2 && (l.Between[0] == a && l.Between[1] == b || l.Between[0] == b && l.Between[1] == a) {
			return l
		}
	}
	return nil
}

// LinkEnabled reports whether sites a and b (in either order) have a link.
// In a mesh every pair of distinct sites has one unless a topology.links
// entry disables it. It is false for a site with itself and for unknown
// sites.
func (f *Federation) LinkEnabled(a, b string) bool {
	if a == b {
		return false
	}
	if _, ok := f.Site(a); !ok {
		return false
	}
	if _, ok := f.Site(b); !ok {
		return false
	}
	if vias := f.externalVias(); vias != nil && !externalAllows(vias, a, b) {
		return false
	}
	if l := f.link(a, b); l != nil {
		return !l.Disabled
	}
	return true
}

// LinkCost returns the cost of the link between sites a and b (in either
// order): its topology.links entry's cost, or 1 when there is no entry or the
// entry leaves cost out. It says nothing about whether the link is enabled;
// ask LinkEnabled.
func (f *Federation) LinkCost(a, b string) int {
	if l := f.link(a, b); l != nil && l.Cost > 0 {
		return l.Cost
	}
	return 1
}

// BehindNAT reports whether every gateway of s is behind NAT, so that no
// other site can open a tunnel to s: s must connect out. It is false for a
// site without gateways.
func (s Site) BehindNAT() bool {
	for _, g := range s.Gateways {
		if !g.BehindNAT {
			return false
		}
	}
	return len(s.Gateways) > 0
}
