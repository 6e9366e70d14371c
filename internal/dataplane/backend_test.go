package dataplane_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/backend"
	"github.com/fednet/fednet/internal/dataplane"
	"github.com/fednet/fednet/internal/dataplane/tunnel"
	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/spec"
)

// A second tunnel backend is a package of its own (here: fakeDriver and
// its ops, this file), an entry in package backend's table (Register) and
// a line in the data plane's registry (NewFake's drivers; Config.Drivers
// on Linux). The spec names it in overlay.backend; nothing else in spec,
// plan or dataplane changes.

// fakeBackend is the backend this test adds.
const fakeBackend backend.Name = "fake"

// fakeDriver is a tunnel driver whose device is a list of peers.
type fakeDriver struct{}

// fakeDevice is fakeDriver's device: the peers it was given.
type fakeDevice struct{ peers []string }

func (d *fakeDevice) Clone() tunnel.Device { return &fakeDevice{peers: slices.Clone(d.peers)} }
func (d *fakeDevice) String() string {
	return "fake peers " + strings.Join(d.peers, ",") + "\n"
}

// fakeCreate creates the interface; fakePeers gives the device its peers.
type (
	fakeCreate struct{ name string }
	fakePeers  struct {
		name  string
		peers []string
	}
)

func (o fakeCreate) Change() tunnel.Change { return tunnel.Change("fake create " + o.name) }
func (o fakeCreate) Target() tunnel.Target { return tunnel.Target{Interface: o.name, Creates: true} }
func (o fakeCreate) Apply(s *tunnel.State) {
	s.Link = &tunnel.Interface{Name: o.name, Kind: "fake", Alias: tunnel.Mark(fakeBackend), MTU: 1500}
	s.Device = &fakeDevice{}
}
func (o fakePeers) Change() tunnel.Change {
	return tunnel.Change("fake peers " + o.name + " " + strings.Join(o.peers, ","))
}
func (o fakePeers) Target() tunnel.Target { return tunnel.Target{Interface: o.name} }
func (o fakePeers) Apply(s *tunnel.State) { s.Device.(*fakeDevice).peers = slices.Clone(o.peers) }

func (fakeDriver) Backend() backend.Name                  { return fakeBackend }
func (fakeDriver) Check(plan.Tunnel, []plan.Peer) []error { return nil }
func (fakeDriver) Configured(plan.Peer) bool              { return true }
func (fakeDriver) Adopt(tunnel.State) bool                { return false }
func (fakeDriver) Down(cur tunnel.State) []tunnel.Op      { return nil }
func (fakeDriver) Diff(cur tunnel.State, t plan.Tunnel, peers []plan.Peer) tunnel.Diff {
	var d tunnel.Diff
	if cur.Link == nil {
		d.Setup = append(d.Setup, fakeCreate{t.Name})
		cur = tunnel.State{Device: &fakeDevice{}}
	}
	var want []string
	for _, p := range peers {
		want = append(want, fmt.Sprintf("%s=%s", p.Gateway, tunnel.Join(p.AllowedIPs)))
	}
	if !slices.Equal(cur.Device.(*fakeDevice).peers, want) {
		d.Peers = append(d.Peers, fakePeers{t.Name, want})
	}
	return d
}

// Status: a peer on the device is established.
func (fakeDriver) Status(cur tunnel.State, peers []plan.Peer, now time.Time) []tunnel.LinkState {
	var out []tunnel.LinkState
	for _, p := range peers {
		l := tunnel.LinkState{Peer: p.Gateway, Backend: fakeBackend}
		if dev, ok := cur.Device.(*fakeDevice); ok {
			l.Established = slices.ContainsFunc(dev.peers, func(s string) bool { return strings.HasPrefix(s, p.Gateway+"=") })
		}
		out = append(out, l)
	}
	return out
}

func TestSecondBackend(t *testing.T) {
	err := backend.Register(backend.Info{Name: fakeBackend, Overhead: []backend.Term{{Label: "fake", Bytes: 60}},
		Public: func(port int) []backend.Port { return []backend.Port{{Protocol: backend.TCP, Port: port}} }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { backend.Unregister(fakeBackend) })

	data, err := os.ReadFile("../../examples/three-sites.yaml")
	if err != nil {
		t.Fatal(err)
	}
	yaml := strings.Replace(string(data), "overlay:\n", "overlay:\n  backend: fake\n", 1)
	f, err := spec.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	plans, err := plan.Compute(f, plan.Inputs{})
	if err != nil {
		t.Fatal(err)
	}
	p := plans[0]
	if len(p.Tunnels) != 1 || p.Tunnels[0].Backend != fakeBackend || len(p.Peers) != 2 || p.Peers[0].Backend != fakeBackend {
		t.Fatalf("plan of %s: tunnels %+v peers %+v; want the fake backend's", p.Name, p.Tunnels, p.Peers)
	}

	dp := dataplane.NewFake(fakeDriver{})
	changes, err := dp.Apply(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("changes:\n%s", strings.Join(func() []string {
		var s []string
		for _, c := range changes {
			s = append(s, string(c))
		}
		return s
	}(), "\n"))
	st := dp.State()
	tun, ok := st.Tunnel(p.Tunnels[0].Name)
	if !ok {
		t.Fatalf("no tunnel %s:\n%s", p.Tunnels[0].Name, st)
	}
	// The driver got the tunnel and every peer with its allowed IPs.
	var want []string
	for _, peer := range p.Peers {
		want = append(want, peer.Gateway+"="+tunnel.Join(peer.AllowedIPs))
	}
	if dev, ok := tun.Device.(*fakeDevice); !ok || !slices.Equal(dev.peers, want) || tun.Backend != fakeBackend || tun.Link.Kind != "fake" {
		t.Errorf("the fake driver's tunnel: %+v device %v; want peers %v", tun.Link, tun.Device, want)
	}
	// The core set the MTU from the fake backend's overhead, the address,
	// the routes and the firewall (which opens the backend's TCP port).
	if tun.Link.MTU != p.Tunnels[0].MTU || p.Tunnels[0].MTU != 1500-20-60 || !tun.Link.Up ||
		!slices.Equal(tun.Link.Addresses, []netip.Prefix{p.Tunnels[0].Address}) {
		t.Errorf("tunnel link %+v; want MTU %d (1500 - IPv4 20 - fake 60), up, address %s", tun.Link, p.Tunnels[0].MTU, p.Tunnels[0].Address)
	}
	if len(st.Routes) != len(p.Routes) || len(p.Routes) == 0 {
		t.Errorf("routes %v; want the plan's %v", st.Routes, p.Routes)
	}
	for i, r := range p.Routes {
		if i < len(st.Routes) && (st.Routes[i].Destination != r.Destination || st.Routes[i].Device != p.Tunnels[0].Name) {
			t.Errorf("route %d = %+v, want %s dev %s", i, st.Routes[i], r.Destination, p.Tunnels[0].Name)
		}
	}
	fw, err := dataplane.RenderFirewall(p.Firewall)
	if err != nil || st.Table == nil || !strings.Contains(fw, "tcp dport 51820 accept") || strings.Contains(fw, "udp dport 51820") {
		t.Errorf("firewall (table %+v, %v):\n%s\nwant TCP 51820 open, UDP not", st.Table, err, fw)
	}
	links, err := dp.Status(context.Background(), p)
	if err != nil || len(links) != 2 || !links[0].Established || links[0].Backend != fakeBackend {
		t.Errorf("Status = %+v, %v; want both links established by the fake driver", links, err)
	}
	if again, err := dp.Apply(context.Background(), p); err != nil || len(again) != 0 {
		t.Errorf("second Apply = %q, %v", again, err)
	}

	// Without the driver the plan is refused whole.
	_, err = dataplane.NewFake().Apply(context.Background(), p)
	if err == nil || !strings.Contains(err.Error(), `tunnels[0].backend "fake" has no tunnel driver`) {
		t.Errorf("Apply without the driver = %v", err)
	}
}
