package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/plan"
)

func openTest(t *testing.T, dir string) *SQLite {
	t.Helper()
	s, err := OpenSQLite(context.Background(), filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

var t0 = time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC)

func TestEmpty(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir())
	if _, err := s.Spec(ctx); !errors.Is(err, ErrNotFound) {
		t.Errorf("Spec on empty store: %v, want ErrNotFound", err)
	}
	if g, err := s.Generation(ctx); err != nil || g != 0 {
		t.Errorf("Generation = %d, %v; want 0", g, err)
	}
	for name, f := range map[string]func() (int, error){
		"Revisions": func() (int, error) { r, err := s.Revisions(ctx); return len(r), err },
		"Tokens":    func() (int, error) { r, err := s.Tokens(ctx); return len(r), err },
		"Gateways":  func() (int, error) { r, err := s.Gateways(ctx); return len(r), err },
		"Plans":     func() (int, error) { r, err := s.Plans(ctx); return len(r), err },
	} {
		if n, err := f(); err != nil || n != 0 {
			t.Errorf("%s = %d items, %v; want none", name, n, err)
		}
	}
	if _, err := s.RevokeToken(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("RevokeToken(unknown) = %v, want ErrNotFound", err)
	}
	if _, err := s.TokenBySecret(ctx, HashSecret("x")); !errors.Is(err, ErrNotFound) {
		t.Errorf("TokenBySecret(unknown) = %v, want ErrNotFound", err)
	}
}

// fill stores one of everything and returns what it stored.
func fill(t *testing.T, s Store) (Revision, Token, Gateway, Plan) {
	t.Helper()
	ctx := context.Background()
	rev := Revision{Number: 1, YAML: "name: x\n", Created: t0}
	tok := Token{ID: "t1", Gateway: "gw-a", SecretHash: HashSecret("secret"), Created: t0, Expires: t0.Add(time.Hour)}
	gw := Gateway{Name: "gw-a", PublicKey: plan.Key{1, 2, 3}, CredentialHash: HashSecret("cred"), RotateRequested: 2, RotateAnswered: 1,
		Endpoint: "198.51.100.1:51820", ObservedAddress: "192.0.2.1", Enrolled: t0}
	pl := Plan{Gateway: "gw-a", Generation: 3, Revision: 1, JSON: []byte(`{"gateway":"gw-a"}`)}
	if err := s.CreateToken(ctx, tok); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(ctx, Change{Spec: &rev, Gateways: []Gateway{gw}, Plans: []Plan{pl}, Generation: 3}); err != nil {
		t.Fatal(err)
	}
	return rev, tok, gw, pl
}

func TestReopenKeepsEverything(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openTest(t, dir)
	rev, tok, gw, pl := fill(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Spec(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("Spec after Close = %v, want ErrClosed", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}

	s = openTest(t, dir)
	if got, err := s.Spec(ctx); err != nil || !reflect.DeepEqual(got, rev) {
		t.Errorf("Spec = %+v, %v; want %+v", got, err, rev)
	}
	if got, err := s.Revisions(ctx); err != nil || !reflect.DeepEqual(got, []Revision{rev}) {
		t.Errorf("Revisions = %+v, %v", got, err)
	}
	if got, err := s.Generation(ctx); err != nil || got != 3 {
		t.Errorf("Generation = %d, %v; want 3", got, err)
	}
	if got, err := s.Tokens(ctx); err != nil || !reflect.DeepEqual(got, []Token{tok}) {
		t.Errorf("Tokens = %+v, %v; want %+v", got, err, tok)
	}
	if got, err := s.Gateways(ctx); err != nil || !reflect.DeepEqual(got, []Gateway{gw}) {
		t.Errorf("Gateways = %+v, %v; want %+v", got, err, gw)
	}
	if got, err := s.Plans(ctx); err != nil || !reflect.DeepEqual(got, []Plan{pl}) {
		t.Errorf("Plans = %+v, %v; want %+v", got, err, pl)
	}
	fi, err := os.Stat(filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %v, want 0600", FileName, fi.Mode().Perm())
	}
}

func TestCommitPreconditions(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir())
	fill(t, s)
	tests := []struct {
		name string
		c    Change
		want error
	}{
		{"revision gap", Change{Spec: &Revision{Number: 3, YAML: "x", Created: t0}}, ErrConflict},
		{"revision again", Change{Spec: &Revision{Number: 1, YAML: "x", Created: t0}}, ErrConflict},
		{"generation same", Change{Generation: 3}, ErrConflict},
		{"generation back", Change{Generation: 2}, ErrConflict},
		{"unknown token", Change{UseToken: &UseToken{SecretHash: HashSecret("nope"), Now: t0}}, ErrNotFound},
		{"expired token", Change{UseToken: &UseToken{SecretHash: HashSecret("secret"), Now: t0.Add(time.Hour)}}, ErrTokenExpired},
		// A failing precondition writes nothing, not even the parts before it.
		{"all or nothing", Change{Generation: 9, Plans: []Plan{{Gateway: "gw-b", Generation: 9, JSON: []byte("{}")}}, Spec: &Revision{Number: 5}}, ErrConflict},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := s.Commit(ctx, tt.c); !errors.Is(err, tt.want) {
				t.Errorf("Commit = %v, want %v", err, tt.want)
			}
		})
	}
	if g, _ := s.Generation(ctx); g != 3 {
		t.Errorf("generation = %d after failed commits, want 3", g)
	}
	if p, _ := s.Plans(ctx); len(p) != 1 {
		t.Errorf("plans = %+v after failed commits, want only gw-a's", p)
	}

	// Revoked wins over used and expired; revoking again is no error.
	if _, err := s.RevokeToken(ctx, "t1"); err != nil {
		t.Fatal(err)
	}
	tok, err := s.RevokeToken(ctx, "t1")
	if err != nil || !tok.Revoked {
		t.Fatalf("RevokeToken again = %+v, %v", tok, err)
	}
	if err := s.Commit(ctx, Change{UseToken: &UseToken{SecretHash: HashSecret("secret"), Now: t0}}); !errors.Is(err, ErrTokenRevoked) {
		t.Errorf("using a revoked token: %v, want ErrTokenRevoked", err)
	}
	if err := s.CreateToken(ctx, Token{ID: "t1", Gateway: "gw-a", SecretHash: HashSecret("other"), Created: t0, Expires: t0}); !errors.Is(err, ErrExists) {
		t.Errorf("CreateToken with a taken id = %v, want ErrExists", err)
	}
	if err := s.CreateToken(ctx, Token{ID: "t2", Gateway: "gw-a", SecretHash: HashSecret("secret"), Created: t0, Expires: t0}); !errors.Is(err, ErrExists) {
		t.Errorf("CreateToken with a taken secret = %v, want ErrExists", err)
	}
}

func TestDeletePlansAndRevokeTokensOf(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir())
	fill(t, s)
	if err := s.CreateToken(ctx, Token{ID: "t2", Gateway: "gw-b", SecretHash: HashSecret("b"), Created: t0, Expires: t0.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(ctx, Change{DeletePlans: []string{"gw-a", "gw-none"}, RevokeTokensOf: []string{"gw-a"}, Generation: 4}); err != nil {
		t.Fatal(err)
	}
	if p, _ := s.Plans(ctx); len(p) != 0 {
		t.Errorf("plans = %+v, want none", p)
	}
	toks, _ := s.Tokens(ctx)
	for _, tok := range toks {
		if tok.Revoked != (tok.Gateway == "gw-a") {
			t.Errorf("token %s of %s: revoked = %v", tok.ID, tok.Gateway, tok.Revoked)
		}
	}
}

// TestTokenSingleUse makes 20 concurrent attempts to use one token: exactly
// one succeeds, the rest see ErrTokenUsed.
func TestTokenSingleUse(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir())
	tok := Token{ID: "once", Gateway: "gw-a", SecretHash: HashSecret("once"), Created: t0, Expires: t0.Add(time.Hour)}
	if err := s.CreateToken(ctx, tok); err != nil {
		t.Fatal(err)
	}
	const tries = 20
	errs := make([]error, tries)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range tries {
		wg.Go(func() {
			<-start
			errs[i] = s.Commit(ctx, Change{
				UseToken: &UseToken{SecretHash: tok.SecretHash, Now: t0.Add(time.Minute)},
				Gateways: []Gateway{{Name: "gw-a", Endpoint: string(rune('a' + i))}},
			})
		})
	}
	close(start)
	wg.Wait()
	ok := 0
	for i, err := range errs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, ErrTokenUsed):
			t.Errorf("try %d: %v, want success or ErrTokenUsed", i, err)
		}
	}
	if ok != 1 {
		t.Errorf("%d of %d tries used the token, want exactly 1", ok, tries)
	}
	got, err := s.Token(ctx, "once")
	if err != nil || !got.Used.Equal(t0.Add(time.Minute)) {
		t.Errorf("token after use = %+v, %v", got, err)
	}
	if gws, _ := s.Gateways(ctx); len(gws) != 1 {
		t.Errorf("gateways = %+v, want the one written by the winning try", gws)
	}
}

// Hosts and host tokens survive a reopen; a host is replaced whole and
// deleted by name.
func TestHosts(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openTest(t, dir)
	tok := Token{ID: "h1", SecretHash: HashSecret("host"), Created: t0, Expires: t0.Add(time.Hour), Site: "aws-eu", Network: "lan"}
	if err := s.CreateToken(ctx, tok); err != nil {
		t.Fatal(err)
	}
	h := Host{Name: "web1", Site: "aws-eu", Network: "lan", Address: "10.1.0.10", Slot: 2, CredentialHash: HashSecret("c"), Joined: t0}
	if err := s.Commit(ctx, Change{Hosts: []Host{h, {Name: "db1", Site: "aws-eu", Network: "lan", Address: "10.1.0.11", Joined: t0}}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(ctx, Change{DeleteHosts: []string{"db1", "nope"}}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = openTest(t, dir)
	got, err := s.Hosts(ctx)
	if err != nil || len(got) != 1 || !reflect.DeepEqual(got[0], h) {
		t.Errorf("Hosts = %+v, %v; want [%+v]", got, err, h)
	}
	gt, err := s.Token(ctx, "h1")
	if err != nil || !reflect.DeepEqual(gt, tok) || !gt.IsHost() {
		t.Errorf("Token(h1) = %+v, %v; want %+v, a host token", gt, err, tok)
	}
}
