package dataplane

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/fednet/fednet/internal/plan"
)

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, x := range s {
		out = append(out, netip.MustParseAddr(x))
	}
	return out
}

// bridged returns plan A with the bridged network "lan" (VNI 100) on port
// eth1, flooding to b and c.
func bridged() plan.Gateway {
	p := planA()
	p.Bridges = []plan.Bridge{{
		Network: "lan", VNI: 100, Name: "fbr100", VXLAN: "fvx100", Port: "eth1",
		Local: netip.MustParseAddr("10.255.0.1"), Remotes: addrs("10.255.0.2", "10.255.0.3"),
		MTU: 1370, UDPPort: 4789,
	}}
	return p
}

// twoBridged adds the network "lab" (VNI 200, port eth2) to bridged.
func twoBridged() plan.Gateway {
	p := bridged()
	p.Bridges = append(p.Bridges, plan.Bridge{
		Network: "lab", VNI: 200, Name: "fbr200", VXLAN: "fvx200", Port: "eth2",
		Local: netip.MustParseAddr("10.255.0.1"), Remotes: addrs("10.255.0.3"),
		MTU: 1370, UDPPort: 4789,
	})
	return p
}

// Steps of a bridged network's life; each changes one thing.
var bridgePlans = map[string]func() plan.Gateway{
	"1-add": bridged,
	"2-remotes": func() plan.Gateway { // c leaves, d joins
		p := bridged()
		p.Bridges[0].Remotes = addrs("10.255.0.2", "10.255.0.4")
		return p
	},
	"3-mtu": func() plan.Gateway {
		p := bridged()
		p.Bridges[0].MTU = 1330
		return p
	},
	"4-no-port": func() plan.Gateway {
		p := bridged()
		p.Bridges[0].Port = ""
		return p
	},
	"5-second": twoBridged,
	"6-vni": func() plan.Gateway { // lan's VNI changes: its VXLAN device is recreated
		p := bridged()
		p.Bridges[0].VNI = 101
		return p
	},
	"7-move-port": func() plan.Gateway { // eth1 moves from lan to lab, lan goes
		p := twoBridged()
		p.Bridges = p.Bridges[1:]
		p.Bridges[0].Port = "eth1"
		return p
	},
	"8-none": planA,
}

func TestFakeBridgeTransitions(t *testing.T) {
	f := NewFake()
	var b strings.Builder
	for _, name := range sortedKeys(bridgePlans) {
		fmt.Fprintf(&b, "== apply %s ==\n%s-- state --\n%s\n", name, render(mustApply(t, f, bridgePlans[name]())), f.State())
	}
	mustApply(t, f, bridgePlans["5-second"]())
	changes, err := f.Down(context.Background(), planA())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&b, "== apply 5-second, down ==\n%s-- state --\n%s", render(changes), f.State())
	golden(t, "bridges.golden", b.String())
	if s := f.State(); !s.IsEmpty() {
		t.Errorf("state after Down is not empty:\n%s", s)
	}
}

func TestFakeBridgeSamePlanTwiceAndRandomOrder(t *testing.T) {
	names := sortedKeys(bridgePlans)
	want := map[string]string{}
	for _, n := range names {
		f := NewFake()
		mustApply(t, f, bridgePlans[n]())
		if c := mustApply(t, f, bridgePlans[n]()); len(c) != 0 {
			t.Errorf("%s: second Apply made changes:\n%s", n, render(c))
		}
		want[n] = f.State().String()
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 50; i++ {
		seq := make([]string, 2+rng.IntN(6))
		for j := range seq {
			seq[j] = names[rng.IntN(len(names))]
		}
		f := NewFake()
		for _, n := range seq {
			mustApply(t, f, bridgePlans[n]())
			if c := mustApply(t, f, bridgePlans[n]()); len(c) != 0 {
				t.Errorf("sequence %v: applying %s again made changes:\n%s", seq, n, render(c))
			}
		}
		last := seq[len(seq)-1]
		if d := cmp.Diff(want[last], f.State().String()); d != "" {
			t.Errorf("sequence %v: state differs from applying %s alone (-want +got):\n%s", seq, last, d)
		}
	}
}

// Only all-zero entries fednet wants change; an existing device keeps its
// other entries (the fake has none) and the bridge is not recreated.
func TestFakeBridgeRemotesOnly(t *testing.T) {
	f := NewFake()
	mustApply(t, f, bridged())
	got := render(mustApply(t, f, bridgePlans["2-remotes"]()))
	want := "bridge fdb del 00:00:00:00:00:00 dev fvx100 dst 10.255.0.3\n" +
		"bridge fdb append 00:00:00:00:00:00 dev fvx100 dst 10.255.0.4\n"
	if got != want {
		t.Errorf("changes:\n%swant:\n%s", got, want)
	}
}

func TestFakeBridgeForeignName(t *testing.T) {
	f := NewFake()
	f.SetState(State{Foreign: []string{"fbr100"}})
	p := bridgePlans["5-second"]()
	changes, err := f.Apply(context.Background(), p)
	if err == nil || !strings.Contains(err.Error(), "interface fbr100 exists and is not fednet's") {
		t.Errorf("Apply = %v, want an error naming fbr100", err)
	}
	got := render(changes)
	if strings.Contains(got, "fbr100") || strings.Contains(got, "fvx100") || !strings.Contains(got, "ip link add fbr200") || !strings.Contains(got, "ip link add fed0") {
		t.Errorf("changes should apply everything but network lan:\n%s", got)
	}
}

func TestFakeBridgeStaleAndAlias(t *testing.T) {
	f := NewFake()
	mustApply(t, f, bridged())
	s := f.State()
	s.Bridges[0].Network = "old"
	s.Bridges[0].Ports = append(s.Bridges[0].Ports, "eth9")
	s.VXLANs = append(s.VXLANs, VXLANState{Name: "fvx999", Network: "gone", VNI: 999, Learning: true})
	f.SetState(s)
	got := render(mustApply(t, f, bridged()))
	want := "ip link del fvx999\n" +
		"ip link set eth9 nomaster\n" +
		"ip link set fbr100 alias fednet:lan\n"
	if got != want {
		t.Errorf("changes:\n%swant:\n%s", got, want)
	}
}

func TestValidateBridges(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*plan.Bridge)
		want   string
	}{
		{"name", func(b *plan.Bridge) { b.Name = "fednet-bridge-100" }, "bridges[0].name"},
		{"vxlan", func(b *plan.Bridge) { b.VXLAN = "" }, "bridges[0].vxlan"},
		{"port", func(b *plan.Bridge) { b.Port = "a/b" }, "bridges[0].port"},
		{"port is tunnel", func(b *plan.Bridge) { b.Port = "fed0" }, "interface fed0 is also interface.name"},
		{"same names", func(b *plan.Bridge) { b.VXLAN = b.Name }, "bridges[0].vxlan"},
		{"vni 0", func(b *plan.Bridge) { b.VNI = 0 }, "bridges[0].vni 0 is out of range 1-16777215"},
		{"vni big", func(b *plan.Bridge) { b.VNI = 1 << 24 }, "bridges[0].vni"},
		{"local", func(b *plan.Bridge) { b.Local = netip.Addr{} }, "bridges[0].local"},
		{"remote local", func(b *plan.Bridge) { b.Remotes = addrs("10.255.0.1") }, "is the local address"},
		{"remote invalid", func(b *plan.Bridge) { b.Remotes = []netip.Addr{{}} }, "bridges[0].remotes"},
		{"remote family", func(b *plan.Bridge) { b.Remotes = addrs("fd00::2") }, "family"},
		{"mtu", func(b *plan.Bridge) { b.MTU = 100 }, "bridges[0].mtu 100"},
		{"port number", func(b *plan.Bridge) { b.UDPPort = 0 }, "bridges[0].udpPort"},
		{"network", func(b *plan.Bridge) { b.Network = "" }, "bridges[0].network"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := bridged()
			tc.change(&p.Bridges[0])
			checkRejected(t, p, tc.want)
		})
	}
	t.Run("duplicate vni", func(t *testing.T) {
		p := bridgePlans["5-second"]()
		p.Bridges[1].VNI = 100
		checkRejected(t, p, "bridges[1].vni 100 is also the VNI of bridges[0]")
	})
	t.Run("duplicate name", func(t *testing.T) {
		p := bridgePlans["5-second"]()
		p.Bridges[1].Name = "fvx100"
		checkRejected(t, p, "bridges[1].name")
	})
}

func checkRejected(t *testing.T, p plan.Gateway, want string) {
	t.Helper()
	f := NewFake()
	changes, err := f.Apply(context.Background(), p)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Apply = %v, want an error mentioning %q", err, want)
	}
	if len(changes) != 0 || !f.State().IsEmpty() {
		t.Errorf("an invalid plan changed the machine: %q", changes)
	}
}

func sortedKeys(m map[string]func() plan.Gateway) []string {
	var names []string
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
