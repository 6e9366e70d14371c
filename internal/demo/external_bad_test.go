package demo_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/demo"
	"github.com/fednet/fednet/internal/lab"
	"github.com/fednet/fednet/internal/spec"
)

// badExternalSpec has two external sites terminated by hq-gw: vpc, whose
// provider is configured with another proposal than fednet's (an
// operator's typo), and cloud, whose VPN gateway does not run.
const badExternalSpec = `apiVersion: fednet/v1
kind: Federation
name: extbad
sites:
  - name: hq
    provider: onprem
    gateways: [{name: hq-gw, endpoint: "198.51.100.10:51820"}]
  - name: branch
    provider: edge
    gateways: [{name: branch-gw, endpoint: "203.0.113.20:51820"}]
  - name: vpc
    provider: aws
    external: {profile: aws, endpoint: 198.51.100.71, psk: {file: /run/fednet-lab/e2eextbad/vpc.psk}, via: hq-gw}
  - name: cloud
    provider: openstack
    external: {profile: openstack-vpnaas, endpoint: 198.51.100.72, psk: {file: /run/fednet-lab/e2eextbad/cloud.psk}, via: hq-gw,
               ikeVersion: 2, ike: [aes256-sha256-modp2048], esp: [aes256-sha256-modp2048]}
networks:
  - {name: apps, id: 100, mode: routed, sites: [hq, branch, vpc]}
  - {name: ops, id: 101, mode: routed, sites: [hq, cloud]}
lab: {hostsPerSite: 1}
`

// TestExternalBadInput: a proposal mismatch with one external site and an
// unreachable VPN gateway of another. The terminating gateway's agent
// logs, per link, the reason naming the site; the manager shows both
// links down with that reason; the rest of the federation (WireGuard between hq and
// branch) carries traffic.
func TestExternalBadInput(t *testing.T) {
	needRoot(t)
	const name = "e2eextbad"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lab.Down(ctx, name)
	f, err := spec.Parse([]byte(badExternalSpec))
	if err != nil {
		t.Fatal(err)
	}
	l, err := lab.Up(ctx, lab.Config{Federation: f, Name: name, Manager: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Down(context.Background()) })
	if err := l.SaveSpec([]byte(badExternalSpec)); err != nil {
		t.Fatal(err)
	}
	// vpc's provider typed another DH group than the one printed.
	c, err := demo.StartProvider(ctx, l, binary, l.External("vpc"), func(conf string) string {
		return strings.ReplaceAll(conf, "ecp384", "modp3072")
	})
	if c != nil {
		t.Cleanup(func() { c.Process.Stop(context.Background()) })
	}
	if err != nil {
		t.Fatal(err)
	}
	// cloud's key is written (hq-gw reads it) but nothing answers at its
	// endpoint.
	if err := l.EnsurePSK("/run/fednet-lab/" + name + "/cloud.psk"); err != nil {
		t.Fatal(err)
	}
	m, err := demo.StartManaged(ctx, l, binary)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Stop(context.Background()) })
	if _, err := m.Apply(ctx, badExternalSpec); err != nil {
		t.Fatal(err)
	}
	for _, gw := range l.Gateways() {
		ch, err := demo.StartGatewayCharon(ctx, l, f, gw)
		if err != nil {
			t.Fatal(err)
		}
		var extra []string
		if ch != nil {
			t.Cleanup(func() { ch.Process.Stop(context.Background()) })
			extra = []string{"--ipsec-vici", ch.Socket}
		}
		if err := m.EnrollWith(ctx, gw.Name, extra...); err != nil {
			t.Fatal(err)
		}
	}
	pairs, _ := demo.RoutedPairs(l, f)
	var fednetPairs, vpcPairs []demo.Pair
	for _, p := range pairs {
		if p.From.Site == "vpc" || p.To.Site == "vpc" {
			vpcPairs = append(vpcPairs, p)
		} else if p.From.Site != "cloud" && p.To.Site != "cloud" {
			fednetPairs = append(fednetPairs, p)
		}
	}
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	_, err = demo.WaitReachable(wctx, fednetPairs, m.AgentsAlive)
	wcancel()
	if err != nil {
		t.Errorf("hq <-> branch beside two broken external links: %v", err)
		logWireGuard(t, l)
		for _, gw := range []string{"hq-gw", "branch-gw"} {
			log := m.Agent(gw).LogText()
			t.Logf("%s's agent log (tail):\n%s", gw, log[max(0, len(log)-3000):])
		}
	}
	want := map[string]string{
		"ipsec link to vpc: proposal mismatch":  "",
		"ipsec link to cloud: peer unreachable": "",
	}
	deadline := time.Now().Add(45 * time.Second)
	for time.Now().Before(deadline) {
		log := m.Agent("hq-gw").LogText()
		for line := range want {
			if strings.Contains(log, line) {
				delete(want, line)
			}
		}
		if len(want) == 0 {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	for line := range want {
		t.Errorf("hq-gw's agent never logged %q; its log:\n%s", line, m.Agent("hq-gw").LogText())
	}
	for _, res := range demo.PingAll(ctx, vpcPairs, 1, 100*time.Millisecond) {
		if res.Received > 0 {
			t.Errorf("a pair over the mismatched external link answered: %+v", res)
		}
	}
	// The manager lists both links down with the reason hq-gw's agent
	// reported (its reports follow the log within a report interval).
	reasons := map[string]string{"vpc": "proposal mismatch", "cloud": "peer unreachable"}
	var links []api.Link
	var problems []string
	for end := time.Now().Add(20 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		if links, err = m.Admin.Links(ctx); err != nil {
			t.Fatal(err)
		}
		problems = nil
		for site, why := range reasons {
			i := slices.IndexFunc(links, func(k api.Link) bool { return k.From == "hq-gw" && k.To == site })
			if i < 0 || links[i].Up || !strings.HasPrefix(links[i].Reason, why) {
				problems = append(problems, fmt.Sprintf("hq-gw -> %s: want it listed, down, reason %q...", site, why))
			}
		}
		if len(problems) == 0 || time.Now().After(end) {
			break
		}
	}
	for _, p := range problems {
		t.Errorf("manager's links: %s; got %+v", p, links)
	}
}
