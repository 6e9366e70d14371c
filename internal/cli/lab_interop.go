package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/fednet/fednet/internal/demo"
)

func newLabInteropCmd() *cobra.Command {
	var asJSON, keep bool
	var file string
	var throughput time.Duration
	cmd := &cobra.Command{
		Use:   "interop [--json] [-f SPEC]",
		Short: "Run every kind of link in one lab: WireGuard, IPsec, TCP/443 and external sites",
		Long: `Interop builds the lab "interop" from examples/interop.yaml (built in; -f
for another spec with the same shape): three sites joined by WireGuard over
UDP, one link on IPsec between two fednet gateways (strongSwan, userspace
ESP), a site whose UDP the lab's internet drops (its links move to TLS over
TCP 443 by themselves), and two external sites with no agent, an AWS
Site-to-Site VPN and an OpenStack VPNaaS router, each played by a standalone
strongSwan in its own namespace with a host behind it. Those are configured
only from "fednet external config SITE --format json", translated into
swanctl.conf, which shows the printed configuration is complete.

It starts a manager and one agent per gateway, then checks and prints:
  - every host pair whose sites share a network answers, counted apart for
    external sites, the IPsec link and the UDP-blocked site;
  - hosts behind an external site reach the sites of its networks and
    nothing else (and every other isolated pair stays isolated);
  - the manager shows the links to external sites up on ipsec and the
    blocked site's links on tcp443;
  - a capture on the lab's internet: the external sites' VPN gateways send
    only IKE and ESP (UDP 500/4500), the blocked site only TCP 443, and no
    packet carries overlay traffic in clear;
  - TCP throughput over the IPsec link, the TCP/443 link, a WireGuard/UDP
    link and into an external site, in the same run.
It exits 0 only if every check passes, and removes the lab.`,
		Example: `  sudo fednet lab interop
  sudo fednet lab interop --json > interop.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := needRoot(); err != nil {
				return err
			}
			cfg := demo.InteropConfig{Throughput: throughput, Keep: keep, Progress: cmd.OutOrStdout()}
			if asJSON {
				cfg.Progress = cmd.ErrOrStderr()
			}
			if file != "" {
				text, err := readSpecText(file)
				if err != nil {
					return err
				}
				cfg.SpecYAML = text
			}
			r, err := demo.RunInterop(cmd.Context(), cfg)
			if r != nil {
				if asJSON {
					b, jerr := json.MarshalIndent(r, "", "  ")
					if jerr != nil {
						return jerr
					}
					fmt.Fprintf(cmd.OutOrStdout(), "%s\n", b)
				} else {
					fmt.Fprintf(cmd.OutOrStdout(), "\nexternal %d/%d, ipsec %d/%d, tcp443 %d/%d pairs; isolation %d/%d reached; %d plaintext packets; throughput ipsec %.0f, tcp443 %.0f, udp %.0f, external %.0f Mbit/s; %.1f s: %s\n",
						r.ExternalPairsOK, r.ExternalPairsTotal, r.IPsecPairsOK, r.IPsecPairsTotal, r.TCP443PairsOK, r.TCP443PairsTotal,
						r.IsolatedReached, r.IsolatedPairs, r.PlaintextPackets, r.ThroughputIPsecMbps, r.ThroughputTCP443Mbps, r.ThroughputUDPMbps, r.ThroughputExternalMbps,
						r.DurationS, map[bool]string{true: "all checks passed", false: "CHECKS FAILED"}[r.ChecksPassed])
				}
			}
			if err == nil && r != nil && !r.ChecksPassed {
				err = errors.New("interop checks failed")
			}
			return err
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "run on this spec instead of the built-in examples/interop.yaml")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as one JSON object (progress goes to standard error)")
	cmd.Flags().DurationVar(&throughput, "throughput-time", 3*time.Second, "length of each iperf3 run")
	cmd.Flags().BoolVar(&keep, "keep", false, "leave the lab running (remove it with: fednet lab down --name interop)")
	return cmd
}

// readSpecText validates the spec file and returns its text (for a lab
// that applies the text itself).
func readSpecText(file string) (string, error) {
	if _, err := readSpec(file); err != nil {
		return "", err
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	return string(data), nil
}
