package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/fednet/fednet/internal/lab"
	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/spec"
)

// Config configures a demo run.
type Config struct {
	// Sites is how many sites the generated spec has (default 3, 2..12).
	// Ignored when Federation is set.
	Sites int
	// SpecYAML, when set, is the spec to run instead of a generated one.
	SpecYAML string
	// Static runs the agents on plan files (`fednet agent --plan`) instead
	// of a manager.
	Static bool
	// Managers, above 1, runs that many managers, each in its own
	// namespace beside an etcd member, sharing that etcd cluster.
	Managers int
	// Binary is the fednet executable the agents run (default: this one).
	Binary string
	// LabName names the lab (default "demo").
	LabName string
	// Keep leaves the lab running after the checks.
	Keep bool
	// Throughput is how long each iperf3 run lasts (default 5 s).
	Throughput time.Duration
	// ConvergeTimeout bounds the wait for every pair to answer (default 30 s).
	ConvergeTimeout time.Duration
	// Progress receives one line per step; nil discards.
	Progress io.Writer
}

// managerAddrs are the manager nodes' public addresses.
func managerAddrs(l *lab.Lab) []string {
	var out []string
	for _, n := range l.Managers {
		out = append(out, n.Public.Addr().String())
	}
	return out
}

// Check is one pass/fail check of the demo.
type Check struct {
	Name   string `json:"name"`
	Passed bool   `json:"passed"`
	Detail string `json:"detail"`
}

// Report is what a demo measured. JSON names are the demo's public
// contract (`fednet lab demo --json`).
type Report struct {
	Sites      int           `json:"sites"`
	Gateways   int           `json:"gateways"`
	Hosts      int           `json:"hosts"`
	WireGuard  string        `json:"wireguard"`
	PairsTotal int           `json:"pairs_total"`
	PairsOK    int           `json:"pairs_ok"`
	Matrix     []MatrixEntry `json:"matrix"`
	// IsolatedPairs counts host pairs whose sites share no network;
	// IsolatedReached those that got a reply anyway (must be 0).
	IsolatedPairs   int `json:"isolated_pairs"`
	IsolatedReached int `json:"isolated_reached"`
	// BridgedNetwork names the bridged network the layer-2 checks use;
	// BridgedPairs* count its host pairs across sites.
	BridgedNetwork    string `json:"bridged_network,omitempty"`
	BridgedPairsTotal int    `json:"bridged_pairs_total"`
	BridgedPairsOK    int    `json:"bridged_pairs_ok"`
	// MTURouted and MTUBridged are the largest packets the MTU checks
	// sent unfragmented across sites (the planned MTUs).
	MTURouted              int     `json:"mtu_routed"`
	MTUBridged             int     `json:"mtu_bridged,omitempty"`
	RTTOverlayMs           float64 `json:"rtt_overlay_ms"`
	RTTUnderlayMs          float64 `json:"rtt_underlay_ms"`
	RTTAddedMs             float64 `json:"rtt_added_ms"`
	ThroughputOverlayMbps  float64 `json:"throughput_overlay_mbps"`
	ThroughputUnderlayMbps float64 `json:"throughput_underlay_mbps"`
	ThroughputRatio        float64 `json:"throughput_ratio"`
	// ThroughputBridgedMbps is TCP between bridged hosts of the first two
	// sites; ThroughputBridgedRatio is it over ThroughputOverlayMbps
	// (VXLAN inside WireGuard against routed WireGuard).
	ThroughputBridgedMbps  float64 `json:"throughput_bridged_mbps"`
	ThroughputBridgedRatio float64 `json:"throughput_bridged_ratio"`
	WirePackets            int     `json:"wire_packets"`
	WireGuardPackets       int     `json:"wireguard_packets"`
	NonWireGuardPackets    int     `json:"non_wireguard_packets"`
	// IPsecPackets counts the gateway-to-gateway packets that are IKE or
	// ESP (UDP 500, 4500, protocol ESP): links on backend ipsec.
	IPsecPackets     int     `json:"ipsec_packets"`
	PlaintextPackets int     `json:"plaintext_packets"`
	ConvergedS       float64 `json:"converged_s"`
	Mode             string  `json:"mode"`
	PropagationMs    float64 `json:"propagation_ms,omitempty"`
	DurationS        float64 `json:"duration_s"`
	Checks           []Check `json:"checks"`
	ChecksPassed     bool    `json:"checks_passed"`
	AddressPlan      string  `json:"address_plan"`
}

// MatrixEntry is one host-to-host result of the connectivity matrix.
type MatrixEntry struct {
	From     string  `json:"from"`
	To       string  `json:"to"`
	Address  string  `json:"address"`
	Sent     int     `json:"sent"`
	Received int     `json:"received"`
	AvgMs    float64 `json:"avg_ms"`
}

// providers cycles through the numbering plan's providers for generated
// sites.
var providers = []string{"aws", "azure", "onprem", "gcp", "openstack", "edge"}

// GenerateSpec returns a spec of n sites (2..12) with one gateway each, on
// the lab's public ranges, joined by one routed network "apps".
func GenerateSpec(n int) (*spec.Federation, error) {
	text, err := GenerateSpecYAML(n)
	if err != nil {
		return nil, err
	}
	return spec.Parse([]byte(text))
}

// GenerateSpecYAML returns the YAML of GenerateSpec(n), leaving out the
// sites named in without (as an operator removing a site would).
func GenerateSpecYAML(n int, without ...string) (string, error) {
	return specYAML(n, false, without)
}

// DemoSubnet is the subnet of the demo spec's bridged network.
var DemoSubnet = netip.MustParsePrefix("192.168.50.0/24")

// DemoSpecYAML returns the spec `fednet lab demo` runs on n sites (2..12):
// GenerateSpecYAML's sites, a bridged network "lan" (id 200, DemoSubnet)
// over every site, attached at each first gateway's port b1, and two
// routed networks: "apps" (id 100) over every site but the last and "ops"
// (id 101) over the first and the last. So with three sites or more, the
// hosts of the sites between the first and the last share no network with
// the last site's hosts, which shows that networks are isolated. With two
// sites both routed networks span both.
func DemoSpecYAML(n int) (string, error) {
	return specYAML(n, true, nil)
}

func specYAML(n int, demo bool, without []string) (string, error) {
	if n < 2 || n > 12 {
		return "", fmt.Errorf("--sites %d: want 2 to 12", n)
	}
	var b strings.Builder
	b.WriteString("apiVersion: fednet/v1\nkind: Federation\nname: demo\nsites:\n")
	var names []string
	for i := 0; i < n; i++ {
		p := providers[i%len(providers)]
		idx := i / len(providers)
		name := p
		if idx > 0 {
			name = fmt.Sprintf("%s%d", p, idx+1)
		}
		if slices.Contains(without, name) {
			continue
		}
		names = append(names, name)
		ep := fmt.Sprintf("198.51.100.%d", 10+i)
		if i%2 == 1 {
			ep = fmt.Sprintf("203.0.113.%d", 10+i)
		}
		fmt.Fprintf(&b, "  - name: %s\n    provider: %s\n    index: %d\n    gateways:\n      - name: %s-gw\n        endpoint: %s:51820\n", name, p, idx, name, ep)
		if demo {
			b.WriteString("        bridgePorts: {lan: b1}\n")
		}
	}
	all := strings.Join(names, ", ")
	if !demo {
		fmt.Fprintf(&b, "networks:\n  - name: apps\n    id: 100\n    mode: routed\n    sites: [%s]\nlab:\n  hostsPerSite: 2\n", all)
		return b.String(), nil
	}
	apps, ops := all, all
	if len(names) >= 3 {
		apps = strings.Join(names[:len(names)-1], ", ")
		ops = names[0] + ", " + names[len(names)-1]
	}
	fmt.Fprintf(&b, "networks:\n  - name: apps\n    id: 100\n    mode: routed\n    sites: [%s]\n", apps)
	fmt.Fprintf(&b, "  - name: ops\n    id: 101\n    mode: routed\n    sites: [%s]\n", ops)
	fmt.Fprintf(&b, "  - name: lan\n    id: 200\n    mode: bridged\n    subnet: %s\n    sites: [%s]\n", DemoSubnet, all)
	b.WriteString("lab:\n  hostsPerSite: 2\n")
	return b.String(), nil
}

// LabBridged returns the lab's bridged networks for the bridged networks of
// f, in spec order: the lab attaches every gateway of every member site to
// the i-th network's segment as port b<i> (from 1), so the spec's
// bridgePorts must name that port.
func LabBridged(f *spec.Federation) ([]lab.BridgedNetwork, error) {
	var out []lab.BridgedNetwork
	for _, n := range f.Networks {
		if n.Mode != spec.Bridged {
			continue
		}
		port := fmt.Sprintf("b%d", len(out)+1)
		if !n.Subnet.IsValid() {
			return nil, fmt.Errorf("network %s: the lab addresses its hosts from the subnet; set subnet", n.Name)
		}
		for _, s := range f.Sites {
			if !slices.Contains(n.Sites, s.Name) || len(s.Gateways) == 0 {
				continue
			}
			for _, g := range s.Gateways {
				if got := g.BridgePorts[n.Name]; got != port {
					return nil, fmt.Errorf("network %s: the lab attaches gateway %s to its segment as %s, but bridgePorts says %q; set bridgePorts: {%s: %s}",
						n.Name, g.Name, port, got, n.Name, port)
				}
			}
		}
		out = append(out, lab.BridgedNetwork{Name: n.Name, Subnet: n.Subnet, Sites: n.Sites})
	}
	return out, nil
}

// Run builds the lab, federates it, checks it and (unless Keep) removes it.
// The report is returned even when checks fail; the error is non-nil when a
// check failed or the demo could not run.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	start := time.Now()
	out := cfg.Progress
	if out == nil {
		out = io.Discard
	}
	step := stepper(out, start)
	if cfg.Sites == 0 {
		cfg.Sites = 3
	}
	if cfg.LabName == "" {
		cfg.LabName = "demo"
	}
	if cfg.Throughput == 0 {
		cfg.Throughput = 5 * time.Second
	}
	if cfg.ConvergeTimeout == 0 {
		cfg.ConvergeTimeout = 30 * time.Second
	}
	var err error
	if cfg.Binary, err = binaryOr(cfg.Binary); err != nil {
		return nil, err
	}
	specYAML := cfg.SpecYAML
	if specYAML == "" {
		var err error
		if specYAML, err = DemoSpecYAML(cfg.Sites); err != nil {
			return nil, err
		}
	}
	f, err := spec.Parse([]byte(specYAML))
	if err != nil {
		return nil, err
	}
	if len(f.Sites) < 2 {
		return nil, errors.New("the demo needs at least two sites")
	}

	// A lab of the same name left over from a crashed run goes first.
	if err := lab.Down(ctx, cfg.LabName); err != nil {
		return nil, fmt.Errorf("removing an old lab %q: %w", cfg.LabName, err)
	}
	bridged, err := LabBridged(f)
	if err != nil {
		return nil, err
	}
	step("building lab %q: %d sites, %d bridged networks", cfg.LabName, len(f.Sites), len(bridged))
	if cfg.Static && cfg.Managers > 1 {
		return nil, errors.New("--managers is for a managed federation, not --static")
	}
	l, err := lab.Up(ctx, lab.Config{Federation: f, Name: cfg.LabName, Manager: !cfg.Static, Managers: cfg.Managers, Bridged: bridged})
	if err != nil {
		return nil, err
	}
	if err := l.SaveSpec([]byte(specYAML)); err != nil {
		l.Down(context.WithoutCancel(ctx))
		return nil, err
	}
	var d interface {
		AgentsAlive() error
		Stop(context.Context) error
	}
	defer func() {
		if cfg.Keep {
			step("lab kept: fednet lab status --name %s; remove it with fednet lab down --name %s", cfg.LabName, cfg.LabName)
			return
		}
		cleanup, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if d != nil {
			d.Stop(cleanup)
		}
		l.Down(cleanup)
	}()

	r := &Report{Sites: len(f.Sites), Gateways: len(l.Gateways()), AddressPlan: plan.AddressPlan(f), Mode: "managed"}
	if cfg.Static {
		r.Mode = "static"
	}
	for _, s := range l.Sites() {
		r.Hosts += len(l.Hosts(s))
	}
	check := checker(&r.Checks, step)
	fmt.Fprintf(out, "\nAddress plan:\n%s\n", r.AddressPlan)

	sites := l.Sites()
	a, b := sites[0], sites[1]
	gwA, gwB := l.SiteGateways(a)[0], l.SiteGateways(b)[0]
	hostA, hostB := l.Hosts(a)[0], l.Hosts(b)[0]

	// The bare underlay first: the gateways' firewalls admit only
	// WireGuard once the agents run.
	step("underlay: %s -> %s over the lab internet", gwA, gwB)
	under, err := lab.Ping(ctx, gwA, gwB.Public.Addr(), 20, 20*time.Millisecond)
	if err != nil {
		return r, fmt.Errorf("underlay ping: %w", err)
	}
	r.RTTUnderlayMs = ms(under.Avg)
	tu, err := lab.Iperf3(ctx, gwA, gwB, gwB.Public.Addr(), cfg.Throughput, 1)
	if err != nil {
		return r, fmt.Errorf("underlay iperf3: %w", err)
	}
	r.ThroughputUnderlayMbps = round(tu.Mbps, 1)

	agentsStart := time.Now()
	var managed *Managed
	if cfg.Static {
		step("keys, plans and one agent per gateway (static mode: plan files)")
		dep, err := Deploy(ctx, l, cfg.Binary)
		if err != nil {
			return r, err
		}
		d = dep
	} else {
		if len(l.Managers) > 1 {
			step("%d managers on a %d-member etcd cluster (one member beside each manager), at %s; spec applied through the API; one agent per gateway, enrolled with a join token carrying every manager",
				len(l.Managers), len(l.Managers), strings.Join(managerAddrs(l), ", "))
		} else {
			step("manager at %s; spec applied through the API; one agent per gateway, enrolled with a join token", l.Manager.Public.Addr())
		}
		if managed, err = StartManaged(ctx, l, cfg.Binary); err != nil {
			return r, err
		}
		d = managed
		agentsStart = time.Now()
		if _, err := managed.Apply(ctx, specYAML); err != nil {
			return r, fmt.Errorf("applying the spec: %w", err)
		}
		for _, gw := range l.Gateways() {
			if err := managed.Enroll(ctx, gw.Name); err != nil {
				return r, err
			}
		}
	}
	pairs, isolated := RoutedPairs(l, f)
	var l2pairs []Pair
	if len(bridged) > 0 {
		r.BridgedNetwork = bridged[0].Name
		l2pairs = BridgedPairs(l, r.BridgedNetwork)
	}
	cctx, cancel := context.WithTimeout(ctx, cfg.ConvergeTimeout)
	_, convErr := WaitReachable(cctx, append(slices.Clone(pairs), l2pairs...), d.AgentsAlive)
	cancel()
	r.ConvergedS = round(time.Since(agentsStart).Seconds(), 2)
	check("converged", convErr == nil, "every host reaches every host it shares a network with at the other sites %.2f s after the agents started%s", r.ConvergedS, errSuffix(convErr))
	current := f // the spec the agents run now
	if managed != nil {
		// A change that touches every gateway: the tunnel MTU.
		mtu := f.Overlay.UnderlayMTU - 20
		changed, err := WithUnderlayMTU(specYAML, mtu)
		if err != nil {
			return r, err
		}
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		took, resp, err := managed.Propagate(pctx, changed)
		cancel()
		affected := 0
		if resp != nil {
			affected = len(resp.Affected)
		}
		r.PropagationMs = round(float64(took)/float64(time.Millisecond), 1)
		check("propagation", err == nil && affected == len(l.Gateways()), "underlayMTU %d -> %d applied by all %d affected agents %.1f ms after the API call%s",
			f.Overlay.UnderlayMTU, mtu, affected, r.PropagationMs, errSuffix(err))
		if err == nil {
			if current, err = spec.Parse([]byte(changed)); err != nil {
				return r, err
			}
		}
	}
	plans, err := Plans(current)
	if err != nil {
		return r, err
	}
	if err := followBridgedMTU(ctx, l, plans, bridged, step); err != nil {
		return r, err
	}
	r.WireGuard = WireGuardKind(ctx, gwA)

	// The wire check watches the connectivity matrix and a short bulk
	// transfer: every packet between gateways must be WireGuard, and no
	// overlay address may show in clear.
	capture, err := lab.StartCapture(ctx, l)
	if err != nil {
		return r, err
	}
	step("connectivity matrix: %d host pairs, 3 pings each", len(pairs))
	res := PingAll(ctx, pairs, 3, 100*time.Millisecond)
	for i, p := range pairs {
		r.PairsTotal++
		if res[i].Received > 0 {
			r.PairsOK++
		}
		r.Matrix = append(r.Matrix, MatrixEntry{From: p.From.Name, To: p.To.Name, Address: p.To.LAN.Addr().String(),
			Sent: res[i].Sent, Received: res[i].Received, AvgMs: round(ms(res[i].Avg), 3)})
	}
	fmt.Fprint(out, matrixTable(l, sites, pairs, res))
	check("connectivity", r.PairsOK == r.PairsTotal, "%d of %d host pairs across sites that share a network answer", r.PairsOK, r.PairsTotal)
	if len(l2pairs) > 0 {
		for _, res := range PingAll(ctx, l2pairs, 3, 100*time.Millisecond) {
			r.BridgedPairsTotal++
			if res.Received > 0 {
				r.BridgedPairsOK++
			}
		}
		check("bridged connectivity", r.BridgedPairsOK == r.BridgedPairsTotal, "%d of %d host pairs of bridged network %s across sites answer",
			r.BridgedPairsOK, r.BridgedPairsTotal, r.BridgedNetwork)
	}
	if _, err := lab.Iperf3(ctx, hostA, hostB, hostB.LAN.Addr(), time.Second, 1); err != nil {
		step("short transfer for the wire check failed: %v", err)
	}
	pcap, err := capture.Stop()
	if err != nil {
		return r, err
	}
	// Control traffic (agents to managers, managers to etcd, etcd
	// members to each other) is not between gateways.
	var control []netip.Addr
	for _, m := range l.Managers {
		control = append(control, m.Public.Addr())
	}
	wire, err := lab.AnalyzeWire(pcap, f.Overlay.Supernet, f.Overlay.ListenPort, control...)
	if err != nil {
		return r, err
	}
	// Bridged subnets lie outside the supernet: look for them in clear too.
	for _, b := range bridged {
		w, err := lab.AnalyzeWire(pcap, b.Subnet, f.Overlay.ListenPort, control...)
		if err != nil {
			return r, err
		}
		wire.Plaintext += w.Plaintext
		wire.PlaintextSamples = append(wire.PlaintextSamples, w.PlaintextSamples...)
	}
	r.WirePackets, r.WireGuardPackets, r.NonWireGuardPackets, r.PlaintextPackets = wire.Packets, wire.WireGuard, wire.NonWireGuard, wire.Plaintext
	r.IPsecPackets = wire.IPsec
	check("wire: only WireGuard between gateways", wire.NonWireGuard == 0 && wire.WireGuard > 0,
		"%d of %d gateway-to-gateway packets are UDP port %d, %d IKE/ESP (links on backend ipsec)%s", wire.WireGuard, wire.Gateway, f.Overlay.ListenPort, wire.IPsec, samples(wire.NonWireGuardSamples))
	check("wire: no overlay address in clear", wire.Plaintext == 0, "%d plaintext packets in %d captured%s", wire.Plaintext, wire.Packets, samples(wire.PlaintextSamples))

	r.IsolatedPairs = len(isolated)
	if len(isolated) > 0 {
		for _, res := range PingAll(ctx, isolated, 2, 100*time.Millisecond) {
			if res.Received > 0 {
				r.IsolatedReached++
			}
		}
		check("isolation: routed networks", r.IsolatedReached == 0, "%d of %d host pairs whose sites share no network got a reply", r.IsolatedReached, r.IsolatedPairs)
	}
	if r.BridgedNetwork != "" {
		layer2Checks(ctx, l, r.BridgedNetwork, sites, check)
	}
	mtuChecks(ctx, r, plans, l, hostA, hostB, check)

	step("latency: %s -> %s over the overlay", hostA, hostB)
	over, err := lab.Ping(ctx, hostA, hostB.LAN.Addr(), 20, 20*time.Millisecond)
	if err == nil && over.Received > 0 {
		r.RTTOverlayMs = ms(over.Avg)
		r.RTTAddedMs = round(r.RTTOverlayMs-r.RTTUnderlayMs, 3)
	}
	check("latency", err == nil && over.Received == over.Sent, "overlay %.3f ms vs underlay %.3f ms (%d/%d replies)", r.RTTOverlayMs, r.RTTUnderlayMs, over.Received, over.Sent)

	step("throughput: %s -> %s over the overlay, %s", hostA, hostB, cfg.Throughput)
	to, err := lab.Iperf3(ctx, hostA, hostB, hostB.LAN.Addr(), cfg.Throughput, 1)
	if err == nil {
		r.ThroughputOverlayMbps = round(to.Mbps, 1)
		if r.ThroughputUnderlayMbps > 0 {
			r.ThroughputRatio = round(r.ThroughputOverlayMbps/r.ThroughputUnderlayMbps, 4)
		}
	}
	check("throughput", err == nil && to.Mbps > 0, "overlay %.0f Mbit/s vs underlay %.0f Mbit/s (ratio %.3f)%s",
		r.ThroughputOverlayMbps, r.ThroughputUnderlayMbps, r.ThroughputRatio, errSuffix(err))
	if r.BridgedNetwork != "" {
		ba, bb := l.BridgedHosts(r.BridgedNetwork, a), l.BridgedHosts(r.BridgedNetwork, b)
		if len(ba) > 0 && len(bb) > 0 {
			step("throughput: %s -> %s on bridged network %s, %s", ba[0], bb[0], r.BridgedNetwork, cfg.Throughput)
			tb, err := lab.Iperf3(ctx, ba[0], bb[0], bb[0].LAN.Addr(), cfg.Throughput, 1)
			if err == nil {
				r.ThroughputBridgedMbps = round(tb.Mbps, 1)
				if r.ThroughputOverlayMbps > 0 {
					r.ThroughputBridgedRatio = round(r.ThroughputBridgedMbps/r.ThroughputOverlayMbps, 4)
				}
			}
			check("throughput: bridged", err == nil && tb.Mbps > 0, "bridged %.0f Mbit/s vs routed %.0f Mbit/s (ratio %.3f)%s",
				r.ThroughputBridgedMbps, r.ThroughputOverlayMbps, r.ThroughputBridgedRatio, errSuffix(err))
		}
	}
	check("agents running", d.AgentsAlive() == nil, "every agent still runs%s", errSuffix(d.AgentsAlive()))

	r.ChecksPassed = !slices.ContainsFunc(r.Checks, func(c Check) bool { return !c.Passed })
	r.RTTOverlayMs, r.RTTUnderlayMs = round(r.RTTOverlayMs, 3), round(r.RTTUnderlayMs, 3)
	r.DurationS = round(time.Since(start).Seconds(), 1)
	if !r.ChecksPassed {
		return r, errors.New("demo checks failed")
	}
	return r, nil
}

// WireGuardKind tells whether a gateway runs kernel or userspace WireGuard:
// "kernel", "userspace (wireguard-go)" or "unknown". It reads the link's
// kind, not its text: fednet's mark (the interface alias) names the backend
// on either kind.
func WireGuardKind(ctx context.Context, gw *lab.Node) string {
	out, err := gw.Run(ctx, "ip", "-d", "-j", "link", "show", "dev", spec.DefaultInterface)
	if err != nil {
		return "unknown"
	}
	var links []struct {
		LinkInfo struct {
			Kind string `json:"info_kind"`
		} `json:"linkinfo"`
	}
	if json.Unmarshal([]byte(out), &links) != nil || len(links) != 1 {
		return "unknown"
	}
	switch links[0].LinkInfo.Kind {
	case "wireguard":
		return "kernel"
	case "tun":
		return "userspace (wireguard-go)"
	}
	return "unknown"
}

func matrixTable(l *lab.Lab, sites []string, pairs []Pair, res []lab.PingResult) string {
	var hosts []*lab.Node
	for _, s := range sites {
		hosts = append(hosts, l.Hosts(s)...)
	}
	got := map[[2]string]lab.PingResult{}
	for i, p := range pairs {
		got[[2]string{p.From.Name, p.To.Name}] = res[i]
	}
	var b strings.Builder
	b.WriteString("\nConnectivity matrix (replies of 3 pings; rows ping columns):\n")
	fmt.Fprintf(&b, "%-14s", "")
	for _, h := range hosts {
		fmt.Fprintf(&b, " %-12s", h.Name)
	}
	b.WriteString("\n")
	for _, from := range hosts {
		fmt.Fprintf(&b, "%-14s", from.Name)
		for _, to := range hosts {
			cell := "-"
			if r, ok := got[[2]string{from.Name, to.Name}]; ok {
				cell = fmt.Sprintf("%d/%d", r.Received, r.Sent)
			}
			fmt.Fprintf(&b, " %-12s", cell)
		}
		b.WriteString("\n")
	}
	return b.String() + "\n"
}

func samples(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return "; e.g. " + strings.Join(s, "; ")
}

func errSuffix(err error) string {
	if err == nil {
		return ""
	}
	return ": " + err.Error()
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func round(v float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}
