package controlplane

import (
	"strings"
	"testing"
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
