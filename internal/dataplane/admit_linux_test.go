package dataplane

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/fednet/fednet/internal/backend"
	"github.com/fednet/fednet/internal/dataplane/nstest"
	"github.com/fednet/fednet/internal/dataplane/wireguard"
	"github.com/fednet/fednet/internal/plan"
)

// envAdmitPeer names, in the inner run of TestLinuxAdmit, the namespace
// the connections come from.
const envAdmitPeer = "FEDNET_TEST_ADMIT_PEER"

// admitPort is the TCP port TestLinuxAdmit admits (SSH's stand-in).
const admitPort = 2222

// TestLinuxAdmit: a plan's public-side admission (spec publicAllow) lets
// its protocol and port in from its sources, and from nowhere else, on a
// gateway whose firewall otherwise admits only the tunnel; `nft list`
// shows the rule. The gateway namespace a is joined to b, which has an
// admitted address (.2) and one that is not (.3).
func TestLinuxAdmit(t *testing.T) {
	if nstest.Inner(t) {
		admitInner(t)
		return
	}
	a, b := nstest.New(t), nstest.New(t)
	joinNamespaces(t, a, "veth-a", "192.168.77.1/24", b, "veth-b", "192.168.77.2/24")
	b.Exec(t, "ip", "address", "add", "192.168.77.3/24", "dev", "veth-b")
	a.Run(t, envWGDevChild+"=1", envAdmitPeer+"="+b.Name)
}

func admitInner(t *testing.T) {
	ctx := context.Background()
	d := newTestLinux(t, newPrivateKey(t), wireguard.Auto)
	p := planA()
	p.Firewall.Admit = []plan.Admission{{Protocol: backend.TCP, Port: admitPort, Sources: pfx("192.168.77.2/32", "2001:db8::/32")}}
	ln, err := net.Listen("tcp4", fmt.Sprintf(":%d", admitPort))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	// Before any plan, nothing filters: both sources connect (the test
	// itself works).
	for _, src := range []string{"192.168.77.2", "192.168.77.3"} {
		if err := dialFrom(t, src); err != nil {
			t.Fatalf("before the plan, from %s: %v", src, err)
		}
	}
	if _, err := d.Apply(ctx, p); err != nil {
		t.Fatal(err)
	}
	nft := sh(t, "nft list table inet fednet")
	for _, rule := range []string{
		fmt.Sprintf("ip saddr 192.168.77.2 tcp dport %d accept", admitPort),
		fmt.Sprintf("ip6 saddr 2001:db8::/32 tcp dport %d accept", admitPort),
	} {
		if !strings.Contains(nft, rule) {
			t.Errorf("nft list table inet fednet lacks %q:\n%s", rule, nft)
		}
	}
	if err := dialFrom(t, "192.168.77.2"); err != nil {
		t.Errorf("from the admitted 192.168.77.2: %v", err)
	}
	if err := dialFrom(t, "192.168.77.3"); err == nil {
		t.Errorf("from 192.168.77.3, which no admission lists: connected; want it dropped")
	}
	// Without the admission, the admitted source is dropped too.
	p.Firewall.Admit = nil
	if _, err := d.Apply(ctx, p); err != nil {
		t.Fatal(err)
	}
	if err := dialFrom(t, "192.168.77.2"); err == nil {
		t.Errorf("from 192.168.77.2 after the admission was removed: connected; want it dropped")
	}
}

// dialFrom connects to the gateway's admitPort from source src in the
// peer namespace; a dropped SYN times out after a second.
func dialFrom(t *testing.T, src string) error {
	t.Helper()
	peer, err := netns.GetFromName(os.Getenv(envAdmitPeer))
	if err != nil {
		t.Fatalf("opening the peer namespace: %v", err)
	}
	defer peer.Close()
	errc := make(chan error, 1)
	go func() {
		// This thread enters the peer namespace and is dropped when the
		// goroutine ends (it stays locked), so no other goroutine runs
		// in that namespace.
		runtime.LockOSThread()
		if err := netns.Set(peer); err != nil {
			errc <- fmt.Errorf("entering the peer namespace: %w", err)
			return
		}
		dl := net.Dialer{Timeout: time.Second, LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr(src), 0))}
		c, err := dl.Dial("tcp4", fmt.Sprintf("192.168.77.1:%d", admitPort))
		if err == nil {
			c.Close()
		}
		errc <- err
	}()
	return <-errc
}
