package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fednet/fednet/internal/demo"
	"github.com/fednet/fednet/internal/lab"
)

func newLabCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "lab",
		Short: "Build a federation's sites in network namespaces on this machine",
		Long: `Lab builds the sites of a spec on one Linux machine, in network namespaces:
an "internet" namespace with a bridge and routers for 198.51.100.0/24 and
203.0.113.0/24; per site a switch namespace (a bridge standing in for the cloud
fabric), one namespace per gateway (a public and a LAN interface) and host
namespaces whose only route into the overlay points at their gateway.

Every namespace is named fnlab-<name>-..., so "fednet lab down" finds and
removes everything, also after a crash. The lab never changes the addresses or
routes of this machine itself. It needs root.`,
	}
	cmd.AddCommand(newLabUpCmd(), newLabDownCmd(), newLabStatusCmd(), newLabExecCmd(), newLabDemoCmd(), newLabImpairCmd(), newLabFaultsCmd(), newLabInteropCmd())
	return cmd
}

type labFlags struct {
	file, name string
	hosts      int
}

func (f *labFlags) register(cmd *cobra.Command, needSpec bool) {
	if needSpec {
		cmd.Flags().StringVarP(&f.file, "file", "f", "", "federation spec (YAML)")
	}
	cmd.Flags().StringVar(&f.name, "name", lab.DefaultName, "lab name (lowercase letters and digits), to run several labs side by side")
	if needSpec {
		cmd.Flags().IntVar(&f.hosts, "hosts", 0, "hosts per site (default: the spec's lab.hostsPerSite, else 2)")
	}
}

// config checks for root and reads the spec into a lab configuration.
func (f *labFlags) config() (lab.Config, error) {
	if err := needRoot(); err != nil {
		return lab.Config{}, err
	}
	fed, err := readSpec(f.file)
	if err != nil {
		return lab.Config{}, err
	}
	// Hosts on the spec's bridged networks, as the demo places them.
	bridged, err := demo.LabBridged(fed)
	if err != nil {
		return lab.Config{}, fmt.Errorf("%s: %w", f.file, err)
	}
	return lab.Config{Federation: fed, Name: f.name, HostsPerSite: f.hosts, Bridged: bridged}, nil
}

// open opens the lab the flags name, built earlier from the same spec.
func (f *labFlags) open(ctx context.Context) (*lab.Lab, error) {
	cfg, err := f.config()
	if err != nil {
		return nil, err
	}
	return lab.Open(ctx, cfg)
}

func needRoot() error {
	if os.Geteuid() != 0 {
		return errors.New("the lab creates network namespaces and needs root; run it with sudo")
	}
	return nil
}

func newLabUpCmd() *cobra.Command {
	var lf labFlags
	var federate bool
	var managers int
	cmd := &cobra.Command{
		Use:   "up -f SPEC",
		Short: "Build a lab from a spec (and with --federate, run an agent per gateway)",
		Long: `Up builds the lab of a spec. With --federate it also creates a key per gateway,
computes the plans and starts one "fednet agent" per gateway, so the sites are
federated; the agents keep running after this command returns. Remove it all
with "fednet lab down".

With --managers N it also runs N managers, each in its own namespace with an
etcd member beside it (the members form one cluster the managers share), and
applies the spec through them; with --federate too, each gateway's agent
enrolls with a join token that carries every manager's URL (instead of keys
and plan files), so it fails over between them.`,
		Example: `  fednet lab up -f examples/three-sites.yaml --federate
  fednet lab up -f examples/three-sites.yaml --managers 3 --federate
  fednet lab exec -f examples/three-sites.yaml aws-eu-h1 -- ping -c 3 10.2.0.1
  fednet lab down`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := lf.config()
			if err != nil {
				return err
			}
			cfg.Managers = managers
			ctx := cmd.Context()
			text, err := os.ReadFile(lf.file)
			if err != nil && lf.file != "-" {
				return err
			}
			l, err := lab.Up(ctx, cfg)
			if err != nil {
				return err
			}
			if lf.file != "-" {
				if err := l.SaveSpec(text); err != nil {
					return err
				}
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "lab %q is up (state in %s)\n", l.Name, l.Dir)
			for _, n := range l.Nodes() {
				addr := ""
				switch {
				case n.Public.IsValid():
					addr = fmt.Sprintf("public %s lan %s", n.Public, n.LAN)
				case n.LAN.IsValid():
					addr = "lan " + n.LAN.String()
				}
				fmt.Fprintf(out, "  %-8s %-16s %-28s %s\n", n.Role, n.Name, n.Namespace, addr)
			}
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			if managers > 0 {
				m, err := demo.StartManaged(ctx, l, exe)
				if err != nil {
					return err
				}
				if _, err := m.Apply(ctx, string(text)); err != nil {
					return fmt.Errorf("applying the spec: %w", err)
				}
				fmt.Fprintf(out, "managers at %s (CA fingerprint %s, admin token in %s/admin.token)\n", strings.Join(m.URLs(), ", "), m.CAFingerprint(), l.Manager.Dir)
				if federate {
					for _, g := range l.Gateways() {
						if err := m.Enroll(ctx, g.Name); err != nil {
							return err
						}
					}
					fmt.Fprintf(out, "agents enrolled and started; logs in %s/logs\n", l.Dir)
				}
				return nil
			}
			if federate {
				if _, err := demo.Deploy(ctx, l, exe); err != nil {
					return err
				}
				fmt.Fprintf(out, "agents started; logs in %s/logs\n", l.Dir)
			}
			return nil
		},
	}
	lf.register(cmd, true)
	cmd.Flags().BoolVar(&federate, "federate", false, "also generate keys and plans and start an agent per gateway (with --managers: enroll one per gateway)")
	cmd.Flags().IntVar(&managers, "managers", 0, "run this many managers (1, or 3 on a 3-member etcd cluster beside them) and apply the spec through them")
	return cmd
}

func newLabDownCmd() *cobra.Command {
	var lf labFlags
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Remove a lab: its processes, namespaces and state",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := needRoot(); err != nil {
				return err
			}
			if err := lab.Down(cmd.Context(), lf.name); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "lab %q removed\n", lf.name)
			return nil
		},
	}
	lf.register(cmd, false)
	return cmd
}

func newLabStatusCmd() *cobra.Command {
	var lf labFlags
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show what exists of a lab: namespaces and the processes in them",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := lab.Status(cmd.Context(), lf.name)
			if err != nil {
				return err
			}
			if !st.Exists() {
				fmt.Fprintf(cmd.OutOrStdout(), "lab %q does not exist\n", lf.name)
				return nil
			}
			fmt.Fprint(cmd.OutOrStdout(), st)
			return nil
		},
	}
	lf.register(cmd, false)
	return cmd
}

func newLabExecCmd() *cobra.Command {
	var lf labFlags
	cmd := &cobra.Command{
		Use:   "exec -f SPEC NODE -- COMMAND [ARGS...]",
		Short: "Run a command inside a lab node (a gateway, a host, a switch or the internet)",
		Long: `Exec runs a command in the network namespace of a lab node. Nodes are named
after the spec: a gateway by its name, hosts <site>-h1, <site>-h2, ..., switches
<site>-lan, and "internet". In a gateway the command also sees that gateway's
WireGuard control sockets, so "wg show" works there.`,
		Example: `  fednet lab exec -f examples/three-sites.yaml aws-gw -- wg show
  fednet lab exec -f examples/three-sites.yaml aws-eu-h1 -- ping -c 3 10.5.0.2`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			l, err := lf.open(ctx)
			if err != nil {
				return err
			}
			n := l.Node(args[0])
			if n == nil {
				var names []string
				for _, n := range l.Nodes() {
					names = append(names, n.Name)
				}
				return fmt.Errorf("no node %q in lab %q; nodes are %s", args[0], l.Name, strings.Join(names, ", "))
			}
			c := n.Command(ctx, args[1], args[2:]...)
			c.Stdin, c.Stdout, c.Stderr = os.Stdin, cmd.OutOrStdout(), cmd.ErrOrStderr()
			if err := c.Run(); err != nil {
				var ee interface{ ExitCode() int }
				if errors.As(err, &ee) && ee.ExitCode() > 0 {
					return exitError(ee.ExitCode())
				}
				return err
			}
			return nil
		},
	}
	lf.register(cmd, true)
	return cmd
}

func newLabDemoCmd() *cobra.Command {
	var sites, managers int
	var keep, asJSON, static bool
	var file string
	var throughput time.Duration
	cmd := &cobra.Command{
		Use:   "demo [--sites N] [--keep] [--json]",
		Short: "Build a lab of N sites, federate it with real agents and prove it works",
		Long: `Demo builds a lab (3 sites by default: aws, azure, onprem with 2 hosts each),
starts a manager in its own namespace (--managers 3: three, each beside a
member of a three-member etcd cluster they share), applies the spec through its API and
starts one agent per gateway, enrolled with a join token (with --static: keys
and plan files instead of a manager). The generated spec has two routed
networks (apps: every site but the last; ops: the first and the last) and one
bridged network (lan, 192.168.50.0/24, over every site, 2 more hosts per
site). It waits for the tunnels and then checks and prints:
  - the propagation time of a spec change (managed mode): from the API call
    until every affected agent reports the new plan applied;
  - the address plan;
  - a connectivity matrix: every host pings every host of the other sites it
    shares a network with; hosts of sites that share none must not answer;
  - on the bridged network, across sites: ARP, broadcast ping, IPv6
    link-local ping (neighbor discovery) and a ping to ff02::1;
  - the MTU boundary: the largest ping with don't-fragment crosses, one byte
    more is refused with an error the host sees, on both kinds of network;
  - round-trip time host-to-host over the overlay against gateway-to-gateway
    over the bare underlay;
  - TCP throughput (iperf3) host-to-host over the overlay against the same two
    gateways over the bare underlay, and the ratio; and between bridged hosts
    (VXLAN inside the tunnel) against the routed figure;
  - a wire check: a capture on the lab internet while traffic flows, where
    every packet between gateways must be WireGuard and no overlay address may
    appear in clear.
It exits 0 only if every check passes, and removes the lab unless --keep.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := needRoot(); err != nil {
				return err
			}
			cfg := demo.Config{Sites: sites, Keep: keep, Throughput: throughput, Static: static, Managers: managers}
			if file != "" {
				text, err := readSpecText(file)
				if err != nil {
					return err
				}
				cfg.SpecYAML = text
			}
			if !asJSON {
				cfg.Progress = cmd.OutOrStdout()
			} else {
				cfg.Progress = cmd.ErrOrStderr()
			}
			r, err := demo.Run(cmd.Context(), cfg)
			if asJSON && r != nil {
				b, jerr := json.MarshalIndent(r, "", "  ")
				if jerr != nil {
					return jerr
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s\n", b)
			} else if r != nil {
				fmt.Fprintf(cmd.OutOrStdout(), "\n%d/%d pairs, overlay RTT %.3f ms (underlay %.3f ms), throughput %.0f Mbit/s (underlay %.0f, ratio %.3f; bridged %.0f), %d plaintext packets, converged in %.2f s, %.1f s in all: %s\n",
					r.PairsOK, r.PairsTotal, r.RTTOverlayMs, r.RTTUnderlayMs, r.ThroughputOverlayMbps, r.ThroughputUnderlayMbps,
					r.ThroughputRatio, r.ThroughputBridgedMbps, r.PlaintextPackets, r.ConvergedS, r.DurationS, map[bool]string{true: "all checks passed", false: "CHECKS FAILED"}[r.ChecksPassed])
			}
			return err
		},
	}
	cmd.Flags().IntVar(&sites, "sites", 3, "number of sites (2 to 12)")
	cmd.Flags().StringVarP(&file, "file", "f", "", "run the demo on this spec instead of a generated one")
	cmd.Flags().BoolVar(&static, "static", false, "run the agents on plan files instead of a manager")
	cmd.Flags().IntVar(&managers, "managers", 1, "managers; more than one share an etcd cluster of as many members, one beside each manager")
	cmd.Flags().BoolVar(&keep, "keep", false, "leave the lab running (remove it with: fednet lab down --name demo)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as one JSON object (progress goes to standard error)")
	cmd.Flags().DurationVar(&throughput, "throughput-time", 5*time.Second, "length of each iperf3 run")
	return cmd
}
