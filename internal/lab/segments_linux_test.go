//go:build linux

package lab

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestLabSegments(t *testing.T) {
	needRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	name := testName("s")
	cfg := segmentsConfig(name)
	l, err := Up(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Down(context.Background()) })

	// reaches pings a from n and reports whether a reply came back.
	reaches := func(t *testing.T, n *Node, a netip.Addr) bool {
		t.Helper()
		r, err := Ping(ctx, n, a, 2, 20*time.Millisecond)
		if err != nil {
			t.Fatalf("%s -> %s: %v", n, a, err)
		}
		return r.Received > 0
	}
	// setMAC gives a host's eth0 a MAC the switch never saw.
	setMAC := func(t *testing.T, h *Node, mac string) {
		t.Helper()
		if _, err := h.Run(ctx, "ip", "link", "set", HostInterface, "address", mac); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("FabricDropsUnknownMACs", func(t *testing.T) {
		aws := l.Gateway("aws-gw")
		h1, h2 := l.Hosts("aws-eu")[0], l.Hosts("aws-eu")[1]
		setMAC(t, h1, "02:00:00:00:aa:01")
		if reaches(t, h1, aws.LAN.Addr()) {
			t.Errorf("%s reached %s with a MAC the fabric does not know", h1, aws)
		}
		if !reaches(t, h2, aws.LAN.Addr()) {
			t.Errorf("%s (own MAC) did not reach %s", h2, aws)
		}
		// The control: without the fabric option a changed MAC works.
		onprem, h := l.Gateway("onprem-gw"), l.Hosts("lab")[0]
		setMAC(t, h, "02:00:00:00:aa:02")
		if !reaches(t, h, onprem.LAN.Addr()) {
			t.Errorf("%s did not reach %s with a changed MAC on a plain switch", h, onprem)
		}
		// Bridged segments of a fabric site filter too.
		b1, b2 := l.BridgedHosts("l2", "aws-eu")[0], l.BridgedHosts("l2", "aws-eu")[1]
		if !reaches(t, b1, b2.LAN.Addr()) {
			t.Errorf("%s did not reach %s before its MAC changed", b1, b2)
		}
		setMAC(t, b2, "02:00:00:00:aa:03")
		if _, err := b1.Run(ctx, "ip", "neigh", "flush", "dev", HostInterface); err != nil {
			t.Fatal(err)
		}
		if reaches(t, b1, b2.LAN.Addr()) {
			t.Errorf("%s reached %s whose MAC the fabric does not know", b1, b2)
		}
	})

	t.Run("ExtraSegment", func(t *testing.T) {
		port, addr, ok := l.SegmentPort("azure-we", 2)
		if !ok {
			t.Fatal("no segment 2 on azure-we")
		}
		gw := l.Gateway("azure-gw")
		out, err := gw.Run(ctx, "ip", "-4", "-o", "addr", "show", "dev", port)
		if err != nil || !strings.Contains(out, "inet "+addr.String()) {
			t.Errorf("%s on %s: %q, %v; want %s", port, gw, out, err, addr)
		}
		for _, h := range l.SegmentHosts("azure-we", 2) {
			if !reaches(t, h, addr.Addr()) {
				t.Errorf("%s did not reach %s at %s", h, gw, addr.Addr())
			}
			out, err := h.Run(ctx, "ip", "-4", "-o", "route", "show", "table", "main")
			if err != nil || !strings.Contains(out, "10.0.0.0/8 via 10.2.1.254 dev eth0") {
				t.Errorf("routes of %s: %q, %v", h, out, err)
			}
		}
	})

	t.Run("BridgedNetwork", func(t *testing.T) {
		subnet := cfg.Bridged[0].Subnet
		azure := l.BridgedHosts("l2", "azure-we")
		for _, h := range append(l.BridgedHosts("l2", "aws-eu"), azure...) {
			if !subnet.Contains(h.LAN.Addr()) || h.LAN.Bits() != subnet.Bits() {
				t.Errorf("%s: address %s not in %s", h, h.LAN, subnet)
			}
		}
		if !reaches(t, azure[0], azure[1].LAN.Addr()) {
			t.Errorf("%s did not reach %s on the same site's segment", azure[0], azure[1])
		}
		if reaches(t, azure[0], l.BridgedHosts("l2", "aws-eu")[0].LAN.Addr()) {
			t.Errorf("%s reached another site's host with no bridging configured", azure[0])
		}
		for _, gw := range []string{"aws-gw", "azure-gw"} {
			port := l.BridgedPort("l2", gw)
			out, err := l.Gateway(gw).Run(ctx, "ip", "-o", "addr", "show", "dev", port)
			if err != nil || strings.Contains(out, "inet") {
				t.Errorf("port %q of %s: %q, %v; want it without addresses", port, gw, out, err)
			}
		}
	})

	t.Run("StatusAndDown", func(t *testing.T) {
		st, err := Status(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, ns := range st.Namespaces {
			got = append(got, ns.Name)
		}
		var want []string
		for _, n := range l.Nodes() {
			want = append(want, n.Namespace)
		}
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("Status lists %v, want %v", got, want)
		}
		if err := l.Down(ctx); err != nil {
			t.Fatal(err)
		}
		if st, err := Status(ctx, name); err != nil || st.Exists() {
			t.Errorf("after Down: %v\n%s", err, st)
		}
	})
}
