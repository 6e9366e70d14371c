package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fednet/fednet/internal/faults"
)

func newLabFaultsCmd() *cobra.Command {
	var (
		file, name    string
		only          []string
		managerDown   bool
		asJSON, keep  bool
		hold, after   time.Duration
		transferMbps  float64
		probeInterval time.Duration
	)
	cmd := &cobra.Command{
		Use:   "faults [-f SPEC] [--only NAME] [--manager-down] [--json]",
		Short: "Inject failures into a federated lab and measure what the federation does",
		Long: `Faults builds the lab of a spec (default examples/ha.yaml: four sites, one of
them with two gateways), starts a manager and one agent per gateway, and then
injects one failure after another. During each, every pair of hosts at
different sites is probed every 10 ms (ICMP echo with sequence numbers) and
an iperf3 TCP transfer crosses the path the fault hits. Each fault is
repaired after a few seconds, and the suite reports per fault: what was sent
and lost on the pairs it concerns, the longest outage (the longest gap
between two answered probes), whether the TCP connection survived, whether
and how soon after the repair every pair answered again, and what the pairs
it does not concern lost (they must lose nothing).

The faults, in order:
  active-gateway-down   the HA site's active gateway machine: cables out,
                        every process killed; repair: cables in, agent
                        started again
  active-uplink-cut     its internet link only (its LAN stays up)
  wgdev-killed          kill -9 its userspace WireGuard (fednet wgdev); no
                        repair: the federation must heal by itself
  agent-killed          kill -9 its agent; repair: start it again
  standby-down          the standby gateway machine, as active-gateway-down
  link-cut              one inter-site link, both ways (nftables in the lab
                        internet between the two gateways' addresses);
                        watched 14 s after the repair, through the way back
                        to the repaired link (way_back_lost)
  link-cut-one-way      the same link, one way
  link-flap             the same link cut and restored every 2 s for 20 s
  relay-down            the gateway that relays two other sites' traffic
  site-lan-split        the HA site's two gateways stop seeing each other on
                        their LAN; hosts still reach both
  manager-killed-during-change
                        kill -9 the manager right after it stored a change
                        (the underlay MTU); repair: start it; the change
                        must land
  operator-activate     fednet gateway activate: the HA site's active role
                        moved to the standby through the API, and back after
                        the hold (no failure: it measures a planned handover)

With --manager-down the manager is stopped once every agent has its plan.
The report ends with checks_passed: the resilience thresholds (outage
<= 1 s and TCP surviving for the first three faults, <= 3 s for link-cut,
link-cut-one-way and relay-down; nothing lost for standby-down,
agent-killed, operator-activate, link-cut's way back and every pair a fault
does not concern; every fault recovered). It exits 1 when a check fails.
It removes the lab when it ends, unless --keep. It needs root. See
docs/resilience.md for the mechanisms and the figures.`,
		Example: `  fednet lab faults
  fednet lab faults --only link-cut --only agent-killed
  fednet lab faults --manager-down --json > faults.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := needRoot(); err != nil {
				return err
			}
			if _, err := faults.Selected(only); err != nil {
				return err
			}
			data, err := readSpecFile(cmd, file)
			if err != nil {
				return fmt.Errorf("%w (run from the repository, or pass -f SPEC)", err)
			}
			cfg := faults.Config{
				SpecYAML: string(data), Only: only, ManagerDown: managerDown, LabName: name, Keep: keep,
				Hold: hold, After: after, TransferRate: transferMbps * 1e6, Interval: probeInterval,
				Progress: cmd.OutOrStdout(),
			}
			if asJSON {
				cfg.Progress = cmd.ErrOrStderr()
			}
			r, err := faults.Run(cmd.Context(), cfg)
			if r == nil {
				return err
			}
			if asJSON {
				b, jerr := json.MarshalIndent(r, "", "  ")
				if jerr != nil {
					return jerr
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s\n", b)
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "\n%s\n", faults.Table(r.Faults))
			failed := 0
			for _, c := range r.Checks {
				if !c.Passed {
					failed++
					fmt.Fprintf(out, "FAIL %s: %s\n", c.Name, c.Detail)
				}
			}
			verdict := "all checks passed"
			if !r.ChecksPassed {
				verdict = fmt.Sprintf("%d of %d checks FAILED", failed, len(r.Checks))
			}
			fmt.Fprintf(out, "\n%d faults on %s (manager %s, virtual address held by %s), %.1f s in all: %s\n",
				len(r.Faults), r.Federation, r.Manager, r.VirtualAddress, r.DurationS, verdict)
			return err
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "examples/ha.yaml", "federation spec (YAML) with a site of two gateways")
	cmd.Flags().StringVar(&name, "name", "faults", "lab name (lowercase letters and digits)")
	cmd.Flags().StringSliceVar(&only, "only", nil, "run only these faults (repeat, or separate with commas): "+strings.Join(faults.Names, ", "))
	cmd.Flags().BoolVar(&managerDown, "manager-down", false, "stop the manager once every agent has its plan")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as one JSON object (progress goes to standard error)")
	cmd.Flags().BoolVar(&keep, "keep", false, "leave the lab running (remove it with: fednet lab down --name faults)")
	cmd.Flags().DurationVar(&hold, "hold", 5*time.Second, "how long each fault lasts before its repair")
	cmd.Flags().DurationVar(&after, "after", 10*time.Second, "how long the TCP transfer goes on after a repair")
	cmd.Flags().Float64Var(&transferMbps, "transfer-mbps", 20, "rate cap of the TCP transfer, in Mbit/s")
	cmd.Flags().DurationVar(&probeInterval, "interval", 10*time.Millisecond, "interval between two probes of a host pair")
	return cmd
}
