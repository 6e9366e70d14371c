package ipsec

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/backend"
	"github.com/fednet/fednet/internal/dataplane/tunnel"
	"github.com/fednet/fednet/internal/plan"
)

func peer(name string, initiator bool, allowed ...string) plan.Peer {
	p := plan.Peer{Gateway: name, Backend: backend.IPsec, Endpoint: "192.0.2.2:51820"}
	for _, a := range allowed {
		p.AllowedIPs = append(p.AllowedIPs, netip.MustParsePrefix(a))
	}
	p.IPsec = &plan.IPsecPeer{Initiator: initiator, LocalID: "a", RemoteID: name, RemoteAddress: "192.0.2.2",
		LocalTS: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}, IKE: []string{"aes256gcm16-prfsha384-curve25519"},
		ESP: []string{"aes256gcm16-curve25519"}, PSKFile: "/etc/fednet/ipsec.psk", DPDSeconds: 10, RekeySeconds: 3600}
	return p
}

func apply(s *tunnel.State, d tunnel.Diff) {
	for _, o := range append(d.Setup, d.Peers...) {
		o.Apply(s)
	}
}

// Diff: a fresh tunnel gets its interface and one connection per peer; the
// same plan again changes nothing; a changed peer is reloaded, a removed
// one unloaded; Down unloads and removes.
func TestDiff(t *testing.T) {
	d := New(Config{})
	tun := plan.Tunnel{Backend: backend.IPsec, Name: "ipsec0"}
	b, c := peer("b", true, "10.2.0.0/24", "10.255.0.2/32"), peer("c", false, "10.3.0.0/24")
	var s tunnel.State
	diff := d.Diff(s, tun, []plan.Peer{b, c})
	if len(diff.Setup) != 1 || len(diff.Peers) != 2 {
		t.Fatalf("first diff: setup %v peers %v; want the interface and two connections", diff.Setup, diff.Peers)
	}
	apply(&s, diff)
	if got := s.Device.String(); !strings.Contains(got, "fednet-b remote 192.0.2.2 ts 10.2.0.0/24,10.255.0.2/32") || !strings.Contains(got, "fednet-c") {
		t.Errorf("device after the first diff:\n%s", got)
	}
	if again := d.Diff(s.Clone(), tun, []plan.Peer{b, c}); len(again.Setup)+len(again.Peers) != 0 {
		t.Errorf("the same plan again: %v %v; want nothing", again.Setup, again.Peers)
	}
	b2, ip := b, *b.IPsec
	ip.ESP = []string{"chacha20poly1305-curve25519"}
	b2.IPsec = &ip
	diff = d.Diff(s.Clone(), tun, []plan.Peer{b2})
	var changes []string
	for _, o := range diff.Peers {
		changes = append(changes, string(o.Change()))
	}
	if len(diff.Peers) != 2 || !strings.Contains(changes[0], "load-conn fednet-b") || !strings.Contains(changes[1], "unload-conn fednet-c") {
		t.Errorf("changed b, removed c: %q; want b reloaded and c unloaded", changes)
	}
	apply(&s, diff)
	if down := d.Down(s); len(down) != 2 || !strings.Contains(string(down[1].Change()), "ip link del ipsec0") {
		t.Errorf("down: %v; want fednet-b unloaded and the interface deleted", down)
	}
}

// Status: established only with an established IKE_SA and an installed
// CHILD_SA; otherwise the last reason the log gave.
func TestStatus(t *testing.T) {
	d := New(Config{})
	now := time.Unix(1000, 0)
	b, c := peer("b", true, "10.2.0.0/24"), peer("c", true, "10.3.0.0/24")
	dev := &Device{SAs: map[string]SA{
		"b": {State: "ESTABLISHED", Installed: true, Established: now.Add(-time.Minute), RxBytes: 10, TxBytes: 20, Remote: "192.0.2.2:4500"},
		"c": {State: "ESTABLISHED"},
	}}
	d.reasons.record("fednet-c", "received AUTHENTICATION_FAILED notify error")
	st := d.Status(tunnel.State{Device: dev}, []plan.Peer{b, c}, now)
	if len(st) != 2 || !st[0].Established || st[0].RxBytes != 10 || st[0].Endpoint != "192.0.2.2:4500" || st[0].Backend != backend.IPsec {
		t.Errorf("b: %+v; want established with its counters", st[0])
	}
	if st[1].Established || !strings.Contains(st[1].Reason, "authentication failed") {
		t.Errorf("c: %+v; want down, reason authentication failed", st[1])
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct{ msg, want string }{
		{"received AUTHENTICATION_FAILED notify error", "authentication failed"},
		{"tried 1 shared key for 'a' - 'b', but MAC mismatched", "authentication failed"},
		{"received NO_PROPOSAL_CHOSEN notify error", "proposal mismatch"},
		{"giving up after 3 retransmits", "peer unreachable: no answer to IKE after 3 retransmits"},
		{"IKE_SA fednet-b[1] established between 192.0.2.1[a]...192.0.2.2[b]", ""},
	} {
		got, known := Classify(tc.msg)
		if !known || !strings.HasPrefix(got, tc.want) || (tc.want == "") != (got == "") {
			t.Errorf("Classify(%q) = %q, %t; want %q...", tc.msg, got, known, tc.want)
		}
	}
	if _, known := Classify("sending packet: from 192.0.2.1[500]"); known {
		t.Error("an ordinary log line was classified")
	}
}

func TestCheck(t *testing.T) {
	d := New(Config{})
	bad := peer("b", true, "10.2.0.0/24")
	bad.IPsec.PSKFile = "relative.psk"
	noAddr := peer("c", true, "10.3.0.0/24")
	noAddr.IPsec.RemoteAddress = ""
	noBlock := peer("d", true, "10.5.0.0/24")
	noBlock.IPsec = nil
	errs := d.Check(plan.Tunnel{}, []plan.Peer{bad, noAddr, noBlock, peer("ok", false, "10.4.0.0/24")})
	if len(errs) != 3 || !strings.Contains(errs[0].Error(), "pskFile") || !strings.Contains(errs[1].Error(), "remoteAddress") ||
		!strings.Contains(errs[2].Error(), "peer d: backend ipsec without its ipsec block") {
		t.Errorf("Check: %v; want the relative PSK file, the initiator without address and the peer without a block", errs)
	}
}
