package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/fednet/fednet/internal/agent"
	"github.com/fednet/fednet/internal/bench"
	"github.com/fednet/fednet/internal/bench/controlplane"
	"github.com/fednet/fednet/internal/demo"
)

func newBenchCmd() *cobra.Command {
	var (
		labName, specFile, name, out string
		quick, keep                  bool
		between                      []string
		live                         bench.LiveConfig
		source, agentDir             string
	)
	cmd := &cobra.Command{
		Use:   "bench [--lab NAME | --spec FILE | --live ...] [--out DIR] [--quick]",
		Short: "Measure the overlay against the underlay and a plain WireGuard tunnel; write tables and plots",
		Long: `Bench measures what the overlay costs, side by side in one run:
  - round-trip time: N pings (default 200, 10 ms apart): p50/p90/p99/mean,
    distribution and time series;
  - TCP throughput with 1 and 4 streams (iperf3; in a full run three rounds,
    every path in turn, each path's median counting);
  - UDP at offered rates of 100, 500 and 1000 Mbit/s, with loss;
  - traffic overhead: bytes on the wire over payload bytes of a fixed-size TCP
    transfer (NetFed's Table 2);
  - latency under load: pings during a bulk transfer (NetFed's Table 3; in a
    full run three rounds too, every round's pings together);
  - TCP throughput against added path delay 0 to 200 ms (when the lab can
    delay a link).
Each on three paths: the overlay (host to host across two sites through the
gateways), the underlay (gateway to gateway between public addresses, no
tunnel) and a standalone wireguard-go tunnel set up by hand without fednet, on
the same machine; for the routed network and for each bridged network of the
spec. Results: results.json (with the overlay/underlay, fednet/standalone and
wire/payload ratios), results.md, plots (SVG and PNG) and index.html, in the
output directory.

On a lab (needs root): --lab NAME measures a running, federated lab (from
"fednet lab demo --keep" or "fednet lab up -f SPEC --federate"); without
--lab, bench builds a lab from --spec (default: the demo's three sites),
federates it, measures and removes it. Either way it builds a reference lab
of the same two sites for the underlay and the standalone tunnel.
The two sites are the first two of the spec whose link is WireGuard, or the
ones --between names. When the spec has a link on IPsec (overlay.backend or
topology.links[].backend: ipsec), bench measures its first one too, as the
mode "routed (ipsec)", beside "routed (wireguard/udp)" and, with UDP of the
second site blocked, "tcp443 (wireguard/tcp443)".

On a live federation: --live, run on a host of one site, against a host of
another site (--overlay-target) and, for the underlay, the public address of
that site's gateway or any machine next to it outside the overlay
(--underlay-target); both must run "iperf3 -s". On a gateway, bench sends
into the overlay from the gateway's LAN address (--source; by default the one
in the plan the agent cached in --agent-data-dir), because what a gateway
sends by default leaves with its transit address, which the remote gateways
do not forward. See docs/bench.md.`,
		Example: `  fednet bench --quick                                # a short run on a lab of its own
  fednet bench --spec examples/bridged.yaml --out bench-bridged
  fednet bench --quick --spec examples/ipsec-mixed.yaml --name demo  # WireGuard/UDP, TCP/443, IPsec side by side
  fednet bench --spec examples/ipsec-mixed.yaml --name demo --between azure-we,lab
  fednet lab demo --keep && fednet bench --lab demo
  fednet bench --live --overlay-target 10.2.0.1 --underlay-target 203.0.113.20
  fednet bench --live --overlay-target 10.2.0.1 --source 10.1.0.254   # on gateway aws-gw: from its LAN address`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			settings := bench.DefaultSettings()
			if quick {
				settings = bench.QuickSettings()
			}
			if out == "" {
				out = "bench-" + time.Now().UTC().Format("20060102-150405")
			}
			progress := cmd.ErrOrStderr()
			var res *bench.Results
			var err error
			if live.Overlay != "" || live.Underlay != "" || cmd.Flags().Changed("live") {
				live.Settings, live.Quick, live.Progress = settings, quick, progress
				if live.Source, err = liveSource(source, agentDir, progress); err != nil {
					return err
				}
				res, err = bench.RunLive(cmd.Context(), live)
			} else {
				if err := needRoot(); err != nil {
					return err
				}
				cfg := bench.LabConfig{Lab: labName, Name: name, Settings: settings, Quick: quick, Keep: keep, Progress: progress, Between: between,
					LogsDir: filepath.Join(out, "logs")}
				switch {
				case specFile != "":
					if _, err := readSpec(specFile); err != nil {
						return err
					}
					b, err := os.ReadFile(specFile)
					if err != nil {
						return err
					}
					cfg.SpecYAML, cfg.SpecName = string(b), specFile
				case labName == "":
					cfg.SpecYAML, err = demo.GenerateSpecYAML(3)
					if err != nil {
						return err
					}
					cfg.SpecName = "the demo's three sites"
				}
				res, err = bench.RunLab(cmd.Context(), cfg)
			}
			if res != nil {
				if werr := bench.Write(out, res); werr != nil {
					return werr
				}
				abs, _ := filepath.Abs(out)
				fmt.Fprint(cmd.OutOrStdout(), bench.Headline(res))
				fmt.Fprintf(cmd.OutOrStdout(), "\nresults in %s (open index.html)\n", abs)
			}
			return err
		},
	}
	cmd.Flags().StringVar(&labName, "lab", "", "measure this running, federated lab instead of building one")
	cmd.Flags().StringVarP(&specFile, "spec", "f", "", "the lab's spec (default: the demo's three sites; with --lab: the spec saved with the lab)")
	cmd.Flags().StringVar(&name, "name", bench.DefaultLabName, "name of the lab bench builds (without --lab)")
	cmd.Flags().StringVarP(&out, "out", "o", "", "output directory (default bench-<UTC timestamp>)")
	cmd.Flags().BoolVar(&quick, "quick", false, "short run: 20 pings, 1 s transfers, one UDP rate, delays 0 and 50 ms")
	cmd.Flags().BoolVar(&keep, "keep", false, "leave the labs bench built running")
	cmd.Flags().StringSliceVar(&between, "between", nil, "lab: measure between these two sites, SITE_A,SITE_B (default: the first two sites whose link is WireGuard; a spec's first IPsec link is measured beside it as routed (ipsec))")
	cmd.Flags().Bool("live", false, "measure a live federation from this machine (see --overlay-target)")
	cmd.Flags().StringVar(&live.Overlay, "overlay-target", "", "live: overlay address of a host in another site running iperf3 -s")
	cmd.Flags().StringVar(&live.Underlay, "underlay-target", "", "live: public address, outside the overlay, next to that host, running iperf3 -s")
	cmd.Flags().StringVar(&live.WireInterface, "wire-interface", "", "live, when run on a gateway: its public interface, whose counters give the traffic overhead")
	cmd.Flags().StringVar(&source, "source", "", "live, when run on a gateway: the address to send into the overlay from, the gateway's LAN address (default: from the plan cached in --agent-data-dir, if any)")
	cmd.Flags().StringVar(&agentDir, "agent-data-dir", "/var/lib/fednet/agent", "live: the data directory of this machine's agent, if it is a gateway; its cached plan gives the LAN address to send from")
	cmd.AddCommand(newBenchControlPlaneCmd())
	return cmd
}

// newBenchControlPlaneCmd is `fednet bench control-plane`.
func newBenchControlPlaneCmd() *cobra.Command {
	var (
		gateways      []int
		out           string
		asJSON        bool
		cfg           controlplane.Config
		noDeltas, gz0 bool
		noLocal       bool
		http2         bool
	)
	cmd := &cobra.Command{
		Use:   "control-plane --gateways N[,N...] [--managers M] [--store sqlite|etcd] [--json]",
		Short: "Measure the control plane: propagation of spec changes to N simulated agents, planning, bytes, CPU, reconnection",
		Long: `control-plane runs N simulated agents (real HTTPS, real enrollment, real long
polls with deltas and gzip, a status report every 5 s as fednet agent sends,
a data plane that applies nothing) against real fednet manager processes on
this machine: one on SQLite, or --managers M on an etcd cluster of
--etcd-members started for the run (the etcd-server package; make deps
installs it). It measures the managers' load for 10 s while nothing
changes, then applies a sequence of changes through the first manager and
measures each: a site added, one site's prefix changed, a bridged
network added over every site, a gateway removed. For each: the planning time
(the managers' own log), propagation p50/p99/max to every affected agent (from
the start of the API call to the arrival of the agent's new plan), the bytes
the managers sent, the managers' CPU seconds and peak RSS. Then it stops every
manager at once, starts them again, and measures how long the agents (backing
off with jitter) take to come back, and how an operator's request fares
meanwhile.

With several --gateways values it runs each and plots propagation p99 and
planning time against N. Everything runs on loopback, on this machine's CPUs:
the figures include the agents' own work. The N agents share this process's
heap, which it collects before each change, outside the change's window (a
real agent's heap is a few megabytes); --collect-in-window leaves its
collections where they fall. It raises the open file limit (N agents
hold 2N connections: their long polls and their reports; N with --http2).
Results: results.json, results.md and the plots (SVG and PNG) in --out;
--json prints the results on stdout.`,
		Example: `  fednet bench control-plane --gateways 1000 --json
  fednet bench control-plane --gateways 10,100,300,1000 --managers 3 --out cp-etcd
  fednet bench control-plane --gateways 300 --no-deltas --no-compression`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(gateways) == 0 {
				return errors.New("--gateways N is required: the number of simulated gateways (several, comma-separated, for a sweep)")
			}
			if out == "" {
				out = "bench-control-plane-" + time.Now().UTC().Format("20060102-150405")
			}
			cfg.NoDeltas, cfg.NoCompression, cfg.NoLocal, cfg.HTTP2, cfg.Progress = noDeltas, gz0, noLocal, http2, cmd.ErrOrStderr()
			var results []*controlplane.Result
			for i, n := range gateways {
				run := cfg
				run.Gateways = n
				run.Dir = filepath.Join(out, "runs", fmt.Sprintf("%d-%d", i, n))
				res, err := controlplane.Run(cmd.Context(), run)
				if err != nil {
					return fmt.Errorf("control-plane bench with %d gateways: %w (logs in %s)", n, err, run.Dir)
				}
				results = append(results, res)
				// Keep only the logs of a run that succeeded.
				cleanRun(run.Dir)
			}
			if err := controlplane.Write(out, results); err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(results)
			}
			abs, _ := filepath.Abs(out)
			fmt.Fprint(cmd.OutOrStdout(), controlplane.Markdown(results))
			fmt.Fprintf(cmd.OutOrStdout(), "results in %s\n", abs)
			return nil
		},
	}
	f := cmd.Flags()
	f.IntSliceVar(&gateways, "gateways", nil, "simulated gateways (sites): N, or N,N,... for a sweep (required)")
	f.IntVar(&cfg.Managers, "managers", 1, "manager processes; more than one share an etcd cluster")
	f.StringVar(&cfg.Store, "store", "", "sqlite or etcd (default: sqlite for one manager, etcd for several)")
	f.IntVar(&cfg.EtcdMembers, "etcd-members", 3, "members of the etcd cluster the run starts")
	f.StringVarP(&out, "out", "o", "", "output directory (default bench-control-plane-<UTC timestamp>)")
	f.BoolVar(&asJSON, "json", false, "print the results as JSON")
	f.BoolVar(&noDeltas, "no-deltas", false, "agents take whole plans, never deltas")
	f.BoolVar(&gz0, "no-compression", false, "agents do not accept gzip")
	f.BoolVar(&cfg.CollectInWindow, "collect-in-window", false, "leave the collections of the simulated agents' shared heap where they fall instead of collecting it before each change (docs/manager.md, Sizing)")
	f.BoolVar(&noLocal, "no-local", false, "agents take plans without their Local (the spec and inputs they plan failures with), as fednet agent --no-failover")
	f.BoolVar(&http2, "http2", false, "agents speak HTTP/2 to the managers (one connection each), not HTTP/1.1 as fednet's client does: to measure what HTTP/1.1 saves")
	return cmd
}

// cleanRun removes a finished run's data directories (databases, etcd
// data), keeping its logs.
func cleanRun(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if e.IsDir() {
			os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
}

// liveSource is the address a live run sends into the overlay from:
// --source, else the LAN address of the gateway whose agent cached its plan
// in agentDir, else none (the default route's source: right on a host).
func liveSource(source, agentDir string, progress io.Writer) (netip.Addr, error) {
	if source != "" {
		a, err := netip.ParseAddr(source)
		if err != nil {
			return netip.Addr{}, fmt.Errorf("--source %q: want this gateway's LAN address, like 10.1.0.254: %w", source, err)
		}
		return a, nil
	}
	cached, err := agent.LoadCachedPlan(agentDir)
	if err != nil || !cached.Plan.LAN.Address.IsValid() {
		return netip.Addr{}, nil // not a gateway (or not a managed one): send as the routes say
	}
	a := cached.Plan.LAN.Address.Addr()
	fmt.Fprintf(progress, "this machine is gateway %s (its agent's plan in %s): sending into the overlay from its LAN address %s (--source overrides)\n", cached.Plan.Name, agentDir, a)
	return a, nil
}
