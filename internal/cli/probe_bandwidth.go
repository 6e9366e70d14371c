package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/fednet/fednet/internal/abw"
	"github.com/fednet/fednet/internal/abw/abwlab"
	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/client"
	"github.com/fednet/fednet/internal/lab"
)

func newProbeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "probe",
		Short: "Measure the overlay's links on demand",
	}
	cmd.AddCommand(newProbeBandwidthCmd())
	return cmd
}

// bandwidthReport is what `fednet probe bandwidth` prints.
type bandwidthReport struct {
	From   string     `json:"from"`
	To     string     `json:"to"`
	Result abw.Result `json:"result"`
	// Iperf3 is the comparison run (--compare-iperf3), if any.
	Iperf3 *iperfComparison `json:"iperf3,omitempty"`
	// fleets counts the fleets when Result carries none (the manager's
	// answer has the count only).
	fleets int
}

// iperfComparison holds iperf3's figures on the same link, in payload
// Mbit/s as iperf3 reports them.
type iperfComparison struct {
	TCPMbps        float64 `json:"tcp_mbps"`
	UDPMbps        float64 `json:"udp_mbps"`
	UDPOfferedMbps float64 `json:"udp_offered_mbps"`
	UDPLoss        float64 `json:"udp_loss"`
	Seconds        float64 `json:"seconds"`
	// Bytes is what the two runs sent, about, for the cost comparison.
	Bytes int64 `json:"bytes"`
}

func newProbeBandwidthCmd() *cobra.Command {
	var lf labFlags
	var cf connFlags
	var from, to, output string
	var compare bool
	var compareTime time.Duration
	cmd := &cobra.Command{
		Use:   "bandwidth --from GATEWAY --to GATEWAY [--lab NAME -f SPEC] [--compare-iperf3] [-o json]",
		Short: "Estimate a link's available bandwidth with self-loading periodic streams",
		Long: `Bandwidth estimates the available bandwidth from one gateway to another through
their tunnel, the way Pathload does: fleets of short periodic UDP streams at a
rate R go from the first gateway's transit address to the second's (port
51822); when R exceeds the available bandwidth the one-way delays grow during
a stream, and a binary search over R narrows a range that holds it. It sends a
few percent of what a 10-second iperf3 would, and takes a second or two.

Rates are underlay rates: bit/s of the frames the tunnel puts on the wire
(WireGuard, UDP/IP and Ethernet headers included). See docs/bandwidth.md.

Without --lab the manager relays the request to the agent of --from, which
runs the estimate and sends the result back (within a minute; the agent must
be running). With --lab the sender runs in the first gateway's namespace of a running lab
(fednet lab up --federate); --compare-iperf3 then also runs iperf3 TCP and UDP
over the same tunnel.`,
		Example: `  fednet probe bandwidth --from aws-gw --to azure-gw
  fednet probe bandwidth --from aws-gw --to azure-gw -o json

  fednet lab up -f examples/three-sites.yaml --federate
  fednet lab impair -f examples/three-sites.yaml --site azure-we --rate 100mbit
  fednet probe bandwidth --lab lab -f examples/three-sites.yaml --from aws-gw --to azure-gw --compare-iperf3`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if from == "" || to == "" {
				return fmt.Errorf("--from and --to: name the gateways at both ends of the link")
			}
			if output != "table" && output != "json" {
				return fmt.Errorf("-o %q is not an output format: use table or json", output)
			}
			ctx := cmd.Context()
			if lf.name == "" {
				if compare {
					return fmt.Errorf("--compare-iperf3 needs --lab: the manager does not run iperf3 on gateways")
				}
				return managerCall(&cf, func(c *client.Client) error {
					res, err := c.ProbeBandwidth(ctx, from, to)
					if err != nil {
						return err
					}
					if output == "json" {
						return writeJSON(cmd.OutOrStdout(), res)
					}
					printBandwidth(cmd.OutOrStdout(), reportFromAPI(*res))
					return nil
				})
			}
			rep, err := probeInLab(ctx, &lf, from, to, compare, compareTime)
			if err != nil {
				return err
			}
			if output == "json" {
				return writeJSON(cmd.OutOrStdout(), rep)
			}
			printBandwidth(cmd.OutOrStdout(), rep)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&from, "from", "", "gateway that sends the probe streams")
	f.StringVar(&to, "to", "", "gateway that receives them")
	f.StringVarP(&output, "output", "o", "table", "output format: table or json")
	f.StringVar(&lf.name, "lab", "", "probe inside this lab (built with fednet lab up --federate)")
	f.StringVarP(&lf.file, "file", "f", "", "the lab's federation spec (YAML), with --lab")
	f.BoolVar(&compare, "compare-iperf3", false, "also run iperf3 TCP and UDP over the same tunnel (lab only)")
	f.DurationVar(&compareTime, "iperf3-time", 5*time.Second, "length of each iperf3 comparison run")
	cf.add(cmd)
	return cmd
}

// probeInLab runs the estimate, and the iperf3 comparison, in a lab.
func probeInLab(ctx context.Context, lf *labFlags, from, to string, compare bool, d time.Duration) (bandwidthReport, error) {
	l, err := lf.open(ctx)
	if err != nil {
		return bandwidthReport{}, err
	}
	res, err := abwlab.Estimate(ctx, l, from, to, abw.Config{})
	if err != nil {
		return bandwidthReport{}, err
	}
	rep := bandwidthReport{From: from, To: to, Result: res}
	if compare {
		c, err := compareIperf3(ctx, l, from, to, res, d)
		if err != nil {
			return rep, err
		}
		rep.Iperf3 = &c
	}
	return rep, nil
}

// compareIperf3 runs iperf3 TCP, then UDP offered at 1.5 times the
// estimate's upper bound, between the gateways' transit addresses.
func compareIperf3(ctx context.Context, l *lab.Lab, from, to string, res abw.Result, d time.Duration) (iperfComparison, error) {
	gf, gt := l.Gateway(from), l.Gateway(to)
	dst, err := abwlab.TransitAddr(l, gt)
	if err != nil {
		return iperfComparison{}, err
	}
	tcp, err := lab.Iperf3(ctx, gf, gt, dst, d, 1)
	if err != nil {
		return iperfComparison{}, err
	}
	const payload = 1200
	offered := min(max(1.5*res.High, 10e6), 2e9) * payload / float64(abw.TunnelFrame(payload))
	udp, err := lab.Iperf3UDP(ctx, gf, gt, dst, d, offered, payload)
	if err != nil {
		return iperfComparison{}, err
	}
	secs := tcp.Duration.Seconds() + udp.Duration.Seconds()
	return iperfComparison{
		TCPMbps: tcp.Mbps, UDPMbps: udp.Mbps, UDPOfferedMbps: udp.OfferedMbps, UDPLoss: udp.Loss(),
		Seconds: secs,
		Bytes:   int64((tcp.SentMbps*tcp.Duration.Seconds() + udp.OfferedMbps*udp.Duration.Seconds()) * 1e6 / 8),
	}, nil
}

func printBandwidth(w io.Writer, rep bandwidthReport) {
	r := rep.Result
	conv := "converged"
	if !r.Converged {
		conv = "stopped before converging"
	}
	fmt.Fprintf(w, "available bandwidth %s → %s: %s (range %s – %s)\n", rep.From, rep.To, mbit(r.Estimate), mbit(r.Low), mbit(r.High))
	fmt.Fprintf(w, "%s in %.2f s after %d fleets; sent %.2f MB in %d probes; packet-train dispersion %s\n",
		conv, r.Duration.Seconds(), max(len(r.Fleets), rep.fleets), float64(r.Bytes)/1e6, r.Packets, mbit(r.ADR))
	if c := rep.Iperf3; c != nil {
		fmt.Fprintf(w, "iperf3 over the same tunnel: TCP %.1f Mbit/s, UDP %.1f Mbit/s received of %.1f offered (%.1f%% lost); %.2f MB in %.0f s\n",
			c.TCPMbps, c.UDPMbps, c.UDPOfferedMbps, 100*c.UDPLoss, float64(c.Bytes)/1e6, c.Seconds)
	}
}

// reportFromAPI turns the manager's answer into the report's form.
func reportFromAPI(r api.BandwidthResult) bandwidthReport {
	return bandwidthReport{From: r.From, To: r.To, Result: abw.Result{
		Low: r.LowBps, High: r.HighBps, Estimate: r.EstimateBps, ADR: r.ADRBps, Converged: r.Converged,
		Bytes: r.Bytes, Packets: r.Packets, Duration: time.Duration(r.Seconds * float64(time.Second)),
	}, fleets: r.Fleets}
}

// mbit renders bit/s as Mbit/s.
func mbit(bps float64) string { return fmt.Sprintf("%.1f Mbit/s", bps/1e6) }
