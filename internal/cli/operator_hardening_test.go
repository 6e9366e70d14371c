package cli

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/client"
)

// TestApplyRacingAnotherApply: another operator's apply lands between this
// apply's dry run and its real PUT. This apply must fail, say which
// revision is current and what to run, and store nothing: the other
// change stays. (Before, both exited 0 and the later silently reverted the
// earlier.)
func TestApplyRacingAnotherApply(t *testing.T) {
	m := loggedIn(t)
	mustRun(t, "apply", "-f", exampleSpec)
	mine, theirs := specWithMTU(t, "1400"), specWithMTU(t, "1420")
	theirYAML, err := os.ReadFile(theirs)
	if err != nil {
		t.Fatal(err)
	}
	other, err := client.New(client.Config{URL: m.URL(), Token: m.AdminToken(), CAFingerprint: m.CAFingerprint()})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	var fired atomic.Bool
	m.OnRequest("PUT "+api.PathSpec, func(r *http.Request) {
		// The first real PUT (this apply's) waits while the other apply
		// goes through whole (its own PUT passes this hook too).
		if r.URL.Query().Get("dryRun") != "" || !fired.CompareAndSwap(false, true) {
			return
		}
		if _, err := other.PutSpec(context.Background(), string(theirYAML), false); err != nil {
			t.Errorf("the other apply: %v", err)
		}
	})
	out, _, err := runIO(t, "", "apply", "-f", mine)
	if err == nil {
		t.Fatalf("an apply whose diff was overtaken succeeded:\n%s", out)
	}
	contains(t, "the losing apply's error", err.Error(), "from revision 1", "revision 2 is current", "nothing was applied", "fednet diff -f "+mine)
	contains(t, "the losing apply's output", out, "1340") // it did print its diff first
	var revs []api.Revision
	if err := json.Unmarshal([]byte(mustRun(t, "get", "revisions", "-o", "json")), &revs); err != nil || len(revs) != 2 {
		t.Errorf("revisions %+v (%v), want 2: the losing apply stored nothing", revs, err)
	}
	cur, err := other.GetSpec(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if cur.Revision != 2 || cur.YAML != string(theirYAML) {
		t.Errorf("the current spec is revision %d, the other operator's: %v", cur.Revision, cur.YAML == string(theirYAML))
	}
	// Run again, it diffs against revision 2 and applies.
	m.OnRequest("PUT "+api.PathSpec, nil)
	contains(t, "applying again", mustRun(t, "apply", "-f", mine), "revision 3")
}

// TestStatusEscapesReports: what a gateway reports reaches fednet status
// and fednet get with control characters escaped: no terminal escape
// sequence, no forged line.
func TestStatusEscapesReports(t *testing.T) {
	m := loggedIn(t)
	mustRun(t, "apply", "-f", exampleSpec)
	admin, err := client.New(client.Config{URL: m.URL(), Token: m.AdminToken(), CAFingerprint: m.CAFingerprint()})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	tok, err := admin.CreateToken(context.Background(), "aws-gw", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	jt, err := api.ParseJoinToken(tok.Token)
	if err != nil {
		t.Fatal(err)
	}
	enr, err := admin.Enroll(context.Background(), jt.Secret, api.EnrollRequest{PublicKey: [32]byte{7}})
	if err != nil {
		t.Fatal(err)
	}
	gw, err := client.New(client.Config{URL: m.URL(), Token: enr.Credential, CAFingerprint: m.CAFingerprint()})
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	forged := "boom\x1b[2J\x1b[H\nonprem-gw  lab  applied  1  1  1  1s ago\u202e"
	if err := gw.PutStatus(context.Background(), "aws-gw", api.StatusReport{ApplyError: forged}); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"status"}, {"get", "gateways"}} {
		out := mustRun(t, args...)
		if strings.ContainsAny(out, "\x1b\u202e") {
			t.Errorf("fednet %s printed a raw escape sequence:\n%q", strings.Join(args, " "), out)
		}
		if args[0] == "status" {
			contains(t, "status", out, `apply error on aws-gw: boom\x1b[2J\x1b[H\nonprem-gw  lab  applied`, `\u202e`)
			rows := 0
			for _, line := range strings.Split(out, "\n") {
				if strings.HasPrefix(line, "onprem-gw ") {
					rows++
				}
			}
			if rows != 1 {
				t.Errorf("%d rows of onprem-gw (a forged one?):\n%s", rows, out)
			}
		}
	}
}

func TestEsc(t *testing.T) {
	for in, want := range map[string]string{
		"aws-gw":                "aws-gw",
		"café ⇄ 東京":             "café ⇄ 東京",
		"a\tb\nc\rd\x1b[31m":    `a\tb\nc\rd\x1b[31m`,
		"\u202eevil\u200b":      `\u202eevil\u200b`,
		"bad \xff byte\x00\x7f": `bad \ufffd byte\x00\x7f`,
	} {
		if got := esc(in); got != want {
			t.Errorf("esc(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestHostTokenReplace: --replace makes a host token that may replace a
// joined host; it needs --site and --network.
func TestHostTokenReplace(t *testing.T) {
	m := loggedIn(t)
	mustRun(t, "apply", "-f", filepath.Join("..", "..", "examples", "neighbors.yaml"))
	out := mustRun(t, "token", "create", "--site", "aws-eu", "--network", "lan", "--replace", "web1")
	if _, err := api.ParseJoinToken(out); err != nil {
		t.Fatalf("not a token: %q", out)
	}
	admin, err := client.New(client.Config{URL: m.URL(), Token: m.AdminToken(), CAFingerprint: m.CAFingerprint()})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	toks, err := admin.Tokens(context.Background())
	if err != nil || len(toks) != 1 || toks[0].Replaces != "web1" {
		t.Errorf("tokens %+v (%v), want one that replaces web1", toks, err)
	}
	_, _, err = runIO(t, "", "token", "create", "--gateway", "aws-gw", "--replace", "web1")
	if err == nil || !strings.Contains(err.Error(), "--replace NAME is for host tokens") {
		t.Errorf("--replace on a gateway token: %v", err)
	}
}

// TestManagerRefusesDamagedDataDir runs fednet manager (in a child
// process, as from a shell) on data directories of a manager that ran,
// whose database is missing, empty, damaged or of a newer schema: it exits
// 1 with the reason and the file on standard error, and no stack trace.
func TestManagerRefusesDamagedDataDir(t *testing.T) {
	if args := os.Getenv("FEDNET_TEST_MAIN"); args != "" {
		os.Exit(Main(strings.Split(args, "\x1f")))
	}
	// A manager that ran: its CA, admin token and database.
	base := t.TempDir()
	runManager := func(dir string, extra ...string) (string, int) {
		t.Helper()
		args := append([]string{"manager", "--data-dir", dir, "--listen", "127.0.0.1:0", "--advertise", "127.0.0.1:7443", "--metrics-listen", ""}, extra...)
		cmd := exec.Command(os.Args[0], "-test.run=^TestManagerRefusesDamagedDataDir$")
		cmd.Env = append(os.Environ(), "FEDNET_TEST_MAIN="+strings.Join(args, "\x1f"))
		var stderr strings.Builder
		cmd.Stderr = &stderr
		done := make(chan error, 1)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Fatalf("fednet manager %v did not exit within 30s", extra)
		}
		return stderr.String(), cmd.ProcessState.ExitCode()
	}
	prepare := func(name string, damage func(db string)) string {
		dir := filepath.Join(base, name)
		seed := dataDirWithManager(t, dir)
		damage(filepath.Join(dir, "fednet.db"))
		return seed
	}
	tests := []struct {
		name   string
		damage func(db string)
		want   []string
	}{
		{"missing", func(db string) { os.Remove(db) }, []string{"does not exist", "--reinitialize"}},
		{"empty", func(db string) { os.Truncate(db, 0) }, []string{"is empty", "--reinitialize"}},
		{"header overwritten", func(db string) {
			f, _ := os.OpenFile(db, os.O_WRONLY, 0)
			f.WriteAt([]byte("0123456789abcdef"), 0)
			f.Close()
		}, []string{"file is not a database"}},
		{"half truncated", func(db string) {
			fi, _ := os.Stat(db)
			os.Truncate(db, fi.Size()/2)
		}, []string{"damaged"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := prepare(tt.name, tt.damage)
			stderr, code := runManager(dir)
			t.Logf("stderr: %s", stderr)
			if code != 1 {
				t.Errorf("exit status %d, want 1; stderr:\n%s", code, stderr)
			}
			for _, w := range append(tt.want, filepath.Join(dir, "fednet.db")) {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
			if strings.Contains(stderr, "goroutine ") || strings.Contains(stderr, "panic") {
				t.Errorf("a stack trace:\n%s", stderr)
			}
		})
	}
}

// dataDirWithManager makes dir the data directory of a manager that ran
// (fednet manager, stopped at once) and returns it.
func dataDirWithManager(t *testing.T, dir string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := NewRoot()
	cmd.SetArgs([]string{"manager", "--data-dir", dir, "--listen", "127.0.0.1:0", "--advertise", "127.0.0.1:7443", "--metrics-listen", ""})
	out := &lockedBuffer{}
	cmd.SetOut(out)
	cmd.SetErr(out)
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(dir, "admin.token")); err == nil && strings.Contains(out.String(), "log in with") {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("fednet manager did not start within 30s:\n%s", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("fednet manager: %v", err)
	}
	return dir
}

// lockedBuffer is a strings.Builder safe for one writer and readers.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
