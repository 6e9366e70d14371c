package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/fednet/fednet/internal/lab"
)

func newLabImpairCmd() *cobra.Command {
	var lf labFlags
	var site, rate, loss string
	var delay, jitter time.Duration
	var clear bool
	cmd := &cobra.Command{
		Use:   "impair -f SPEC --site SITE [--rate R] [--delay D] [--jitter J] [--loss L] | --clear",
		Short: "Shape a lab site's internet link: rate, delay, jitter, loss",
		Long: `Impair shapes the internet link of every gateway of a lab site (the link
between the gateway and the lab's internet), in each direction separately:

  --rate    a token-bucket (tbf) limit in bit/s: 100mbit, 1.5gbit, 800kbit
  --delay   added to every packet each way (a round trip over the link grows
            by twice the delay)
  --jitter  the delay varies uniformly within ±jitter; packets keep their order
  --loss    percentage of packets dropped each way, independently: 1%

A new impairment of a site replaces the old one; --clear removes it. Delay,
jitter and loss run in a userspace delay line in the lab's internet namespace
(these kernels have no netem); see docs/lab.md.`,
		Example: `  fednet lab impair -f examples/three-sites.yaml --site azure-we --rate 100mbit --delay 50ms --jitter 5ms --loss 1%
  fednet lab impair -f examples/three-sites.yaml --site azure-we --clear`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if site == "" {
				return fmt.Errorf("--site: name the site whose link to shape")
			}
			var im lab.Impairment
			if clear {
				if cmd.Flags().Changed("rate") || cmd.Flags().Changed("delay") || cmd.Flags().Changed("jitter") || cmd.Flags().Changed("loss") {
					return fmt.Errorf("--clear removes the impairment; leave out --rate, --delay, --jitter and --loss")
				}
			} else {
				var err error
				if rate != "" {
					if im.Rate, err = lab.ParseRate(rate); err != nil {
						return fmt.Errorf("--rate: %w", err)
					}
				}
				if loss != "" {
					if im.Loss, err = lab.ParseLoss(loss); err != nil {
						return fmt.Errorf("--loss: %w", err)
					}
				}
				im.Delay, im.Jitter = delay, jitter
				if im.IsZero() {
					return fmt.Errorf("give at least one of --rate, --delay, --jitter, --loss (or --clear)")
				}
			}
			ctx := cmd.Context()
			l, err := lf.open(ctx)
			if err != nil {
				return err
			}
			if err := l.Impair(ctx, site, im); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "site %s: internet link impairment %s\n", site, im)
			return nil
		},
	}
	lf.register(cmd, true)
	f := cmd.Flags()
	f.StringVar(&site, "site", "", "site whose gateways' internet links to shape (required)")
	f.StringVar(&rate, "rate", "", "rate limit in bit/s, e.g. 100mbit (default: none)")
	f.DurationVar(&delay, "delay", 0, "delay added each way, e.g. 50ms")
	f.DurationVar(&jitter, "jitter", 0, "delay variation, uniform within ±jitter, e.g. 5ms")
	f.StringVar(&loss, "loss", "", "packet loss each way in percent, e.g. 1%")
	f.BoolVar(&clear, "clear", false, "remove the site's impairment")
	return cmd
}
