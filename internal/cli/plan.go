package cli

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/fednet/fednet/internal/plan"
)

func newPlanCmd() *cobra.Command {
	var file, gateway, output string
	cmd := &cobra.Command{
		Use:   "plan -f SPEC [--gateway NAME] [-o text|json]",
		Short: "Show the address plan and each gateway's desired state",
		Long: `Plan reads a federation spec, validates it, and prints the address plan (site,
prefix, gateway addresses) and the plan of every gateway: its WireGuard
interface, peers, routes, forwarding and firewall.

With --gateway and -o json it prints exactly the file "fednet agent --plan"
applies, for people who bring their own configuration management.

Public keys come from each gateway's publicKey in the spec (print one with
"fednet keygen" on the gateway); peers without a key are shown and skipped by
the agent until the key is known.`,
		Example: `  fednet plan -f examples/three-sites.yaml
  fednet plan -f spec.yaml --gateway aws-gw -o json > aws-gw.plan.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "text" && output != "json" {
				return fmt.Errorf("-o %q: want text or json", output)
			}
			f, err := readSpec(file)
			if err != nil {
				return err
			}
			for _, w := range f.Warnings() {
				fmt.Fprintf(cmd.ErrOrStderr(), "fednet: warning: %s\n", w)
			}
			gws, err := plan.Compute(f, plan.Inputs{})
			if err != nil {
				return err
			}
			if gateway != "" {
				g, err := plan.ForGateway(f, plan.Inputs{}, gateway)
				if err != nil {
					return fmt.Errorf("--gateway: %w", err)
				}
				gws = []plan.Gateway{g}
			}
			out := cmd.OutOrStdout()
			if output == "json" {
				if gateway != "" {
					_, err := out.Write(gws[0].JSON())
					return err
				}
				b, err := json.MarshalIndent(struct {
					Federation string         `json:"federation"`
					Gateways   []plan.Gateway `json:"gateways"`
				}{f.Name, gws}, "", "  ")
				if err != nil {
					return err
				}
				fmt.Fprintf(out, "%s\n", b)
				return nil
			}
			fmt.Fprintf(out, "Address plan of federation %s (supernet %s, transit %s)\n\n", f.Name, f.Overlay.Supernet, f.Overlay.Transit)
			fmt.Fprint(out, plan.AddressPlan(f))
			for _, g := range gws {
				fmt.Fprintf(out, "\n%s", g)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "federation spec (YAML), - for standard input")
	cmd.Flags().StringVar(&gateway, "gateway", "", "print only this gateway's plan")
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	return cmd
}
