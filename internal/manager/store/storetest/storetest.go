// Package storetest is the conformance suite of store.Store: every
// implementation (SQLite today, etcd next) must pass Run. It checks the
// contracts the manager relies on: revisions numbered without gaps,
// ErrConflict on a stale revision or a generation that does not increase,
// a join token used exactly once under concurrency, atomic commits (a
// failing Commit writes nothing and wakes no watcher), Watch (wakes on a
// later generation and not before, returns at once when the generation
// already passed, carries the current values of what changed), status
// reports, and Close (ErrClosed from every method, waiting watches
// included).
package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/manager/store"
	"github.com/fednet/fednet/internal/plan"
)

// Open returns a new, empty store for one test. The suite closes it (maybe
// more than once); Open may register its own cleanup too.
type Open func(t *testing.T) store.Store

// Run runs the conformance suite against the stores open returns.
func Run(t *testing.T, open Open) {
	tests := []struct {
		name string
		f    func(*testing.T, store.Store)
	}{
		{"Empty", testEmpty},
		{"RoundTrip", testRoundTrip},
		{"RevisionsWithoutGaps", testRevisions},
		{"Generation", testGeneration},
		{"Atomic", testAtomic},
		{"TokenExactlyOnce", testTokenOnce},
		{"TokenStates", testTokenStates},
		{"Deletes", testDeletes},
		{"WatchWaitsForALaterGeneration", testWatchWaits},
		{"WatchAfterAChangeReturnsAtOnce", testWatchAtOnce},
		{"WatchCarriesWhatChanged", testWatchContent},
		{"WatchWholeState", testWatchReset},
		{"WatchersAllWake", testWatchersAllWake},
		{"Reports", testReports},
		{"Identity", testIdentity},
		{"Close", testClose},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := open(t)
			t.Cleanup(func() { s.Close() })
			tt.f(t, s)
		})
	}
}

// t0 is the clock of the suite's records (UTC, with nanoseconds, which a
// store must keep).
var t0 = time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC)

// within bounds every wait of the suite for something that must happen.
const within = 10 * time.Second

// Fixture is one of everything, as fill stores it.
type fixture struct {
	rev   store.Revision
	tok   store.Token
	htok  store.Token
	gw    store.Gateway
	host  store.Host
	plan  store.Plan
	other store.Plan
}

// fill stores one of everything at generation 3.
func fill(t *testing.T, s store.Store) fixture {
	t.Helper()
	ctx := context.Background()
	f := fixture{
		rev:  store.Revision{Number: 1, YAML: "name: x\n", Created: t0},
		tok:  store.Token{ID: "t1", Gateway: "gw-a", SecretHash: store.HashSecret("secret"), Created: t0, Expires: t0.Add(time.Hour)},
		htok: store.Token{ID: "h1", SecretHash: store.HashSecret("host"), Created: t0.Add(time.Second), Expires: t0.Add(time.Hour), Site: "aws-eu", Network: "lan", Replaces: "web1"},
		gw: store.Gateway{Name: "gw-a", PublicKey: plan.Key{1, 2, 3}, CredentialHash: store.HashSecret("cred"), RotateRequested: 2, RotateAnswered: 1,
			Endpoint: "198.51.100.1:51820", ObservedAddress: "192.0.2.1", Enrolled: t0},
		host:  store.Host{Name: "web1", Site: "aws-eu", Network: "lan", Address: "10.1.0.10", Slot: 2, CredentialHash: store.HashSecret("c"), Joined: t0},
		plan:  store.Plan{Gateway: "gw-a", Generation: 3, Revision: 1, Sum: store.HashSecret("plan a"), JSON: []byte(`{"gateway":"gw-a"}`)},
		other: store.Plan{Gateway: "gw-b", Generation: 3, Revision: 1, Sum: store.HashSecret("plan b")},
	}
	for _, tok := range []store.Token{f.tok, f.htok} {
		if err := s.CreateToken(ctx, tok); err != nil {
			t.Fatal(err)
		}
	}
	c := store.Change{Spec: &f.rev, Gateways: []store.Gateway{f.gw}, Hosts: []store.Host{f.host}, Plans: []store.Plan{f.plan, f.other}, Generation: 3}
	if err := s.Commit(ctx, c); err != nil {
		t.Fatal(err)
	}
	return f
}

func equal[T any](t *testing.T, what string, got T, err error, want T) {
	t.Helper()
	if err != nil {
		t.Errorf("%s: %v", what, err)
	} else if !reflect.DeepEqual(got, want) {
		t.Errorf("%s = %+v, want %+v", what, got, want)
	}
}

func testEmpty(t *testing.T, s store.Store) {
	ctx := context.Background()
	if _, err := s.Spec(ctx); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Spec on an empty store: %v, want ErrNotFound", err)
	}
	g, err := s.Generation(ctx)
	equal(t, "Generation", g, err, 0)
	for name, f := range map[string]func() (int, error){
		"Revisions": func() (int, error) { r, err := s.Revisions(ctx); return len(r), err },
		"Tokens":    func() (int, error) { r, err := s.Tokens(ctx); return len(r), err },
		"Gateways":  func() (int, error) { r, err := s.Gateways(ctx); return len(r), err },
		"Hosts":     func() (int, error) { r, err := s.Hosts(ctx); return len(r), err },
		"Plans":     func() (int, error) { r, err := s.Plans(ctx); return len(r), err },
		"Reports":   func() (int, error) { r, err := s.Reports(ctx); return len(r), err },
	} {
		n, err := f()
		equal(t, name+" (count)", n, err, 0)
	}
	if _, err := s.RevokeToken(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RevokeToken(unknown) = %v, want ErrNotFound", err)
	}
	if _, err := s.Token(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Token(unknown) = %v, want ErrNotFound", err)
	}
	if _, err := s.TokenBySecret(ctx, store.HashSecret("x")); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("TokenBySecret(unknown) = %v, want ErrNotFound", err)
	}
}

func testRoundTrip(t *testing.T, s store.Store) {
	ctx := context.Background()
	f := fill(t, s)
	spec, err := s.Spec(ctx)
	equal(t, "Spec", spec, err, f.rev)
	revs, err := s.Revisions(ctx)
	equal(t, "Revisions", revs, err, []store.Revision{f.rev})
	gen, err := s.Generation(ctx)
	equal(t, "Generation", gen, err, 3)
	toks, err := s.Tokens(ctx)
	equal(t, "Tokens", toks, err, []store.Token{f.tok, f.htok})
	tok, err := s.Token(ctx, "h1")
	equal(t, "Token(h1)", tok, err, f.htok)
	if !tok.IsHost() {
		t.Error("a token with a site is not a host token")
	}
	tok, err = s.TokenBySecret(ctx, f.tok.SecretHash)
	equal(t, "TokenBySecret", tok, err, f.tok)
	gws, err := s.Gateways(ctx)
	equal(t, "Gateways", gws, err, []store.Gateway{f.gw})
	hosts, err := s.Hosts(ctx)
	equal(t, "Hosts", hosts, err, []store.Host{f.host})
	plans, err := s.Plans(ctx)
	equal(t, "Plans", plans, err, []store.Plan{f.plan, f.other})

	// Returned values are copies.
	plans[0].JSON[0] = 'X'
	again, err := s.Plans(ctx)
	equal(t, "Plans after changing a returned value", again, err, []store.Plan{f.plan, f.other})
}

func testRevisions(t *testing.T, s store.Store) {
	ctx := context.Background()
	fill(t, s)
	r2 := store.Revision{Number: 2, YAML: "name: y\n", Created: t0.Add(time.Minute)}
	if err := s.Commit(ctx, store.Change{Spec: &r2, Generation: 4}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 1, 2, 4, 10} {
		err := s.Commit(ctx, store.Change{Spec: &store.Revision{Number: n, YAML: "x", Created: t0}, Generation: 5})
		if !errors.Is(err, store.ErrConflict) {
			t.Errorf("storing revision %d after 2: %v, want ErrConflict", n, err)
		}
	}
	revs, err := s.Revisions(ctx)
	if err != nil || len(revs) != 2 || revs[0].Number != 1 || revs[1] != r2 {
		t.Errorf("Revisions = %+v, %v; want 1 and 2", revs, err)
	}
	spec, err := s.Spec(ctx)
	equal(t, "Spec", spec, err, r2)
}

func testGeneration(t *testing.T, s store.Store) {
	ctx := context.Background()
	fill(t, s)
	for _, g := range []int64{3, 2, -1} {
		if err := s.Commit(ctx, store.Change{Generation: g}); !errors.Is(err, store.ErrConflict) {
			t.Errorf("setting generation %d at 3: %v, want ErrConflict", g, err)
		}
	}
	// A change of watched state needs a generation, so watchers hear of it.
	if err := s.Commit(ctx, store.Change{Gateways: []store.Gateway{{Name: "gw-z"}}}); err == nil {
		t.Error("a Change storing a gateway without a generation was committed")
	}
	if err := s.Commit(ctx, store.Change{Generation: 10}); err != nil {
		t.Fatal(err)
	}
	g, err := s.Generation(ctx)
	equal(t, "Generation", g, err, 10)
	gws, err := s.Gateways(ctx)
	equal(t, "gateways (count)", len(gws), err, 1)
}

// testAtomic: a Commit failing on any precondition writes nothing, not even
// the parts before the one that failed, and wakes no watcher.
func testAtomic(t *testing.T, s store.Store) {
	ctx := context.Background()
	f := fill(t, s)
	if err := s.CreateToken(ctx, store.Token{ID: "t2", Gateway: "gw-b", SecretHash: store.HashSecret("t2"), Created: t0, Expires: t0.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	everything := func() store.Change {
		return store.Change{
			UseToken:       &store.UseToken{SecretHash: store.HashSecret("t2"), Now: t0},
			RevokeTokensOf: []string{"gw-a"},
			Gateways:       []store.Gateway{{Name: "gw-b", Endpoint: "x"}},
			Hosts:          []store.Host{{Name: "db1", Site: "aws-eu", Network: "lan", Address: "10.1.0.11", Joined: t0}},
			DeleteHosts:    []string{"web1"},
			Plans:          []store.Plan{{Gateway: "gw-c", Generation: 9, JSON: []byte("{}")}},
			DeletePlans:    []string{"gw-a"},
			DeleteReports:  []string{"gw-a"},
			Spec:           &store.Revision{Number: 2, YAML: "y", Created: t0},
			Generation:     9,
		}
	}
	if err := s.PutReport(ctx, store.Report{Gateway: "gw-a", JSON: []byte(`{}`), Received: t0}); err != nil {
		t.Fatal(err)
	}
	watch := startWatch(s, 3)
	tests := []struct {
		name   string
		change func(*store.Change)
		want   error
	}{
		{"revision gap", func(c *store.Change) { c.Spec.Number = 3 }, store.ErrConflict},
		{"stale generation", func(c *store.Change) { c.Generation = 3 }, store.ErrConflict},
		{"used token", func(c *store.Change) {
			c.UseToken.SecretHash = f.tok.SecretHash
			c.UseToken.Now = t0.Add(2 * time.Hour)
		}, store.ErrTokenExpired},
		{"unknown token", func(c *store.Change) { c.UseToken.SecretHash = store.HashSecret("nope") }, store.ErrNotFound},
	}
	for _, tt := range tests {
		c := everything()
		tt.change(&c)
		if err := s.Commit(ctx, c); !errors.Is(err, tt.want) {
			t.Errorf("%s: Commit = %v, want %v", tt.name, err, tt.want)
		}
	}
	g, err := s.Generation(ctx)
	equal(t, "Generation after failed commits", g, err, 3)
	plans, err := s.Plans(ctx)
	equal(t, "Plans after failed commits", plans, err, []store.Plan{f.plan, f.other})
	gws, err := s.Gateways(ctx)
	equal(t, "Gateways after failed commits", gws, err, []store.Gateway{f.gw})
	hosts, err := s.Hosts(ctx)
	equal(t, "Hosts after failed commits", hosts, err, []store.Host{f.host})
	revs, err := s.Revisions(ctx)
	equal(t, "Revisions after failed commits", revs, err, []store.Revision{f.rev})
	reps, err := s.Reports(ctx)
	equal(t, "Reports after failed commits (count)", len(reps), err, 1)
	for _, id := range []string{"t1", "t2"} {
		tok, err := s.Token(ctx, id)
		if err != nil || tok.Revoked || !tok.Used.IsZero() {
			t.Errorf("token %s after failed commits: %+v, %v; want unused, unrevoked", id, tok, err)
		}
	}
	if ev, done := watch.poll(); done {
		t.Errorf("a watch woke on failed commits: %+v", ev)
	}
	// The same change, valid, is applied whole.
	if err := s.Commit(ctx, everything()); err != nil {
		t.Fatal(err)
	}
	ev := watch.wait(t)
	if ev.Generation != 9 || ev.Spec == nil || ev.Spec.Number != 2 {
		t.Errorf("watch after the valid commit: %+v", ev)
	}
	if tok, _ := s.Token(ctx, "t1"); !tok.Revoked {
		t.Error("the valid commit did not revoke gw-a's token")
	}
}

func testTokenOnce(t *testing.T, s store.Store) {
	ctx := context.Background()
	tok := store.Token{ID: "once", Gateway: "gw-a", SecretHash: store.HashSecret("once"), Created: t0, Expires: t0.Add(time.Hour)}
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
			errs[i] = s.Commit(ctx, store.Change{
				UseToken:   &store.UseToken{SecretHash: tok.SecretHash, Now: t0.Add(time.Minute)},
				Gateways:   []store.Gateway{{Name: "gw-a", Endpoint: fmt.Sprintf("try-%d", i)}},
				Generation: int64(i + 1),
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
		case !errors.Is(err, store.ErrTokenUsed) && !errors.Is(err, store.ErrConflict):
			t.Errorf("try %d: %v, want success, ErrTokenUsed or ErrConflict", i, err)
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
	if err := s.Commit(ctx, store.Change{UseToken: &store.UseToken{SecretHash: tok.SecretHash, Now: t0.Add(2 * time.Minute)}}); !errors.Is(err, store.ErrTokenUsed) {
		t.Errorf("using the token again: %v, want ErrTokenUsed", err)
	}
}

func testTokenStates(t *testing.T, s store.Store) {
	ctx := context.Background()
	f := fill(t, s)
	use := func(now time.Time) error {
		return s.Commit(ctx, store.Change{UseToken: &store.UseToken{SecretHash: f.tok.SecretHash, Now: now}})
	}
	if err := use(t0.Add(time.Hour)); !errors.Is(err, store.ErrTokenExpired) {
		t.Errorf("using a token at its expiry: %v, want ErrTokenExpired", err)
	}
	if err := use(time.Time{}); err == nil {
		t.Error("using a token without UseToken.Now succeeded")
	}
	// Revoked wins over expired; revoking again is no error.
	if _, err := s.RevokeToken(ctx, "t1"); err != nil {
		t.Fatal(err)
	}
	tok, err := s.RevokeToken(ctx, "t1")
	if err != nil || !tok.Revoked {
		t.Fatalf("RevokeToken again = %+v, %v", tok, err)
	}
	for _, now := range []time.Time{t0, t0.Add(2 * time.Hour)} {
		if err := use(now); !errors.Is(err, store.ErrTokenRevoked) {
			t.Errorf("using a revoked token at %v: %v, want ErrTokenRevoked", now, err)
		}
	}
	if err := s.CreateToken(ctx, store.Token{ID: "t1", Gateway: "gw-a", SecretHash: store.HashSecret("other"), Created: t0, Expires: t0}); !errors.Is(err, store.ErrExists) {
		t.Errorf("CreateToken with a taken id = %v, want ErrExists", err)
	}
	if err := s.CreateToken(ctx, store.Token{ID: "t9", Gateway: "gw-a", SecretHash: f.tok.SecretHash, Created: t0, Expires: t0}); !errors.Is(err, store.ErrExists) {
		t.Errorf("CreateToken with a taken secret = %v, want ErrExists", err)
	}
}

func testDeletes(t *testing.T, s store.Store) {
	ctx := context.Background()
	fill(t, s)
	if err := s.CreateToken(ctx, store.Token{ID: "t2", Gateway: "gw-b", SecretHash: store.HashSecret("b"), Created: t0, Expires: t0.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutReport(ctx, store.Report{Gateway: "gw-a", JSON: []byte(`{"a":1}`), Received: t0}); err != nil {
		t.Fatal(err)
	}
	c := store.Change{DeletePlans: []string{"gw-a", "gw-none"}, DeleteHosts: []string{"web1", "none"}, DeleteReports: []string{"gw-a", "none"},
		RevokeTokensOf: []string{"gw-a"}, Generation: 4}
	if err := s.Commit(ctx, c); err != nil {
		t.Fatal(err)
	}
	plans, err := s.Plans(ctx)
	if err != nil || len(plans) != 1 || plans[0].Gateway != "gw-b" {
		t.Errorf("plans = %+v, %v; want gw-b's only", plans, err)
	}
	hosts, err := s.Hosts(ctx)
	equal(t, "hosts (count)", len(hosts), err, 0)
	reps, err := s.Reports(ctx)
	equal(t, "reports (count)", len(reps), err, 0)
	toks, _ := s.Tokens(ctx)
	for _, tok := range toks {
		if tok.Revoked != (tok.Gateway == "gw-a") {
			t.Errorf("token %s of %q: revoked = %v", tok.ID, tok.Gateway, tok.Revoked)
		}
	}
}

// watching is a Watch running in a goroutine.
type watching struct {
	cancel context.CancelFunc
	done   chan struct{}
	ev     store.Event
	err    error
}

func startWatch(s store.Store, after int64) *watching {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	w := &watching{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		w.ev, w.err = s.Watch(ctx, after)
	}()
	return w
}

// poll reports whether the watch returned, without waiting.
func (w *watching) poll() (store.Event, bool) {
	select {
	case <-w.done:
		return w.ev, true
	default:
		return store.Event{}, false
	}
}

// wait returns what the watch returned; it fails the test unless that was
// an event.
func (w *watching) wait(t *testing.T) store.Event {
	t.Helper()
	defer w.cancel()
	<-w.done // bounded by the watch's own context
	if w.err != nil {
		t.Fatalf("Watch: %v", w.err)
	}
	return w.ev
}

func testWatchWaits(t *testing.T, s store.Store) {
	ctx := context.Background()
	fill(t, s)
	// Up to date: nothing to return until the context ends.
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if ev, err := s.Watch(short, 3); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Watch(after=3) at generation 3 = %+v, %v; want the context's deadline", ev, err)
	}
	// A watch ahead of the store waits for the store to get there.
	ahead := startWatch(s, 4)
	w := startWatch(s, 3)
	// Writes that are not watched state do not wake it.
	if err := s.CreateToken(ctx, store.Token{ID: "t9", Gateway: "gw-a", SecretHash: store.HashSecret("t9"), Created: t0, Expires: t0.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutReport(ctx, store.Report{Gateway: "gw-a", JSON: []byte(`{}`), Received: t0}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RevokeToken(ctx, "t9"); err != nil {
		t.Fatal(err)
	}
	if ev, done := w.poll(); done {
		t.Fatalf("the watch returned %+v, %v before any commit", ev, w.err)
	}
	gw := store.Gateway{Name: "gw-b", Endpoint: "203.0.113.9:51820", Enrolled: t0}
	if err := s.Commit(ctx, store.Change{Gateways: []store.Gateway{gw}, Generation: 4}); err != nil {
		t.Fatal(err)
	}
	ev := w.wait(t)
	if ev.Generation != 4 || ev.Reset || !reflect.DeepEqual(ev.Gateways, []store.Gateway{gw}) || len(ev.Plans) != 0 || ev.Spec != nil {
		t.Errorf("woken watch = %+v, want generation 4 with gateway gw-b only", ev)
	}
	if ev, done := ahead.poll(); done && ahead.err == nil {
		t.Errorf("a watch after generation 4 returned at generation 4: %+v", ev)
	}
	if err := s.Commit(ctx, store.Change{Generation: 5}); err != nil {
		t.Fatal(err)
	}
	if ev := ahead.wait(t); ev.Generation != 5 {
		t.Errorf("watch after 4 = %+v, want generation 5", ev)
	}
}

func testWatchAtOnce(t *testing.T, s store.Store) {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	f := fill(t, s)
	// Nothing commits after this point: the watch must return by itself.
	ev, err := s.Watch(ctx, 0)
	if err != nil {
		t.Fatalf("Watch(after=0) at generation 3: %v", err)
	}
	if ev.Generation != 3 || ev.Reset || ev.Spec == nil || *ev.Spec != f.rev {
		t.Errorf("event = %+v, want generation 3 with revision 1", ev)
	}
	equal(t, "event gateways", ev.Gateways, nil, []store.Gateway{f.gw})
	equal(t, "event hosts", ev.Hosts, nil, []store.Host{f.host})
	equal(t, "event plans", ev.Plans, nil, []store.Plan{f.plan, f.other})
}

// testWatchContent: an event carries the current values of what changed
// after its after, and names what was deleted.
func testWatchContent(t *testing.T, s store.Store) {
	ctx := context.Background()
	f := fill(t, s)
	p4 := store.Plan{Gateway: "gw-a", Generation: 4, Revision: 1, JSON: []byte(`{"gateway":"gw-a","v":4}`)}
	db := store.Host{Name: "db1", Site: "aws-eu", Network: "lan", Address: "10.1.0.11", Slot: 1, Joined: t0}
	steps := []store.Change{
		{Plans: []store.Plan{p4}, Hosts: []store.Host{db}, Generation: 4},
		{DeletePlans: []string{"gw-b"}, DeleteHosts: []string{"web1"}, Generation: 5},
		// Stored and deleted within the range: deleted.
		{Hosts: []store.Host{{Name: "tmp", Site: "aws-eu", Network: "lan", Address: "10.1.0.12", Joined: t0}}, Generation: 6},
		{DeleteHosts: []string{"tmp"}, Generation: 7},
	}
	for _, c := range steps {
		if err := s.Commit(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	ev, err := s.Watch(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	want := store.Event{Generation: 7, Hosts: []store.Host{db}, Plans: []store.Plan{p4}, DeletedHosts: []string{"tmp", "web1"}, DeletedPlans: []string{"gw-b"}}
	if !sameEvent(ev, want) {
		t.Errorf("Watch(3) = %+v\nwant %+v", ev, want)
	}
	// From later on, only the later changes.
	ev, err = s.Watch(ctx, 5)
	want = store.Event{Generation: 7, DeletedHosts: []string{"tmp"}}
	if err != nil || !sameEvent(ev, want) {
		t.Errorf("Watch(5) = %+v, %v\nwant %+v", ev, err, want)
	}
	// A later gateway write carries the gateway as it is now.
	g := f.gw
	g.Removed = true
	g.Activated = time.Unix(0, 1_700_000_000_123_456_789)
	if err := s.Commit(ctx, store.Change{Gateways: []store.Gateway{g}, Generation: 8}); err != nil {
		t.Fatal(err)
	}
	ev, err = s.Watch(ctx, 7)
	if err != nil || len(ev.Gateways) != 1 || !ev.Gateways[0].Removed || !ev.Gateways[0].Activated.Equal(g.Activated) {
		t.Errorf("Watch(7) = %+v, %v; want gw-a removed and activated at %v", ev, err, g.Activated)
	}
}

// sameEvent compares events, treating nil and empty lists alike.
func sameEvent(a, b store.Event) bool {
	norm := func(e store.Event) store.Event {
		if len(e.Gateways) == 0 {
			e.Gateways = nil
		}
		if len(e.Hosts) == 0 {
			e.Hosts = nil
		}
		if len(e.Plans) == 0 {
			e.Plans = nil
		}
		if len(e.DeletedHosts) == 0 {
			e.DeletedHosts = nil
		}
		if len(e.DeletedPlans) == 0 {
			e.DeletedPlans = nil
		}
		return e
	}
	return reflect.DeepEqual(norm(a), norm(b))
}

func testWatchReset(t *testing.T, s store.Store) {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	// An empty store: the whole (empty) state at generation 0, at once.
	ev, err := s.Watch(ctx, -1)
	if err != nil || !ev.Reset || ev.Generation != 0 || ev.Spec != nil || len(ev.Gateways)+len(ev.Hosts)+len(ev.Plans) != 0 {
		t.Errorf("Watch(-1) on an empty store = %+v, %v", ev, err)
	}
	f := fill(t, s)
	if err := s.Commit(ctx, store.Change{DeletePlans: []string{"gw-b"}, Generation: 4}); err != nil {
		t.Fatal(err)
	}
	ev, err = s.Watch(ctx, -1)
	want := store.Event{Generation: 4, Reset: true, Spec: &f.rev, Gateways: []store.Gateway{f.gw}, Hosts: []store.Host{f.host}, Plans: []store.Plan{f.plan}}
	if err != nil || !sameEvent(ev, want) {
		t.Errorf("Watch(-1) = %+v, %v\nwant %+v", ev, err, want)
	}
}

func testWatchersAllWake(t *testing.T, s store.Store) {
	ctx := context.Background()
	var ws []*watching
	for range 5 {
		ws = append(ws, startWatch(s, 0))
	}
	if err := s.Commit(ctx, store.Change{Plans: []store.Plan{{Gateway: "gw-a", Generation: 1, JSON: []byte("{}")}}, Generation: 1}); err != nil {
		t.Fatal(err)
	}
	for i, w := range ws {
		if ev := w.wait(t); ev.Generation != 1 || len(ev.Plans) != 1 {
			t.Errorf("watcher %d: %+v", i, ev)
		}
	}
}

func testReports(t *testing.T, s store.Store) {
	ctx := context.Background()
	a1 := store.Report{Gateway: "gw-a", JSON: []byte(`{"generation":1}`), Received: t0}
	b := store.Report{Gateway: "gw-b", JSON: []byte(`{"generation":2}`), Received: t0.Add(time.Second)}
	a2 := store.Report{Gateway: "gw-a", JSON: []byte(`{"generation":3}`), Received: t0.Add(5 * time.Second)}
	for _, r := range []store.Report{a1, b, a2} {
		if err := s.PutReport(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Reports(ctx)
	equal(t, "Reports", got, err, []store.Report{a2, b})
	// Reports do not move the generation.
	g, err := s.Generation(ctx)
	equal(t, "Generation after reports", g, err, 0)
}

// testIdentity: no identity at first; of concurrent InitIdentity calls
// exactly one stores its identity and all return it; it does not move the
// generation.
func testIdentity(t *testing.T, s store.Store) {
	ctx := context.Background()
	if _, err := s.Identity(ctx); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Identity on an empty store = %v, want ErrNotFound", err)
	}
	const tries = 8
	got := make([]store.Identity, tries)
	errs := make([]error, tries)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range tries {
		wg.Go(func() {
			<-start
			got[i], errs[i] = s.InitIdentity(ctx, store.Identity{CACert: []byte(fmt.Sprintf("ca %d", i)), AdminTokenHash: store.HashSecret(fmt.Sprint(i))})
		})
	}
	close(start)
	wg.Wait()
	for i := range tries {
		if errs[i] != nil {
			t.Fatalf("InitIdentity %d: %v", i, errs[i])
		}
		if !reflect.DeepEqual(got[i], got[0]) {
			t.Errorf("InitIdentity %d returned %+v, call 0 %+v: want one identity for all", i, got[i], got[0])
		}
	}
	var winner int
	if _, err := fmt.Sscanf(string(got[0].CACert), "ca %d", &winner); err != nil || got[0].AdminTokenHash != store.HashSecret(fmt.Sprint(winner)) {
		t.Errorf("the stored identity %+v is not one of those offered whole", got[0])
	}
	stored, err := s.Identity(ctx)
	equal(t, "Identity", stored, err, got[0])
	stored.CACert[0] = 'X'
	again, err := s.Identity(ctx)
	equal(t, "Identity after changing a returned value", again, err, got[0])
	g, err := s.Generation(ctx)
	equal(t, "Generation after InitIdentity", g, err, 0)
}

func testClose(t *testing.T, s store.Store) {
	ctx := context.Background()
	fill(t, s)
	w := startWatch(s, 3)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	<-w.done
	w.cancel()
	if !errors.Is(w.err, store.ErrClosed) {
		t.Errorf("a watch waiting at Close returned %v, want ErrClosed", w.err)
	}
	calls := map[string]func() error{
		"Spec":          func() error { _, err := s.Spec(ctx); return err },
		"Revisions":     func() error { _, err := s.Revisions(ctx); return err },
		"Generation":    func() error { _, err := s.Generation(ctx); return err },
		"CreateToken":   func() error { return s.CreateToken(ctx, store.Token{ID: "x"}) },
		"Token":         func() error { _, err := s.Token(ctx, "t1"); return err },
		"TokenBySecret": func() error { _, err := s.TokenBySecret(ctx, store.HashSecret("secret")); return err },
		"Tokens":        func() error { _, err := s.Tokens(ctx); return err },
		"RevokeToken":   func() error { _, err := s.RevokeToken(ctx, "t1"); return err },
		"Gateways":      func() error { _, err := s.Gateways(ctx); return err },
		"Hosts":         func() error { _, err := s.Hosts(ctx); return err },
		"Plans":         func() error { _, err := s.Plans(ctx); return err },
		"Commit":        func() error { return s.Commit(ctx, store.Change{Generation: 9}) },
		"Watch":         func() error { _, err := s.Watch(ctx, 0); return err },
		"PutReport":     func() error { return s.PutReport(ctx, store.Report{Gateway: "gw-a"}) },
		"Reports":       func() error { _, err := s.Reports(ctx); return err },
		"Identity":      func() error { _, err := s.Identity(ctx); return err },
		"InitIdentity":  func() error { _, err := s.InitIdentity(ctx, store.Identity{CACert: []byte("x")}); return err },
	}
	names := make([]string, 0, len(calls))
	for n := range calls {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if err := calls[n](); !errors.Is(err, store.ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", n, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}
