package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/client"
	"github.com/fednet/fednet/internal/client/clienttest"
)

// TestOutageLogsOnceAMinute: a run of failures makes one line at once,
// then at most one a minute however many failures follow; a failure the
// agent makes something else of (401 after "out of reach") is logged at
// once; the end of the run is logged.
func TestOutageLogsOnceAMinute(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var lines []string
	logf := func(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) }
	o := outage{now: func() time.Time { return now }}
	unreachable := errors.New("cannot reach the manager")
	unknown := managerAnswer(t, 401, api.CodeUnauthenticated)

	o.failed(logf, "watching the plan", unreachable)
	for range 100 { // 50 s of failures every half second
		now = now.Add(500 * time.Millisecond)
		o.failed(logf, "watching the plan", unreachable)
	}
	if len(lines) != 1 || !strings.Contains(lines[0], "cannot reach the manager; retrying with backoff") {
		t.Fatalf("after 50 s of failures: %q, want the first one only", lines)
	}
	now = now.Add(10 * time.Second)
	o.failed(logf, "watching the plan", unreachable)
	if len(lines) != 2 || !strings.Contains(lines[1], "still failing after 102 attempts over 1m0s") {
		t.Fatalf("after a minute: %q", lines)
	}

	// The manager answers now, but does not know us: said at once, then
	// once a minute again.
	now = now.Add(time.Second)
	o.failed(logf, "watching the plan", unknown)
	if len(lines) != 3 || !strings.Contains(lines[2], "401 unauthenticated") {
		t.Fatalf("a 401 after an outage: %q, want it logged at once", lines)
	}
	for range 50 {
		now = now.Add(time.Second)
		o.failed(logf, "watching the plan", unknown)
	}
	if len(lines) != 3 {
		t.Fatalf("50 s of 401s logged %q", lines[3:])
	}
	now = now.Add(10 * time.Second)
	o.failed(logf, "watching the plan", unknown)
	if len(lines) != 4 || !strings.Contains(lines[3], "still failing") {
		t.Fatalf("a minute of 401s: %q", lines[3:])
	}

	o.recovered(logf)
	if len(lines) != 5 || !strings.Contains(lines[4], "watching the plan: works again after 154 failed attempts over 2m1s") {
		t.Fatalf("recovery: %q", lines[4:])
	}
	o.recovered(logf)
	if len(lines) != 5 {
		t.Errorf("a success without failures logged %q", lines[5:])
	}
}

// TestClassify: what the agent makes of the manager's answers; only 403
// gateway_removed stops it.
func TestClassify(t *testing.T) {
	answerOf := func(status int, code string) error {
		return fmt.Errorf("watching: %w", managerAnswer(t, status, code))
	}
	tests := []struct {
		err  error
		want answer
	}{
		{nil, answerRetry},
		{errors.New("cannot reach the manager at https://m:8443: connection refused"), answerRetry},
		{answerOf(500, api.CodeInternal), answerRetry},
		{answerOf(503, "service_unavailable"), answerRetry},
		{answerOf(429, "too_many_requests"), answerRetry},
		{answerOf(408, api.CodeTimeout), answerRetry},
		{answerOf(403, api.CodeGatewayRemoved), answerRemoved},
		{answerOf(401, api.CodeUnauthenticated), answerUnknown},
		{answerOf(401, api.CodeGatewayRemoved), answerUnknown},
		{answerOf(403, api.CodeForbidden), answerNoPlan},
		{answerOf(404, api.CodeNotFound), answerNoPlan},
		{answerOf(409, api.CodeConflict), answerRefused},
		{answerOf(400, api.CodeBadRequest), answerRefused},
		{errors.New("decoding the answer of the manager at https://m:8443 to GET /v1/gateways/g/plan: decoding plan: it is of format 3"), answerUnreadable},
	}
	for _, tt := range tests {
		if got := classify(tt.err); got != tt.want {
			t.Errorf("classify(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

// managerAnswer returns the error a client call gets from a manager that
// answers status with an api.Error of code.
func managerAnswer(t *testing.T, status int, code string) error {
	t.Helper()
	srv := clienttest.NewServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(api.Error{Code: code, Message: "answer of the test"})
	}))
	cl, err := client.New(client.Config{URL: srv.URL, CAFingerprint: srv.Fingerprint(), Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	_, _, err = cl.WatchPlan(context.Background(), "g", 0, time.Second)
	if client.StatusOf(err) != status {
		t.Fatalf("the test manager's answer: %v, want status %d", err, status)
	}
	return err
}

func TestClip(t *testing.T) {
	if got := clip("short", 100); got != "short" {
		t.Errorf("clip of a short string: %q", got)
	}
	long := strings.Repeat("é", 5000) // 10000 bytes
	got := clip(long, maxApplyError)
	if len(got) > maxApplyError || !utf8.ValidString(got) || !strings.HasSuffix(got, "bytes more; see the agent's log)") {
		t.Errorf("clip of 10000 bytes: %d bytes, valid UTF-8 %v, ends %q", len(got), utf8.ValidString(got), got[len(got)-40:])
	}
	if got := clip("a\xffb", 10); got != "a?b" {
		t.Errorf("clip of invalid UTF-8: %q", got)
	}
}
