package bench

import (
	"encoding/json"
	"fmt"
	"html"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/fednet/fednet/internal/backend"
)

// Output files of Write, besides the plots.
const (
	JSONFile = "results.json"
	MDFile   = "results.md"
	HTMLFile = "index.html"
)

// table is a titled table, rendered as markdown and as HTML.
type table struct {
	title  string
	header []string
	rows   [][]string
}

func (t table) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "### %s\n\n| %s |\n|%s\n", t.title, strings.Join(t.header, " | "), strings.Repeat("---|", len(t.header)))
	for _, r := range t.rows {
		fmt.Fprintf(&b, "| %s |\n", strings.Join(r, " | "))
	}
	return b.String() + "\n"
}

func (t table) html() string {
	var b strings.Builder
	fmt.Fprintf(&b, "<h3>%s</h3>\n<table>\n<tr>", html.EscapeString(t.title))
	for _, h := range t.header {
		fmt.Fprintf(&b, "<th>%s</th>", html.EscapeString(h))
	}
	b.WriteString("</tr>\n")
	for _, r := range t.rows {
		b.WriteString("<tr>")
		for _, c := range r {
			fmt.Fprintf(&b, "<td>%s</td>", html.EscapeString(c))
		}
		b.WriteString("</tr>\n")
	}
	return b.String() + "</table>\n"
}

// f formats a figure; "–" for one that was not measured (0).
func f(v float64, digits int) string {
	if v == 0 {
		return "–"
	}
	return strconv.FormatFloat(v, 'f', digits, 64)
}

// ratioTable lists a mode's ratios.
func ratioTable(title string, x Ratios) table {
	return table{title: title, header: []string{"ratio", "value"}, rows: [][]string{
		{"RTT p50 overlay / underlay", f(x.RTTP50, 3)},
		{"RTT mean overlay / underlay", f(x.RTTMean, 3)},
		{"RTT p50 fednet / standalone wireguard-go", f(x.StandaloneRTT, 3)},
		{"RTT p50 under load / idle (overlay)", f(x.LoadedRTT, 3)},
		{"TCP 1 stream overlay / underlay", f(x.Throughput1, 3)},
		{"TCP 4 streams overlay / underlay", f(x.Throughput4, 3)},
		{"TCP 1 stream fednet / standalone wireguard-go", f(x.Standalone1, 3)},
		{"TCP 4 streams fednet / standalone wireguard-go", f(x.Standalone4, 3)},
		{"traffic overhead overlay (wire / payload)", f(x.Overhead, 4)},
		{"traffic overhead underlay (wire / payload)", f(x.OverheadUnderlay, 4)},
		{"traffic overhead overlay / underlay", f(x.OverheadRelative, 4)},
	}}
}

// joinRounds renders each round's figure, in the order they ran, with
// prec decimals: "1520 / 1834 / 1514".
func joinRounds(vs []float64, prec int) string {
	each := make([]string, len(vs))
	for i, v := range vs {
		each[i] = f(v, prec)
	}
	return strings.Join(each, " / ")
}

// modeTables returns a mode's tables in reading order.
func modeTables(m ModeResult) []table {
	name := modeTitle(m)
	var ts []table
	paths := table{title: name + ": paths", header: []string{"path", "from", "to", "address"}}
	for _, p := range m.Paths {
		paths.rows = append(paths.rows, []string{p.Name, p.From, p.To, p.Address})
	}
	ts = append(ts, ratioTable(name+": ratios", m.Ratios), paths)
	rtt := table{title: name + ": round-trip time (ms)", header: []string{"path", "sent", "received", "loss %", "p50", "p90", "p99", "mean", "stddev", "min", "max"}}
	for _, r := range m.RTT {
		s := r.Ms
		rtt.rows = append(rtt.rows, []string{r.Path, strconv.Itoa(r.Sent), strconv.Itoa(r.Received), strconv.FormatFloat(r.LossPct, 'f', 1, 64),
			f(s.P50, 3), f(s.P90, 3), f(s.P99, 3), f(s.Mean, 3), f(s.StdDev, 3), f(s.Min, 3), f(s.Max, 3)})
	}
	tcp := table{title: name + ": TCP throughput (iperf3)", header: []string{"path", "streams", "Mbit/s", "retransmits", "seconds", "CPU s/GB (machine)", "wgdev CPU s/GB"}}
	rounds := slices.ContainsFunc(m.TCP, func(t TCPResult) bool { return len(t.RoundsMbps) > 1 })
	if rounds {
		tcp.title += ", the median of each path's rounds"
		tcp.header = append(tcp.header, "Mbit/s of each round")
	}
	for _, t := range m.TCP {
		row := []string{t.Path, strconv.Itoa(t.Streams), f(t.Mbps, 1), strconv.Itoa(t.Retransmits), f(t.Seconds, 1),
			f(t.CPUSecondsPerGB, 2), f(t.WgdevCPUSecondsPerGB, 2)}
		if rounds {
			row = append(row, joinRounds(t.RoundsMbps, 0))
		}
		tcp.rows = append(tcp.rows, row)
	}
	udp := table{title: name + ": UDP at offered rates (iperf3)", header: []string{"path", "offered Mbit/s", "sent Mbit/s", "received Mbit/s", "loss %", "jitter ms", "CPU s/GB (machine)", "wgdev CPU s/GB"}}
	for _, u := range m.UDP {
		udp.rows = append(udp.rows, []string{u.Path, f(u.OfferedMbps, 0), f(u.SentMbps, 1), f(u.Mbps, 1), strconv.FormatFloat(u.LossPct, 'f', 2, 64), strconv.FormatFloat(u.JitterMs, 'f', 3, 64),
			f(u.CPUSecondsPerGB, 2), f(u.WgdevCPUSecondsPerGB, 2)})
	}
	ov := table{title: name + ": traffic overhead (fixed-size TCP transfer)", header: []string{"path", "payload bytes", "wire bytes", "wire packets", "wire / payload", "counted"}}
	for _, o := range m.Overhead {
		ov.rows = append(ov.rows, []string{o.Path, strconv.FormatInt(o.PayloadBytes, 10), strconv.FormatInt(o.WireBytes, 10), strconv.FormatInt(o.WirePackets, 10), f(o.Ratio, 4), o.Counted})
	}
	ld := table{title: name + ": latency under load (ms; ping during a bulk TCP transfer)", header: []string{"path", "idle p50", "loaded p50", "loaded p90", "loaded p99", "loaded mean", "loss %", "load Mbit/s"}}
	loadedRounds := slices.ContainsFunc(m.Loaded, func(l LoadedResult) bool { return len(l.RoundsP99Ms) > 1 })
	if loadedRounds {
		ld.title += ", every round's pings together"
		ld.header = append(ld.header, "p99 of each round")
	}
	for _, l := range m.Loaded {
		row := []string{l.Path, f(l.IdleMs.P50, 3), f(l.LoadedMs.P50, 3), f(l.LoadedMs.P90, 3), f(l.LoadedMs.P99, 3), f(l.LoadedMs.Mean, 3), strconv.FormatFloat(l.LossPct, 'f', 1, 64), f(l.LoadMbps, 1)}
		if loadedRounds {
			row = append(row, joinRounds(l.RoundsP99Ms, 1))
		}
		ld.rows = append(ld.rows, row)
	}
	ts = append(ts, rtt, tcp, udp, ov, ld)
	if len(m.Memory) > 0 {
		mt := table{title: name + ": userspace WireGuard memory (peak resident, largest process of the path)", header: []string{"path", "processes", "peak MiB"}}
		for _, x := range m.Memory {
			mt.rows = append(mt.rows, []string{x.Path, strconv.Itoa(x.Processes), f(x.PeakRSSMiB, 1)})
		}
		ts = append(ts, mt)
	}
	if len(m.Delay) > 0 {
		dt := table{title: name + ": TCP throughput against added round-trip delay", header: []string{"path", "added RTT ms", "measured RTT ms", "Mbit/s"}}
		for _, d := range m.Delay {
			dt.rows = append(dt.rows, []string{d.Path, strconv.FormatFloat(d.DelayMs, 'f', -1, 64), f(d.RTTMs, 3), f(d.Mbps, 1)})
		}
		ts = append(ts, dt)
	}
	return ts
}

// comparisonTables sets the modes side by side (empty for a run without
// the figures, a live one).
func comparisonTables(c Comparison) []table {
	var ts []table
	head := table{title: "fednet against standalone wireguard-go, bridged against routed", header: []string{"figure", "value"}}
	for _, r := range []struct {
		name string
		v    float64
	}{
		{"TCP 1 stream bridged / routed", c.BridgedRouted1},
		{"TCP 4 streams bridged / routed", c.BridgedRouted4},
		{"TCP 1 stream fednet / standalone (routed)", c.Standalone1},
		{"TCP 4 streams fednet / standalone (routed)", c.Standalone4},
		{"RTT p50 fednet / standalone (routed, idle)", c.RTTP50},
	} {
		if r.v != 0 {
			head.rows = append(head.rows, []string{r.name, f(r.v, 3)})
		}
	}
	if len(head.rows) > 0 {
		ts = append(ts, head)
	}
	if len(c.Loaded) > 0 {
		t := table{title: "RTT under load (ms), fednet against standalone", header: []string{"mode", "fednet p50", "standalone p50", "fednet p99", "standalone p99", "p99 fednet / standalone", "fednet loss %", "standalone loss %"}}
		for _, l := range c.Loaded {
			t.rows = append(t.rows, []string{l.Mode, f(l.FednetP50Ms, 3), f(l.StandaloneP50Ms, 3), f(l.FednetP99Ms, 3), f(l.StandaloneP99Ms, 3), f(l.P99Ratio, 3),
				strconv.FormatFloat(l.FednetLossPct, 'f', 1, 64), strconv.FormatFloat(l.StandaloneLossPct, 'f', 1, 64)})
		}
		ts = append(ts, t)
	}
	if len(c.UDP) > 0 {
		t := table{title: "UDP received (Mbit/s), fednet against standalone", header: []string{"mode", "offered", "fednet", "standalone", "fednet / standalone", "fednet loss %", "standalone loss %"}}
		for _, u := range c.UDP {
			t.rows = append(t.rows, []string{u.Mode, f(u.OfferedMbps, 0), f(u.FednetMbps, 1), f(u.StandaloneMbps, 1), f(u.Ratio, 3),
				strconv.FormatFloat(u.FednetLossPct, 'f', 2, 64), strconv.FormatFloat(u.StandaloneLossPct, 'f', 2, 64)})
		}
		ts = append(ts, t)
	}
	if len(c.Delay) > 0 {
		t := table{title: "routed TCP (Mbit/s) against added delay, fednet against standalone", header: []string{"added RTT ms", "fednet", "standalone", "fednet / standalone"}}
		for _, d := range c.Delay {
			t.rows = append(t.rows, []string{strconv.FormatFloat(d.DelayMs, 'f', -1, 64), f(d.FednetMbps, 1), f(d.StandaloneMbps, 1), f(d.Ratio, 3)})
		}
		ts = append(ts, t)
	}
	return ts
}

// modeTitle names a mode in tables and plots: "routed (wireguard/udp)",
// "bridged (lan, wireguard/udp)", "tcp443 (wireguard/tcp443)", "routed
// (ipsec)"; without the link's label for results that have none.
func modeTitle(m ModeResult) string {
	var in []string
	if m.Network != "" {
		in = append(in, m.Network)
	}
	if l := linkLabel(m); l != "" {
		in = append(in, l)
	}
	if len(in) == 0 {
		return m.Mode
	}
	return m.Mode + " (" + strings.Join(in, ", ") + ")"
}

// linkLabel is the backend and transport of a mode's link: "ipsec" (IPsec
// has one transport), "wireguard/udp", "wireguard/tcp443"; "" when the
// results do not say.
func linkLabel(m ModeResult) string {
	switch {
	case m.Backend == "":
		return ""
	case m.Backend == backend.IPsec || m.Transport == "":
		return string(m.Backend)
	}
	return string(m.Backend) + "/" + string(m.Transport)
}

// Write writes results.json, results.md, the plots and index.html into
// dir (created if missing; files of an earlier run are overwritten).
func Write(dir string, r *Results) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("output directory: %w", err)
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, JSONFile), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing results: %w", err)
	}
	plots, err := writePlots(dir, r)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, MDFile), []byte(markdown(r, plots)), 0o644); err != nil {
		return fmt.Errorf("writing results: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, HTMLFile), []byte(page(r, plots)), 0o644); err != nil {
		return fmt.Errorf("writing results: %w", err)
	}
	return nil
}

// heading describes the run in a few lines.
func heading(r *Results) []string {
	t := r.Target
	var out []string
	switch t.Kind {
	case "lab":
		out = append(out, fmt.Sprintf("Lab %s (spec: %s), sites %s; underlay and standalone tunnel in reference lab %s.", t.Lab, t.Spec, strings.Join(t.Sites, " and "), t.Reference))
	default:
		out = append(out, "Live federation, measured from this machine.")
	}
	if t.WireGuard != "" {
		out = append(out, "WireGuard: "+t.WireGuard+".")
	}
	s := r.Settings
	quick := ""
	if t.Quick {
		quick = " (quick run)"
	}
	out = append(out, fmt.Sprintf("Started %s, %.0f s%s: %d pings %g ms apart, %g s transfers, UDP at %v Mbit/s (%d-byte datagrams), %d bytes for the overhead, delays %v ms.",
		r.Started.Format("2006-01-02 15:04:05 UTC"), r.DurationS, quick, s.PingCount, s.PingIntervalMs, s.TransferS, s.UDPRatesMbps, s.UDPLength, s.OverheadBytes, s.DelaysMs))
	return out
}

// markdown renders results.md.
func markdown(r *Results, plots []plotFile) string {
	var b strings.Builder
	b.WriteString("# fednet bench\n\n")
	for _, l := range heading(r) {
		b.WriteString(l + "\n")
	}
	b.WriteString("\n")
	for _, n := range r.Notes {
		b.WriteString("- " + n + "\n")
	}
	b.WriteString("\n")
	if cts := comparisonTables(r.Comparison); len(cts) > 0 {
		b.WriteString("## comparison\n\n")
		for _, t := range cts {
			b.WriteString(t.markdown())
		}
	}
	for _, m := range r.Modes {
		fmt.Fprintf(&b, "## %s\n\n", modeTitle(m))
		for _, t := range modeTables(m) {
			b.WriteString(t.markdown())
		}
		for _, e := range m.Errors {
			b.WriteString("- not measured: " + e + "\n")
		}
		for _, p := range plots {
			if p.mode == modeKey(m) {
				fmt.Fprintf(&b, "![%s](%s)\n\n", p.title, p.base+".svg")
			}
		}
	}
	return b.String()
}

// page renders index.html: every table and every plot.
func page(r *Results, plots []plotFile) string {
	var b strings.Builder
	b.WriteString(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>fednet bench</title>
<style>
body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:right}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}
figure{display:inline-block;margin:.5em}figure img{width:520px;border:1px solid #eee}
</style></head><body>
<h1>fednet bench</h1>
`)
	for _, l := range heading(r) {
		fmt.Fprintf(&b, "<p>%s</p>\n", html.EscapeString(l))
	}
	b.WriteString("<ul>\n")
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "<li>%s</li>\n", html.EscapeString(n))
	}
	fmt.Fprintf(&b, "</ul>\n<p>Raw figures: <a href=\"%s\">%s</a>, tables: <a href=\"%s\">%s</a>.</p>\n", JSONFile, JSONFile, MDFile, MDFile)
	if cts := comparisonTables(r.Comparison); len(cts) > 0 {
		b.WriteString("<h2>comparison</h2>\n")
		for _, t := range cts {
			b.WriteString(t.html())
		}
	}
	for _, m := range r.Modes {
		fmt.Fprintf(&b, "<h2>%s</h2>\n", html.EscapeString(modeTitle(m)))
		for _, p := range plots {
			if p.mode == modeKey(m) {
				fmt.Fprintf(&b, "<figure><a href=\"%s.png\"><img src=\"%s.svg\" alt=\"%s\"></a><figcaption>%s (<a href=\"%s.png\">PNG</a>)</figcaption></figure>\n",
					p.base, p.base, html.EscapeString(p.title), html.EscapeString(p.title), p.base)
			}
		}
		for _, t := range modeTables(m) {
			b.WriteString(t.html())
		}
		if len(m.Errors) > 0 {
			b.WriteString("<p>Not measured:</p><ul>\n")
			for _, e := range m.Errors {
				fmt.Fprintf(&b, "<li>%s</li>\n", html.EscapeString(e))
			}
			b.WriteString("</ul>\n")
		}
	}
	b.WriteString("</body></html>\n")
	return b.String()
}

// Headline is a few lines for the terminal: the headline ratios of each
// mode.
func Headline(r *Results) string {
	var b strings.Builder
	for _, m := range r.Modes {
		x := m.Ratios
		fmt.Fprintf(&b, "%s: RTT p50 overlay/underlay %s, TCP overlay/underlay %s (1 stream) %s (4), fednet/standalone wireguard-go %s (1) %s (4), traffic overhead %s (underlay %s)\n",
			modeTitle(m), f(x.RTTP50, 2), f(x.Throughput1, 3), f(x.Throughput4, 3), f(x.Standalone1, 3), f(x.Standalone4, 3), f(x.Overhead, 4), f(x.OverheadUnderlay, 4))
		for _, t := range m.TCP {
			if t.Path == Overlay && t.CPUSecondsPerGB != 0 {
				fmt.Fprintf(&b, "  TCP %d stream(s): %s Mbit/s, %s CPU s/GB (machine), %s wgdev CPU s/GB\n", t.Streams, f(t.Mbps, 1), f(t.CPUSecondsPerGB, 2), f(t.WgdevCPUSecondsPerGB, 2))
			}
		}
		for _, e := range m.Errors {
			fmt.Fprintf(&b, "  not measured: %s\n", e)
		}
	}
	if c := r.Comparison; c.BridgedRouted1 != 0 {
		fmt.Fprintf(&b, "bridged/routed TCP %s (1 stream) %s (4)\n", f(c.BridgedRouted1, 3), f(c.BridgedRouted4, 3))
	}
	for _, n := range r.Notes {
		if strings.Contains(n, "not measured") {
			fmt.Fprintf(&b, "%s\n", n)
		}
	}
	return b.String()
}

// modeKey names a mode in file names: "routed", "bridged-lan".
// A mode on IPsec gets its backend appended ("routed-ipsec"), so that it
// does not share the routed mode's files.
func modeKey(m ModeResult) string {
	k := m.Mode
	if m.Network != "" {
		k += "-" + sanitize(m.Network)
	}
	if m.Backend == backend.IPsec {
		k += "-" + string(m.Backend)
	}
	return k
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, s)
}
