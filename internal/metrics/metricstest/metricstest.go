// Package metricstest reads Prometheus text exposition for tests: parse a
// scrape, then look up one series' value by name and labels.
package metricstest

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Scrape is one parsed scrape: metric families by name.
type Scrape map[string]*dto.MetricFamily

// Parse reads the text exposition format.
func Parse(r io.Reader) (Scrape, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parsing the metrics: %w", err)
	}
	return Scrape(fams), nil
}

// Value returns the value of the series of family name whose labels
// include want: a gauge's or counter's value, a histogram's sample count.
// ok is false when there is no such series.
func (s Scrape) Value(name string, want map[string]string) (v float64, ok bool) {
	f := s[name]
	if f == nil {
		return 0, false
	}
	for _, m := range f.GetMetric() {
		if !hasLabels(m, want) {
			continue
		}
		switch {
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		case m.Untyped != nil:
			return m.GetUntyped().GetValue(), true
		}
	}
	return 0, false
}

// Series returns the label sets of every series of family name, each
// rendered as {a="x",b="y"} with sorted names.
func (s Scrape) Series(name string) []string {
	var out []string
	for _, m := range s[name].GetMetric() {
		l := map[string]string{}
		for _, lp := range m.GetLabel() {
			l[lp.GetName()] = lp.GetValue()
		}
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(l)) {
			parts = append(parts, fmt.Sprintf("%s=%q", k, l[k]))
		}
		out = append(out, "{"+strings.Join(parts, ",")+"}")
	}
	return out
}

// Type returns the type of family name ("" when absent).
func (s Scrape) Type(name string) string {
	if f := s[name]; f != nil {
		return strings.ToLower(f.GetType().String())
	}
	return ""
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	have := map[string]string{}
	for _, lp := range m.GetLabel() {
		have[lp.GetName()] = lp.GetValue()
	}
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}
