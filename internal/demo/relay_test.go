package demo_test

import (
	"context"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/demo"
	"github.com/fednet/fednet/internal/lab"
	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/spec"
)

// partialMesh is three sites whose aws–azure link is disabled: the routed
// network apps and the bridged network lan (all three sites) relay through
// lab, and the bridged network lan2 (aws and azure only) relays through lab
// although lab is not a member.
const partialMesh = `apiVersion: fednet/v1
kind: Federation
name: partial
overlay: {supernet: 10.0.0.0/8, transit: 10.255.0.0/16}
sites:
  - name: aws-eu
    provider: aws
    gateways: [{name: aws-gw, endpoint: "198.51.100.10:51820", bridgePorts: {lan: b1, lan2: b2}}]
  - name: azure-we
    provider: azure
    gateways: [{name: azure-gw, endpoint: "203.0.113.20:51820", bridgePorts: {lan: b1, lan2: b2}}]
  - name: lab
    provider: onprem
    gateways: [{name: onprem-gw, endpoint: "198.51.100.30:51820", bridgePorts: {lan: b1}}]
networks:
  - {name: apps, id: 100, mode: routed, sites: [aws-eu, azure-we, lab]}
  - {name: lan, id: 200, mode: bridged, subnet: 192.168.50.0/24, sites: [aws-eu, azure-we, lab]}
  - {name: lan2, id: 300, mode: bridged, subnet: 192.168.60.0/24, sites: [aws-eu, azure-we]}
topology:
  links:
    - {between: [aws-eu, azure-we], disabled: true}
lab:
  hostsPerSite: 1
`

// TestPartialMesh disables the link between two sites and checks that
// their traffic flows through the third: routed packets take one more
// router hop (the relay gateway), bridged frames cross the relay's bridge,
// for a network the relay is a member of and for one it is not, and a
// broadcast reaches each far segment exactly once (a capture there counts
// duplicate packets: zero), while the relay-only site sees none of lan2.
func TestPartialMesh(t *testing.T) {
	needRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	f, err := spec.Parse([]byte(partialMesh))
	if err != nil {
		t.Fatal(err)
	}
	gws, err := plan.Compute(f, plan.Inputs{})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range gws {
		if g.Name != "onprem-gw" {
			continue
		}
		if i := slices.IndexFunc(g.Bridges, func(b plan.Bridge) bool { return b.Network == "lan2" }); i < 0 || !g.Bridges[i].Relay || g.Bridges[i].Port != "" {
			t.Fatalf("onprem-gw should relay lan2 without a port: %+v", g.Bridges)
		}
	}

	const name = "e2epartial"
	lab.Down(ctx, name)
	l, err := lab.Up(ctx, lab.Config{Federation: f, Name: name, Bridged: []lab.BridgedNetwork{
		{Name: "lan", Subnet: netip.MustParsePrefix("192.168.50.0/24"), Sites: []string{"aws-eu", "azure-we", "lab"}},
		{Name: "lan2", Subnet: netip.MustParsePrefix("192.168.60.0/24"), Sites: []string{"aws-eu", "azure-we"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		l.Down(context.Background())
		noLab(t, name)
	})
	d, err := demo.Deploy(ctx, l, binary)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Stop(context.Background()) })

	pairs := demo.CrossSitePairs(l, l.Sites())
	for _, net := range []string{"lan", "lan2"} {
		for _, a := range l.Sites() {
			for _, b := range l.Sites() {
				for _, ha := range l.BridgedHosts(net, a) {
					for _, hb := range l.BridgedHosts(net, b) {
						if a != b {
							pairs = append(pairs, demo.Pair{From: ha, To: hb})
						}
					}
				}
			}
		}
	}
	wctx, wcancel := context.WithTimeout(ctx, 40*time.Second)
	defer wcancel()
	took, err := demo.WaitReachable(wctx, pairs, d.AgentsAlive)
	if err != nil {
		t.Fatalf("not every pair reaches the other: %v", err)
	}
	t.Logf("%d routed and bridged pairs reachable after %v", len(pairs), took.Round(time.Millisecond))

	// No tunnel between aws and azure: the relay carries them.
	out, err := l.Gateway("aws-gw").Run(ctx, "wg", "show", "fed0", "endpoints")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "203.0.113.20") {
		t.Errorf("aws-gw has a tunnel to azure-gw over the disabled link:\n%s", out)
	}

	// Routed: the relayed pair is one router further than the direct one.
	aws, azure, onprem := l.Hosts("aws-eu")[0], l.Hosts("azure-we")[0], l.Hosts("lab")[0]
	direct, relayed := replyTTL(t, ctx, aws, onprem), replyTTL(t, ctx, aws, azure)
	if relayed != direct-1 {
		t.Errorf("reply TTL from azure %d, from lab %d: want one hop more through the relay", relayed, direct)
	}

	// Bridged: broadcast pings from aws on both networks; captures on the
	// far segments count what arrives and what arrives twice.
	src := map[string]*lab.Node{"lan": l.BridgedHosts("lan", "aws-eu")[0], "lan2": l.BridgedHosts("lan2", "aws-eu")[0]}
	type watch struct {
		net, site string
		want      int // echo requests expected
		cap       *lab.Capture
	}
	const count = 20
	watches := []*watch{{net: "lan", site: "azure-we", want: count}, {net: "lan", site: "lab", want: count}, {net: "lan2", site: "azure-we", want: count}}
	for _, w := range watches {
		h := l.BridgedHosts(w.net, w.site)[0]
		c, err := lab.StartCaptureOn(ctx, l, h, lab.HostInterface, "icmp and src host "+src[w.net].LAN.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		w.cap = c
	}
	// A lan host at the relay-only site watches for any lan2 address.
	leak, err := lab.StartCaptureOn(ctx, l, l.BridgedHosts("lan", "lab")[0], lab.HostInterface, "net 192.168.60.0/24")
	if err != nil {
		t.Fatal(err)
	}
	for net, h := range src {
		bcast := "192.168.50.255"
		if net == "lan2" {
			bcast = "192.168.60.255"
		}
		// The answers do not matter (hosts ignore broadcast pings by
		// default); the requests are what floods.
		h.Run(ctx, "ping", "-b", "-n", "-q", "-c", "20", "-i", "0.05", "-W", "1", bcast)
	}
	for _, w := range watches {
		pcap, err := w.cap.Stop()
		if err != nil {
			t.Fatal(err)
		}
		r, err := lab.CountDuplicates(pcap)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s at %s: %d broadcast echo requests, %d duplicates", w.net, w.site, r.IPv4, r.Duplicates)
		if r.Duplicates != 0 {
			t.Errorf("%s at %s: %d duplicate packets (a loop or a double flood): %v", w.net, w.site, r.Duplicates, r.Samples)
		}
		if r.IPv4 != w.want {
			t.Errorf("%s at %s: %d of %d broadcast echo requests arrived", w.net, w.site, r.IPv4, w.want)
		}
	}
	pcap, err := leak.Stop()
	if err != nil {
		t.Fatal(err)
	}
	if r, err := lab.CountDuplicates(pcap); err != nil || r.Frames != 0 {
		t.Errorf("lan2 frames reached the relay-only site's lan segment: %+v, %v", r, err)
	}
}

var ttlRE = regexp.MustCompile(`ttl=(\d+)`)

// replyTTL pings to once and returns the TTL of the reply.
func replyTTL(t *testing.T, ctx context.Context, from, to *lab.Node) int {
	t.Helper()
	out, err := from.Run(ctx, "ping", "-n", "-c", "1", "-W", "2", to.LAN.Addr().String())
	m := ttlRE.FindStringSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("ping %s -> %s: %v\n%s", from, to, err, out)
	}
	ttl, err := strconv.Atoi(m[1])
	if err != nil {
		t.Fatalf("ping %s -> %s: ttl %q: %v", from, to, m[1], err)
	}
	return ttl
}
