package plan

import "github.com/fednet/fednet/internal/spec"

// SetChunkSize sets the size of the chunks Chunks are made of (tests make
// small plans span several) and returns what sets it back.
func SetChunkSize(n int) func() {
	was := chunkSize
	chunkSize = n
	return func() { chunkSize = was }
}

// MeshBoth returns, for each bridged network of f planned with in, whether
// its members that are up form a mesh, as meshOf finds it and as asking
// linkUp of every two members does.
func MeshBoth(f *spec.Federation, in Inputs) (fast, checked []bool) {
	v := newView(f, in)
	for _, n := range f.Networks {
		if n.Mode != spec.Bridged {
			continue
		}
		is := map[string]bool{}
		var members []string
		for _, s := range n.Sites {
			if v.siteUp(s) {
				members, is[s] = append(members, s), true
			}
		}
		fast, checked = append(fast, v.meshOf(members, is)), append(checked, v.meshChecked(members))
	}
	return fast, checked
}
