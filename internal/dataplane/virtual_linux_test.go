package dataplane

import (
	"bytes"
	"net"
	"net/netip"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/fednet/fednet/internal/await"
	"github.com/fednet/fednet/internal/plan"
)

// TestVirtualAddressMoves: two gateways and a host share a segment (a
// bridge in the test's namespace, each in its own namespace). The active
// gateway holds the site's virtual address and the host reaches it; when
// the other gateway becomes active, the address moves, the host's neighbor
// entry for it follows the gratuitous ARP without the host asking, and the
// host's pings to it go on being answered.
func TestVirtualAddressMoves(t *testing.T) {
	testVirtualMove(t, virtualFamily{
		netlink: netlink.FAMILY_V4, site: "10.9.0.0/24", virtual: "10.9.0.254", gw1: "10.9.0.253", gw2: "10.9.0.252", host: "10.9.0.10",
		announce: "gratuitous ARP",
	})
}

// TestVirtualAddressMovesIPv6: the same with an IPv6 virtual address,
// which the gateway taking it announces with an unsolicited neighbor
// advertisement.
func TestVirtualAddressMovesIPv6(t *testing.T) {
	testVirtualMove(t, virtualFamily{
		netlink: netlink.FAMILY_V6, site: "fd00:9::/64", virtual: "fd00:9::fe", gw1: "fd00:9::fd", gw2: "fd00:9::fc", host: "fd00:9::10",
		announce: "unsolicited neighbor advertisement",
	})
}

// virtualFamily are the addresses of a virtual address test in one IP
// version, and how the taking gateway announces the address.
type virtualFamily struct {
	netlink                       int
	site, virtual, gw1, gw2, host string
	announce                      string
}

func testVirtualMove(t *testing.T, fam virtualFamily) {
	if !inner(t) {
		return
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	defer netns.Set(orig)
	in := func(ns netns.NsHandle, f func()) {
		t.Helper()
		if err := netns.Set(ns); err != nil {
			t.Fatal(err)
		}
		defer netns.Set(orig)
		f()
	}
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0"}}
	if err := netlink.LinkAdd(br); err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetUp(br); err != nil {
		t.Fatal(err)
	}
	site := netip.MustParsePrefix(fam.site)
	virtual := netip.PrefixFrom(netip.MustParseAddr(fam.virtual), site.Bits())
	// macOf reads the LAN interface's address when asked: udev may set
	// another one shortly after the interface appears.
	macOf := func(ns netns.NsHandle) func() net.HardwareAddr {
		return func() net.HardwareAddr {
			var mac net.HardwareAddr
			in(ns, func() {
				lan, err := netlink.LinkByName("lan")
				if err != nil {
					t.Fatal(err)
				}
				mac = lan.Attrs().HardwareAddr
			})
			return mac
		}
	}
	node := func(name string, addr netip.Addr) (netns.NsHandle, func() net.HardwareAddr) {
		ns, err := netns.New() // switches this thread into it
		if err != nil {
			t.Fatal(err)
		}
		if err := netns.Set(orig); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ns.Close() })
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "p-" + name, MasterIndex: br.Index}, PeerName: "lan", PeerNamespace: netlink.NsFd(ns)}
		if err := netlink.LinkAdd(veth); err != nil {
			t.Fatal(err)
		}
		if err := netlink.LinkSetUp(veth); err != nil {
			t.Fatal(err)
		}
		in(ns, func() {
			lan, err := netlink.LinkByName("lan")
			if err != nil {
				t.Fatal(err)
			}
			a := &netlink.Addr{IPNet: &net.IPNet{IP: addr.AsSlice(), Mask: net.CIDRMask(site.Bits(), addr.BitLen())}}
			if addr.Is6() {
				a.Flags = unix.IFA_F_NODAD // usable at once
			}
			if err := netlink.AddrAdd(lan, a); err != nil {
				t.Fatal(err)
			}
			if err := netlink.LinkSetUp(lan); err != nil {
				t.Fatal(err)
			}
		})
		return ns, macOf(ns)
	}
	gw1, mac1 := node("gw1", netip.MustParseAddr(fam.gw1))
	gw2, mac2 := node("gw2", netip.MustParseAddr(fam.gw2))
	host, _ := node("host", netip.MustParseAddr(fam.host))
	lanPlan := func(own string, active bool) plan.Gateway {
		return plan.Gateway{LAN: plan.LAN{Address: netip.PrefixFrom(netip.MustParseAddr(own), site.Bits()), Virtual: virtual, Active: active}}
	}
	hold := func(ns netns.NsHandle, p plan.Gateway, want string) {
		t.Helper()
		in(ns, func() {
			changes, err := syncVirtual(p)
			if err != nil {
				t.Fatal(err)
			}
			if got := render(changes); !strings.Contains(got, want) {
				t.Errorf("syncVirtual(active %v) changes:\n%swant %q", p.LAN.Active, got, want)
			}
			if again, err := syncVirtual(p); err != nil || len(again) != 0 {
				t.Errorf("syncVirtual again = %q, %v; want no changes", again, err)
			}
		})
	}
	ping := func(count string) {
		t.Helper()
		in(host, func() {
			if out, err := exec.Command("ping", "-c", count, "-i", "0.2", "-W", "1", virtual.Addr().String()).CombinedOutput(); err != nil {
				t.Fatalf("ping %s from the host: %v\n%s", virtual.Addr(), err, out)
			}
		})
	}
	neighbor := func() net.HardwareAddr {
		var mac net.HardwareAddr
		in(host, func() {
			ns, err := netlink.NeighList(0, fam.netlink)
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range ns {
				if n.IP.Equal(virtual.Addr().AsSlice()) {
					mac = n.HardwareAddr
				}
			}
		})
		return mac
	}

	hold(gw1, lanPlan(fam.gw1, true), "ip address add "+virtual.String()+" dev lan")
	hold(gw2, lanPlan(fam.gw2, false), "")
	ping("3")
	if got := neighbor(); !bytes.Equal(got, mac1()) {
		t.Fatalf("the host's neighbor entry for %s is %s, want gw1's %s", virtual.Addr(), got, mac1())
	}

	// The move: gw1 releases, gw2 takes and announces. The host sends
	// nothing meanwhile: only the announcement can change its entry.
	hold(gw1, lanPlan(fam.gw1, false), "ip address del "+virtual.String()+" dev lan")
	hold(gw2, lanPlan(fam.gw2, true), fam.announce)
	await.Until(t, 5*time.Second, func() (bool, string) {
		got := neighbor()
		return bytes.Equal(got, mac2()), "the host's neighbor entry for the virtual address is " + got.String() + ", not gw2's " + mac2().String() + " (the " + fam.announce + " did not reach it)"
	})
	ping("3")
	if got := neighbor(); !bytes.Equal(got, mac2()) {
		t.Errorf("after the pings the host's neighbor entry is %s, want gw2's %s (gw1 %s)", got, mac2(), mac1())
	}
	// Down releases it.
	in(gw2, func() {
		if _, err := releaseVirtual(lanPlan(fam.gw2, true)); err != nil {
			t.Fatal(err)
		}
		_, held, err := lanLink(netip.MustParseAddr(fam.gw2), virtual.Addr())
		if err != nil || held {
			t.Errorf("after releaseVirtual gw2 holds the address: %v, %v", held, err)
		}
	})
}
