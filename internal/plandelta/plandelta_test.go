package plandelta_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/plandelta"
	"github.com/fednet/fednet/internal/spec"
)

// federation writes a spec of n sites with one routed network over all,
// site s%03d with prefix 10.64.i.0/24, plus the extra lines.
func federation(t testing.TB, n int, edit func(i int) string, extra string) *spec.Federation {
	t.Helper()
	var b strings.Builder
	b.WriteString("apiVersion: fednet/v1\nkind: Federation\nname: d\nsites:\n")
	var names []string
	for i := range n {
		prefix := fmt.Sprintf("10.%d.%d.0/24", 64+i/256, i%256)
		if edit != nil {
			if p := edit(i); p != "" {
				prefix = p
			}
		}
		names = append(names, fmt.Sprintf("s%03d", i))
		ports := ""
		if strings.Contains(extra, "name: lan") {
			ports = ", bridgePorts: {lan: eth1}"
		}
		fmt.Fprintf(&b, "  - {name: s%03d, provider: p, prefixes: [%s], gateways: [{name: g%03d, endpoint: '100.%d.%d.1:51820'%s}]}\n", i, prefix, i, 64+i/256, i%256, ports)
	}
	fmt.Fprintf(&b, "networks:\n  - {name: apps, id: 1, mode: routed, sites: [%s]}\n%s", strings.Join(names, ", "), extra)
	f, err := spec.Parse([]byte(b.String()))
	if err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	return f
}

func plans(t testing.TB, f *spec.Federation, in plan.Inputs) map[string]plan.Gateway {
	t.Helper()
	gws, err := plan.Compute(f, in)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]plan.Gateway{}
	for _, g := range gws {
		out[g.Name] = g
	}
	return out
}

func js(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestRoundTrip: for the changes the control-plane bench makes (a site
// added, a prefix changed, a bridged network over every site, a gateway
// removed), a delta sent over JSON and applied to the old plan gives the
// new plan byte for byte, and is much smaller than the new plan (but for
// the site whose own prefix changed, and the new bridge on every plan).
func TestRoundTrip(t *testing.T) {
	const n = 40
	base := federation(t, n, nil, "")
	all := ""
	for i := range n {
		all += fmt.Sprintf("s%03d, ", i)
	}
	changes := map[string]struct {
		f  *spec.Federation
		in plan.Inputs
	}{
		"site added":     {federation(t, n+1, nil, ""), plan.Inputs{}},
		"prefix changed": {federation(t, n, func(i int) string { return map[bool]string{true: "10.99.0.0/24"}[i == 7] }, ""), plan.Inputs{}},
		"network added": {federation(t, n, nil, "  - {name: lan, id: 100, mode: bridged, subnet: 192.168.0.0/24, sites: ["+strings.TrimSuffix(all, ", ")+"]}\n"),
			plan.Inputs{}},
		"gateway removed": {base, plan.Inputs{Removed: map[string]bool{"g003": true}}},
		"nothing":         {base, plan.Inputs{}},
	}
	old := plans(t, base, plan.Inputs{})
	oldList, err := plan.Compute(base, plan.Inputs{})
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range changes {
		t.Run(name, func(t *testing.T) {
			updated, edits, err := plan.Update(base, plan.Inputs{}, oldList, c.f, c.in)
			if err != nil {
				t.Fatal(err)
			}
			edited := 0
			for i, want := range updated {
				from, ok := old[want.Name]
				if !ok {
					continue
				}
				gw := want.Name
				d, wire := roundTrip(t, gw, from, want)
				// Every plan but that of the changed site changes a little.
				if full := len(js(t, want)); name != "network added" && gw != "g007" && wire > full/3 {
					t.Errorf("%s: delta of %d bytes for a plan of %d", gw, wire, full)
				}
				checkDigest(t, gw, from, want, d)
				if edits[i] != nil {
					// The delta from Update's edit.
					edited++
					e := plandelta.FromEdit(from, want, *edits[i], plandelta.Sum(want))
					if got, err := plandelta.Apply(from, e); err != nil || js(t, got) != js(t, want) {
						t.Fatalf("%s: the delta from the edit: %v", gw, err)
					}
					checkDigest(t, gw+" (from the edit)", from, want, e)
				}
			}
			if edited == 0 && name != "nothing" {
				t.Errorf("plan.Update edited no plan")
			}
		})
	}
}

// roundTrip makes the delta of gateway gw from from to want, sends it
// over JSON, applies it to from as an agent holds it (decoded from JSON)
// and fails unless that gives want byte for byte. It returns the delta and
// its size on the wire.
func roundTrip(t *testing.T, gw string, from, want plan.Gateway) (plandelta.Delta, int) {
	t.Helper()
	d, ok := plandelta.Diff(from, want, plandelta.Sum(want))
	if !ok {
		t.Fatalf("%s: no delta", gw)
	}
	wire := js(t, d)
	head, err := plandelta.HeadJSON(want)
	if err != nil {
		t.Fatal(err)
	}
	if with, err := d.MarshalWithHead(head); err != nil || string(with) != wire {
		t.Fatalf("%s: MarshalWithHead: %v\n got %s\nwant %s", gw, err, with, wire)
	}
	var back plandelta.Delta
	var held plan.Gateway
	if err := json.Unmarshal([]byte(wire), &back); err != nil {
		t.Fatalf("%s: decoding the delta: %v", gw, err)
	}
	if err := json.Unmarshal([]byte(js(t, from)), &held); err != nil {
		t.Fatal(err)
	}
	got, err := plandelta.Apply(held, back)
	if err != nil {
		t.Fatalf("%s: %v", gw, err)
	}
	if js(t, got) != js(t, want) {
		t.Fatalf("%s: rebuilt plan differs:\n got %s\nwant %s", gw, js(t, got), js(t, want))
	}
	return d, len(wire)
}

// checkDigest: with a sum of version 2, delta d from from to want updates
// from's digest to want's, and ApplyDigest and Apply rebuild want.
func checkDigest(t *testing.T, gw string, from, want plan.Gateway, d plandelta.Delta) {
	t.Helper()
	dg := plandelta.NewDigest(from).Edited(from, want, d, plandelta.NewLocalDigest(want.Local))
	if !dg.Same(plandelta.NewDigest(want)) {
		t.Fatalf("%s: the digest updated by the delta differs from the new plan's", gw)
	}
	head, err := plandelta.HeadJSON(want)
	if err != nil {
		t.Fatal(err)
	}
	local := plandelta.NewLocalDigest(want.Local)
	if !plandelta.NewDigest(from).EditedWithHead(from, want, d, local, head).Same(dg) || !plandelta.NewDigestWithHead(want, local, head).Same(dg) {
		t.Fatalf("%s: the digests made with the head's JSON at hand differ", gw)
	}
	if !plandelta.NewDigest(from).EditedHeld(plan.Hold(from), plan.Hold(want), d, local, head).Same(dg) || !plandelta.NewDigestHeld(plan.Hold(want), local, head).Same(dg) {
		t.Fatalf("%s: the digest updated on plans held in chunks differs", gw)
	}
	if bare := plandelta.NewDigest(want).Bare(want); plandelta.NewDigest(want).BareHeld(plan.Hold(want)) != bare {
		t.Fatalf("%s: the bare sum of the plan held in chunks differs", gw)
	}
	d.Sum, d.SumVersion = fmt.Sprintf("%x", dg.Sum), plandelta.SumVersion
	got, dg2, err := plandelta.ApplyDigest(from, plandelta.NewDigest(from), d)
	if err != nil || js(t, got) != js(t, want) || !dg2.Same(dg) {
		t.Fatalf("%s: ApplyDigest: %v (plan equal: %v, digest equal: %v)", gw, err, err == nil && js(t, got) == js(t, want), dg2.Same(dg))
	}
	if want.Local != nil && (dg2.Local == nil || dg2.Local.Sum != plandelta.NewLocalDigest(want.Local).Sum) {
		t.Fatalf("%s: ApplyDigest's digest of the Local differs from the Local's", gw)
	}
	if got, err := plandelta.Apply(from, d); err != nil || js(t, got) != js(t, want) {
		t.Fatalf("%s: Apply of a delta with a sum of version %d: %v", gw, plandelta.SumVersion, err)
	}
	// Sums of the older versions, as a manager that predates the newest
	// sends them: checked from a digest of the newest version (made
	// again) and of theirs.
	for v := 2; v < plandelta.SumVersion; v++ {
		dgv := plandelta.NewDigestOf(from, v).Edited(from, want, d, plandelta.NewDigestOf(want, v).Local)
		if dgv.Version != v || !dgv.Same(plandelta.NewDigestOf(want, v)) || dgv.Same(dg) {
			t.Fatalf("%s: the digest of version %d updated by the delta differs from the new plan's (or is of version %d)", gw, v, plandelta.SumVersion)
		}
		d.Sum, d.SumVersion = fmt.Sprintf("%x", dgv.Sum), v
		for _, base := range []plandelta.Digest{plandelta.NewDigest(from), plandelta.NewDigestOf(from, v)} {
			got, nd, err := plandelta.ApplyDigest(from, base, d)
			if err != nil || js(t, got) != js(t, want) || !nd.Same(dgv) {
				t.Fatalf("%s: ApplyDigest of a delta with a sum of version %d from a digest of version %d: %v", gw, v, base.Version, err)
			}
		}
		if got, err := plandelta.Apply(from, d); err != nil || js(t, got) != js(t, want) {
			t.Fatalf("%s: Apply of a delta with a sum of version %d: %v", gw, v, err)
		}
	}
}

// TestApplyWrongBase: a delta applied to another plan than its base is
// refused with ErrMismatch.
func TestApplyWrongBase(t *testing.T) {
	a := plans(t, federation(t, 10, nil, ""), plan.Inputs{})
	b := plans(t, federation(t, 11, nil, ""), plan.Inputs{})
	d, ok := plandelta.Diff(a["g001"], b["g001"], plandelta.Sum(b["g001"]))
	if !ok {
		t.Fatal("no delta")
	}
	other := a["g001"]
	other.Peers = slices.Clone(other.Peers)
	other.Peers[2].Endpoint = "203.0.113.9:51820"
	if _, err := plandelta.Apply(other, d); !errors.Is(err, plandelta.ErrMismatch) {
		t.Errorf("Apply on another base = %v, want ErrMismatch", err)
	}
	if _, err := plandelta.Apply(a["g002"], d); !errors.Is(err, plandelta.ErrMismatch) {
		t.Errorf("Apply on another gateway's plan = %v, want ErrMismatch", err)
	}
	// The same with sums of version 2.
	d.Sum, d.SumVersion = fmt.Sprintf("%x", plandelta.NewDigest(b["g001"]).Sum), plandelta.SumVersion
	if _, _, err := plandelta.ApplyDigest(a["g001"], plandelta.NewDigest(a["g001"]), d); err != nil {
		t.Fatalf("ApplyDigest on the right base: %v", err)
	}
	if _, _, err := plandelta.ApplyDigest(other, plandelta.NewDigest(other), d); !errors.Is(err, plandelta.ErrMismatch) {
		t.Errorf("ApplyDigest on another base = %v, want ErrMismatch", err)
	}
	if _, _, err := plandelta.ApplyDigest(a["g001"], plandelta.NewDigest(other), d); !errors.Is(err, plandelta.ErrMismatch) {
		t.Errorf("ApplyDigest with another base's digest = %v, want ErrMismatch", err)
	}
	bad := d
	bad.PeersGone = append(slices.Clone(d.PeersGone), d.Peers[0].Gateway)
	if _, _, err := plandelta.ApplyDigest(a["g001"], plandelta.NewDigest(a["g001"]), bad); !errors.Is(err, plandelta.ErrMismatch) {
		t.Errorf("ApplyDigest of a delta that sets and drops one peer = %v, want ErrMismatch", err)
	}
}

// TestSumCoversEveryField changes every field of a plan's list entries,
// one at a time, and checks that the sum changes. A field added to these
// types fails here until Sum encodes it.
func TestSumCoversEveryField(t *testing.T) {
	g := plans(t, federation(t, 4, nil, ""), plan.Inputs{})["g000"]
	// The first peer gets an (empty) IPsec block, so that its fields are
	// walked; each change below is made to a copy of it.
	g.Peers = slices.Clone(g.Peers)
	g.Peers[0].IPsec = &plan.IPsecPeer{}
	sum, digest := plandelta.Sum(g), plandelta.NewDigest(g).Sum
	targets := map[string]func(plan.Gateway) reflect.Value{
		"Peer":   func(g plan.Gateway) reflect.Value { return reflect.ValueOf(&g.Peers[0]).Elem() },
		"Route":  func(g plan.Gateway) reflect.Value { return reflect.ValueOf(&g.Routes[0]).Elem() },
		"Flow":   func(g plan.Gateway) reflect.Value { return reflect.ValueOf(&g.Firewall.Flows[0]).Elem() },
		"Remote": func(g plan.Gateway) reflect.Value { return reflect.ValueOf(&g.Firewall.Remote[0]).Elem() },
	}
	for name, target := range targets {
		var walk func(path string, get func(plan.Gateway) reflect.Value)
		walk = func(path string, get func(plan.Gateway) reflect.Value) {
			v := get(g)
			if v.Kind() == reflect.Pointer && v.Elem().Kind() == reflect.Struct {
				for i := range v.Elem().NumField() {
					walk(path+"."+v.Elem().Type().Field(i).Name, func(g plan.Gateway) reflect.Value { return get(g).Elem().Field(i) })
				}
				return
			}
			if v.Kind() == reflect.Struct && v.Type() != reflect.TypeFor[netip.Prefix]() {
				for i := range v.NumField() {
					walk(path+"."+v.Type().Field(i).Name, func(g plan.Gateway) reflect.Value { return get(g).Field(i) })
				}
				return
			}
			c := g
			c.Peers = slices.Clone(g.Peers)
			c.Peers[0].AllowedIPs = slices.Clone(g.Peers[0].AllowedIPs)
			ip := *g.Peers[0].IPsec
			c.Peers[0].IPsec = &ip
			c.Routes = slices.Clone(g.Routes)
			c.Firewall.Flows = slices.Clone(g.Firewall.Flows)
			c.Firewall.Remote = slices.Clone(g.Firewall.Remote)
			f := get(c)
			switch f.Interface().(type) {
			case string:
				f.SetString(f.String() + "x")
			case int:
				f.SetInt(f.Int() + 1)
			case netip.Prefix:
				f.Set(reflect.ValueOf(netip.MustParsePrefix("172.31.0.0/30")))
			case []netip.Prefix:
				f.Set(reflect.Append(f, reflect.ValueOf(netip.MustParsePrefix("172.31.0.0/30"))))
			case plan.Key:
				f.Set(reflect.ValueOf(plan.Key{9}))
			case bool:
				f.SetBool(!f.Bool())
			case []string:
				f.Set(reflect.Append(f, reflect.ValueOf("x")))
			case []plan.ChildSA:
				f.Set(reflect.Append(f, reflect.ValueOf(plan.ChildSA{LocalTS: []netip.Prefix{netip.MustParsePrefix("172.31.0.0/30")}})))
			default:
				if f.Kind() == reflect.String {
					f.SetString(f.String() + "x")
					break
				}
				t.Errorf("%s%s: a field of type %s that the test does not know how to change: teach it, and make sure Sum encodes it", name, path, f.Type())
				return
			}
			if plandelta.Sum(c) == sum {
				t.Errorf("changing %s%s does not change the sum: Sum must encode it", name, path)
			}
			if plandelta.NewDigest(c).Sum == digest {
				t.Errorf("changing %s%s does not change the digest: NewDigest must encode it", name, path)
			}
		}
		walk("", target)
	}
	// The head is summed whole.
	c := g
	c.LAN.Active = !c.LAN.Active
	if plandelta.Sum(c) == sum {
		t.Error("changing LAN.Active does not change the sum")
	}
	if plandelta.NewDigest(c).Sum == digest {
		t.Error("changing LAN.Active does not change the digest")
	}
}

// TestDiffRefusesUnkeyedLists: a plan whose list has a key twice gets no
// delta (the whole plan is sent instead).
func TestDiffRefusesUnkeyedLists(t *testing.T) {
	g := plans(t, federation(t, 4, nil, ""), plan.Inputs{})["g000"]
	bad := g
	bad.Routes = append(slices.Clone(g.Routes), g.Routes[len(g.Routes)-1])
	if _, ok := plandelta.Diff(g, bad, plandelta.Sum(bad)); ok {
		t.Error("Diff made a delta to a plan with a route twice")
	}
}

// BenchmarkSumDiffApply: one plan of a 1000-site federation, and the delta
// of a site added.
func BenchmarkSumDiffApply(b *testing.B) {
	old := plans(b, federation(b, 1000, nil, ""), plan.Inputs{})["g000"]
	new := plans(b, federation(b, 1001, nil, ""), plan.Inputs{})["g000"]
	b.Run("Sum", func(b *testing.B) {
		for b.Loop() {
			plandelta.Sum(new)
		}
	})
	b.Run("Diff", func(b *testing.B) {
		for b.Loop() {
			plandelta.Diff(old, new, plandelta.Sum(new))
		}
	})
	d, _ := plandelta.Diff(old, new, plandelta.Sum(new))
	b.Run("Apply", func(b *testing.B) {
		for b.Loop() {
			if _, err := plandelta.Apply(old, d); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Digest", func(b *testing.B) {
		for b.Loop() {
			plandelta.NewDigest(new)
		}
	})
	d.Sum, d.SumVersion = fmt.Sprintf("%x", plandelta.NewDigest(new).Sum), plandelta.SumVersion
	od := plandelta.NewDigest(old)
	b.Run("ApplyDigest", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := plandelta.ApplyDigest(old, od, d); err != nil {
				b.Fatal(err)
			}
		}
	})
}
