package plan_test

import (
	"encoding/json"
	"net/netip"
	"testing"

	"github.com/fednet/fednet/internal/plan"
)

// A plan carries what its agent needs to plan failures itself: after the
// JSON round trip an agent does, ForGateway over the plan's Local gives,
// for every gateway and under every single failure, the plan the manager
// computes from the spec with that failure as input.
func TestLocalRoundTrip(t *testing.T) {
	for _, name := range []string{"ha.yaml", "five-sites.yaml", "neighbors.yaml"} {
		t.Run(name, func(t *testing.T) {
			f := load(t, name)
			in := testKeys(f)
			in.Removed = map[string]bool{}
			in.Hosts = []plan.Host{}
			gws, err := plan.Compute(f, in)
			if err != nil {
				t.Fatal(err)
			}
			plan.AttachLocal(gws, f, in)
			for _, g := range gws {
				back, err := plan.Decode(g.JSON())
				if err != nil {
					t.Fatalf("%s: %v", g.Name, err)
				}
				if back.Local == nil {
					t.Fatalf("%s: the decoded plan has no Local", g.Name)
				}
				local := back.Local.Inputs()
				cases := map[string]plan.Inputs{"no failure": in}
				localCases := map[string]plan.Inputs{"no failure": local}
				for _, o := range gws {
					cases[o.Name+" down"] = in.WithGatewayDown(o.Name)
					localCases[o.Name+" down"] = local.WithGatewayDown(o.Name)
				}
				for _, a := range f.Sites {
					for _, b := range f.Sites {
						if a.Name < b.Name && f.LinkEnabled(a.Name, b.Name) {
							k := a.Name + "-" + b.Name + " down"
							cases[k] = in.WithLinkDown(a.Name, b.Name)
							localCases[k] = local.WithLinkDown(a.Name, b.Name)
						}
					}
				}
				for k, want := range cases {
					w, err := plan.ForGateway(f, want, g.Name)
					if err != nil {
						t.Fatal(err)
					}
					got, err := plan.ForGateway(back.Local.Federation, localCases[k], g.Name)
					if err != nil {
						t.Fatalf("%s, %s: planning from the plan's Local: %v", g.Name, k, err)
					}
					if !plan.Equal(w, got) {
						t.Errorf("%s, %s: the plan from the plan's Local differs from the manager's:\n%s\nwant\n%s", g.Name, k, got, w)
					}
				}
			}
		})
	}
}

// A Local leaves out the enrolled keys that are the spec's own (planning
// takes the spec's key where it has none) and keeps the others; planning
// from it gives the manager's plans.
func TestLocalLeavesOutSpecKeys(t *testing.T) {
	f := load(t, "five-sites.yaml")
	in := testKeys(f)
	in.PublicKeys["not-in-the-spec"] = plan.Key{9}
	same, other := map[string]bool{}, map[string]bool{}
	for i := range f.Sites {
		g := &f.Sites[i].Gateways[0]
		switch i % 3 {
		case 0: // enrolled with the spec's key
			g.PublicKey = in.PublicKeys[g.Name].String()
			same[g.Name] = true
		case 1: // enrolled with another key than the spec's
			g.PublicKey = plan.Key{byte(i + 1)}.String()
			other[g.Name] = true
		}
	}
	if len(same) == 0 || len(other) == 0 {
		t.Fatal("the spec has too few sites for the test")
	}
	l := plan.NewLocal(f, in)
	for name, k := range in.PublicKeys {
		if got, ok := l.PublicKeys[name]; same[name] == ok || ok && got != k {
			t.Errorf("%s: the Local's key is %v (held: %v), want it held %v", name, got, ok, !same[name])
		}
	}
	want, err := plan.Compute(f, in)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range want {
		got, err := plan.ForGateway(l.Federation, l.Inputs(), w.Name)
		if err != nil {
			t.Fatal(err)
		}
		if !plan.Equal(w, got) {
			t.Errorf("%s: the plan from the Local differs from the manager's", w.Name)
		}
	}
}

// Equal ignores Local and nothing else.
func TestEqual(t *testing.T) {
	f := load(t, "ha.yaml")
	gws, err := plan.Compute(f, testKeys(f))
	if err != nil {
		t.Fatal(err)
	}
	a := gws[0]
	b := a
	b.Local = plan.NewLocal(f, plan.Inputs{})
	if !plan.Equal(a, b) {
		t.Error("plans that differ only in Local are not Equal")
	}
	js, _ := json.Marshal(a)
	var c plan.Gateway
	if err := json.Unmarshal(js, &c); err != nil {
		t.Fatal(err)
	}
	c.LAN.Virtual = netip.MustParsePrefix("10.9.9.9/24")
	if plan.Equal(a, c) {
		t.Error("plans with different LANs are Equal")
	}
}
