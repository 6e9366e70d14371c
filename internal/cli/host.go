package cli

import (
	"errors"
	"fmt"
	"log"
	"net/netip"

	"github.com/spf13/cobra"

	"github.com/fednet/fednet/internal/client"
	"github.com/fednet/fednet/internal/neighbor"
)

func newHostCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "host join|leave|list",
		Short: "Join this host to a bridged network through a neighbor tunnel to its gateway",
		Long: `At a site whose fabric drops frames from unknown MAC addresses (spec:
fabric: dropsUnknownMACs; AWS and OpenNebula do this), a bridged network cannot
reach the site's hosts through the gateway's port. Each host there joins
through a neighbor tunnel instead: a unicast VXLAN tunnel over the site's LAN
from the host to its site's gateway (NetFed's neighbor tunnels). The gateway's
end comes from its plan; "fednet host join" sets up the host's end and keeps it
up. See docs/neighbors.md.`,
		Example: `  # on an operator machine: a one-time host token for site aws-eu, network lan
  fednet token create --site aws-eu --network lan > lan.token
  # on the host (root): join and keep the tunnel up (runs in the foreground)
  fednet host join --network lan --token-file lan.token --address 192.168.50.40/24
  # on the host: leave (the gateway's end goes too)
  fednet host leave`,
	}
	cmd.AddCommand(newHostJoinCmd(), newHostLeaveCmd(), newHostListCmd())
	return cmd
}

func newHostJoinCmd() *cobra.Command {
	var cfg neighbor.Config
	var tokenFile, lan, address string
	cmd := &cobra.Command{
		Use:   "join --network NAME --token-file FILE [--address CIDR] [--data-dir DIR]",
		Short: "Join a bridged network through a neighbor tunnel and keep it up",
		Long: `Join enrolls this host with a one-time host token (from "fednet token create
--site SITE --network NETWORK"), sends the manager the host's LAN address and
keeps the host's identity in --data-dir (host.json, mode 0600; the token is
not needed again). It then creates the tunnel: a VXLAN device fvx<VNI> (VNI =
the network's id) from the host's LAN address to its gateway's, on the UDP port
the manager gave the host (4790 + its slot at the site), with the network's
MTU, and with --address when given (the host's address on the bridged
network; without it, configure one yourself, e.g. by DHCP over the network).

It stays in the foreground: it follows changes through the manager (long
poll), sets the tunnel up again every few seconds (a deleted device comes
back), and retries with backoff while the manager is away (the tunnel keeps
working). Stopping it leaves the tunnel as it is; "fednet host leave" removes
it. When the operator removes the host, join removes the tunnel and exits
with an error.`,
		Example: `  fednet host join --network lan --token-file lan.token --address 192.168.50.40/24
  fednet host join --network lan     # later runs: the identity is in --data-dir`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if tokenFile != "" {
				var err error
				if cfg.Token, err = readTokenFile(tokenFile); err != nil {
					return err
				}
			}
			if lan != "" {
				a, err := netip.ParseAddr(lan)
				if err != nil {
					return fmt.Errorf("--lan-address %q: want an IP address, like 10.1.0.10", lan)
				}
				cfg.LANAddress = a
			}
			if address != "" {
				p, err := netip.ParsePrefix(address)
				if err != nil {
					return fmt.Errorf("--address %q: want ADDRESS/LENGTH on the bridged network's subnet, like 192.168.50.40/24", address)
				}
				cfg.Address = p
			}
			if cfg.Network == "" {
				return errors.New("--network NAME is required: the bridged network to join (the host token's)")
			}
			cfg.Logf = log.New(cmd.ErrOrStderr(), "", log.LstdFlags).Printf
			return neighbor.Run(cmd.Context(), cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Network, "network", "", "the bridged network to join")
	f.StringVar(&tokenFile, "token-file", "", "file holding the host token (first join only)")
	f.StringVar(&cfg.DataDir, "data-dir", neighbor.DefaultDataDir, "directory of the host's identity and last tunnel")
	f.StringVar(&cfg.Name, "name", "", "the host's name, unique among hosts (default: the host name)")
	f.StringVar(&lan, "lan-address", "", "the host's address on its site's LAN (default: its first IPv4 address)")
	f.StringVar(&address, "address", "", "the host's address on the bridged network, set on the tunnel device (CIDR)")
	f.DurationVar(&cfg.Resync, "resync", neighbor.DefaultResync, "how often the tunnel is checked and set up again")
	return cmd
}

func newHostLeaveCmd() *cobra.Command {
	var dataDir string
	cmd := &cobra.Command{
		Use:   "leave [--data-dir DIR]",
		Short: "Leave the bridged network: remove the tunnel here and at the gateway",
		Long: `Leave tells the manager that this host leaves (the gateway's end of the
tunnel and its firewall opening go, and the host's slot is free again),
removes the tunnel device here and forgets the identity in --data-dir. Stop
"fednet host join" first. When the manager cannot be reached, the device is
removed all the same and the error says so; the operator can then remove the
host with the admin token.`,
		Example: `  fednet host leave`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			changes, err := neighbor.Leave(cmd.Context(), neighbor.Config{DataDir: dataDir})
			printChanges(cmd.OutOrStdout(), changes)
			return err
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", neighbor.DefaultDataDir, "directory of the host's identity and last tunnel")
	return cmd
}

func newHostListCmd() *cobra.Command {
	var cf connFlags
	cmd := &cobra.Command{
		Use:     "list",
		Short:   "List the hosts joined through neighbor tunnels (admin)",
		Example: `  fednet host list`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return managerCall(&cf, func(c *client.Client) error {
				hosts, err := c.Hosts(cmd.Context())
				if err != nil {
					return err
				}
				tw := newTable(cmd.OutOrStdout())
				fmt.Fprintln(tw, "HOST\tSITE\tNETWORK\tADDRESS\tGATEWAY\tUDP PORT")
				for _, h := range hosts {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\n", h.Name, h.Site, h.Network, h.Address, h.Gateway, h.UDPPort)
				}
				return tw.Flush()
			})
		},
	}
	cf.add(cmd)
	return cmd
}
