package controlplane

import (
	"strings"
	"testing"
	"time"
)

// TestMarkdownSaysWhyRequestsFailed: the report lists the requests that
// failed after the managers answered again, with their errors, and
// nothing of the kind when none did.
func TestMarkdownSaysWhyRequestsFailed(t *testing.T) {
	r := &Result{Gateways: 2, Managers: 1, Store: SQLite}
	r.Reconnect.FailedAfterUp = 1
	r.Reconnect.FailuresAfterUp = []string{"g0001, 12ms after the managers answered: status report: connection reset by peer"}
	md := Markdown([]*Result{r})
	if !strings.Contains(md, "1 requests failed after the managers answered again") || !strings.Contains(md, "g0001, 12ms after the managers answered: status report: connection reset by peer") {
		t.Errorf("the report does not say which request failed after the managers were back:\n%s", md)
	}
	r.Reconnect.FailedAfterUp, r.Reconnect.FailuresAfterUp = 0, nil
	if md := Markdown([]*Result{r}); strings.Contains(md, "failed after the managers answered:") {
		t.Errorf("the report lists failures where there were none:\n%s", md)
	}
}

// TestCountFailures: only the requests that failed after the managers
// answered again count, and the first five are said, with the agent, how
// long after and the error.
func TestCountFailures(t *testing.T) {
	up := time.Unix(100, 0)
	var rc Reconnect
	rc.countFailures("g0001", []failure{{up.Add(-time.Second), "connection refused"}, {up, "at the moment itself"}, {up.Add(12 * time.Millisecond), "status report: 503"}}, up)
	if rc.FailedAfterUp != 1 || len(rc.FailuresAfterUp) != 1 || rc.FailuresAfterUp[0] != "g0001, 12ms after the managers answered: status report: 503" {
		t.Fatalf("after one late failure: %d, %q", rc.FailedAfterUp, rc.FailuresAfterUp)
	}
	var late []failure
	for i := range 7 {
		late = append(late, failure{up.Add(time.Duration(i+1) * time.Second), "reset"})
	}
	rc.countFailures("g0002", late, up)
	if rc.FailedAfterUp != 8 || len(rc.FailuresAfterUp) != 5 {
		t.Errorf("after eight late failures: %d counted, %d said, want 8 and 5", rc.FailedAfterUp, len(rc.FailuresAfterUp))
	}
}
