package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fednet/fednet/internal/manager/store"
)

// writesState reports whether c changes what Watch announces.
func writesState(c store.Change) bool {
	return c.Spec != nil || len(c.Gateways) > 0 || len(c.Hosts) > 0 || len(c.DeleteHosts) > 0 || len(c.Plans) > 0 || len(c.DeletePlans) > 0
}

// Commit implements store.Store: one etcd transaction that writes only if
// nothing it read to check c's preconditions changed; else it reads again
// (at most maxAttempts times).
func (s *Store) Commit(ctx context.Context, c store.Change) error {
	if err := s.check(); err != nil {
		return err
	}
	if c.Generation == 0 && writesState(c) {
		return errors.New("commit: a Change that writes a revision, gateway, host or plan must set Generation")
	}
	if c.UseToken != nil && c.UseToken.Now.IsZero() {
		return errors.New("using token: UseToken.Now is not set")
	}
	for range maxAttempts {
		txn, err := s.prepare(ctx, c)
		if err != nil {
			return err
		}
		resp, err := txn.Commit()
		if err != nil {
			return s.fail("committing", err)
		}
		if resp.Succeeded {
			return nil
		}
	}
	return fmt.Errorf("committing: other writers kept changing the state: %w", store.ErrConflict)
}

// prepare reads what c's preconditions depend on, checks them, and returns
// the transaction that applies c if none of it changed since.
func (s *Store) prepare(ctx context.Context, c store.Change) (clientv3.Txn, error) {
	sn := &snapshot{s: s, ctx: ctx}
	var cmps []clientv3.Cmp
	var ops []clientv3.Op
	unchanged := func(key string, mod int64) {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(s.key(key)), "=", mod))
	}

	genResp, err := sn.get(keyGeneration)
	if err != nil {
		return nil, s.fail("reading the generation", err)
	}
	gen, err := number(genResp)
	if err != nil {
		return nil, err
	}
	if c.Generation != 0 {
		if c.Generation <= gen {
			return nil, fmt.Errorf("setting generation %d: it is already %d: %w", c.Generation, gen, store.ErrConflict)
		}
		unchanged(keyGeneration, modRevision(genResp))
		ops = append(ops, clientv3.OpPut(s.key(keyGeneration), strconv.FormatInt(c.Generation, 10)))
	}

	// Tokens: the one used, then those revoked, written once each.
	tokens := map[string]store.Token{}
	if u := c.UseToken; u != nil {
		t, mod, err := s.tokenBySecret(sn, u.SecretHash)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return nil, fmt.Errorf("using token: %w", store.ErrNotFound)
		case err != nil:
			return nil, err
		case t.Revoked:
			return nil, fmt.Errorf("using token %s: %w", t.ID, store.ErrTokenRevoked)
		case !t.Used.IsZero():
			return nil, fmt.Errorf("using token %s: %w", t.ID, store.ErrTokenUsed)
		case !u.Now.Before(t.Expires):
			return nil, fmt.Errorf("using token %s: %w", t.ID, store.ErrTokenExpired)
		}
		unchanged(dirTokens+t.ID, mod)
		t.Used = u.Now
		tokens[t.ID] = t
	}
	if len(c.RevokeTokensOf) > 0 {
		all, mods, err := s.tokens(sn)
		if err != nil {
			return nil, err
		}
		for _, t := range all {
			if !slices.Contains(c.RevokeTokensOf, t.Gateway) {
				continue
			}
			if used, ok := tokens[t.ID]; ok {
				t = used
			} else {
				unchanged(dirTokens+t.ID, mods[t.ID])
			}
			if t.Used.IsZero() {
				t.Revoked = true
			}
			tokens[t.ID] = t
		}
	}
	for _, id := range slices.Sorted(maps.Keys(tokens)) {
		ops = append(ops, clientv3.OpPut(s.key(dirTokens+id), mustJSON(fromToken(tokens[id]))))
	}

	if r := c.Spec; r != nil {
		resp, err := sn.get(keyRevision)
		if err != nil {
			return nil, s.fail("reading the current revision", err)
		}
		cur, err := number(resp)
		if err != nil {
			return nil, err
		}
		if int64(r.Number) != cur+1 {
			return nil, fmt.Errorf("storing revision %d: current is %d: %w", r.Number, cur, store.ErrConflict)
		}
		unchanged(keyRevision, modRevision(resp))
		ops = append(ops,
			clientv3.OpPut(s.key(keyRevision), strconv.Itoa(r.Number)),
			clientv3.OpPut(s.key(numberKey(dirRevisions, int64(r.Number))), mustJSON(fromRevision(*r))))
	}

	var log []change
	if c.Spec != nil {
		log = append(log, change{Kind: "spec"})
	}
	for _, g := range c.Gateways {
		ops = append(ops, clientv3.OpPut(s.key(dirGateways+g.Name), mustJSON(fromGateway(g))))
		log = append(log, change{"gateway", g.Name})
	}
	for _, h := range c.Hosts {
		ops = append(ops, clientv3.OpPut(s.key(dirHosts+h.Name), mustJSON(fromHost(h))))
		log = append(log, change{"host", h.Name})
	}
	for _, n := range c.DeleteHosts {
		ops = append(ops, clientv3.OpDelete(s.key(dirHosts+n)))
		log = append(log, change{"host", n})
	}
	for _, n := range c.DeleteReports {
		ops = append(ops, clientv3.OpDelete(s.key(dirReports+n)))
	}
	if len(c.Plans) > 0 || len(c.DeletePlans) > 0 {
		plans, mod, err := s.plans(sn)
		if err != nil {
			return nil, err
		}
		for _, p := range c.Plans {
			plans[p.Gateway] = planRecord{Generation: p.Generation, Revision: p.Revision, Sum: sumString(p.Sum), JSON: p.JSON}
			log = append(log, change{"plan", p.Gateway})
		}
		for _, n := range c.DeletePlans {
			delete(plans, n)
			log = append(log, change{"plan", n})
		}
		unchanged(keyPlans, mod)
		ops = append(ops, clientv3.OpPut(s.key(keyPlans), mustJSON(plans)))
	}

	if c.Generation != 0 {
		ops = append(ops, clientv3.OpPut(s.key(numberKey(dirChanges, c.Generation)), mustJSON(log)))
		floorResp, err := sn.get(keyFloor)
		if err != nil {
			return nil, s.fail("reading the history floor", err)
		}
		floor, err := number(floorResp)
		if err != nil {
			return nil, err
		}
		if c.Generation-floor > 2*historyGenerations {
			floor = c.Generation - historyGenerations
			ops = append(ops,
				clientv3.OpDelete(s.key(dirChanges), clientv3.WithRange(s.key(numberKey(dirChanges, floor+1)))),
				clientv3.OpPut(s.key(keyFloor), strconv.FormatInt(floor, 10)))
		}
	}
	return s.cli.Txn(ctx).If(cmps...).Then(ops...), nil
}

// sumString stores the zero sum as "" (a plan stored without one).
func sumString(h store.Hash) string {
	if h == (store.Hash{}) {
		return ""
	}
	return hashString(h)
}

// Watch implements store.Store: it reads the state at one etcd revision R
// and, when the generation is not above after yet, waits on an etcd watch
// of the generation key from R+1, so that no commit between the read and
// the wait is missed.
func (s *Store) Watch(ctx context.Context, after int64) (store.Event, error) {
	for {
		if err := s.check(); err != nil {
			return store.Event{}, err
		}
		ev, ok, rev, err := s.event(ctx, after)
		if err != nil || ok {
			return ev, err
		}
		if err := s.waitGeneration(ctx, rev+1); err != nil {
			return store.Event{}, err
		}
	}
}

// waitGeneration returns once the generation key changes at or after etcd
// revision from (or the watch ends for another reason: the caller reads
// again), ctx's error when ctx ends, store.ErrClosed when the store closes.
func (s *Store) waitGeneration(ctx context.Context, from int64) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wc := s.cli.Watch(wctx, s.key(keyGeneration), clientv3.WithRev(from))
	select {
	case <-wc:
		// An event, or the watch's end (compaction, a lost leader):
		// either way, read the state again.
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return nil
	case <-s.done:
		return store.ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// event reads, at one etcd revision, what changed after generation after;
// ok is false (and rev the revision read) when the generation is not above
// after yet.
func (s *Store) event(ctx context.Context, after int64) (ev store.Event, ok bool, rev int64, err error) {
	sn := &snapshot{s: s, ctx: ctx}
	resp, err := sn.get(keyGeneration)
	if err != nil {
		return store.Event{}, false, 0, s.fail("watching", err)
	}
	if ev.Generation, err = number(resp); err != nil {
		return store.Event{}, false, 0, err
	}
	if after >= 0 && ev.Generation <= after {
		return store.Event{}, false, sn.rev, nil
	}
	floorResp, err := sn.get(keyFloor)
	if err != nil {
		return store.Event{}, false, 0, s.fail("watching", err)
	}
	floor, err := number(floorResp)
	if err != nil {
		return store.Event{}, false, 0, err
	}
	if ev.Reset = after < floor; ev.Reset {
		err = s.readAll(sn, &ev)
	} else {
		err = s.readChanged(sn, after, &ev)
	}
	if err != nil {
		return store.Event{}, false, 0, err
	}
	return ev, true, sn.rev, nil
}

// currentSpec reads the current revision at the snapshot, nil when none.
func (s *Store) currentSpec(sn *snapshot) (*store.Revision, error) {
	resp, err := sn.get(dirRevisions, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend), clientv3.WithLimit(1))
	if err != nil {
		return nil, s.fail("reading the current spec", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	revs, err := decodeAll("revision", values(resp), toRevision)
	if err != nil {
		return nil, err
	}
	return &revs[0], nil
}

// readAll fills ev with the whole state.
func (s *Store) readAll(sn *snapshot, ev *store.Event) error {
	var err error
	if ev.Spec, err = s.currentSpec(sn); err != nil {
		return err
	}
	if ev.Gateways, err = s.gateways(sn); err != nil {
		return err
	}
	if ev.Hosts, err = s.hosts(sn); err != nil {
		return err
	}
	plans, _, err := s.plans(sn)
	if err != nil {
		return err
	}
	ev.Plans, err = sortedPlans(plans, nil)
	return err
}

// readChanged fills ev with the current values of what the history says
// changed after generation after.
func (s *Store) readChanged(sn *snapshot, after int64, ev *store.Event) error {
	resp, err := sn.get(numberKey(dirChanges, after+1), clientv3.WithRange(s.key(numberKey(dirChanges, 1<<62))))
	if err != nil {
		return s.fail("reading changes", err)
	}
	names := map[string]map[string]bool{}
	for _, kv := range resp.Kvs {
		var log []change
		if err := json.Unmarshal(kv.Value, &log); err != nil {
			return fmt.Errorf("changes: damaged record %s: %w", kv.Key, err)
		}
		for _, c := range log {
			if names[c.Kind] == nil {
				names[c.Kind] = map[string]bool{}
			}
			names[c.Kind][c.Name] = true
		}
	}
	if len(names["spec"]) > 0 {
		if ev.Spec, err = s.currentSpec(sn); err != nil {
			return err
		}
	}
	for _, n := range slices.Sorted(maps.Keys(names["gateway"])) {
		r, err := sn.get(dirGateways + n)
		if err != nil {
			return s.fail("reading gateway "+n, err)
		}
		gws, err := decodeAll("gateway", values(r), toGateway)
		if err != nil {
			return err
		}
		ev.Gateways = append(ev.Gateways, gws...)
	}
	for _, n := range slices.Sorted(maps.Keys(names["host"])) {
		r, err := sn.get(dirHosts + n)
		if err != nil {
			return s.fail("reading host "+n, err)
		}
		hosts, err := decodeAll("host", values(r), toHost)
		if err != nil {
			return err
		}
		if len(hosts) == 0 {
			ev.DeletedHosts = append(ev.DeletedHosts, n)
		}
		ev.Hosts = append(ev.Hosts, hosts...)
	}
	if changed := slices.Sorted(maps.Keys(names["plan"])); len(changed) > 0 {
		plans, _, err := s.plans(sn)
		if err != nil {
			return err
		}
		if ev.Plans, err = sortedPlans(plans, changed); err != nil {
			return err
		}
		for _, n := range changed {
			if _, ok := plans[n]; !ok {
				ev.DeletedPlans = append(ev.DeletedPlans, n)
			}
		}
	}
	return nil
}

// PutReport implements store.Store: reports are put in batches
// (store.ReportBatcher), those of a batch in transactions of up to
// reportsPerTxn puts (etcd allows 128 operations in one).
func (s *Store) PutReport(ctx context.Context, r store.Report) error {
	if err := s.check(); err != nil {
		return err
	}
	return s.reports.Put(ctx, r)
}

// reportsPerTxn is how many reports one transaction puts.
const reportsPerTxn = 100

// putReports puts reports (the last of each gateway), in transactions of
// reportsPerTxn.
func (s *Store) putReports(reports []store.Report) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reports = store.Latest(reports)
	for len(reports) > 0 {
		n := min(len(reports), reportsPerTxn)
		ops := make([]clientv3.Op, n)
		for i, r := range reports[:n] {
			ops[i] = clientv3.OpPut(s.key(dirReports+r.Gateway), mustJSON(reportRecord{JSON: r.JSON, Received: nanos(r.Received)}))
		}
		if _, err := s.cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			return s.fail(fmt.Sprintf("storing %d reports", n), err)
		}
		reports = reports[n:]
	}
	return nil
}

// Reports implements store.Store.
func (s *Store) Reports(ctx context.Context) ([]store.Report, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	resp, err := s.cli.Get(ctx, s.key(dirReports), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, s.fail("listing reports", err)
	}
	out := make([]store.Report, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var r reportRecord
		if err := json.Unmarshal(kv.Value, &r); err != nil {
			return nil, fmt.Errorf("report %s: damaged record: %w", kv.Key, err)
		}
		out = append(out, store.Report{Gateway: string(kv.Key[len(s.key(dirReports)):]), JSON: r.JSON, Received: fromNanos(r.Received)})
	}
	return out, nil
}

// Identity implements store.Store.
func (s *Store) Identity(ctx context.Context) (store.Identity, error) {
	if err := s.check(); err != nil {
		return store.Identity{}, err
	}
	resp, err := s.cli.Get(ctx, s.key(keyIdentity))
	if err != nil {
		return store.Identity{}, s.fail("reading the identity", err)
	}
	if len(resp.Kvs) == 0 {
		return store.Identity{}, fmt.Errorf("identity: %w", store.ErrNotFound)
	}
	return decodeIdentity(resp.Kvs[0].Value)
}

func decodeIdentity(b []byte) (store.Identity, error) {
	var r identityRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return store.Identity{}, fmt.Errorf("identity: damaged record: %w", err)
	}
	h, err := parseHash(r.AdminTokenHash)
	if err != nil {
		return store.Identity{}, fmt.Errorf("identity: %w", err)
	}
	return store.Identity{CACert: r.CACert, AdminTokenHash: h}, nil
}

// InitIdentity implements store.Store: a put if the key was never created,
// else a read of what is there, in one transaction.
func (s *Store) InitIdentity(ctx context.Context, id store.Identity) (store.Identity, error) {
	if err := s.check(); err != nil {
		return store.Identity{}, err
	}
	k := s.key(keyIdentity)
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, mustJSON(identityRecord{CACert: id.CACert, AdminTokenHash: hashString(id.AdminTokenHash)}))).
		Else(clientv3.OpGet(k)).
		Commit()
	if err != nil {
		return store.Identity{}, s.fail("storing the identity", err)
	}
	if resp.Succeeded {
		return store.Identity{CACert: slices.Clone(id.CACert), AdminTokenHash: id.AdminTokenHash}, nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return store.Identity{}, errors.New("storing the identity: it was there, then gone")
	}
	return decodeIdentity(kvs[0].Value)
}
