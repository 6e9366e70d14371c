package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/fednet/fednet/internal/client"
	"github.com/fednet/fednet/internal/external"
	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/spec"
)

func newExternalCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "external",
		Short: "External sites: a provider's VPN gateway instead of a fednet gateway",
		Long: `An external site (sites[].external in the spec) is joined by the provider's
managed VPN gateway (AWS Site-to-Site VPN, Azure VPN Gateway, Google Cloud VPN,
OpenStack VPNaaS) or a router speaking IKE, through an IPsec connection to one
fednet gateway; no agent runs there. See docs/interop.md.`,
	}
	cmd.AddCommand(newExternalConfigCmd())
	return cmd
}

func newExternalConfigCmd() *cobra.Command {
	var cf connFlags
	var file, format string
	cmd := &cobra.Command{
		Use:   "config SITE [--format text|json] [-f SPEC | --manager URL]",
		Short: "Print what to enter on the provider's side of an external site",
		Long: `Config prints exactly what to enter on the provider's side of external site
SITE: the peer (fednet gateway's public) address, the IKE version, proposals
and lifetimes in the provider's vocabulary, DPD, the inside addresses (AWS),
the site's prefixes and the federation prefixes it may reach (to route into
the tunnel), and which file holds the pre-shared key. With --format text it
reads as steps for a person (the AWS console's fields, Azure's custom policy,
the gcloud and openstack commands); --format json is for tools.

The spec comes from a file (-f) or from the manager (--manager, or the
configuration fednet login saved).`,
		Example: `  fednet external config aws-vpc -f examples/interop.yaml
  fednet external config os-lab -f examples/interop.yaml --format json
  fednet external config aws-vpc --manager https://manager:7443`,
		Args: exactArgs("an external site's name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if format != "text" && format != "json" {
				return fmt.Errorf("--format %q: want text or json", format)
			}
			var f *spec.Federation
			var err error
			if file != "" {
				if f, err = readSpec(file); err != nil {
					return err
				}
			} else {
				err = managerCall(&cf, func(c *client.Client) error {
					s, err := c.GetSpec(cmd.Context())
					if err != nil {
						return err
					}
					f, err = spec.Parse([]byte(s.YAML))
					if err != nil {
						return fmt.Errorf("the manager's spec (revision %d): %w", s.Revision, err)
					}
					return nil
				})
				if err != nil {
					return err
				}
			}
			c, err := external.New(f, plan.Inputs{}, args[0])
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if format == "json" {
				return writeJSON(out, c)
			}
			_, err = fmt.Fprint(out, c.Text())
			return err
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "federation spec (YAML), - for standard input (default: the manager's)")
	cmd.Flags().StringVar(&format, "format", "text", "output format: text or json")
	cf.add(cmd)
	return cmd
}
