package bench

import (
	"fmt"
	"image/color"
	"path/filepath"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
)

// plotFile is one plot written as base.svg and base.png.
type plotFile struct {
	mode  string // modeKey of its mode
	base  string // file name without extension
	title string
}

// Plot size: wide enough for a legend beside the data, small enough for a
// README.
const (
	plotWidth  = 16 * vg.Centimeter
	plotHeight = 10 * vg.Centimeter
)

// pathColors gives each path the same colour in every plot.
var pathColors = map[string]color.RGBA{
	Overlay:    {R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	Underlay:   {R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	Standalone: {R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
}

func pathColor(p string) color.Color {
	if c, ok := pathColors[p]; ok {
		return c
	}
	return color.Black
}

// writePlots writes every plot of r into dir, each as SVG and PNG, and
// returns them in order.
func writePlots(dir string, r *Results) ([]plotFile, error) {
	var out []plotFile
	for _, m := range r.Modes {
		key := modeKey(m)
		for _, mk := range []struct {
			name, title string
			make        func(ModeResult) (*plot.Plot, bool, error)
		}{
			{"rtt-cdf", "RTT distribution (CDF)", rttCDF},
			{"rtt-series", "RTT time series", rttSeries},
			{"rtt-box", "RTT idle and under load (box plots)", rttBox},
			{"throughput", "TCP throughput", throughputBars},
			{"udp", "UDP received rate and loss at offered rates", udpPlot},
			{"throughput-delay", "TCP throughput against added round-trip delay", throughputDelay},
		} {
			p, ok, err := mk.make(m)
			if err != nil {
				return out, fmt.Errorf("plot %s of %s: %w", mk.name, key, err)
			}
			if !ok {
				continue
			}
			p.Title.Text = modeTitle(m) + ": " + mk.title
			base := key + "-" + mk.name
			for _, ext := range []string{".svg", ".png"} {
				if err := p.Save(plotWidth, plotHeight, filepath.Join(dir, base+ext)); err != nil {
					return out, fmt.Errorf("writing plot %s%s: %w", base, ext, err)
				}
			}
			out = append(out, plotFile{mode: key, base: base, title: modeTitle(m) + ": " + mk.title})
		}
	}
	return out, nil
}

func newPlot(x, y string) *plot.Plot {
	p := plot.New()
	p.X.Label.Text, p.Y.Label.Text = x, y
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	return p
}

func addLine(p *plot.Plot, name string, pts plotter.XYs, withPoints bool) error {
	l, err := plotter.NewLine(pts)
	if err != nil {
		return err
	}
	l.Color = pathColor(name)
	l.Width = vg.Points(1.2)
	p.Add(l)
	p.Legend.Add(name, l)
	if withPoints {
		s, err := plotter.NewScatter(pts)
		if err != nil {
			return err
		}
		s.Color = pathColor(name)
		p.Add(s)
	}
	return nil
}

// rttCDF: the empirical distribution of each path's RTTs.
func rttCDF(m ModeResult) (*plot.Plot, bool, error) {
	p := newPlot("round-trip time (ms)", "fraction of probes")
	p.Legend.Left, p.Legend.Top = false, false
	p.Y.Min, p.Y.Max = 0, 1
	return p, len(m.RTT) > 0, rttLines(p, m, func(samples []float64) plotter.XYs {
		var pts plotter.XYs
		prev := 0.0
		for _, c := range CDF(samples) {
			// Steps: the fraction holds until the next value.
			pts = append(pts, plotter.XY{X: c.Value, Y: prev}, plotter.XY{X: c.Value, Y: c.Fraction})
			prev = c.Fraction
		}
		return pts
	})
}

// rttSeries: each path's RTTs in the order they arrived.
func rttSeries(m ModeResult) (*plot.Plot, bool, error) {
	p := newPlot("probe", "round-trip time (ms)")
	return p, len(m.RTT) > 0, rttLines(p, m, func(samples []float64) plotter.XYs {
		pts := make(plotter.XYs, len(samples))
		for i, v := range samples {
			pts[i] = plotter.XY{X: float64(i + 1), Y: v}
		}
		return pts
	})
}

// rttLines adds a line per path of m's RTT samples, made by points.
func rttLines(p *plot.Plot, m ModeResult, points func([]float64) plotter.XYs) error {
	for _, r := range m.RTT {
		if pts := points(r.SamplesMs); len(pts) > 0 {
			if err := addLine(p, r.Path, pts, false); err != nil {
				return err
			}
		}
	}
	return nil
}

// rttBox: a box per path idle, and per path under load.
func rttBox(m ModeResult) (*plot.Plot, bool, error) {
	p := newPlot("", "round-trip time (ms)")
	var names []string
	add := func(name, path string, v []float64) error {
		if len(v) == 0 {
			return nil
		}
		b, err := plotter.NewBoxPlot(vg.Points(28), float64(len(names)), plotter.Values(v))
		if err != nil {
			return err
		}
		b.FillColor = pathColor(path)
		p.Add(b)
		names = append(names, name)
		return nil
	}
	for _, r := range m.RTT {
		if err := add(r.Path, r.Path, r.SamplesMs); err != nil {
			return nil, false, err
		}
	}
	for _, l := range m.Loaded {
		if err := add(l.Path+"\nunder load", l.Path, l.SamplesMs); err != nil {
			return nil, false, err
		}
	}
	p.NominalX(names...)
	return p, len(names) > 0, nil
}

// throughputBars: TCP Mbit/s, grouped by stream count, a bar per path.
func throughputBars(m ModeResult) (*plot.Plot, bool, error) {
	p := newPlot("", "TCP throughput (Mbit/s)")
	p.Legend.Left = true
	var streams []int
	var paths []string
	for _, t := range m.TCP {
		if !slices.Contains(streams, t.Streams) {
			streams = append(streams, t.Streams)
		}
		if !slices.Contains(paths, t.Path) {
			paths = append(paths, t.Path)
		}
	}
	slices.Sort(streams)
	w := vg.Points(24)
	for i, path := range paths {
		vals := make(plotter.Values, len(streams))
		for j, n := range streams {
			for _, t := range m.TCP {
				if t.Path == path && t.Streams == n {
					vals[j] = t.Mbps
				}
			}
		}
		b, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return nil, false, err
		}
		b.Color = pathColor(path)
		b.LineStyle.Width = 0
		b.Offset = w * vg.Length(float64(i)-float64(len(paths)-1)/2)
		p.Add(b)
		p.Legend.Add(path, b)
		// The figure above each bar: on a lab the underlay dwarfs the
		// tunnels, whose bars alone would not show their difference.
		if err := barLabels(p, vals, b.Offset); err != nil {
			return nil, false, err
		}
	}
	names := make([]string, len(streams))
	for i, n := range streams {
		names[i] = strconv.Itoa(n) + " stream"
		if n > 1 {
			names[i] += "s"
		}
	}
	p.NominalX(names...)
	p.Y.Min = 0
	return p, len(paths) > 0, nil
}

// barLabels writes each value above its bar (bars at x = 0, 1, ...,
// shifted by offset).
func barLabels(p *plot.Plot, vals plotter.Values, offset vg.Length) error {
	xy := plotter.XYLabels{XYs: make(plotter.XYs, len(vals)), Labels: make([]string, len(vals))}
	for j, v := range vals {
		xy.XYs[j] = plotter.XY{X: float64(j), Y: v}
		xy.Labels[j] = strconv.FormatFloat(v, 'f', 0, 64)
	}
	l, err := plotter.NewLabels(xy)
	if err != nil {
		return err
	}
	for k := range l.TextStyle {
		l.TextStyle[k].XAlign = text.XCenter
		l.TextStyle[k].Font.Size = vg.Points(7)
	}
	l.Offset = vg.Point{X: offset, Y: vg.Points(2)}
	p.Add(l)
	return nil
}

// udpPlot: received rate against offered rate, per path.
func udpPlot(m ModeResult) (*plot.Plot, bool, error) {
	p := newPlot("offered rate (Mbit/s)", "received rate (Mbit/s)")
	p.Legend.Left = true
	var pts []pathXY
	for _, u := range m.UDP {
		pts = append(pts, pathXY{u.Path, plotter.XY{X: u.OfferedMbps, Y: u.Mbps}})
	}
	p.X.Min, p.Y.Min = 0, 0
	return p, len(pts) > 0, linesByPath(p, pts)
}

// throughputDelay: TCP Mbit/s against added delay, per path (seed 002).
func throughputDelay(m ModeResult) (*plot.Plot, bool, error) {
	p := newPlot("added round-trip delay (ms)", "TCP throughput, 1 stream (Mbit/s, log scale)")
	// A log scale: the lab's underlay without delay is ten times anything
	// else, and the interesting part is how the lines fall with delay.
	p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	var pts []pathXY
	for _, d := range m.Delay {
		if d.Mbps > 0 {
			pts = append(pts, pathXY{d.Path, plotter.XY{X: d.DelayMs, Y: d.Mbps}})
		}
	}
	return p, len(pts) > 0, linesByPath(p, pts)
}

// pathXY is a point of a path's line.
type pathXY struct {
	path string
	xy   plotter.XY
}

// linesByPath adds a line with marked points per path, in the order the
// paths first appear.
func linesByPath(p *plot.Plot, pts []pathXY) error {
	by := map[string]plotter.XYs{}
	var order []string
	for _, pt := range pts {
		if _, ok := by[pt.path]; !ok {
			order = append(order, pt.path)
		}
		by[pt.path] = append(by[pt.path], pt.xy)
	}
	for _, path := range order {
		if err := addLine(p, path, by[path], true); err != nil {
			return err
		}
	}
	return nil
}
