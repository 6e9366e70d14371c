package console

import (
	"strings"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/plan"
)

// TestChanges: the events between two views name what changed: a link
// going down and up, a gateway removed, failing to apply, going silent, a
// takeover, a new revision. Nothing changed gives no event.
func TestChanges(t *testing.T) {
	s := fixture(t)
	a := Build(s)
	if evs := changes(a, a); len(evs) != 0 {
		t.Errorf("no change gave events: %+v", evs)
	}

	s2 := fixture(t)
	s2.Now = now.Add(10 * time.Second)
	s2.Links[0].Up = false // aws-gw -> azure-gw
	s2.Revision = 3
	s2.Revisions = append(s2.Revisions, api.Revision{Revision: 3, Created: s2.Now, Sites: 4, Gateways: 5, Networks: 3})
	for i := range s2.Gateways {
		g := &s2.Gateways[i]
		g.LastReport = s2.Now.Add(-time.Second)
		switch g.Name {
		case "azure-gw":
			g.ApplyError = "adding route 10.3.0.0/24: file exists\nmore"
		case "gcp-gw":
			g.LastReport = s2.Now.Add(-time.Minute)
		case "aws-gw":
			g.Removed = true
		}
	}
	// A takeover at the office: the standby becomes active.
	for _, name := range []string{"office-gw1", "office-gw2"} {
		p := s2.Plans[name]
		p.LAN = plan.LAN{Address: p.LAN.Address, Virtual: p.LAN.Virtual, Active: name == "office-gw2"}
		s2.Plans[name] = p
	}
	b := Build(s2)
	got := map[string]Event{}
	for _, e := range changes(a, b) {
		got[e.Subject+" "+e.Text] = e
		if !e.Time.Equal(s2.Now) {
			t.Errorf("event %q at %v, want the new view's time", e.Text, e.Time)
		}
	}
	for _, want := range []struct {
		key string
		sev Severity
	}{
		{"link:aws-gw|azure-gw link aws-gw – azure-gw down", Failure},
		{"revision:3 spec revision 3 stored: 4 sites, 5 gateways, 3 networks", Info},
		{"gateway:aws-gw gateway aws-gw removed from the federation", Warning},
		{"gateway:azure-gw gateway azure-gw failed to apply its plan: adding route 10.3.0.0/24: file exists", Failure},
		{"gateway:gcp-gw gateway gcp-gw has not reported for 15s", Warning},
		{"gateway:office-gw2 gateway office-gw2 is now active", Warning},
		{"gateway:office-gw1 gateway office-gw1 is now standby", Warning},
	} {
		e, ok := got[want.key]
		if !ok {
			t.Errorf("missing event %q; got %v", want.key, keys(got))
			continue
		}
		if e.Severity != want.sev {
			t.Errorf("event %q is %s, want %s", want.key, e.Severity, want.sev)
		}
	}

	// And back: the link comes up again, the gateway applies again.
	s3 := fixture(t)
	s3.Now = now.Add(20 * time.Second)
	for i := range s3.Gateways {
		s3.Gateways[i].LastReport = s3.Now.Add(-time.Second)
	}
	evs := changes(b, Build(s3))
	var texts []string
	for _, e := range evs {
		texts = append(texts, e.Text)
	}
	all := strings.Join(texts, "\n")
	for _, want := range []string{"link aws-gw – azure-gw up", "gateway azure-gw applies its plan again", "gateway gcp-gw reports again"} {
		if !strings.Contains(all, want) {
			t.Errorf("no event %q in:\n%s", want, all)
		}
	}
}

func keys(m map[string]Event) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestHistory: a view's own past (revisions stored, gateways enrolled)
// starts the events, oldest first.
func TestHistory(t *testing.T) {
	evs := history(Build(fixture(t)))
	if len(evs) != 2+5 {
		t.Fatalf("%d events, want 7 (2 revisions, 5 enrollments): %+v", len(evs), evs)
	}
	if evs[0].Subject != "revision:1" || evs[1].Subject != "revision:2" || !strings.HasPrefix(evs[2].Subject, "gateway:") {
		t.Errorf("history not oldest first: %+v", evs)
	}
}

func TestEventLogBounded(t *testing.T) {
	var l eventLog
	for i := range MaxEvents + 50 {
		l.add(Event{Time: now.Add(time.Duration(i) * time.Second), Text: "e"})
	}
	out := l.newestFirst()
	if len(out) != MaxEvents || !out[0].Time.Equal(now.Add((MaxEvents+49)*time.Second)) {
		t.Errorf("%d events, newest %v", len(out), out[0].Time)
	}
}

func TestFirstLine(t *testing.T) {
	long := strings.Repeat("é", 150) // 300 bytes
	got := firstLine(long + "\nsecond")
	if !strings.HasSuffix(got, "…") || len(got) > 204 || !strings.HasPrefix(long, strings.TrimSuffix(got, "…")) {
		t.Errorf("firstLine cut %q badly", got)
	}
	if firstLine("a\nb") != "a" {
		t.Error("firstLine kept the second line")
	}
}
