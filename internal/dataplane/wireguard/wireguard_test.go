package wireguard

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/backend"
	"github.com/fednet/fednet/internal/dataplane/tunnel"
	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/probe"
)

func newDriver(t *testing.T, priv plan.Key) *Driver {
	t.Helper()
	d, err := New(Config{PrivateKey: priv})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

var (
	priv = plan.Key{1, 2, 3}
	keyB = plan.Key{0xb0}
	tun  = plan.Tunnel{Backend: backend.WireGuard, Name: "fed0", ListenPort: 51820, Address: netip.MustParsePrefix("10.255.0.1/16")}
)

func peer(name string, key plan.Key, allowed ...string) plan.Peer {
	p := plan.Peer{Gateway: name, Backend: backend.WireGuard, WireGuard: plan.WireGuardPeer{PublicKey: key}}
	for _, a := range allowed {
		p.AllowedIPs = append(p.AllowedIPs, netip.MustParsePrefix(a))
	}
	return p
}

// changes renders ops.
func changes(ops []tunnel.Op) string {
	var b strings.Builder
	for _, o := range ops {
		b.WriteString(string(o.Change()) + "\n")
	}
	return b.String()
}

// apply applies the diff to s and returns it.
func apply(s tunnel.State, d tunnel.Diff) tunnel.State {
	for _, o := range append(d.Setup, d.Peers...) {
		o.Apply(&s)
	}
	return s
}

func TestDiffFromNothingAndBack(t *testing.T) {
	d := newDriver(t, priv)
	peers := []plan.Peer{peer("b", keyB, "10.2.0.0/24", "10.255.0.2/32"), peer("c", plan.Key{})}
	diff := d.Diff(tunnel.State{}, tun, peers)
	want := "ip link add fed0 type wireguard && ip link set fed0 alias fednet-tunnel:wireguard\n" +
		"wg set fed0 listen-port 51820 private-key (set)\n"
	if got := changes(diff.Setup); got != want {
		t.Errorf("setup:\n%swant:\n%s", got, want)
	}
	if got, want := changes(diff.Peers), "wg set fed0 peer "+keyB.String()+" allowed-ips 10.2.0.0/24,10.255.0.2/32\n"; got != want {
		t.Errorf("peers (c has no key):\n%swant:\n%s", got, want)
	}
	s := apply(tunnel.State{}, diff)
	if s.Link == nil || s.Link.Alias != tunnel.Mark(backend.WireGuard) || s.Link.MTU != DefaultMTU || device(s).PublicKey != d.PublicKey() {
		t.Errorf("state after the diff: %+v %v", s.Link, s.Device)
	}
	if again := d.Diff(s, tun, peers); len(again.Setup)+len(again.Peers) != 0 {
		t.Errorf("second diff:\n%s%s", changes(again.Setup), changes(again.Peers))
	}
	if got := changes(d.Down(s)); got != "ip link del fed0\n" {
		t.Errorf("down: %s", got)
	}
}

func TestDiffRecreates(t *testing.T) {
	d, err := New(Config{PrivateKey: priv, Mode: Userspace})
	if err != nil {
		t.Fatal(err)
	}
	kernel := tunnel.State{Link: &tunnel.Interface{Name: "fed0", Kind: KindKernel}, Device: &Device{PublicKey: d.PublicKey(), ListenPort: 51820}}
	orphan := tunnel.State{Link: &tunnel.Interface{Name: "fed0", Kind: KindUserspace}}
	for name, s := range map[string]tunnel.State{"kernel link in userspace mode": kernel, "TUN without a device": orphan} {
		got := changes(d.Diff(s, tun, nil).Setup)
		if !strings.HasPrefix(got, "ip link del fed0\nfednet wgdev fed0 && ip link set fed0 alias fednet-tunnel:wireguard\n") {
			t.Errorf("%s: setup:\n%s", name, got)
		}
	}
}

func TestAdopt(t *testing.T) {
	d := newDriver(t, priv)
	link := func(kind string) *tunnel.Interface { return &tunnel.Interface{Name: "fed0", Kind: kind} }
	for _, tc := range []struct {
		name string
		s    tunnel.State
		want bool
	}{
		{"our key", tunnel.State{Link: link(KindKernel), Device: &Device{PublicKey: d.PublicKey()}}, true},
		{"our key, userspace", tunnel.State{Link: link(KindUserspace), Device: &Device{PublicKey: d.PublicKey()}}, true},
		{"another key", tunnel.State{Link: link(KindKernel), Device: &Device{PublicKey: keyB}}, false},
		{"no key", tunnel.State{Link: link(KindKernel), Device: &Device{}}, false},
		{"no device", tunnel.State{Link: link(KindUserspace)}, false},
		{"a veth", tunnel.State{Link: link("veth"), Device: &Device{PublicKey: d.PublicKey()}}, false},
	} {
		if got := d.Adopt(tc.s); got != tc.want {
			t.Errorf("%s: Adopt = %v, want %v", tc.name, got, tc.want)
		}
	}
	if newDriver(t, plan.Key{}).Adopt(tunnel.State{Link: link(KindKernel), Device: &Device{}}) {
		t.Error("a driver without a key adopted a device without one")
	}
}

func TestCheck(t *testing.T) {
	bad := peer("b", keyB)
	bad.WireGuard.PersistentKeepalive = 70000
	bad.Endpoint = "192.0.2.2"
	errs := newDriver(t, priv).Check(tun, []plan.Peer{bad})
	if len(errs) != 2 || !strings.Contains(errs[0].Error(), "wireguard.persistentKeepalive 70000") || !strings.Contains(errs[1].Error(), `endpoint "192.0.2.2"`) {
		t.Errorf("Check = %v", errs)
	}
	errs = newDriver(t, plan.Key{}).Check(tun, nil)
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "no private key") {
		t.Errorf("Check without a key = %v", errs)
	}
}

func TestStatus(t *testing.T) {
	d := newDriver(t, priv)
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	keyC := plan.Key{0xc0}
	s := tunnel.State{Link: &tunnel.Interface{Name: "fed0", Kind: KindKernel}, Device: &Device{Peers: []Peer{
		{PublicKey: keyB, Endpoint: "192.0.2.2:51820", LastHandshake: now.Add(-10 * time.Second), RxBytes: 5, TxBytes: 7},
		{PublicKey: keyC, LastHandshake: now.Add(-EstablishedWithin)},
	}}}
	b := peer("b", keyB)
	c := peer("c", keyC)
	c.Endpoint = "192.0.2.3:51820"
	got := d.Status(s, []plan.Peer{b, c, peer("d", plan.Key{}), peer("e", plan.Key{0xe0})}, now)
	if len(got) != 3 {
		t.Fatalf("Status = %+v, want b, c and e (d has no key)", got)
	}
	if g := got[0]; g.Peer != "b" || !g.Established || g.Endpoint != "192.0.2.2:51820" || g.RxBytes != 5 || g.TxBytes != 7 || g.Backend != backend.WireGuard {
		t.Errorf("b: %+v", g)
	}
	if g := got[1]; g.Peer != "c" || g.Established || g.Endpoint != "192.0.2.3:51820" {
		t.Errorf("c, whose handshake is %v old: %+v", EstablishedWithin, g)
	}
	if g := got[2]; g.Peer != "e" || g.Established || !g.LastHandshake.IsZero() {
		t.Errorf("e, not on the device: %+v", g)
	}
	if len(d.Status(tunnel.State{}, []plan.Peer{b}, now)) != 1 {
		t.Error("a missing device hides the links")
	}
}

// The manager judges reports of agents from before tunnel drivers by the
// same rule.
func TestEstablishedIsTheManagersFallback(t *testing.T) {
	if EstablishedWithin != probe.HandshakeWithin {
		t.Errorf("EstablishedWithin %v, probe.HandshakeWithin %v", EstablishedWithin, probe.HandshakeWithin)
	}
}

func TestParseMode(t *testing.T) {
	for _, m := range []Mode{Auto, Kernel, Userspace} {
		got, err := ParseMode(m.String())
		if err != nil || got != m {
			t.Errorf("ParseMode(%q) = %v, %v", m, got, err)
		}
	}
	if _, err := ParseMode("bpf"); err == nil {
		t.Error("ParseMode(bpf) = nil error")
	}
	if _, err := New(Config{Mode: Mode(7)}); err == nil {
		t.Error("New with mode 7 = nil error")
	}
}
