package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fednet/fednet/internal/client"
	"github.com/fednet/fednet/internal/cloud"
	"github.com/fednet/fednet/internal/cloud/aws"
	"github.com/fednet/fednet/internal/cloud/script"
	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/spec"
)

// cloudTimeout bounds one fednet cloud command's calls to the provider.
const cloudTimeout = 5 * time.Minute

// cloudFlags are the flags every cloud subcommand shares.
type cloudFlags struct {
	file, site, active string
	conn               connFlags
}

func (cf *cloudFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVarP(&cf.file, "file", "f", "", "federation spec (YAML), - for standard input; default: the manager's current spec (needs fednet login)")
	f.StringVar(&cf.site, "site", "", "the site whose cloud to configure (required; it needs a cloud: block in the spec)")
	f.StringVar(&cf.active, "active", "", "the gateway the site's routes point at (default: the site's first gateway); name the new one after a failover")
	cf.conn.add(cmd)
}

// needs reads the spec and computes the site's cloud needs.
func (cf *cloudFlags) needs(cmd *cobra.Command) (*spec.Federation, cloud.Needs, error) {
	if cf.site == "" {
		return nil, cloud.Needs{}, errors.New("--site SITE is required: the site whose cloud to configure")
	}
	var f *spec.Federation
	var err error
	if cf.file != "" {
		f, err = readSpec(cf.file)
	} else {
		err = managerCall(&cf.conn, func(c *client.Client) error {
			resp, err := c.GetSpec(cmd.Context())
			if err != nil {
				return fmt.Errorf("reading the current spec from the manager (or give -f spec.yaml): %w", err)
			}
			f, err = spec.Parse([]byte(resp.YAML))
			if err != nil {
				return fmt.Errorf("the manager's spec (revision %d) is not valid:\n%w", resp.Revision, err)
			}
			return nil
		})
	}
	if err != nil {
		return nil, cloud.Needs{}, err
	}
	var in plan.Inputs
	if cf.active != "" {
		g, s, ok := f.Gateway(cf.active)
		if !ok || s.Name != cf.site {
			return nil, cloud.Needs{}, fmt.Errorf("--active %s: not a gateway of site %s", cf.active, cf.site)
		}
		in = in.WithActive(cf.site, g.Name)
	}
	n, err := cloud.Compute(f, cf.site, cloud.Options{Inputs: in, Resolve: resolve})
	return f, n, err
}

// resolve looks up a DNS endpoint's addresses.
func resolve(host string) ([]netip.Addr, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, err
	}
	return ips, nil
}

// awsSite returns the reconciler of an AWS site, with a client for its
// region and the standard AWS credentials.
func awsSite(ctx context.Context, f *spec.Federation, n cloud.Needs) (*aws.Site, error) {
	s, _ := f.Site(n.Site)
	c, err := aws.NewClient(ctx, s.Cloud.AWS.Region)
	if err != nil {
		return nil, fmt.Errorf("site %s: %w", n.Site, err)
	}
	return aws.New(aws.Config{EC2: c, Federation: f, Needs: n})
}

func printCloudChanges(w io.Writer, changes []aws.Change, what string) {
	for _, c := range changes {
		fmt.Fprintln(w, c)
	}
	if len(changes) == 0 {
		fmt.Fprintf(w, "no changes: %s\n", what)
	}
}

// notScripted refuses apply and remove on a provider fednet writes
// scripts for.
func notScripted(n cloud.Needs, verb string) error {
	flag := ""
	if verb == "remove" {
		flag = " --remove"
	}
	return fmt.Errorf("site %s is on %s: fednet does not call %s itself; write the %s script with `fednet cloud plan --site %s%s > %s-%s.sh`, review it, and run it with bash where the provider's CLI is logged in (docs/cloud.md)",
		n.Site, n.Kind, n.Kind, verb, n.Site, flag, n.Site, verb)
}

func newCloudCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cloud plan|apply|remove --site SITE",
		Short: "Set up a site's cloud for the federation: routes, forwarding, security group",
		Long: `Cloud configures what a cloud site needs so that its hosts reach the other
sites through its gateway, computed from the spec and the plan:

  - a route for every remote prefix of the site's networks to the active
    gateway, in the route tables of the site's subnets;
  - forwarding allowed on every gateway (AWS: source/destination check off;
    Azure and GCP: IP forwarding; OpenStack: allowed address pairs);
  - the tunnel port(s) admitted from every peer gateway's address in the
    security group (or NSG, firewall rules) of the gateways' public side.

The site's identifiers (route tables, the gateways' instances or interfaces,
the security group) go in a cloud: block of the site in the spec
(docs/cloud.md). Credentials never do: each provider's tools find them.

AWS: fednet calls the EC2 API itself (credentials the standard AWS way:
AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or the instance role).
"apply" reads the VPC, changes only what differs and marks what it makes;
"remove" deletes exactly that. Azure, GCP, OpenStack: "plan" writes a script
for az, gcloud or openstack to review and run.

After a gateway failover, run "fednet cloud apply --site SITE --active NEW" (or
re-run the script written with --active NEW): the routes move to the new
gateway. After a spec change, run it again: routes for prefixes that left the
site's networks go.`,
		Example: `  fednet cloud plan   -f spec.yaml --site aws-eu
  fednet cloud apply  -f spec.yaml --site aws-eu --dry-run
  fednet cloud apply  -f spec.yaml --site aws-eu
  fednet cloud apply  -f spec.yaml --site aws-eu --active aws-gw2   # after a failover
  fednet cloud remove -f spec.yaml --site aws-eu
  fednet cloud plan   -f spec.yaml --site azure-we > azure-we-apply.sh
  fednet cloud plan   -f spec.yaml --site azure-we --remove > azure-we-remove.sh`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return errors.New("say what to do: fednet cloud plan, apply or remove --site SITE (see fednet cloud --help)")
		},
	}
	cmd.AddCommand(newCloudPlanCmd(), newCloudApplyCmd(), newCloudRemoveCmd())
	return cmd
}

func newCloudPlanCmd() *cobra.Command {
	var cf cloudFlags
	var remove bool
	cmd := &cobra.Command{
		Use:   "plan --site SITE [-f SPEC] [--active GATEWAY] [--remove]",
		Short: "Show what a site's cloud needs; for Azure, GCP and OpenStack print the script",
		Long: `Plan prints what the site's cloud needs: the routes to the active gateway, the
gateways that must be allowed to forward, and the ingress the tunnel ports
need, from which peers. It calls no cloud API.

For a site on Azure, GCP or OpenStack it then prints the bash script that makes
it so with the provider's CLI (az, gcloud, openstack); with --remove the script
that undoes it. The lines before the script are comments, so the whole output
can be saved and run. For AWS, "fednet cloud apply --dry-run" shows the exact
changes against the VPC.`,
		Example: `  fednet cloud plan -f spec.yaml --site aws-eu
  fednet cloud plan -f spec.yaml --site gcp-ew > gcp-ew-apply.sh && bash gcp-ew-apply.sh`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, n, err := cf.needs(cmd)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if n.Kind == spec.CloudAWS {
				if remove {
					return errors.New("--remove writes a removal script for Azure, GCP and OpenStack; for AWS run fednet cloud remove --site " + n.Site + " --dry-run")
				}
				fmt.Fprint(out, n)
				site, _ := f.Site(n.Site)
				fmt.Fprintf(out, "\n%s", aws.Describe(site.Cloud.AWS, n))
				fmt.Fprintf(out, "\nfednet cloud apply --site %s --dry-run shows the changes to the VPC; without --dry-run it makes them.\n", n.Site)
				return nil
			}
			s, err := script.For(f, n)
			if err != nil {
				return err
			}
			text := s.Apply
			if remove {
				text = s.Remove
			}
			// The needs, as comments, after the script's first line.
			first, rest, _ := strings.Cut(text, "\n")
			fmt.Fprintln(out, first)
			for _, line := range strings.Split(strings.TrimSuffix(n.String(), "\n"), "\n") {
				fmt.Fprintf(out, "# %s\n", line)
			}
			fmt.Fprint(out, rest)
			return nil
		},
	}
	cf.add(cmd)
	cmd.Flags().BoolVar(&remove, "remove", false, "print the script that removes what the apply script made (Azure, GCP, OpenStack)")
	return cmd
}

func newCloudApplyCmd() *cobra.Command {
	var cf cloudFlags
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "apply --site SITE [-f SPEC] [--active GATEWAY] [--dry-run]",
		Short: "Make an AWS site's routes, source/dest checks and security group what the federation needs",
		Long: `Apply reads the site's VPC through the EC2 API (the VPC, the gateways'
network interfaces, the route tables and the security group named in the
site's cloud.aws block), and makes exactly what the site needs: source/dest
check off on every gateway's interface, a route for each remote prefix to the
active gateway's interface in each route table, and ingress for the tunnel
port from each peer. It prints each change as the aws CLI command that does the
same. A second apply with the same spec prints "no changes".

Bad identifiers, resources of another VPC and the operator's own routes for a
prefix the federation needs are reported before anything changes. What fednet
makes is marked (route table tags fednet:route:PREFIX, rule descriptions
"fednet FEDERATION/SITE: ...", an interface tag for the check), so remove
deletes only that.

--dry-run prints the changes and makes none. For Azure, GCP and OpenStack use
"fednet cloud plan" to write a script.`,
		Example: `  fednet cloud apply -f spec.yaml --site aws-eu --dry-run
  fednet cloud apply -f spec.yaml --site aws-eu
  AWS_PROFILE=prod fednet cloud apply -f spec.yaml --site aws-eu --active aws-gw2`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runAWS(cmd, &cf, "apply", func(n cloud.Needs) string {
				return fmt.Sprintf("site %s's VPC has what the federation needs (routes to %s)", n.Site, n.Active)
			}, func(ctx context.Context, s *aws.Site) ([]aws.Change, error) {
				if dryRun {
					return s.Plan(ctx)
				}
				return s.Apply(ctx)
			})
		},
	}
	cf.add(cmd)
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the changes, make none")
	return cmd
}

func newCloudRemoveCmd() *cobra.Command {
	var cf cloudFlags
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "remove --site SITE [-f SPEC] [--dry-run]",
		Short: "Undo what fednet cloud apply made in an AWS site's VPC",
		Long: `Remove deletes the routes and security-group rules fednet made for the site
and turns the source/dest check back on where fednet turned it off (it stays
off where it was off before). The operator's own routes and rules stay. The
VPC is then as it was before the first apply. --dry-run prints the changes and
makes none. For Azure, GCP and OpenStack write the removal script with
"fednet cloud plan --remove".`,
		Example: `  fednet cloud remove -f spec.yaml --site aws-eu --dry-run
  fednet cloud remove -f spec.yaml --site aws-eu`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runAWS(cmd, &cf, "remove", func(n cloud.Needs) string {
				return fmt.Sprintf("fednet has nothing of its own in site %s's VPC", n.Site)
			}, func(ctx context.Context, s *aws.Site) ([]aws.Change, error) {
				if dryRun {
					return s.PlanRemove(ctx)
				}
				return s.Remove(ctx)
			})
		},
	}
	cf.add(cmd)
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the changes, make none")
	return cmd
}

// runAWS is the body of cloud apply and cloud remove (verb): the site's
// needs from the flags, refused with a pointer to the scripts for clouds
// other than AWS, then do on the site's VPC and its changes printed, or
// done(needs) when there were none.
func runAWS(cmd *cobra.Command, cf *cloudFlags, verb string, done func(cloud.Needs) string, do func(context.Context, *aws.Site) ([]aws.Change, error)) error {
	f, n, err := cf.needs(cmd)
	if err != nil {
		return err
	}
	if n.Kind != spec.CloudAWS {
		return notScripted(n, verb)
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), cloudTimeout)
	defer cancel()
	s, err := awsSite(ctx, f, n)
	if err != nil {
		return err
	}
	changes, err := do(ctx, s)
	printCloudChanges(cmd.OutOrStdout(), changes, done(n))
	return err
}
