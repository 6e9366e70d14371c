package controlplane

import (
	"encoding/json"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Write writes results (one per run, in the order run) into dir:
// results.json, results.md (a table per run) and two plots against the
// number of gateways, each as SVG and PNG: propagation-p99 (per change
// kind) and plan-time (the planning of the manager a change went through).
func Write(dir string, results []*Result) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	js, err := json.MarshalIndent(results, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.md"), []byte(Markdown(results)), 0o644); err != nil {
		return err
	}
	for _, pl := range []struct {
		name, y string
		value   func(Change) float64
	}{
		{"propagation-p99", "propagation p99 (ms)", func(c Change) float64 { return c.P99Ms }},
		{"plan-time", "planning time (ms)", func(c Change) float64 { return c.PlanMs }},
	} {
		p := plot.New()
		p.Title.Text = "fednet control plane: " + pl.y + " against gateways"
		p.X.Label.Text, p.Y.Label.Text = "gateways", pl.y
		p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, plot.LogTicks{}
		p.Legend.Top, p.Legend.Left = true, true
		p.Add(plotter.NewGrid())
		for i, kind := range []string{SiteAdded, PrefixChanged, NetworkAdded, GatewayRemoved} {
			byStore := map[string]plotter.XYs{}
			var order []string
			for _, r := range results {
				for _, c := range r.Changes {
					if c.Kind == kind {
						label := fmt.Sprintf("%s (%s, %d managers)", kind, r.Store, r.Managers)
						if _, ok := byStore[label]; !ok {
							order = append(order, label)
						}
						byStore[label] = append(byStore[label], plotter.XY{X: float64(r.Gateways), Y: pl.value(c)})
					}
				}
			}
			for j, label := range order {
				l, s, err := plotter.NewLinePoints(byStore[label])
				if err != nil {
					return err
				}
				l.Color, s.Color = kindColors[i], kindColors[i]
				l.Width = vg.Points(1.2)
				if j > 0 {
					l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
				}
				p.Add(l, s)
				p.Legend.Add(label, l, s)
			}
		}
		for _, ext := range []string{".svg", ".png"} {
			if err := p.Save(18*vg.Centimeter, 11*vg.Centimeter, filepath.Join(dir, pl.name+ext)); err != nil {
				return fmt.Errorf("writing plot %s%s: %w", pl.name, ext, err)
			}
		}
	}
	return nil
}

var kindColors = []color.Color{
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
}

// Markdown renders results as tables, one per run.
func Markdown(results []*Result) string {
	var b strings.Builder
	for _, r := range results {
		store := r.Store
		if r.EtcdMembers > 0 {
			store = fmt.Sprintf("etcd (%d members)", r.EtcdMembers)
		}
		proto := "HTTP/1.1"
		if r.HTTP2 {
			proto = "HTTP/2"
		}
		fmt.Fprintf(&b, "### %d gateways, %d manager(s), %s store, %d CPUs (deltas %v, gzip %v, local %v, %s)\n\n", r.Gateways, r.Managers, store, r.CPUs, r.Deltas, r.Compression, r.Local, proto)
		fmt.Fprintf(&b, "Setup: %d enrollments in %.1f s; first (whole) plans to every agent in %.1f s, %.1f MB.\n\n",
			r.Gateways, r.EnrollSeconds, r.FirstPlanSeconds, float64(r.FirstPlanBytes)/1e6)
		fmt.Fprintf(&b, "Steady (%.0f s, nothing changing, every agent watching and reporting every 5 s): managers %.2f cores, etcd %.2f cores, largest manager RSS %.0f MB.\n\n",
			r.Steady.Seconds, r.Steady.ManagerCores, r.Steady.EtcdCores, r.Steady.RSSMB)
		if pre := preGC(r); pre > 0 {
			fmt.Fprintf(&b, "The simulated agents' shared heap was collected before each change, outside its window (%.2f CPU-s in all; --collect-in-window leaves its collections where they fall).\n\n", pre)
		}
		b.WriteString("| change | agents | planning ms (others) | p50 ms | p99 ms | max ms | API ms | bytes sent | manager CPU s | etcd CPU s | agents' CPU s | peak RSS MB |\n")
		b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, c := range r.Changes {
			plan := fmt.Sprintf("%.1f", c.PlanMs)
			if c.FollowerPlanMs > 0 {
				plan += fmt.Sprintf(" (%.1f)", c.FollowerPlanMs)
			}
			fmt.Fprintf(&b, "| %s | %d | %s | %.0f | %.0f | %.0f | %.0f | %s | %.2f | %.2f | %.2f | %.0f |\n",
				c.Kind, c.Affected, plan, c.P50Ms, c.P99Ms, c.MaxMs, c.APIMs, bytesText(c.Bytes), c.ManagerCPUSeconds, c.EtcdCPUSeconds, c.AgentCPUSeconds, c.PeakRSSMB)
		}
		rc := r.Reconnect
		fmt.Fprintf(&b, "\nRestart of every manager at once: down %.1f s; %d of %d agents back within %.1f s of the start (median %.1f s); "+
			"at most %d failed tries in a row per agent (each after its jittered backoff), %d requests failed after the managers answered again; "+
			"an operator's GET /v1/spec meanwhile: median %.0f ms, max %.0f ms, %d failed.\n\n",
			rc.DownSeconds, rc.Reconnected, rc.Agents, rc.Seconds, rc.P50Seconds, rc.MaxTries, rc.FailedAfterUp, rc.AdminP50Ms, rc.AdminMaxMs, rc.AdminFails)
		for _, f := range rc.FailuresAfterUp {
			fmt.Fprintf(&b, "- failed after the managers answered: %s\n", f)
		}
		if len(rc.FailuresAfterUp) > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "Periodic status reports (every agent every 5 s) throughout: %d, %d failed.\n\n", r.StatusReports, r.StatusReportFails)
	}
	return b.String()
}

// preGC is the CPU seconds of the collections made before r's changes.
func preGC(r *Result) float64 {
	var sum float64
	for _, c := range r.Changes {
		sum += c.AgentPreGCCPUSeconds
	}
	return sum
}

func bytesText(n int64) string {
	switch {
	case n >= 1e6:
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.0f kB", float64(n)/1e3)
	}
	return fmt.Sprintf("%d B", n)
}
