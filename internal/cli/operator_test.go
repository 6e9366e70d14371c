package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/fednet/fednet/internal/agent"
	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/await"
	"github.com/fednet/fednet/internal/client/clienttest"
	"github.com/fednet/fednet/internal/dataplane"
	"github.com/fednet/fednet/internal/plan"
)

// runIO executes a command line with stdin and returns stdout and stderr
// apart.
func runIO(t *testing.T, stdin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	root := NewRoot()
	var out, errb bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetIn(strings.NewReader(stdin))
	root.SetArgs(args)
	err = root.Execute()
	return out.String(), errb.String(), err
}

// isolate points the operator commands at an empty config file and clears
// the environment they read; it returns the config file's path.
func isolate(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fednet", "config.json")
	t.Setenv(envConfig, path)
	t.Setenv(envManager, "")
	t.Setenv(envToken, "")
	t.Setenv(envCAFingerprint, "")
	return path
}

// loggedIn starts a real manager and logs in to it; the commands then find
// it through the config file.
func loggedIn(t *testing.T) *clienttest.Real {
	t.Helper()
	isolate(t)
	m := clienttest.NewReal(t)
	if _, _, err := runIO(t, "", "login", "--manager", m.URL(), "--token", m.AdminToken(), "--ca-fingerprint", m.CAFingerprint()); err != nil {
		t.Fatal(err)
	}
	return m
}

var exampleSpec = filepath.Join("..", "..", "examples", "three-sites.yaml")

// specWithMTU writes the example spec with another underlay MTU.
func specWithMTU(t *testing.T, mtu string) string {
	t.Helper()
	data, err := os.ReadFile(exampleSpec)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "spec.yaml")
	if err := os.WriteFile(path, bytes.Replace(data, []byte("underlayMTU: 1500"), []byte("underlayMTU: "+mtu), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func mustRun(t *testing.T, args ...string) string {
	t.Helper()
	out, stderr, err := runIO(t, "", args...)
	if err != nil {
		t.Fatalf("fednet %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	return out
}

func contains(t *testing.T, what, got string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, got)
		}
	}
}

func TestLogin(t *testing.T) {
	path := isolate(t)
	m := clienttest.NewReal(t)
	out, _, err := runIO(t, "", "login", "--manager", m.URL(), "--token", m.AdminToken(), "--ca-fingerprint", m.CAFingerprint())
	if err != nil {
		t.Fatal(err)
	}
	contains(t, "login output", out, "logged in to "+m.URL(), "no spec yet", path)
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("config mode %v, want 0600", st.Mode().Perm())
	}
	c, err := loadConfig(path)
	if err != nil || c != (connection{Manager: m.URL(), Token: m.AdminToken(), CAFingerprint: m.CAFingerprint()}) {
		t.Errorf("config %+v (%v)", c, err)
	}
	// The other commands find the manager through the file.
	contains(t, "get revisions", mustRun(t, "get", "revisions"), "REVISION")

	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"no manager", []string{"--token", "x", "--ca-fingerprint", m.CAFingerprint()}, []string{"--manager https://HOST:PORT is required"}},
		{"no token", []string{"--manager", m.URL(), "--ca-fingerprint", m.CAFingerprint()}, []string{"--token-file FILE is required", "admin.token"}},
		{"missing token file", []string{"--manager", m.URL(), "--token-file", filepath.Join(t.TempDir(), "none"), "--ca-fingerprint", m.CAFingerprint()}, []string{"reading --token-file"}},
		{"empty token file", []string{"--manager", m.URL(), "--token-file", emptyFile(t), "--ca-fingerprint", m.CAFingerprint()}, []string{"--token-file", "is empty"}},
		{"token and token file", []string{"--manager", m.URL(), "--token", "x", "--token-file", emptyFile(t), "--ca-fingerprint", m.CAFingerprint()}, []string{"token", "token-file"}},
		{"no fingerprint", []string{"--manager", m.URL(), "--token", "x"}, []string{"--ca-fingerprint HEX is required"}},
		{"wrong token", []string{"--manager", m.URL(), "--token", "nope", "--ca-fingerprint", m.CAFingerprint()},
			[]string{"manager: 401", "admin token was refused", "fednet login"}},
		{"wrong fingerprint", []string{"--manager", m.URL(), "--token", m.AdminToken(), "--ca-fingerprint", strings.Repeat("0", 64)},
			[]string{"not trusted", "pinned CA fingerprint", m.URL()}},
		{"http", []string{"--manager", strings.Replace(m.URL(), "https", "http", 1), "--token", "x", "--ca-fingerprint", m.CAFingerprint()},
			[]string{"must start with https://"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, _ := os.ReadFile(path)
			_, _, err := runIO(t, "", append([]string{"login"}, tt.args...)...)
			if err == nil {
				t.Fatal("no error")
			}
			contains(t, "error", err.Error(), tt.want...)
			if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
				t.Error("a failed login changed the config file")
			}
		})
	}
}

// TestLoginTokenFile: login takes the admin token from a file, so that it
// is never on a command line; so do the other operator commands.
func TestLoginTokenFile(t *testing.T) {
	path := isolate(t)
	m := clienttest.NewReal(t)
	file := filepath.Join(t.TempDir(), "admin.token")
	if err := os.WriteFile(file, []byte(m.AdminToken()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runIO(t, "", "login", "--manager", m.URL(), "--token-file", file, "--ca-fingerprint", m.CAFingerprint()); err != nil {
		t.Fatal(err)
	}
	if c, err := loadConfig(path); err != nil || c.Token != m.AdminToken() {
		t.Errorf("config %+v (%v): want the file's token", c, err)
	}
	os.Remove(path)
	out := mustRun(t, "get", "revisions", "--manager", m.URL(), "--token-file", file, "--ca-fingerprint", m.CAFingerprint())
	contains(t, "get revisions --token-file", out, "REVISION")
}

// TestTokensStayOffCommandLines: no help text, example or page of the docs
// tells the reader to put a token on a command line (visible to every user
// in ps): they use --token-file.
func TestTokensStayOffCommandLines(t *testing.T) {
	bad := regexp.MustCompile(`--token\s+("?\$\(|TOKEN\b|T\b|fednetjoin|'fednetjoin)`)
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for what, text := range map[string]string{"--help": c.Long, "example": c.Example, "usage": c.Use} {
			for _, line := range strings.Split(text, "\n") {
				if m := bad.FindString(line); m != "" && !strings.Contains(line, "works too") {
					t.Errorf("%s %s puts a token on the command line (%q); use --token-file", c.CommandPath(), what, m)
				}
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(NewRoot())
	docs, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range append(docs, "../../README.md") {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(data), "\n") {
			if m := bad.FindString(line); m != "" && !strings.Contains(line, "works too") {
				t.Errorf("%s:%d puts a token on the command line (%q); use --token-file", f, i+1, m)
			}
		}
	}
}

func emptyFile(t *testing.T) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestConnectionPrecedence(t *testing.T) {
	path := isolate(t)
	m := clienttest.NewReal(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "https://" + ln.Addr().String()
	ln.Close()

	// Nothing anywhere: say how to configure.
	_, _, err = runIO(t, "", "status")
	if err == nil {
		t.Fatal("status with no manager configured: no error")
	}
	contains(t, "error", err.Error(), "fednet login", envManager, envToken, envCAFingerprint, path)

	if err := saveConfig(path, connection{Manager: dead, Token: "file-token", CAFingerprint: m.CAFingerprint()}); err != nil {
		t.Fatal(err)
	}
	// The file alone: its manager is down, and the error says which URL.
	_, _, err = runIO(t, "", "status")
	if err == nil || !strings.Contains(err.Error(), "cannot reach the manager at "+dead) {
		t.Fatalf("err %v, want one naming %s", err, dead)
	}
	// The environment beats the file, field by field.
	t.Setenv(envManager, m.URL())
	_, _, err = runIO(t, "", "status")
	if err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("env manager + file token: err %v, want a 401 for the file's token", err)
	}
	t.Setenv(envToken, m.AdminToken())
	mustRun(t, "status")
	// Flags beat the environment.
	_, _, err = runIO(t, "", "status", "--manager", dead)
	if err == nil || !strings.Contains(err.Error(), dead) {
		t.Fatalf("--manager: err %v, want one naming %s", err, dead)
	}
	_, _, err = runIO(t, "", "status", "--ca-fingerprint", "xyz")
	if err == nil || !strings.Contains(err.Error(), "64 hex digits") {
		t.Fatalf("--ca-fingerprint xyz: err %v", err)
	}
}

func TestApplyAndDiff(t *testing.T) {
	loggedIn(t)
	// Diff against an empty manager stores nothing.
	out := mustRun(t, "diff", "-f", exampleSpec)
	contains(t, "diff", out, "aws-gw", "affected gateways: aws-gw, azure-gw, onprem-gw")
	if revs := mustRun(t, "get", "revisions", "-o", "json"); strings.TrimSpace(revs) != "[]" {
		t.Errorf("diff stored a revision: %s", revs)
	}

	out = mustRun(t, "apply", "-f", exampleSpec)
	contains(t, "first apply", out, "revision 1; affected gateways: aws-gw, azure-gw, onprem-gw")
	out = mustRun(t, "apply", "-f", exampleSpec)
	if strings.TrimSpace(out) != "no changes (revision 1)" {
		t.Errorf("applying the same spec again printed %q", out)
	}
	contains(t, "diff of the same spec", mustRun(t, "diff", "-f", exampleSpec), "no changes (revision 1)")

	changed := specWithMTU(t, "1400")
	out = mustRun(t, "diff", "-f", changed)
	contains(t, "diff", out, "1440", "1340", "affected gateways: aws-gw, azure-gw, onprem-gw")
	out = mustRun(t, "apply", "-f", changed)
	contains(t, "second apply", out, "1340", "revision 2; affected gateways: aws-gw, azure-gw, onprem-gw")

	// From standard input.
	data, _ := os.ReadFile(exampleSpec)
	out, _, err := runIO(t, string(data), "apply", "-f", "-")
	if err != nil {
		t.Fatal(err)
	}
	contains(t, "apply from stdin", out, "revision 3")

	var revs []api.Revision
	if err := json.Unmarshal([]byte(mustRun(t, "get", "revisions", "-o", "json")), &revs); err != nil || len(revs) != 3 {
		t.Errorf("revisions %+v (%v), want 3", revs, err)
	}
}

func TestApplyInvalidSpec(t *testing.T) {
	loggedIn(t)
	mustRun(t, "apply", "-f", exampleSpec)
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("apiVersion: fednet/v1\nkind: Federation\nname: x\nsites:\n  - name: a\n    provider: aws\n    gateways: []\n    colour: blue\n"), 0o644)
	for _, cmd := range []string{"apply", "diff"} {
		_, _, err := runIO(t, "", cmd, "-f", bad)
		if err == nil {
			t.Fatalf("%s of an invalid spec: no error", cmd)
		}
		contains(t, cmd+" error", err.Error(), bad, "nothing was changed", "manager: 422 invalid_spec", "line 8", "sites[0].colour", "line 7")
	}
	out := mustRun(t, "get", "revisions")
	if strings.Count(out, "\n") != 2 {
		t.Errorf("an invalid spec changed the revisions:\n%s", out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"apply"}, "-f spec.yaml"},
		{[]string{"apply", "-f", filepath.Join(t.TempDir(), "none.yaml")}, "reading spec"},
	} {
		_, _, err := runIO(t, "", tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err %v, want %q", tc.args, err, tc.want)
		}
	}
}

func TestManagerDown(t *testing.T) {
	m := loggedIn(t)
	mustRun(t, "apply", "-f", exampleSpec)
	m.Down()
	for _, args := range [][]string{
		{"status"}, {"apply", "-f", exampleSpec}, {"diff", "-f", exampleSpec}, {"get", "gateways"},
		{"token", "create", "--gateway", "aws-gw"}, {"token", "list"}, {"token", "revoke", "x"},
		{"gateway", "remove", "aws-gw"}, {"rotate-key", "aws-gw"},
	} {
		_, _, err := runIO(t, "", args...)
		if err == nil || !strings.Contains(err.Error(), "cannot reach the manager at "+m.URL()) {
			t.Errorf("%v with the manager down: err %v", args, err)
		}
	}
	m.Up()
	contains(t, "status after restart", mustRun(t, "status"), "revision 1")
}

func TestTokens(t *testing.T) {
	m := loggedIn(t)
	mustRun(t, "apply", "-f", exampleSpec)
	out, stderr, err := runIO(t, "", "token", "create", "--gateway", "aws-gw", "--ttl", "30m")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(out, "\n") != 1 {
		t.Errorf("token create printed more than the token on stdout: %q", out)
	}
	jt, err := api.ParseJoinToken(out)
	if err != nil {
		t.Fatalf("stdout %q is not a join token: %v", out, err)
	}
	if jt.Manager != m.URL() || jt.CAFingerprint != m.CAFingerprint() {
		t.Errorf("token %+v", jt)
	}
	contains(t, "stderr hint", stderr, jt.ID, "aws-gw", "fednet agent --data-dir /var/lib/fednet/agent --token-file FILE")

	list := mustRun(t, "token", "list")
	contains(t, "token list", list, "ID", jt.ID, "aws-gw", "valid")
	if strings.Contains(list, jt.Secret) {
		t.Error("token list shows the secret")
	}
	contains(t, "revoke", mustRun(t, "token", "revoke", jt.ID), "join token "+jt.ID+" revoked")
	contains(t, "token list after revoke", mustRun(t, "token", "list"), "revoked")

	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"token", "create"}, []string{"--gateway NAME is required"}},
		{[]string{"token", "create", "--gateway", "nope"}, []string{"manager: 4", "nope"}},
		{[]string{"token", "create", "--gateway", "aws-gw", "--ttl", "1000h"}, []string{"manager: 400", "ttl"}},
		{[]string{"token", "create", "--gateway", "aws-gw", "--ttl", "-1h"}, []string{"--ttl", "positive"}},
		{[]string{"token", "revoke"}, []string{"token ID"}},
		{[]string{"token", "revoke", "nope"}, []string{"manager: 404"}},
	} {
		_, _, err := runIO(t, "", tc.args...)
		if err == nil {
			t.Errorf("%v: no error", tc.args)
			continue
		}
		contains(t, strings.Join(tc.args, " "), err.Error(), tc.want...)
	}
}

func TestGet(t *testing.T) {
	loggedIn(t)
	mustRun(t, "apply", "-f", exampleSpec)
	tests := []struct {
		kind  string
		table []string
		into  any
		check func(t *testing.T, v any)
	}{
		{"sites", []string{"NAME", "PROVIDER", "aws-eu", "10.1.0.0/24", "aws-gw"}, &[]api.Site{},
			func(t *testing.T, v any) {
				if s := *v.(*[]api.Site); len(s) != 3 {
					t.Errorf("sites %+v", s)
				}
			}},
		{"gateways", []string{"NAME", "STATE", "aws-gw", "not enrolled", "198.51.100.10:51820", "never"}, &[]api.Gateway{},
			func(t *testing.T, v any) {
				if g := *v.(*[]api.Gateway); len(g) != 3 || g[0].Enrolled {
					t.Errorf("gateways %+v", g)
				}
			}},
		{"links", []string{"FROM", "TO", "STATE"}, &[]api.Link{}, nil},
		{"networks", []string{"NAME", "ID", "apps", "100", "routed", "aws-eu,azure-we,lab"}, &[]api.Network{},
			func(t *testing.T, v any) {
				if n := *v.(*[]api.Network); len(n) != 1 || n[0].ID != 100 {
					t.Errorf("networks %+v", n)
				}
			}},
		{"revisions", []string{"REVISION", "CREATED", "1"}, &[]api.Revision{},
			func(t *testing.T, v any) {
				if r := *v.(*[]api.Revision); len(r) != 1 || r[0].Sites != 3 {
					t.Errorf("revisions %+v", r)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			contains(t, "table", mustRun(t, "get", tt.kind), tt.table...)
			js := mustRun(t, "get", tt.kind, "-o", "json")
			if err := json.Unmarshal([]byte(js), tt.into); err != nil {
				t.Fatalf("-o json: %v\n%s", err, js)
			}
			if tt.check != nil {
				tt.check(t, tt.into)
			}
			// YAML carries the same data under the same names.
			y := mustRun(t, "get", tt.kind, "-o", "yaml")
			var fromYAML, fromJSON any
			if err := yaml.Unmarshal([]byte(y), &fromYAML); err != nil {
				t.Fatalf("-o yaml: %v\n%s", err, y)
			}
			json.Unmarshal([]byte(js), &fromJSON)
			a, _ := json.Marshal(normalize(fromYAML))
			b, _ := json.Marshal(fromJSON)
			if !bytes.Equal(a, b) {
				t.Errorf("-o yaml and -o json differ:\n%s\n%s", a, b)
			}
		})
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"get"}, "sites, gateways, links, networks, revisions"},
		{[]string{"get", "hosts"}, "sites, gateways, links, networks, revisions"},
		{[]string{"get", "sites", "-o", "xml"}, "table, json or yaml"},
	} {
		_, _, err := runIO(t, "", tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err %v, want %q", tc.args, err, tc.want)
		}
	}
}

// normalize makes YAML's decoded numbers and times compare equal to
// JSON's.
func normalize(v any) any {
	switch v := v.(type) {
	case []any:
		for i := range v {
			v[i] = normalize(v[i])
		}
	case map[string]any:
		for k := range v {
			v[k] = normalize(v[k])
		}
	case int:
		return float64(v)
	case time.Time:
		b, _ := v.MarshalText()
		return string(b)
	}
	return v
}

// startAgent runs a managed agent for gateway (enrolled with a token from
// the logged-in manager) on a fake dataplane, with a
// link to every peer that handshook a few seconds ago.
func startAgent(t *testing.T, gateway string) (dir string, done <-chan error) {
	t.Helper()
	tok, stderr, err := runIO(t, "", "token", "create", "--gateway", gateway)
	if err != nil {
		t.Fatalf("token create: %v\n%s", err, stderr)
	}
	dir = t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan error, 1) // the test may take the result; cleanup then finds it gone
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		ch <- agent.RunManaged(ctx, agent.ManagedConfig{
			DataDir: dir, JoinToken: strings.TrimSpace(tok),
			NewDataplane: func(plan.Key) (dataplane.Dataplane, error) {
				return fakeHandshakes{dataplane.NewFake()}, nil
			},
			StatusInterval: 50 * time.Millisecond, BackoffMin: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond,
		})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-stopped:
		case <-time.After(10 * time.Second):
			t.Error("agent did not stop")
		}
	})
	return dir, ch
}

// fakeHandshakes is a fake data plane whose every link handshook five
// seconds ago.
type fakeHandshakes struct{ *dataplane.Fake }

func (f fakeHandshakes) Status(ctx context.Context, g plan.Gateway) ([]dataplane.LinkState, error) {
	links, err := f.Fake.Status(ctx, g)
	for i := range links {
		links[i].LastHandshake, links[i].Established = time.Now().Add(-5*time.Second), true
		links[i].RxBytes, links[i].TxBytes = 1536, 4<<20
	}
	return links, err
}

func TestStatusRotateRemove(t *testing.T) {
	loggedIn(t)
	out := mustRun(t, "status")
	contains(t, "status without a spec", out, "no spec yet")
	mustRun(t, "apply", "-f", exampleSpec)
	contains(t, "status before enrollment", mustRun(t, "status"), "revision 1", "not enrolled", "no links reported yet")

	awsDir, awsDone := startAgent(t, "aws-gw")
	startAgent(t, "azure-gw")
	await.Until(t, 10*time.Second, func() (bool, string) {
		out := mustRun(t, "status")
		return strings.Count(out, " applied ") == 2 && strings.Contains(out, "aws-gw -> azure-gw") &&
			strings.Contains(out, "azure-gw -> aws-gw") && !strings.Contains(out, " down "), "both gateways applied and their link up; status:\n" + out
	})
	out = mustRun(t, "status")
	contains(t, "status", out, "GATEWAY", "aws-gw", "azure-gw", "onprem-gw", "not enrolled", "LINK", " up ", "5s ago", "1.5 KiB", "4.0 MiB",
		"gateways: 2 applied, 1 not enrolled; links: 2 up, 0 down")
	links := mustRun(t, "get", "links")
	contains(t, "get links", links, "aws-gw", "azure-gw", "up", "1.5 KiB")

	// A spec change: the gateways are behind until their agents apply it,
	// which the status shows as applied again.
	mustRun(t, "apply", "-f", specWithMTU(t, "1400"))
	await.Until(t, 10*time.Second, func() (bool, string) {
		out := mustRun(t, "status")
		return strings.Count(out, " applied ") == 2, "the change applied on both gateways; status:\n" + out
	})

	// Key rotation through the CLI.
	keyFile := filepath.Join(awsDir, agent.KeyFile)
	old, _ := os.ReadFile(keyFile)
	contains(t, "rotate-key", mustRun(t, "rotate-key", "aws-gw"), "asked gateway aws-gw to roll its key")
	await.Until(t, 10*time.Second, func() (bool, string) {
		now, _ := os.ReadFile(keyFile)
		return len(now) > 0 && !bytes.Equal(now, old), "a new key file " + keyFile
	})
	var gws []api.Gateway
	await.Until(t, 10*time.Second, func() (bool, string) {
		json.Unmarshal([]byte(mustRun(t, "get", "gateways", "-o", "json")), &gws)
		i := slices.IndexFunc(gws, func(g api.Gateway) bool { return g.Name == "aws-gw" })
		return i >= 0 && gws[i].KeyRotation == 1, fmt.Sprintf("the manager's new key for aws-gw: gateways %+v", gws)
	})

	// Removal: the agent ends, saying so, and the status says removed.
	contains(t, "gateway remove", mustRun(t, "gateway", "remove", "aws-gw"), "gateway aws-gw removed")
	select {
	case err := <-awsDone:
		if err == nil || !strings.Contains(err.Error(), "removed") {
			t.Errorf("the removed gateway's agent returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the removed gateway's agent kept running")
	}
	contains(t, "status after removal", mustRun(t, "status"), "removed")

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"rotate-key"}, "the gateway's name"},
		{[]string{"rotate-key", "nope"}, "manager: 4"},
		{[]string{"gateway", "remove"}, "the gateway's name"},
		{[]string{"gateway", "remove", "nope"}, "manager: 4"},
		{[]string{"gateway", "activate"}, "the gateway's name"},
		{[]string{"gateway", "activate", "nope"}, "not in the spec"},
		{[]string{"gateway", "activate", "azure-gw"}, "only gateway of site"},
	} {
		_, _, err := runIO(t, "", tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err %v, want %q", tc.args, err, tc.want)
		}
	}
}

func TestOperatorHelp(t *testing.T) {
	isolate(t)
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Runnable() && c.Example == "" {
			t.Errorf("%q has no example", c.CommandPath())
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	for _, c := range newOperatorCmds() {
		walk(c)
		out, _, err := runIO(t, "", c.Name(), "--help")
		if err != nil || !strings.Contains(out, "Example") {
			t.Errorf("%s --help: %v\n%s", c.Name(), err, out)
		}
	}
}

func TestManagedAgentFlags(t *testing.T) {
	isolate(t)
	dir := t.TempDir()
	garbage := filepath.Join(t.TempDir(), "join.token")
	if err := os.WriteFile(garbage, []byte("garbage\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"agent", "--token", "x"}, "need --data-dir"},
		{[]string{"agent", "--data-dir", dir, "--once"}, "--once works with --plan only"},
		{[]string{"agent", "--data-dir", dir, "--key", "k"}, "keeps its key in " + filepath.Join(dir, "private.key")},
		{[]string{"agent", "--data-dir", dir, "--plan", "p"}, "none of the others can be"},
		{[]string{"agent", "--data-dir", dir, "--wireguard", "bogus"}, "auto, kernel or userspace"},
		{[]string{"agent", "--data-dir", dir, "--status-interval", "0s"}, "--status-interval"},
		{[]string{"agent", "--data-dir", dir}, "fednet token create --gateway NAME"},
		{[]string{"agent", "--data-dir", dir, "--token", "garbage"}, "not a join token"},
		{[]string{"agent", "--data-dir", dir, "--down"}, "no cached plan"},
		{[]string{"agent", "--data-dir", dir, "--token-file", filepath.Join(dir, "none")}, "reading --token-file"},
		{[]string{"agent", "--data-dir", dir, "--token-file", garbage}, "not a join token"},
		{[]string{"agent", "--data-dir", dir, "--token", "x", "--token-file", garbage}, "none of the others can be"},
		{[]string{"agent", "--token-file", garbage}, "need --data-dir"},
	} {
		_, _, err := runIO(t, "", tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err %v, want %q", tc.args, err, tc.want)
		}
	}
}

func TestProbeFigures(t *testing.T) {
	for _, tc := range []struct {
		p         *api.LinkProbe
		rtt, loss string
	}{
		{nil, "-", "-"},
		{&api.LinkProbe{}, "-", "-"},
		{&api.LinkProbe{Sent: 60, RTTP50: 1234 * time.Microsecond, RTTP99: 40 * time.Millisecond}, "1.23ms/40ms", "0%"},
		{&api.LinkProbe{Sent: 60, Lost: 3, Loss: 0.05, RTTP50: 800 * time.Microsecond, RTTP99: 2 * time.Second}, "800µs/2s", "5%"},
		{&api.LinkProbe{Sent: 3, Lost: 1, Loss: 1.0 / 3, RTTP50: time.Millisecond, RTTP99: time.Millisecond}, "1ms/1ms", "33.3%"},
		{&api.LinkProbe{Sent: 5, Lost: 5, Loss: 1}, "-", "100%"},
	} {
		rtt, loss := probeFigures(tc.p)
		if rtt != tc.rtt || loss != tc.loss {
			t.Errorf("probeFigures(%+v) = %q, %q; want %q, %q", tc.p, rtt, loss, tc.rtt, tc.loss)
		}
	}
}

func TestCostCell(t *testing.T) {
	links := []api.Link{{From: "a"}, {From: "b", Egress: &api.LinkEgress{CostUSD: 0.2}}}
	if !anyPriced(links) || anyPriced(links[:1]) {
		t.Error("anyPriced is wrong")
	}
	for _, tc := range []struct {
		priced bool
		e      *api.LinkEgress
		want   string
	}{
		{false, nil, ""},
		{true, nil, "\t-"},
		{true, &api.LinkEgress{CostUSD: 0}, "\t$0.00"},
		{true, &api.LinkEgress{CostUSD: 12.345}, "\t$12.35"},
		{true, &api.LinkEgress{CostUSD: 0.00042}, "\t$0.0004"},
	} {
		if got := costCell(tc.priced, tc.e); got != tc.want {
			t.Errorf("costCell(%v, %+v) = %q, want %q", tc.priced, tc.e, got, tc.want)
		}
	}
	var b strings.Builder
	printOverview(&b, &api.Overview{Revision: 1, Links: links}, time.Now())
	if !strings.Contains(b.String(), "EGRESS COST") || !strings.Contains(b.String(), "$0.20") {
		t.Errorf("status without the egress cost:\n%s", b.String())
	}
}

// TestFailoverRendering: status names each site's active gateway, since
// when, and its last failover with the cause; a relayed link shows the
// gateway it goes through, a direct one "direct"; get sites and get links
// show the same.
func TestFailoverRendering(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	sites := []api.Site{
		{Name: "lab", Gateways: []string{"onprem-gw1", "onprem-gw2"}, Active: "onprem-gw2", ActiveSince: now.Add(-3 * time.Minute),
			LastFailover: &api.Failover{At: now.Add(-3 * time.Minute), From: "onprem-gw1", To: "onprem-gw2", Cause: "active gateway onprem-gw1 does not answer on the LAN"}},
		{Name: "aws", Gateways: []string{"aws-gw"}},
	}
	links := []api.Link{{From: "azure-gw", To: "gcp-gw", Up: true, Via: "onprem-gw2"}, {From: "azure-gw", To: "aws-gw", Up: true}}
	var b strings.Builder
	printOverview(&b, &api.Overview{Revision: 1, Sites: sites, Links: links}, now)
	out := b.String()
	for _, want := range []string{
		"lab   onprem-gw2  3m ago  3m ago: onprem-gw1 -> onprem-gw2 (active gateway onprem-gw1 does not answer on the LAN)",
		"aws   -           -       -",
		"azure-gw -> gcp-gw  up     via onprem-gw2",
		"azure-gw -> aws-gw  up     direct",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	if got := failoverCell(sites[0].LastFailover, now); got != "3m ago: onprem-gw1 -> onprem-gw2 (active gateway onprem-gw1 does not answer on the LAN)" {
		t.Errorf("failoverCell = %q", got)
	}
	if got := pathCell(links[0]); got != "via onprem-gw2" {
		t.Errorf("pathCell = %q", got)
	}
}

// TestLinkReasonRendering: a down link's reason, as the manager lists it,
// shows in the REASON column of status and get links, escaped; an up link
// shows "-".
func TestLinkReasonRendering(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	const why = "authentication failed: the pre-shared keys (or identities) of the two sides differ"
	links := []api.Link{
		{From: "aws-gw", To: "azure-gw", Backend: "ipsec", Transport: "ipsec", Reason: why},
		{From: "aws-gw", To: "gcp-gw", Up: true, Transport: "udp"},
		{From: "gcp-gw", To: "aws-gw", Reason: "peer\x1b[2J unreachable"},
	}
	var st, get strings.Builder
	printOverview(&st, &api.Overview{Revision: 1, Links: links}, now)
	printLinks(&get, links, now)
	for name, out := range map[string]string{"status": st.String(), "get links": get.String()} {
		lines := strings.Split(out, "\n")
		find := func(prefix string) string {
			for _, l := range lines {
				if strings.HasPrefix(strings.Join(strings.Fields(l), " "), prefix) {
					return l
				}
			}
			t.Errorf("%s has no line starting %q:\n%s", name, prefix, out)
			return ""
		}
		header := find(map[string]string{"status": "LINK", "get links": "FROM"}[name])
		if !strings.HasSuffix(strings.TrimSpace(header), "REASON") {
			t.Errorf("%s header %q does not end with REASON", name, header)
		}
		from := map[string]string{"status": "aws-gw -> ", "get links": "aws-gw "}[name]
		if l := find(from + "azure-gw"); !strings.HasSuffix(l, why) {
			t.Errorf("%s: the failing link's line %q does not end with its reason", name, l)
		}
		if l := find(from + "gcp-gw"); !strings.HasSuffix(strings.TrimSpace(l), " -") {
			t.Errorf("%s: the up link's line %q does not end with -", name, l)
		}
		if strings.Contains(out, "\x1b") || !strings.Contains(out, `peer\x1b[2J unreachable`) {
			t.Errorf("%s: a reason's control characters are not escaped:\n%q", name, out)
		}
	}
}
