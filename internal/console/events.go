package console

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Severity says how an event is shown.
type Severity string

// Severities.
const (
	Info    Severity = "info"
	Warning Severity = "warning"
	Failure Severity = "error"
)

// Event is one line of the page's recent events.
type Event struct {
	Time     time.Time `json:"time"`
	Severity Severity  `json:"severity"`
	// Subject is what the event is about, as the page names it:
	// "link:A|B", "gateway:NAME", "revision:N".
	Subject string `json:"subject"`
	Text    string `json:"text"`
}

// MaxEvents bounds the events a console keeps (and sends).
const MaxEvents = 200

// history is what a view tells of the past on its own: when each spec
// revision was stored and each gateway enrolled, oldest first. The console
// starts its events with it; what happens later it sees as changes.
func history(v View) []Event {
	var out []Event
	for _, r := range v.Revisions {
		out = append(out, revisionEvent(r.Revision, r.Created, r.Sites, r.Gateways, r.Networks))
	}
	for _, g := range v.Gateways {
		if !g.EnrolledAt.IsZero() {
			out = append(out, Event{Time: g.EnrolledAt, Severity: Info, Subject: "gateway:" + g.Name, Text: fmt.Sprintf("gateway %s enrolled", g.Name)})
		}
	}
	slices.SortStableFunc(out, func(a, b Event) int { return a.Time.Compare(b.Time) })
	return out
}

func revisionEvent(n int, created time.Time, sites, gateways, networks int) Event {
	return Event{Time: created, Severity: Info, Subject: fmt.Sprintf("revision:%d", n),
		Text: fmt.Sprintf("spec revision %d stored: %d sites, %d gateways, %d networks", n, sites, gateways, networks)}
}

// changes are the events that lead from view old to view cur, at cur.Now,
// in a stable order.
func changes(old, cur View) []Event {
	now := cur.Now
	var out []Event
	add := func(sev Severity, subject, format string, args ...any) {
		out = append(out, Event{Time: now, Severity: sev, Subject: subject, Text: fmt.Sprintf(format, args...)})
	}
	if cur.Revision > old.Revision && len(cur.Revisions) > 0 {
		r := cur.Revisions[0]
		e := revisionEvent(r.Revision, r.Created, r.Sites, r.Gateways, r.Networks)
		e.Time = now
		out = append(out, e)
	}
	before := map[string]Gateway{}
	for _, g := range old.Gateways {
		before[g.Name] = g
	}
	for _, g := range cur.Gateways {
		subject := "gateway:" + g.Name
		o, known := before[g.Name]
		switch {
		case !known:
			continue // new in the spec: the revision's event says so
		case g.Removed && !o.Removed:
			add(Warning, subject, "gateway %s removed from the federation", g.Name)
		case g.Enrolled && !o.Enrolled, !g.EnrolledAt.Equal(o.EnrolledAt) && !g.EnrolledAt.IsZero():
			add(Info, subject, "gateway %s enrolled", g.Name)
		}
		switch {
		case g.ApplyError != "" && g.ApplyError != o.ApplyError:
			add(Failure, subject, "gateway %s failed to apply its plan: %s", g.Name, firstLine(g.ApplyError))
		case g.ApplyError == "" && o.ApplyError != "":
			add(Info, subject, "gateway %s applies its plan again", g.Name)
		}
		if g.Role != o.Role && g.Role != RoleNone && o.Role != RoleNone {
			add(Warning, subject, "gateway %s is now %s", g.Name, g.Role)
		}
		if g.Health == HealthSilent && o.Health != HealthSilent {
			add(Warning, subject, "gateway %s has not reported for %v", g.Name, SilentAfter)
		} else if o.Health == HealthSilent && g.Health != HealthSilent && g.Health != HealthRemoved {
			add(Info, subject, "gateway %s reports again", g.Name)
		}
	}
	prev := map[string]LinkState{}
	for _, l := range old.Links {
		prev[l.ID] = l.State
	}
	for _, l := range cur.Links {
		was, known := prev[l.ID]
		if !known || was == l.State || l.State == LinkUnknown {
			continue
		}
		sev := Info
		switch l.State {
		case LinkDown:
			sev = Failure
		case LinkDegraded:
			sev = Warning
		}
		add(sev, "link:"+l.ID, "link %s – %s %s", l.A, l.B, l.State)
	}
	return out
}

// firstLine clips an apply error to its first line, at most 200 bytes.
func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) <= 200 {
		return s
	}
	n := 200
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// eventLog keeps the newest MaxEvents events. Not safe for concurrent use
// (the hub guards it).
type eventLog struct{ events []Event }

// add appends events, keeping the newest MaxEvents.
func (l *eventLog) add(evs ...Event) {
	l.events = append(l.events, evs...)
	if n := len(l.events) - MaxEvents; n > 0 {
		l.events = slices.Delete(l.events, 0, n)
	}
}

// newestFirst returns a copy of the events, newest first.
func (l *eventLog) newestFirst() []Event {
	out := slices.Clone(l.events)
	slices.Reverse(out)
	slices.SortStableFunc(out, func(a, b Event) int { return cmp.Compare(b.Time.UnixNano(), a.Time.UnixNano()) })
	if out == nil {
		out = []Event{}
	}
	return out
}
