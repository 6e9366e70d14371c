package demo

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/backend"
	"github.com/fednet/fednet/internal/external"
	"github.com/fednet/fednet/internal/lab"
	"github.com/fednet/fednet/internal/spec"
)

// InteropLab is the lab name of `fednet lab interop`: the spec's key
// files lie in its directory.
const InteropLab = "interop"

// InteropSpecYAML is examples/interop.yaml (a test keeps the two equal):
// three sites on WireGuard over UDP, one IPsec link between two of them,
// a site whose UDP the lab blocks (hotel, on TCP 443), and two external
// sites (aws-vpc, profile aws, terminated by aws-gw; os-lab, profile
// openstack-vpnaas, terminated by onprem-gw), in two routed networks.
const InteropSpecYAML = `# Every way fednet joins a site, in one federation (docs/interop.md):
# WireGuard over UDP (aws-eu, azure-we, onprem), one link on IPsec between
# two fednet gateways (azure-we <-> onprem), a site whose network blocks UDP
# (hotel: WireGuard in TLS over TCP 443, found by itself), and two external
# sites with no agent: an AWS Site-to-Site VPN (aws-vpc, terminated by aws-gw,
# which relays it to the other sites of network apps) and an OpenStack VPNaaS
# router (os-lab, terminated by onprem-gw).
#
# ` + "`fednet lab interop`" + ` runs it: the lab plays each provider's VPN gateway
# with a standalone strongSwan configured only from
# ` + "`fednet external config SITE --format json`" + `, and writes the pre-shared
# key files under its own directory (lab "interop").
apiVersion: fednet/v1
kind: Federation
name: interop
overlay:
  ipsec:                     # the IPsec link between fednet gateways
    psk: {file: /run/fednet-lab/interop/ipsec.psk}
sites:
  - name: aws-eu
    provider: aws            # numbering plan: 10.1.0.0/24
    index: 0
    gateways:
      - name: aws-gw
        endpoint: 198.51.100.10:51820
  - name: azure-we
    provider: azure          # 10.2.0.0/24
    index: 0
    gateways:
      - name: azure-gw
        endpoint: 203.0.113.20:51820
  - name: onprem
    provider: onprem         # 10.5.0.0/24
    index: 0
    gateways:
      - name: onprem-gw
        endpoint: 198.51.100.30:51820
  - name: hotel
    provider: edge           # 10.6.0.0/24; the lab blocks its UDP
    index: 0
    gateways:
      - name: hotel-gw
        endpoint: 203.0.113.40:51820
  - name: aws-vpc
    provider: aws            # 10.1.1.0/24: a VPC behind AWS Site-to-Site VPN
    index: 1
    external:
      profile: aws
      endpoint: 198.51.100.77          # the VPN tunnel's outside address (AWS's side)
      psk: {file: /run/fednet-lab/interop/aws-vpc.psk}
      via: aws-gw                      # the customer gateway
      # ike: [aes256gcm16-prfsha384-ecp384]   profile default
      # insideCIDR: 169.254.10.0/30          profile default
  - name: os-lab
    provider: openstack      # 10.4.0.0/24: a Neutron router with VPNaaS
    index: 0
    external:
      profile: openstack-vpnaas        # VPNaaS defaults: IKEv1, aes-128, sha1, group5 (a warning)
      endpoint: 203.0.113.78
      psk: {file: /run/fednet-lab/interop/os-lab.psk}
      via: onprem-gw
networks:
  - name: apps               # aws-vpc reaches these sites, not os-lab
    id: 100
    mode: routed
    sites: [aws-eu, azure-we, onprem, hotel, aws-vpc]
  - name: research           # os-lab reaches onprem, nothing else
    id: 101
    mode: routed
    sites: [onprem, os-lab]
topology:
  mode: mesh
  links:
    - between: [azure-we, onprem]
      backend: ipsec
lab:
  hostsPerSite: 1
`

// InteropConfig configures RunInterop.
type InteropConfig struct {
	// Binary is the fednet executable (default: this one).
	Binary string
	// SpecYAML is the spec (default InteropSpecYAML). It needs a site
	// whose UDP the lab blocks (UDPBlocked), at least one link on IPsec
	// between fednet gateways and at least one external site; its key
	// files must lie in the lab's directory (/run/fednet-lab/interop/).
	SpecYAML string
	// UDPBlocked is the site whose UDP the lab's internet drops (default
	// hotel).
	UDPBlocked string
	// Throughput is how long each iperf3 run lasts (default 3 s).
	Throughput time.Duration
	// ConvergeTimeout bounds the wait for every pair (default 60 s).
	ConvergeTimeout time.Duration
	// Keep leaves the lab running after the checks (remove it with
	// `fednet lab down --name interop`).
	Keep bool
	// Progress receives one line per step; nil discards.
	Progress io.Writer
}

// InteropReport is what RunInterop measured. Its JSON names are the public
// contract of `fednet lab interop --json`.
type InteropReport struct {
	Sites         int `json:"sites"`
	Gateways      int `json:"gateways"`
	ExternalSites int `json:"external_sites"`
	// PairsTotal counts the host pairs whose sites share a network,
	// PairsOK those that answered.
	PairsTotal int `json:"pairs_total"`
	PairsOK    int `json:"pairs_ok"`
	// External*: the pairs with a host behind an external site; IPsec*:
	// the pairs between the two sites of an IPsec link between fednet
	// gateways; TCP443*: the pairs with a host of the UDP-blocked site.
	ExternalPairsTotal int `json:"external_pairs_total"`
	ExternalPairsOK    int `json:"external_pairs_ok"`
	IPsecPairsTotal    int `json:"ipsec_pairs_total"`
	IPsecPairsOK       int `json:"ipsec_pairs_ok"`
	TCP443PairsTotal   int `json:"tcp443_pairs_total"`
	TCP443PairsOK      int `json:"tcp443_pairs_ok"`
	// ExternalIsolatedPairs counts the pairs with a host behind an
	// external site whose sites share no network; ExternalIsolatedReached
	// those that got a reply anyway (must be 0). Isolated* the same for
	// every pair of sites that share no network.
	ExternalIsolatedPairs   int `json:"external_isolated_pairs"`
	ExternalIsolatedReached int `json:"external_isolated_reached"`
	IsolatedPairs           int `json:"isolated_pairs"`
	IsolatedReached         int `json:"isolated_reached"`
	// ExternalLinks* count the manager's links to external sites, and
	// those up on backend ipsec; TCP443Links* the blocked site's links,
	// and those up on tcp443.
	ExternalLinksTotal int `json:"external_links_total"`
	ExternalLinksUp    int `json:"external_links_up"`
	TCP443LinksTotal   int `json:"tcp443_links_total"`
	TCP443Links        int `json:"tcp443_links"`
	// The capture on the lab's internet while pairs ping and iperf3
	// runs: the external sites' VPN gateways' packets (only UDP 500/4500
	// or ESP may cross), the blocked gateway's (only TCP to or from 443),
	// and every packet carrying overlay traffic in clear.
	ExternalWirePackets int `json:"external_wire_packets"`
	ExternalWireIKE     int `json:"external_wire_ike_udp"`
	ExternalWireESP     int `json:"external_wire_esp"`
	ExternalWireOther   int `json:"external_wire_other"`
	TCP443WirePackets   int `json:"tcp443_wire_packets"`
	TCP443WireTCP       int `json:"tcp443_wire_tcp"`
	TCP443WireUDP       int `json:"tcp443_wire_udp"`
	TCP443WireOther     int `json:"tcp443_wire_other"`
	WirePackets         int `json:"wire_packets"`
	PlaintextPackets    int `json:"plaintext_packets"`
	// Throughput of one TCP stream between hosts, in the same run: over
	// the IPsec link, over the TCP/443 link, over a WireGuard/UDP link,
	// and into an external site (IPsec to the provider's gateway, after a
	// WireGuard hop).
	ThroughputIPsecMbps    float64 `json:"throughput_ipsec_mbps"`
	ThroughputTCP443Mbps   float64 `json:"throughput_tcp443_mbps"`
	ThroughputUDPMbps      float64 `json:"throughput_udp_mbps"`
	ThroughputExternalMbps float64 `json:"throughput_external_mbps"`
	// ConvergedS is the time from the agents' start to every pair
	// answering.
	ConvergedS float64 `json:"converged_s"`
	// Warnings are the spec's (legacy algorithms a profile needs).
	Warnings     []string `json:"warnings,omitempty"`
	DurationS    float64  `json:"duration_s"`
	Checks       []Check  `json:"checks"`
	ChecksPassed bool     `json:"checks_passed"`
}

// RunInterop runs the interoperability lab (docs/interop.md) on a managed
// federation: WireGuard over UDP, an IPsec link between fednet gateways,
// a site whose UDP the lab's internet drops (on TCP 443), and external
// sites each played by a standalone strongSwan (charon with its own
// directory and vici socket, in its own namespace, a host behind it)
// configured only from `fednet external config SITE --format json`
// through SwanctlConf. It checks every pair of hosts that share a network,
// isolation, the manager's links, the wire (external sites send only IKE
// and ESP, the blocked site only TCP 443, nothing in clear) and measures
// throughput on each kind of link. The lab is removed at the end, also on
// error. A failed check is in the report, not an error; an error means the
// run could not happen.
func RunInterop(ctx context.Context, cfg InteropConfig) (*InteropReport, error) {
	start := time.Now()
	step := stepper(cfg.Progress, start)
	if cfg.SpecYAML == "" {
		cfg.SpecYAML = InteropSpecYAML
	}
	if cfg.UDPBlocked == "" {
		cfg.UDPBlocked = "hotel"
	}
	if cfg.Throughput == 0 {
		cfg.Throughput = 3 * time.Second
	}
	if cfg.ConvergeTimeout == 0 {
		cfg.ConvergeTimeout = 60 * time.Second
	}
	var err error
	if cfg.Binary, err = binaryOr(cfg.Binary); err != nil {
		return nil, err
	}
	if _, err := os.Stat(lab.CharonPath); err != nil {
		return nil, fmt.Errorf("the interop lab needs strongSwan's charon and swanctl (Debian strongswan-charon, strongswan-swanctl, libcharon-extra-plugins; make deps): %w", err)
	}
	f, err := spec.Parse([]byte(cfg.SpecYAML))
	if err != nil {
		return nil, err
	}
	if s, ok := f.Site(cfg.UDPBlocked); !ok || s.External != nil {
		return nil, fmt.Errorf("the site whose UDP the lab blocks, %q, is not a site of the spec with gateways", cfg.UDPBlocked)
	}
	if err := lab.Down(ctx, InteropLab); err != nil {
		return nil, fmt.Errorf("removing an old lab %q: %w", InteropLab, err)
	}
	step("building lab %q: %d sites, UDP of %s to be blocked", InteropLab, len(f.Sites), cfg.UDPBlocked)
	l, err := lab.Up(ctx, lab.Config{Federation: f, Name: InteropLab, Manager: true})
	if err != nil {
		return nil, err
	}
	var m *Managed
	var charons []*lab.Charon
	defer func() {
		if cfg.Keep {
			step("lab kept: fednet lab down --name %s removes it", InteropLab)
			return
		}
		cleanup, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if m != nil {
			m.Stop(cleanup)
		}
		for _, c := range charons {
			c.Process.Stop(cleanup)
		}
		l.Down(cleanup)
	}()
	if err := l.SaveSpec([]byte(cfg.SpecYAML)); err != nil {
		return nil, err
	}
	r := &InteropReport{Sites: len(f.Sites), Gateways: len(l.Gateways()), ExternalSites: len(l.Externals()), Warnings: f.Warnings()}
	check := checker(&r.Checks, step)

	// The providers' side first, as an operator would: each external
	// site's key, then its VPN gateway configured from the JSON alone.
	for _, n := range l.Externals() {
		c, err := StartProvider(ctx, l, cfg.Binary, n, nil)
		if c != nil {
			charons = append(charons, c)
		}
		if err != nil {
			return r, err
		}
		step("%s: a standalone strongSwan configured from fednet external config %s --format json", n, n.Site)
	}
	if err := l.SetUDPBlocked(ctx, cfg.UDPBlocked, true); err != nil {
		return r, err
	}
	if m, err = StartManaged(ctx, l, cfg.Binary); err != nil {
		return r, err
	}
	if _, err := m.Apply(ctx, cfg.SpecYAML); err != nil {
		return r, fmt.Errorf("applying the spec: %w", err)
	}
	agentsStart := time.Now()
	for _, gw := range l.Gateways() {
		c, err := StartGatewayCharon(ctx, l, f, gw)
		if err != nil {
			return r, err
		}
		var extra []string
		if c != nil {
			charons = append(charons, c)
			extra = []string{"--ipsec-vici", c.Socket}
		}
		if err := m.EnrollWith(ctx, gw.Name, extra...); err != nil {
			return r, err
		}
	}
	step("manager and %d agents started; UDP of %s blocked in the lab's internet", len(l.Gateways()), cfg.UDPBlocked)

	pairs, isolated := RoutedPairs(l, f)
	kinds := classify(f, pairs, cfg.UDPBlocked)
	cctx, cancel := context.WithTimeout(ctx, cfg.ConvergeTimeout)
	_, convErr := WaitReachable(cctx, pairs, m.AgentsAlive)
	cancel()
	r.ConvergedS = round(time.Since(agentsStart).Seconds(), 2)
	check("converged", convErr == nil, "every host reaches every host it shares a network with %.2f s after the agents started%s", r.ConvergedS, errSuffix(convErr))

	capture, err := lab.StartCapture(ctx, l)
	if err != nil {
		return r, err
	}
	// What the internet forwards of the blocked gateway (its UDP probes
	// enter the internet and are dropped there: not counted).
	blockedGW := l.SiteGateways(cfg.UDPBlocked)[0]
	forwarded, err := lab.StartCaptureOn(ctx, l, l.Internet, lab.BridgeInterface, "-Q", "out", "host", blockedGW.Public.Addr().String())
	if err != nil {
		capture.Stop()
		return r, err
	}
	res := PingAll(ctx, pairs, 3, 100*time.Millisecond)
	for i, p := range pairs {
		ok := res[i].Received > 0
		count(&r.PairsTotal, &r.PairsOK, ok)
		k := kinds[i]
		if k.external {
			count(&r.ExternalPairsTotal, &r.ExternalPairsOK, ok)
		}
		if k.ipsec {
			count(&r.IPsecPairsTotal, &r.IPsecPairsOK, ok)
		}
		if k.tcp443 {
			count(&r.TCP443PairsTotal, &r.TCP443PairsOK, ok)
		}
		if !ok {
			step("no answer: %s -> %s (%s)", p.From, p.To, p.To.LAN.Addr())
		}
	}
	check("connectivity", r.PairsOK == r.PairsTotal, "%d of %d host pairs that share a network answer", r.PairsOK, r.PairsTotal)
	check("external sites", r.ExternalPairsOK == r.ExternalPairsTotal && r.ExternalPairsTotal > 0, "%d of %d pairs with a host behind an external site answer", r.ExternalPairsOK, r.ExternalPairsTotal)
	check("ipsec link", r.IPsecPairsOK == r.IPsecPairsTotal && r.IPsecPairsTotal > 0, "%d of %d pairs across the IPsec link answer", r.IPsecPairsOK, r.IPsecPairsTotal)
	check("tcp443", r.TCP443PairsOK == r.TCP443PairsTotal && r.TCP443PairsTotal > 0, "%d of %d pairs of %s (UDP blocked) answer", r.TCP443PairsOK, r.TCP443PairsTotal, cfg.UDPBlocked)

	if err := r.throughput(ctx, l, f, cfg, step); err != nil {
		return r, err
	}
	pcap, err := capture.Stop()
	if err != nil {
		return r, err
	}
	blockedPcap, err := forwarded.Stop()
	if err != nil {
		return r, err
	}
	if err := r.wire(pcap, blockedPcap, l, f, cfg.UDPBlocked, check); err != nil {
		return r, err
	}

	r.IsolatedPairs = len(isolated)
	for i, res := range PingAll(ctx, isolated, 2, 100*time.Millisecond) {
		p := isolated[i]
		ext := isExternal(f, p.From.Site) || isExternal(f, p.To.Site)
		if ext {
			r.ExternalIsolatedPairs++
		}
		if res.Received > 0 {
			r.IsolatedReached++
			if ext {
				r.ExternalIsolatedReached++
			}
			step("isolation broken: %s -> %s answered", p.From, p.To)
		}
	}
	check("isolation: external sites", r.ExternalIsolatedReached == 0 && r.ExternalIsolatedPairs > 0,
		"%d of %d pairs with a host behind an external site, whose sites share no network, got a reply", r.ExternalIsolatedReached, r.ExternalIsolatedPairs)
	check("isolation", r.IsolatedReached == 0, "%d of %d pairs whose sites share no network got a reply", r.IsolatedReached, r.IsolatedPairs)

	r.links(ctx, m, l, f, cfg.UDPBlocked, check)
	check("agents running", m.AgentsAlive() == nil, "every agent still runs%s", errSuffix(m.AgentsAlive()))
	r.ChecksPassed = !slices.ContainsFunc(r.Checks, func(c Check) bool { return !c.Passed })
	r.DurationS = round(time.Since(start).Seconds(), 1)
	return r, nil
}

// StartProvider plays external site n.Site's provider: it writes the
// site's pre-shared key (letters and digits, as AWS allows), starts a
// standalone charon in n, asks `fednet external config SITE --format
// json` what to configure, translates that into swanctl.conf
// (SwanctlConf), passes it through edit when edit is not nil (a test's
// operator mistyping), and loads it with swanctl over the charon's own
// socket. The charon is returned (to stop) even with an error.
func StartProvider(ctx context.Context, l *lab.Lab, binary string, n *lab.Node, edit func(conf string) string) (*lab.Charon, error) {
	out, err := l.Internet.Run(ctx, binary, "external", "config", n.Site, "-f", filepath.Join(l.Dir, lab.SpecFile), "--format", "json")
	if err != nil {
		return nil, fmt.Errorf("fednet external config %s: %w", n.Site, err)
	}
	var c external.Config
	if err := json.Unmarshal([]byte(out), &c); err != nil {
		return nil, fmt.Errorf("fednet external config %s --format json: %w", n.Site, err)
	}
	if err := writeKey(l, c.PSKFile); err != nil {
		return nil, err
	}
	key, err := os.ReadFile(c.PSKFile)
	if err != nil {
		return nil, err
	}
	conf, err := SwanctlConf(c, strings.TrimSpace(string(key)))
	if err != nil {
		return nil, fmt.Errorf("external site %s: %w", n.Site, err)
	}
	if edit != nil {
		conf = edit(conf)
	}
	ch, err := l.StartCharon(ctx, n)
	if err != nil {
		return nil, err
	}
	file := filepath.Join(ch.Dir, "swanctl.conf")
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		return ch, err
	}
	if _, err := n.Run(ctx, "swanctl", "--load-all", "--noprompt", "--file", file, "--uri", "unix://"+ch.Socket); err != nil {
		return ch, fmt.Errorf("loading %s into the strongSwan of %s: %w", file, n, err)
	}
	return ch, nil
}

// writeKey writes a fresh pre-shared key to path, inside the lab's
// directory only: 32 letters and digits starting with a letter (every
// profile's providers take it).
func writeKey(l *lab.Lab, path string) error {
	rel, err := filepath.Rel(l.Dir, path)
	if err != nil || strings.HasPrefix(rel, "..") {
		return fmt.Errorf("pre-shared key %s is outside the lab's directory %s; the lab writes keys only there", path, l.Dir)
	}
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	b := make([]byte, 32)
	rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	b[0] = alphabet[int(b[0])%26]
	return os.WriteFile(path, append(b, '\n'), 0o600)
}

// pairKind says which of the run's categories a host pair is in.
type pairKind struct{ external, ipsec, tcp443 bool }

// classify sorts pairs: with a host behind an external site, across a
// link on backend ipsec between fednet gateways, with a host of the
// blocked site.
func classify(f *spec.Federation, pairs []Pair, blocked string) []pairKind {
	out := make([]pairKind, len(pairs))
	for i, p := range pairs {
		a, b := p.From.Site, p.To.Site
		ext := isExternal(f, a) || isExternal(f, b)
		out[i] = pairKind{
			external: ext,
			ipsec:    !ext && f.LinkEnabled(a, b) && f.LinkBackend(a, b) == backend.IPsec,
			tcp443:   a == blocked || b == blocked,
		}
	}
	return out
}

func isExternal(f *spec.Federation, site string) bool {
	s, ok := f.Site(site)
	return ok && s.External != nil
}

func count(total, ok *int, good bool) {
	*total++
	if good {
		*ok++
	}
}

// throughput measures one TCP stream over each kind of link.
func (r *InteropReport) throughput(ctx context.Context, l *lab.Lab, f *spec.Federation, cfg InteropConfig, step func(string, ...any)) error {
	var ipsecA, ipsecB, udpA, udpB, ext string
	for _, s := range f.Sites {
		for _, t := range f.Sites {
			switch {
			case s.Name >= t.Name || s.External != nil || t.External != nil || s.Name == cfg.UDPBlocked || t.Name == cfg.UDPBlocked || !f.LinkEnabled(s.Name, t.Name):
			case f.LinkBackend(s.Name, t.Name) == backend.IPsec && ipsecA == "":
				ipsecA, ipsecB = s.Name, t.Name
			case f.LinkBackend(s.Name, t.Name) == backend.WireGuard && udpA == "":
				udpA, udpB = s.Name, t.Name
			}
		}
		if s.External != nil && ext == "" {
			ext = s.Name
		}
	}
	far := ""
	for _, s := range f.Sites {
		if s.Name != cfg.UDPBlocked && s.External == nil && far == "" {
			far = s.Name
		}
	}
	runs := []struct {
		into     *float64
		what     string
		from, to string
	}{
		{&r.ThroughputIPsecMbps, "ipsec", ipsecA, ipsecB},
		{&r.ThroughputTCP443Mbps, "tcp443", far, cfg.UDPBlocked},
		{&r.ThroughputUDPMbps, "udp", udpA, udpB},
		{&r.ThroughputExternalMbps, "external", externalPeerSite(f, ext), ext},
	}
	for _, run := range runs {
		if run.from == "" || run.to == "" || len(l.Hosts(run.from)) == 0 || len(l.Hosts(run.to)) == 0 {
			continue
		}
		a, b := l.Hosts(run.from)[0], l.Hosts(run.to)[0]
		t, err := lab.Iperf3(ctx, a, b, b.LAN.Addr(), cfg.Throughput, 1)
		if err != nil {
			return fmt.Errorf("iperf3 over %s (%s -> %s): %w", run.what, a, b, err)
		}
		*run.into = round(t.Mbps, 1)
		step("throughput over %s: %s -> %s %.1f Mbit/s", run.what, a, b, t.Mbps)
	}
	return nil
}

// externalPeerSite is a site that shares a network with external site
// ext, "" for none.
func externalPeerSite(f *spec.Federation, ext string) string {
	for _, n := range f.Networks {
		if !slices.Contains(n.Sites, ext) {
			continue
		}
		for _, s := range n.Sites {
			if s != ext && !isExternal(f, s) {
				return s
			}
		}
	}
	return ""
}

// wire checks the captures of the lab's internet: pcap of what every
// node sent into it, blocked of what it forwarded of the blocked gateway.
func (r *InteropReport) wire(pcap, blockedPcap string, l *lab.Lab, f *spec.Federation, blocked string, check func(string, bool, string, ...any)) error {
	var endpoints, inner []netip.Addr
	for _, n := range l.Externals() {
		endpoints = append(endpoints, n.Public.Addr())
	}
	for _, s := range l.Sites() {
		for _, h := range l.Hosts(s) {
			inner = append(inner, h.LAN.Addr())
		}
	}
	ew, err := lab.AnalyzeExternal(pcap, endpoints, f.Overlay.Supernet, inner)
	if err != nil {
		return err
	}
	r.ExternalWirePackets, r.ExternalWireIKE, r.ExternalWireESP, r.ExternalWireOther = ew.Packets, ew.IKE, ew.ESP, ew.Other
	check("wire: external sites send only IKE/ESP", ew.Packets > 0 && ew.Other == 0 && ew.Plaintext == 0, "%s%s", ew, samples(ew.Samples))
	var control []netip.Addr
	for _, m := range l.Managers {
		control = append(control, m.Public.Addr())
	}
	gw := l.SiteGateways(blocked)[0]
	tw, err := lab.AnalyzeFallback(blockedPcap, gw.Public.Addr(), f.Overlay.TCPFallbackPort(), f.Overlay.Supernet, inner, control...)
	if err != nil {
		return err
	}
	r.TCP443WirePackets, r.TCP443WireTCP, r.TCP443WireUDP, r.TCP443WireOther = tw.Packets, tw.TCP, tw.UDP, tw.Other
	check("wire: blocked site sends only TLS on 443", tw.Packets > 0 && tw.TCP == tw.Packets && tw.UDP == 0 && tw.Plaintext == 0, "%s%s", tw, samples(tw.Samples))
	all, err := lab.AnalyzeExternal(pcap, nil, f.Overlay.Supernet, inner)
	if err != nil {
		return err
	}
	r.WirePackets, r.PlaintextPackets = all.Packets, all.Plaintext
	check("wire: no overlay address in clear", all.Plaintext == 0, "%d plaintext packets in %d captured%s", all.Plaintext, all.Packets, samples(all.Samples))
	return nil
}

// links reads the manager's links: the external sites' on ipsec, the
// blocked site's on tcp443.
func (r *InteropReport) links(ctx context.Context, m *Managed, l *lab.Lab, f *spec.Federation, blocked string, check func(string, bool, string, ...any)) {
	blockedGW := map[string]bool{}
	for _, gw := range l.SiteGateways(blocked) {
		blockedGW[gw.Name] = true
	}
	toExternal := func(k api.Link) bool { return isExternal(f, k.To) }
	touches := func(k api.Link) bool { return blockedGW[k.From] || blockedGW[k.To] }
	var links []api.Link
	err := pollLinks(ctx, m, 30*time.Second, func(ls []api.Link) error {
		links = ls
		var errs []error
		for _, k := range ls {
			switch {
			case toExternal(k) && (!k.Up || k.Backend != backend.IPsec):
				errs = append(errs, fmt.Errorf("link %s -> %s: up %v backend %q", k.From, k.To, k.Up, k.Backend))
			case touches(k) && (!k.Up || k.Transport != backend.TransportTCP443):
				errs = append(errs, fmt.Errorf("link %s -> %s: up %v transport %q", k.From, k.To, k.Up, k.Transport))
			}
		}
		return errors.Join(errs...)
	})
	for _, k := range links {
		if toExternal(k) {
			count(&r.ExternalLinksTotal, &r.ExternalLinksUp, k.Up && k.Backend == backend.IPsec)
		}
		if touches(k) {
			count(&r.TCP443LinksTotal, &r.TCP443Links, k.Up && k.Transport == backend.TransportTCP443)
		}
	}
	check("status: external links", err == nil && r.ExternalLinksUp == r.ExternalLinksTotal && r.ExternalLinksTotal == len(l.Externals()),
		"%d of %d links to external sites shown up on ipsec (%d external sites)%s", r.ExternalLinksUp, r.ExternalLinksTotal, len(l.Externals()), errSuffix(err))
	check("status: tcp443 links", r.TCP443Links == r.TCP443LinksTotal && r.TCP443LinksTotal > 0,
		"%d of %d links of %s shown on tcp443", r.TCP443Links, r.TCP443LinksTotal, blocked)
}
