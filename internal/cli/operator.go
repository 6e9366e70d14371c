package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/client"
)

// newOperatorCmds are the commands that talk to a manager.
func newOperatorCmds() []*cobra.Command {
	return []*cobra.Command{
		newLoginCmd(), newApplyCmd(), newDiffCmd(), newStatusCmd(), newGetCmd(),
		newTokenCmd(), newGatewayCmd(), newRotateKeyCmd(),
	}
}

// managerCall resolves the connection, runs f with a client and adds a
// hint to errors an operator can fix.
func managerCall(cf *connFlags, f func(*client.Client) error) error {
	c, err := cf.client()
	if err != nil {
		return err
	}
	defer c.Close()
	return hint(f(c))
}

// hint adds what to do to a refused admin token.
func hint(err error) error {
	if client.StatusOf(err) == http.StatusUnauthorized {
		return fmt.Errorf("%w\n(the admin token was refused: check --token-file or $%s, or run fednet login again with --token-file naming a copy of the manager's admin.token)", err, envToken)
	}
	return err
}

func newLoginCmd() *cobra.Command {
	var cf connFlags
	cmd := &cobra.Command{
		Use:   "login --manager URL --token-file FILE --ca-fingerprint HEX",
		Short: "Check a manager connection and save it for the other commands",
		Long: `Login checks that the manager answers at URL with a certificate from the CA
whose SHA-256 fingerprint is HEX, and that it accepts the admin token, then
saves the three in ~/.config/fednet/config.json (mode 0600; $FEDNET_CONFIG
names another file). Every other operator command reads them from there
unless --manager, --token-file (or --token) and --ca-fingerprint or
$FEDNET_MANAGER, $FEDNET_TOKEN and $FEDNET_CA_FINGERPRINT say otherwise.

The manager prints its URL and CA fingerprint when it starts; the admin token
is the file admin.token in its data directory. On the manager's machine, give
that file to --token-file. From another machine, copy it over a channel you
trust (it is the key to the whole federation) into a file of mode 0600, log
in with --token-file, then delete the copy: the config keeps the token.
--token TOKEN works too, but a command-line argument is visible to every
user in ps while the command runs.`,
		Example: `  # on the manager's machine
  fednet login --manager https://10.0.0.1:7443 --token-file /var/lib/fednet/manager/admin.token --ca-fingerprint 3f9c...e1

  # from another machine
  install -m 600 /dev/null admin.token
  ssh root@10.0.0.1 cat /var/lib/fednet/manager/admin.token > admin.token
  fednet login --manager https://10.0.0.1:7443 --token-file admin.token --ca-fingerprint 3f9c...e1
  rm admin.token`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tok, err := cf.adminToken()
			if err != nil {
				return err
			}
			c := connection{
				Manager:       first(cf.manager, os.Getenv(envManager)),
				Token:         tok,
				CAFingerprint: first(cf.caFingerprint, os.Getenv(envCAFingerprint)),
			}
			switch {
			case c.Manager == "":
				return errors.New("--manager https://HOST:PORT is required: the manager's URL, as it prints at start")
			case c.Token == "":
				return errors.New("--token-file FILE is required: a file holding the admin token (the manager's DATA_DIR/admin.token; copy it to this machine with mode 0600)")
			case c.CAFingerprint == "":
				return errors.New("--ca-fingerprint HEX is required: the SHA-256 of the manager's CA certificate, as it prints at start")
			}
			cl, err := newClient(c)
			if err != nil {
				return err
			}
			defer cl.Close()
			revs, err := cl.Revisions(cmd.Context())
			if err != nil {
				return hint(err)
			}
			path, err := configPath()
			if err != nil {
				return err
			}
			if err := saveConfig(path, c); err != nil {
				return err
			}
			rev := "no spec yet"
			if len(revs) > 0 {
				rev = fmt.Sprintf("revision %d", slices.MaxFunc(revs, func(a, b api.Revision) int { return a.Revision - b.Revision }).Revision)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "logged in to %s (%s); saved in %s\n", cl.URL(), rev, path)
			return nil
		},
	}
	cf.add(cmd)
	return cmd
}

// readSpecFile reads a spec document from path ("-": standard input).
func readSpecFile(cmd *cobra.Command, path string) ([]byte, error) {
	if path == "" {
		return nil, errors.New("no spec given; pass -f spec.yaml (see examples/three-sites.yaml)")
	}
	var data []byte
	var err error
	if path == "-" {
		data, err = io.ReadAll(cmd.InOrStdin())
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, fmt.Errorf("reading spec: %w", err)
	}
	return data, nil
}

// specError names the file in a spec the manager refused.
func specError(path string, err error) error {
	if client.StatusOf(err) == http.StatusUnprocessableEntity {
		if path == "-" {
			path = "the spec on standard input"
		}
		return fmt.Errorf("%s is not valid; nothing was changed:\n%w", path, err)
	}
	return err
}

// applyError explains a spec refused because the current revision moved
// on from base, the one the printed diff is from; other errors as
// specError.
func applyError(path string, base int, err error) error {
	var e *client.Error
	if !errors.As(err, &e) || e.Status != http.StatusPreconditionFailed {
		return specError(path, err)
	}
	cur := "another revision"
	if e.Revision != nil {
		cur = fmt.Sprintf("revision %d", *e.Revision)
	}
	return fmt.Errorf("the spec changed since the diff above was made (from revision %d): %s is current now, applied by someone else meanwhile; nothing was applied.\n"+
		"Run fednet diff -f %s to see what your spec changes now, then fednet apply again", base, cur, path)
}

func affected(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

func printDiff(w io.Writer, diff string) {
	if diff == "" {
		return
	}
	io.WriteString(w, diff)
	if !strings.HasSuffix(diff, "\n") {
		io.WriteString(w, "\n")
	}
}

func newApplyCmd() *cobra.Command {
	var cf connFlags
	var file string
	cmd := &cobra.Command{
		Use:   "apply -f spec.yaml",
		Short: "Make a spec the federation's new revision; print what changes",
		Long: `Apply sends the spec to the manager. The manager validates it (every problem
is reported with its line; a spec that fails leaves the current revision in
force), then apply prints the diff of every affected gateway's plan and makes
the spec the new revision. The affected agents apply their new plans within
a second. A spec equal to the current one changes nothing.

Apply stores the spec only if the revision its diff was computed from is
still the current one. When someone else applied a spec in between, apply
stores nothing and fails, naming the current revision: run fednet diff again
to see what the spec would change now, then apply again. So two operators
applying at once never silently revert each other's change.`,
		Example: `  fednet apply -f federation.yaml
  fednet plan -f federation.yaml >/dev/null && fednet apply -f federation.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			data, err := readSpecFile(cmd, file)
			if err != nil {
				return err
			}
			return managerCall(&cf, func(c *client.Client) error {
				ctx := cmd.Context()
				out := cmd.OutOrStdout()
				dry, err := c.PutSpec(ctx, string(data), true)
				if err != nil {
					return specError(file, err)
				}
				if !dry.Changed {
					fmt.Fprintf(out, "no changes (revision %d)\n", dry.Revision)
					return nil
				}
				printDiff(out, dry.Diff)
				res, err := c.PutSpecIf(ctx, string(data), dry.BaseRevision)
				if err != nil {
					return applyError(file, dry.BaseRevision, err)
				}
				if !res.Changed {
					fmt.Fprintf(out, "no changes (revision %d)\n", res.Revision)
					return nil
				}
				fmt.Fprintf(out, "revision %d; affected gateways: %s\n", res.Revision, affected(res.Affected))
				return nil
			})
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "spec file (- for standard input)")
	cf.add(cmd)
	return cmd
}

func newDiffCmd() *cobra.Command {
	var cf connFlags
	var file string
	cmd := &cobra.Command{
		Use:   "diff -f spec.yaml",
		Short: "Show how a spec would change the gateways' plans, without applying it",
		Long: `Diff sends the spec to the manager as a dry run: the manager validates it and
answers with the diff of every gateway plan it would change. Nothing is
stored.`,
		Example: `  fednet diff -f federation.yaml`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			data, err := readSpecFile(cmd, file)
			if err != nil {
				return err
			}
			return managerCall(&cf, func(c *client.Client) error {
				out := cmd.OutOrStdout()
				dry, err := c.PutSpec(cmd.Context(), string(data), true)
				if err != nil {
					return specError(file, err)
				}
				switch {
				case !dry.Changed:
					fmt.Fprintf(out, "no changes (revision %d)\n", dry.Revision)
				case len(dry.Affected) == 0:
					fmt.Fprintf(out, "no plan changes; applying would make a new revision of the spec text (current: %d)\n", dry.Revision)
				default:
					printDiff(out, dry.Diff)
					fmt.Fprintf(out, "affected gateways: %s (diff from revision %d)\n", affected(dry.Affected), dry.BaseRevision)
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "spec file (- for standard input)")
	cf.add(cmd)
	return cmd
}

// gatewayState says in a word where a gateway is.
func gatewayState(g api.Gateway) string {
	switch {
	case g.Removed:
		return "removed"
	case !g.Enrolled:
		return "not enrolled"
	case g.ApplyError != "":
		return "error"
	case g.PlanGeneration > 0 && g.AppliedGeneration >= g.PlanGeneration:
		return "applied"
	}
	return "behind"
}

// ago renders how long ago t was ("never" for the zero time).
func ago(t, now time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return age(now.Sub(t)) + " ago"
}

// age renders a duration coarsely: 4s, 3m, 2h, 5d.
func age(d time.Duration) string {
	switch {
	case d < 0:
		d = 0
		fallthrough
	case d < time.Minute:
		return strconv.Itoa(int(d/time.Second)) + "s"
	case d < time.Hour:
		return strconv.Itoa(int(d/time.Minute)) + "m"
	case d < 48*time.Hour:
		return strconv.Itoa(int(d/time.Hour)) + "h"
	}
	return strconv.Itoa(int(d/(24*time.Hour))) + "d"
}

// bytesHuman renders a byte count: 512 B, 1.5 KiB, 3.2 MiB.
func bytesHuman(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n), -1
	for v >= unit && i < 4 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMGTP"[i])
}

// dash escapes s for a table (esc), or is "-" when s is empty.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return esc(s)
}

// esc makes a string from the manager safe for a terminal: control
// characters (escape sequences, newlines, tabs that would shift a table's
// columns) and invisible format characters (such as bidirectional
// overrides) are shown as Go escapes (\x1b, \n, \u202e), so that a report
// can neither forge a table row nor drive the terminal.
func esc(s string) string {
	if !strings.ContainsFunc(s, unsafeRune) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if !unsafeRune(r) {
			b.WriteRune(r)
			continue
		}
		q := strconv.QuoteRuneToASCII(r)
		b.WriteString(q[1 : len(q)-1])
	}
	return b.String()
}

func unsafeRune(r rune) bool {
	return r == utf8.RuneError || unicode.IsControl(r) || unicode.Is(unicode.Cf, r)
}

// pathCell says how a link's traffic goes: direct, or via the gateway
// that relays it.
func pathCell(l api.Link) string {
	if l.Via == "" {
		return "direct"
	}
	return "via " + esc(l.Via)
}

// sinceCell renders since when a site's active gateway holds the role,
// "-" when no gateway reported it.
func sinceCell(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return ago(t, now)
}

// failoverCell is a site's last failover: when, from which gateway to
// which, and why; "-" when none was reported.
func failoverCell(f *api.Failover, now time.Time) string {
	if f == nil {
		return "-"
	}
	return fmt.Sprintf("%s: %s -> %s (%s)", ago(f.At, now), dash(esc(f.From)), esc(f.To), esc(f.Cause))
}

func linkState(up bool) string {
	if up {
		return "up"
	}
	return "down"
}

// probeFigures renders a link's probe figures over the last minute: RTT
// p50/p99 ("1.2ms/3.4ms") and loss ("0%"); dashes when the link is not
// probed or no probe was answered.
func probeFigures(p *api.LinkProbe) (rtt, loss string) {
	if p == nil || p.Sent == 0 {
		return "-", "-"
	}
	loss = strconv.FormatFloat(100*p.Loss, 'f', -1, 64)
	if len(loss) > 4 {
		loss = fmt.Sprintf("%.1f", 100*p.Loss)
	}
	loss += "%"
	if p.Lost == p.Sent {
		return "-", loss
	}
	return durationShort(p.RTTP50) + "/" + durationShort(p.RTTP99), loss
}

// anyPriced reports whether any link has an egress cost (the spec has
// egressPrices for its site): only then do the tables show the column.
func anyPriced(links []api.Link) bool {
	return slices.ContainsFunc(links, func(l api.Link) bool { return l.Egress != nil })
}

func costHeader(priced bool) string {
	if priced {
		return "\tEGRESS COST"
	}
	return ""
}

// costCell renders a link's estimated egress cost as a table cell
// ("\t$0.20"), "" when no link is priced.
func costCell(priced bool, e *api.LinkEgress) string {
	switch {
	case !priced:
		return ""
	case e == nil:
		return "\t-"
	case e.CostUSD == 0 || e.CostUSD >= 0.01:
		return fmt.Sprintf("\t$%.2f", e.CostUSD)
	}
	return fmt.Sprintf("\t$%.4f", e.CostUSD)
}

// durationShort renders a round-trip time with three significant digits.
func durationShort(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%.0fµs", float64(d)/float64(time.Microsecond))
	case d < time.Second:
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'g', 3, 64) + "ms"
	}
	return strconv.FormatFloat(d.Seconds(), 'g', 3, 64) + "s"
}

func newTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0) }

func newStatusCmd() *cobra.Command {
	var cf connFlags
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the federation on one screen: revision, gateways, sites' active gateways, links",
		Long: `Status shows the current revision; every gateway, whether it has applied its
current plan ("applied") or not yet ("behind"; APPLIED and PLAN are the plan
generations), and how long ago it last reported; each site's active gateway
(the one holding the site's virtual address and carrying its traffic), since
when, and the last failover its gateways reported, with its cause; and every
link as its
gateway reports it: up when a WireGuard handshake happened in the last three
minutes and the last 3 link probes were not all lost; the probes' round-trip
time (median and 99th percentile) and loss over the last minute; the
handshake's age and the bytes received and sent; and, when the spec has
egressPrices, each link's estimated egress cost (the sending site's price
times the bytes sent).`,
		Example: `  fednet status
  watch -n1 fednet status`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return managerCall(&cf, func(c *client.Client) error {
				o, err := c.Overview(cmd.Context())
				if err != nil {
					return err
				}
				printOverview(cmd.OutOrStdout(), o, time.Now())
				return nil
			})
		},
	}
	cf.add(cmd)
	return cmd
}

func printOverview(w io.Writer, o *api.Overview, now time.Time) {
	if o.Revision == 0 {
		fmt.Fprintln(w, "no spec yet: apply one with fednet apply -f spec.yaml")
		return
	}
	fmt.Fprintf(w, "revision %d (generation %d)\n\n", o.Revision, o.Generation)
	tw := newTable(w)
	fmt.Fprintln(tw, "GATEWAY\tSITE\tSTATE\tAPPLIED\tPLAN\tREVISION\tLAST REPORT")
	counts := map[string]int{}
	var errs []string
	for _, g := range o.Gateways {
		st := gatewayState(g)
		counts[st]++
		applied, planGen, rev := "-", "-", "-"
		if g.Enrolled && !g.Removed {
			applied = strconv.FormatInt(g.AppliedGeneration, 10)
			planGen = strconv.FormatInt(g.PlanGeneration, 10)
			rev = strconv.Itoa(g.AppliedRevision)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", esc(g.Name), esc(g.Site), st, applied, planGen, rev, ago(g.LastReport, now))
		if g.ApplyError != "" {
			errs = append(errs, fmt.Sprintf("%s: %s", esc(g.Name), esc(g.ApplyError)))
		}
	}
	tw.Flush()
	for _, e := range errs {
		fmt.Fprintf(w, "apply error on %s\n", e)
	}
	fmt.Fprintln(w)
	if len(o.Sites) > 0 {
		tw = newTable(w)
		fmt.Fprintln(tw, "SITE\tACTIVE\tSINCE\tLAST FAILOVER")
		for _, s := range o.Sites {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", esc(s.Name), dash(esc(s.Active)), sinceCell(s.ActiveSince, now), failoverCell(s.LastFailover, now))
		}
		tw.Flush()
		fmt.Fprintln(w)
	}
	up := 0
	if len(o.Links) == 0 {
		fmt.Fprintln(w, "no links reported yet")
	} else {
		tw = newTable(w)
		priced := anyPriced(o.Links)
		fmt.Fprintln(tw, "LINK\tSTATE\tPATH\tRTT P50/P99\tLOSS\tHANDSHAKE\tENDPOINT\tRX\tTX"+costHeader(priced)+"\tREASON")
		for _, l := range o.Links {
			if l.Up {
				up++
			}
			rtt, loss := probeFigures(l.Probe)
			fmt.Fprintf(tw, "%s -> %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s%s\t%s\n", esc(l.From), esc(l.To), linkState(l.Up), pathCell(l), rtt, loss, ago(l.LastHandshake, now),
				dash(l.Endpoint), bytesHuman(l.RxBytes), bytesHuman(l.TxBytes), costCell(priced, l.Egress), dash(l.Reason))
		}
		tw.Flush()
		fmt.Fprintln(w)
	}
	var parts []string
	for _, st := range []string{"applied", "behind", "error", "not enrolled", "removed"} {
		if counts[st] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[st], st))
		}
	}
	fmt.Fprintf(w, "gateways: %s; links: %d up, %d down\n", strings.Join(parts, ", "), up, len(o.Links)-up)
}

// printLinks prints the table of fednet get links: one row per direction
// of a link, the REASON column what From's tunnel driver says of a link
// that is down ("-" when nothing).
func printLinks(w io.Writer, links []api.Link, now time.Time) {
	tw := newTable(w)
	priced := anyPriced(links)
	fmt.Fprintln(tw, "FROM\tTO\tSTATE\tPATH\tTRANSPORT\tRTT P50/P99\tLOSS\tHANDSHAKE\tENDPOINT\tRX\tTX"+costHeader(priced)+"\tREASON")
	for _, l := range links {
		rtt, loss := probeFigures(l.Probe)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s%s\t%s\n", esc(l.From), esc(l.To), linkState(l.Up), pathCell(l), dash(string(l.Transport)), rtt, loss, ago(l.LastHandshake, now),
			dash(l.Endpoint), bytesHuman(l.RxBytes), bytesHuman(l.TxBytes), costCell(priced, l.Egress), dash(l.Reason))
	}
	tw.Flush()
}

// getKinds are what "fednet get" lists.
var getKinds = []string{"sites", "gateways", "links", "networks", "revisions"}

func newGetCmd() *cobra.Command {
	var cf connFlags
	var output string
	cmd := &cobra.Command{
		Use:   "get sites|gateways|links|networks|revisions [-o table|json|yaml]",
		Short: "List the federation's sites, gateways, links, networks or spec revisions",
		Long: `Get lists one kind of object as the manager sees it: the sites and networks
of the current spec, the gateways (enrollment, keys, applied plan), the links
as the gateways report them, or the stored spec revisions. -o json and -o yaml
print the API's objects whole, for scripts.`,
		Example: `  fednet get gateways
  fednet get links -o json | jq '.[] | select(.up | not)'
  fednet get revisions -o yaml`,
		ValidArgs: getKinds,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 || !slices.Contains(getKinds, args[0]) {
				return fmt.Errorf("say what to get: one of %s (e.g. fednet get gateways)", strings.Join(getKinds, ", "))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "table" && output != "json" && output != "yaml" {
				return fmt.Errorf("-o %q is not an output format: use table, json or yaml", output)
			}
			return managerCall(&cf, func(c *client.Client) error {
				v, table, err := fetch(cmd.Context(), c, args[0])
				if err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				switch output {
				case "json":
					return writeJSON(out, v)
				case "yaml":
					return writeYAML(out, v)
				}
				table(out, time.Now())
				return nil
			})
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table, json or yaml")
	cf.add(cmd)
	return cmd
}

// fetch gets one kind of object; it returns it for json/yaml and a
// function that prints it as a table.
func fetch(ctx context.Context, c *client.Client, kind string) (any, func(io.Writer, time.Time), error) {
	switch kind {
	case "sites":
		v, err := c.Sites(ctx)
		return v, func(w io.Writer, now time.Time) {
			tw := newTable(w)
			fmt.Fprintln(tw, "NAME\tPROVIDER\tREGION\tPREFIXES\tGATEWAYS\tACTIVE\tSINCE\tLAST FAILOVER")
			for _, s := range v {
				var ps []string
				for _, p := range s.Prefixes {
					ps = append(ps, p.String())
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", esc(s.Name), esc(s.Provider), dash(s.Region), dash(strings.Join(ps, ",")), dash(strings.Join(s.Gateways, ",")),
					dash(esc(s.Active)), sinceCell(s.ActiveSince, now), failoverCell(s.LastFailover, now))
			}
			tw.Flush()
		}, err
	case "gateways":
		v, err := c.Gateways(ctx)
		return v, func(w io.Writer, now time.Time) {
			tw := newTable(w)
			fmt.Fprintln(tw, "NAME\tSITE\tSTATE\tENDPOINT\tTRANSIT\tPUBLIC KEY\tAPPLIED\tPLAN\tLAST REPORT")
			for _, g := range v {
				transit := "-"
				if g.TransitAddress.IsValid() {
					transit = g.TransitAddress.String()
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", esc(g.Name), esc(g.Site), gatewayState(g),
					dash(first(g.Endpoint, g.ObservedAddress)), transit, dash(g.PublicKey.String()),
					g.AppliedGeneration, g.PlanGeneration, ago(g.LastReport, now))
			}
			tw.Flush()
		}, err
	case "links":
		v, err := c.Links(ctx)
		return v, func(w io.Writer, now time.Time) { printLinks(w, v, now) }, err
	case "networks":
		v, err := c.Networks(ctx)
		return v, func(w io.Writer, _ time.Time) {
			tw := newTable(w)
			fmt.Fprintln(tw, "NAME\tID\tMODE\tSITES")
			for _, n := range v {
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", esc(n.Name), n.ID, esc(n.Mode), esc(strings.Join(n.Sites, ",")))
			}
			tw.Flush()
		}, err
	case "revisions":
		v, err := c.Revisions(ctx)
		return v, func(w io.Writer, now time.Time) {
			tw := newTable(w)
			fmt.Fprintln(tw, "REVISION\tCREATED\tSITES\tGATEWAYS\tNETWORKS")
			for _, r := range v {
				fmt.Fprintf(tw, "%d\t%s (%s)\t%d\t%d\t%d\n", r.Revision, r.Created.Local().Format(time.DateTime), ago(r.Created, now),
					r.Sites, r.Gateways, r.Networks)
			}
			tw.Flush()
		}, err
	}
	return nil, nil, fmt.Errorf("cannot get %q: use one of %s", kind, strings.Join(getKinds, ", "))
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// writeYAML prints v as YAML with the same field names and order as its
// JSON form.
func writeYAML(w io.Writer, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encoding: %w", err)
	}
	var n yaml.Node
	if err := yaml.Unmarshal(data, &n); err != nil { // JSON is YAML
		return fmt.Errorf("encoding YAML: %w", err)
	}
	blockStyle(&n)
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&n); err != nil {
		return fmt.Errorf("encoding YAML: %w", err)
	}
	enc.Close()
	_, err = w.Write(buf.Bytes())
	return err
}

// blockStyle turns the flow style that JSON parses into block style, and
// keeps strings that would read as another type quoted.
func blockStyle(n *yaml.Node) {
	if n.Kind == yaml.ScalarNode {
		if n.Tag != "!!str" {
			n.Style = 0
		} else if n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 {
			n.Style = 0 // the encoder quotes what needs it
		}
		return
	}
	n.Style = 0
	for _, c := range n.Content {
		blockStyle(c)
	}
}

func newTokenCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token create|list|revoke",
		Short: "Create, list and revoke the join tokens that enroll gateways",
		Long: `A join token enrolls one gateway's agent, once, before it expires. It carries
the manager's URL, the fingerprint of its CA (so the agent trusts only that
manager) and a secret. Treat it as a password until it is used.`,
		Example: `  fednet token create --gateway aws-gw --ttl 30m
  fednet token list
  fednet token revoke 3f9ce1a2`,
	}
	cmd.AddCommand(newTokenCreateCmd(), newTokenListCmd(), newTokenRevokeCmd())
	return cmd
}

func newTokenCreateCmd() *cobra.Command {
	var cf connFlags
	var gateway, site, network, replace string
	var ttl time.Duration
	cmd := &cobra.Command{
		Use:   "create (--gateway NAME | --site SITE --network NETWORK) [--ttl 1h]",
		Short: "Create a one-time join token for a gateway (or a host) and print it",
		Long: `Create prints the join token alone on standard output, so that
$(fednet token create ...) captures it; what to do with it goes to standard
error. The gateway must be in the current spec.

With --site and --network instead of --gateway it makes a host token: it lets
one host of SITE (a site with fabric: dropsUnknownMACs) join the bridged
NETWORK through a neighbor tunnel, with "fednet host join" (docs/neighbors.md).
A host name that has joined already is refused unless the token was made with
--replace NAME: then the join replaces that host (for a host that lost its
identity, say), keeping its tunnel port.`,
		Example: `  fednet token create --gateway aws-gw > aws-gw.token
  # to the gateway, without the token on any command line:
  fednet token create --gateway aws-gw --ttl 10m | ssh aws-gw 'umask 077; cat > /root/join.token'
  ssh aws-gw fednet agent --data-dir /var/lib/fednet/agent --token-file /root/join.token
  fednet token create --site aws-eu --network lan > lan.token   # a host token`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			host := site != "" || network != ""
			switch {
			case gateway == "" && !host:
				return errors.New("--gateway NAME is required: the gateway (from the spec) the token enrolls; or --site and --network for a host token")
			case gateway != "" && host:
				return errors.New("give --gateway (a gateway's token) or --site and --network (a host token), not both")
			case host && (site == "" || network == ""):
				return errors.New("a host token needs both --site SITE and --network NETWORK")
			case replace != "" && !host:
				return errors.New("--replace NAME is for host tokens: give --site SITE and --network NETWORK too")
			}
			if ttl < 0 {
				return fmt.Errorf("--ttl %v: give a positive duration such as 1h (at most 168h)", ttl)
			}
			return managerCall(&cf, func(c *client.Client) error {
				if host {
					tok, err := c.CreateHostTokenReplacing(cmd.Context(), site, network, replace, ttl)
					if err != nil {
						return err
					}
					fmt.Fprintln(cmd.OutOrStdout(), tok.Token)
					fmt.Fprintf(cmd.ErrOrStderr(), "host token %s for a host of site %s on network %s, valid once until %s; on the host run:\n"+
						"  fednet host join --network %s --token-file FILE\n",
						tok.ID, tok.Site, tok.Network, tok.Expires.Local().Format(time.DateTime), tok.Network)
					return nil
				}
				tok, err := c.CreateToken(cmd.Context(), gateway, ttl)
				if err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), tok.Token)
				fmt.Fprintf(cmd.ErrOrStderr(), "join token %s for gateway %s, valid once until %s; put it in a file of mode 0600 on the gateway and run:\n"+
					"  fednet agent --data-dir /var/lib/fednet/agent --token-file FILE\n",
					tok.ID, tok.Gateway, tok.Expires.Local().Format(time.DateTime))
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&gateway, "gateway", "", "gateway the token enrolls")
	cmd.Flags().StringVar(&site, "site", "", "host token: the site of the host (fabric: dropsUnknownMACs)")
	cmd.Flags().StringVar(&network, "network", "", "host token: the bridged network the host joins")
	cmd.Flags().StringVar(&replace, "replace", "", "host token: the joined host a join with this token may replace")
	cmd.Flags().DurationVar(&ttl, "ttl", 0, "how long the token is valid (default: the manager's, 1h; at most 168h)")
	cf.add(cmd)
	return cmd
}

// tokenState says in a word whether a token can still enroll.
func tokenState(t api.Token, now time.Time) string {
	switch {
	case t.Used:
		return "used"
	case t.Revoked:
		return "revoked"
	case now.After(t.Expires):
		return "expired"
	}
	return "valid"
}

func newTokenListCmd() *cobra.Command {
	var cf connFlags
	cmd := &cobra.Command{
		Use:     "list",
		Short:   "List the join tokens (without their secrets)",
		Example: `  fednet token list`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return managerCall(&cf, func(c *client.Client) error {
				toks, err := c.Tokens(cmd.Context())
				if err != nil {
					return err
				}
				now := time.Now()
				tw := newTable(cmd.OutOrStdout())
				fmt.Fprintln(tw, "ID\tFOR\tSTATE\tEXPIRES")
				for _, t := range toks {
					what := t.Gateway
					if what == "" {
						what = "host of " + t.Site + " on " + t.Network
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", esc(t.ID), esc(what), tokenState(t, now), t.Expires.Local().Format(time.DateTime))
				}
				return tw.Flush()
			})
		},
	}
	cf.add(cmd)
	return cmd
}

func newTokenRevokeCmd() *cobra.Command {
	var cf connFlags
	cmd := &cobra.Command{
		Use:     "revoke ID",
		Short:   "Revoke a join token so that it can no longer enroll",
		Example: `  fednet token revoke 3f9ce1a2     # the ID from fednet token list`,
		Args:    exactArgs("a token ID (see fednet token list)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return managerCall(&cf, func(c *client.Client) error {
				if err := c.RevokeToken(cmd.Context(), args[0]); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "join token %s revoked\n", args[0])
				return nil
			})
		},
	}
	cf.add(cmd)
	return cmd
}

// exactArgs accepts one argument and says what it should be.
func exactArgs(what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != 1 {
			return fmt.Errorf("%s takes one argument: %s", cmd.CommandPath(), what)
		}
		return nil
	}
}

func newGatewayCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "gateway remove|activate NAME",
		Short: "Manage enrolled gateways",
		Example: `  fednet gateway remove azure-gw
  fednet gateway activate onprem-gw2`,
	}
	var cf connFlags
	remove := &cobra.Command{
		Use:   "remove NAME",
		Short: "Revoke a gateway: drop it from every peer's plan and refuse its credential",
		Long: `Remove revokes a gateway. It disappears from every other gateway's plan (its
peers drop its WireGuard key within a second or two), and the manager refuses
its credential from then on, so its agent stops, leaving its own data plane
as it is. The spec still lists it; to enroll it again, create a new join token.`,
		Example: `  fednet gateway remove azure-gw`,
		Args:    exactArgs("the gateway's name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return managerCall(&cf, func(c *client.Client) error {
				if err := c.RemoveGateway(cmd.Context(), args[0]); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "gateway %s removed: it leaves every peer's plan and its credential is refused\n", args[0])
				return nil
			})
		},
	}
	cf.add(remove)
	cmd.AddCommand(remove, newActivateCmd())
	return cmd
}

func newActivateCmd() *cobra.Command {
	var cf connFlags
	cmd := &cobra.Command{
		Use:   "activate NAME",
		Short: "Make a gateway its site's active gateway (move the role from the active one)",
		Long: `Activate makes a gateway its site's active gateway: the one that holds the
site's virtual address (the hosts' next hop) and that the other sites send the
site's prefixes to. The manager stores the choice (it survives a restart) and
sends it in the plans; the agents move the role within about a second: the
named gateway claims the site, the old active steps down, the remote gateways
move the site's prefixes, with the established connections carried on.

The site must have two or more gateways, and the gateway must be up: enrolled
and reporting (within the last 20 s), or the manager refuses. The choice is a
preference, not a pin: if the gateway fails later, another takes over as
usual, and the activated gateway takes the role back once it has been up for
the agents' hold-down (10 s by default) — unlike the others, which stay
standby when they recover. "fednet get sites" shows the active gateway and
the last change with its cause.`,
		Example: `  fednet gateway activate onprem-gw2   # move the role to onprem-gw2
  fednet get sites                      # ACTIVE onprem-gw2, LAST FAILOVER ... the operator activated`,
		Args: exactArgs("the gateway's name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return managerCall(&cf, func(c *client.Client) error {
				g, err := c.Activate(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "gateway %s is site %s's preferred gateway; its agents move the active role to it (fednet get sites shows it)\n", g.Name, g.Site)
				return nil
			})
		},
	}
	cf.add(cmd)
	return cmd
}

func newRotateKeyCmd() *cobra.Command {
	var cf connFlags
	cmd := &cobra.Command{
		Use:   "rotate-key GATEWAY",
		Short: "Ask a gateway's agent to roll its WireGuard key",
		Long: `Rotate-key asks the gateway's agent, through its next plan, to generate a new
WireGuard key and send the manager its public half; the peers then get the new
key in their plans and the links come back by themselves. The private key
never leaves the gateway. "fednet get gateways" shows the new public key once
the agent has answered.`,
		Example: `  fednet rotate-key aws-gw`,
		Args:    exactArgs("the gateway's name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return managerCall(&cf, func(c *client.Client) error {
				if err := c.Rotate(cmd.Context(), args[0]); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "asked gateway %s to roll its key; its agent answers with its next plan\n", args[0])
				return nil
			})
		},
	}
	cf.add(cmd)
	return cmd
}
