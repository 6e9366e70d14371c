package demo

import "testing"

// TestLinkKind reads the WireGuard kind from ip's output as the gateways
// print it: the alias fednet sets on every tunnel interface names the
// backend, and must not make a userspace device look like the kernel's.
func TestLinkKind(t *testing.T) {
	for _, c := range []struct{ name, out, want string }{
		{"userspace with fednet's alias", `5: fed0: <POINTOPOINT,MULTICAST,NOARP,UP,LOWER_UP> mtu 1420 qdisc fq_codel state UNKNOWN mode DEFAULT group default qlen 500
    link/none  promiscuity 0  allmulti 0 minmtu 68 maxmtu 65535
    tun type tun pi off vnet_hdr on persist off addrgenmode eui64 numtxqueues 1 numrxqueues 1 gso_max_size 65536 gso_max_segs 65535
    alias fednet-tunnel:wireguard`, "userspace (wireguard-go)"},
		{"kernel", `5: fed0: <POINTOPOINT,NOARP,UP,LOWER_UP> mtu 1420 qdisc noqueue state UNKNOWN mode DEFAULT group default qlen 1000
    link/none  promiscuity 0  allmulti 0 minmtu 0 maxmtu 2147483552
    wireguard addrgenmode none numtxqueues 1 numrxqueues 1 gso_max_size 65536 gso_max_segs 65535
    alias fednet-tunnel:wireguard`, "kernel"},
		{"something else", `5: fed0: <BROADCAST> mtu 1500
    link/ether 02:00:00:00:00:01 brd ff:ff:ff:ff:ff:ff
    dummy addrgenmode eui64`, "unknown"},
	} {
		if got := linkKind(c.out); got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
	}
}
