package backend

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestBuiltIn(t *testing.T) {
	wg, ok := Lookup(WireGuard)
	if !ok {
		t.Fatal("WireGuard is not in the table")
	}
	if got := wg.Bytes(); got != 40 {
		t.Errorf("WireGuard overhead = %d, want 40 (UDP 8 + WireGuard 32)", got)
	}
	if got := wg.Public(51820); len(got) != 1 || got[0] != (Port{UDP, 51820}) {
		t.Errorf("WireGuard public ports = %v, want udp/51820", got)
	}
	if _, ok := Lookup("openvpn"); ok {
		t.Error("an unknown backend was found")
	}
	if Default != WireGuard {
		t.Errorf("default backend %s, want wireguard", Default)
	}
}

func TestRegister(t *testing.T) {
	fake := Info{Name: "fake", Overhead: []Term{{"fake", 16}}, Public: func(p int) []Port { return []Port{{TCP, p}} }}
	if err := Register(fake); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Unregister("fake") })
	if got, ok := Lookup("fake"); !ok || got.Bytes() != 16 {
		t.Errorf("Lookup(fake) = %+v, %v", got, ok)
	}
	if got := List(); got != "fake, ipsec, wireguard" {
		t.Errorf("List() = %q, want sorted names", got)
	}
	for _, bad := range []Info{fake, {Name: "nopublic"}, {Public: fake.Public}} {
		if err := Register(bad); err == nil {
			t.Errorf("Register(%+v) succeeded", bad)
		}
	}
	Unregister(WireGuard)
	if _, ok := Lookup(WireGuard); !ok {
		t.Error("Unregister removed a built-in backend")
	}
}

func TestProtocolText(t *testing.T) {
	b, err := json.Marshal([]Port{{UDP, 51820}, {ESP, 0}, {TCP, 443}})
	if err != nil {
		t.Fatal(err)
	}
	if want := `[{"protocol":"udp","port":51820},{"protocol":"esp"},{"protocol":"tcp","port":443}]`; string(b) != want {
		t.Errorf("JSON = %s, want %s", b, want)
	}
	var back []Port
	if err := json.Unmarshal(b, &back); err != nil || len(back) != 3 || back[1].Protocol != ESP {
		t.Errorf("round trip = %v, %v", back, err)
	}
	if err := json.Unmarshal([]byte(`[{"protocol":"sctp"}]`), &back); err == nil || !strings.Contains(err.Error(), "want udp, tcp or esp") {
		t.Errorf("unknown protocol: %v", err)
	}
	if _, err := json.Marshal(Port{Protocol: 99}); err == nil {
		t.Error("an unknown protocol was marshalled")
	}
}
