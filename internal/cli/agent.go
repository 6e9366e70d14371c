package cli

import (
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/fednet/fednet/internal/agent"
	"github.com/fednet/fednet/internal/dataplane"
	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/wgdev"
)

func newAgentCmd() *cobra.Command {
	var planFile, keyFile, wgMode string
	var once, down bool
	var resync time.Duration
	cmd := &cobra.Command{
		Use:   "agent --plan FILE --key FILE",
		Short: "Apply a gateway's plan to this machine and keep it applied",
		Long: `Agent runs on a site's gateway. It applies the gateway's plan (from
"fednet plan --gateway NAME -o json") to the kernel: the WireGuard interface and
peers, addresses, routes, IP forwarding and the fednet nftables table. It reads
what is there first and changes only what differs, so running it again changes
nothing.

It then keeps running: it re-applies when the plan file changes or on SIGHUP,
and every --resync to repair drift. Stopping the agent leaves the tunnels up;
--down removes everything the plan created.

WireGuard: the kernel module when the kernel has it, otherwise a userspace
device ("fednet wgdev", wireguard-go) in its own long-lived process, so that
agent restarts never drop a tunnel. Force one with --wireguard.`,
		Example: `  fednet agent --plan /etc/fednet/plan.json --key /etc/fednet/private.key
  fednet agent --plan plan.json --key private.key --once   # apply and exit
  fednet agent --plan plan.json --key private.key --down   # remove it all`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if planFile == "" {
				return errors.New("--plan FILE is required (write one with: fednet plan -f spec.yaml --gateway NAME -o json)")
			}
			mode, err := dataplane.ParseMode(wgMode)
			if err != nil {
				return fmt.Errorf("--wireguard: %w", err)
			}
			var priv plan.Key
			if !down {
				k, err := readPrivateKey(keyFile)
				if err != nil {
					return err
				}
				priv = plan.Key(k)
			}
			logger := log.New(os.Stderr, "", log.LstdFlags)
			dp, err := dataplane.NewLinux(dataplane.Config{PrivateKey: priv, WireGuard: mode, Logf: logger.Printf})
			if err != nil {
				return err
			}
			cfg := agent.Config{PlanFile: planFile, Dataplane: dp, Resync: resync, Logf: logger.Printf}
			ctx := cmd.Context()
			out := cmd.OutOrStdout()
			switch {
			case down:
				changes, err := agent.Down(ctx, cfg)
				printChanges(out, changes)
				return err
			case once:
				changes, err := agent.Once(ctx, cfg)
				printChanges(out, changes)
				return err
			}
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			reload := make(chan struct{}, 1)
			go func() {
				for range hup {
					select {
					case reload <- struct{}{}:
					default:
					}
				}
			}()
			cfg.Reload = reload
			logger.Printf("agent: applying %s", planFile)
			return agent.Run(ctx, cfg)
		},
	}
	cmd.Flags().StringVar(&planFile, "plan", "", "plan file (JSON from fednet plan --gateway NAME -o json)")
	cmd.Flags().StringVar(&keyFile, "key", "", "WireGuard private key file (from fednet keygen)")
	cmd.Flags().StringVar(&wgMode, "wireguard", "auto", "WireGuard implementation: auto, kernel or userspace")
	cmd.Flags().BoolVar(&once, "once", false, "apply the plan once and exit")
	cmd.Flags().BoolVar(&down, "down", false, "remove everything the plan created and exit")
	cmd.Flags().DurationVar(&resync, "resync", agent.DefaultResync, "how often to re-apply the plan to repair drift")
	cmd.MarkFlagsMutuallyExclusive("once", "down")
	return cmd
}

func printChanges(w interface{ Write([]byte) (int, error) }, changes []dataplane.Change) {
	for _, c := range changes {
		fmt.Fprintln(w, c)
	}
	if len(changes) == 0 {
		fmt.Fprintln(w, "no changes")
	}
}

func newWgdevCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "wgdev IFNAME",
		Short: "Run a userspace WireGuard device (started by the agent when the kernel has no WireGuard)",
		Long: `Wgdev creates the TUN interface IFNAME and runs WireGuard on it in userspace
(wireguard-go), with the standard control socket /var/run/wireguard/IFNAME.sock
that "wg" and the agent configure it through. It runs until the interface is
deleted or it gets SIGTERM. The agent starts it by itself when needed; you
rarely run it by hand.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			logger := log.New(os.Stderr, "wgdev: ", log.LstdFlags)
			return wgdev.Run(cmd.Context(), args[0], logger.Printf)
		},
	}
}
