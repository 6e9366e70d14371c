package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fednet/fednet/internal/manager/store"
)

// Relay keys under the prefix, each bound to the request's lease:
//
//	relay/req/ID   the request (JSON relayRecord)
//	relay/res/ID   its result (JSON relayRecord)
const (
	keyRelay    = "relay/"
	keyRelayReq = "relay/req/"
	keyRelayRes = "relay/res/"
)

var _ store.Relay = (*Store)(nil)

// relayRecord is a relayed message as stored.
type relayRecord struct {
	Gateway string `json:"gateway"`
	Data    []byte `json:"data"`
	// Lease is the request's lease, which its result shares.
	Lease int64 `json:"lease"`
}

// PutRelayRequest implements store.Relay: the request's key lives on a
// lease of ttl (at least etcd's minimum, a few seconds), so a request whose
// manager died goes away by itself.
func (s *Store) PutRelayRequest(ctx context.Context, m store.RelayMessage, ttl time.Duration) error {
	if err := s.check(); err != nil {
		return err
	}
	if m.ID == "" || strings.Contains(m.ID, "/") {
		return fmt.Errorf("relay request id %q: want a non-empty id without /", m.ID)
	}
	lease, err := s.cli.Grant(ctx, max(1, int64((ttl+time.Second-1)/time.Second)))
	if err != nil {
		return s.fail("relaying a request", err)
	}
	rec, err := json.Marshal(relayRecord{Gateway: m.Gateway, Data: m.Data, Lease: int64(lease.ID)})
	if err != nil {
		return err
	}
	if _, err := s.cli.Put(ctx, s.key(keyRelayReq+m.ID), string(rec), clientv3.WithLease(lease.ID)); err != nil {
		return s.fail("relaying a request", err)
	}
	return nil
}

// PutRelayResult implements store.Relay: the result goes on the request's
// lease, in one transaction with a check that the request is still there.
func (s *Store) PutRelayResult(ctx context.Context, m store.RelayMessage) error {
	if err := s.check(); err != nil {
		return err
	}
	reqKey := s.key(keyRelayReq + m.ID)
	resp, err := s.cli.Get(ctx, reqKey)
	if err != nil {
		return s.fail("relaying a result", err)
	}
	if len(resp.Kvs) == 0 {
		return fmt.Errorf("relay request %s: %w", m.ID, store.ErrNotFound)
	}
	var req relayRecord
	if err := json.Unmarshal(resp.Kvs[0].Value, &req); err != nil {
		return fmt.Errorf("relay request %s: %w", m.ID, err)
	}
	rec, err := json.Marshal(relayRecord{Gateway: req.Gateway, Data: m.Data, Lease: req.Lease})
	if err != nil {
		return err
	}
	txn, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(reqKey), "=", resp.Kvs[0].ModRevision)).
		Then(clientv3.OpPut(s.key(keyRelayRes+m.ID), string(rec), clientv3.WithLease(clientv3.LeaseID(req.Lease)))).
		Commit()
	if err != nil {
		return s.fail("relaying a result", err)
	}
	if !txn.Succeeded {
		return fmt.Errorf("relay request %s: %w", m.ID, store.ErrNotFound)
	}
	return nil
}

// DeleteRelay implements store.Relay: it revokes the request's lease,
// which deletes the request and its result.
func (s *Store) DeleteRelay(ctx context.Context, id string) error {
	if err := s.check(); err != nil {
		return err
	}
	resp, err := s.cli.Get(ctx, s.key(keyRelayReq+id))
	if err != nil {
		return s.fail("ending a relayed request", err)
	}
	if len(resp.Kvs) == 0 {
		return nil
	}
	if lease := clientv3.LeaseID(resp.Kvs[0].Lease); lease != clientv3.NoLease {
		if _, err := s.cli.Revoke(ctx, lease); err != nil && !errors.Is(err, context.Canceled) {
			return s.fail("ending a relayed request", err)
		}
		return nil
	}
	if _, err := s.cli.Delete(ctx, s.key(keyRelayReq+id)); err != nil {
		return s.fail("ending a relayed request", err)
	}
	return nil
}

// WatchRelay implements store.Relay with an etcd watch of the relay keys
// from the cluster's revision at the start; a watch that ends (a lost
// leader, compaction) is resumed from the last revision seen.
func (s *Store) WatchRelay(ctx context.Context, ready chan<- struct{}, f func(store.RelayMessage)) error {
	if err := s.check(); err != nil {
		return err
	}
	resp, err := s.cli.Get(ctx, s.key(keyGeneration))
	if err != nil {
		return s.fail("watching relayed messages", err)
	}
	next := resp.Header.Revision + 1
	if ready != nil {
		close(ready)
	}
	for {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		wc := s.cli.Watch(wctx, s.key(keyRelay), clientv3.WithPrefix(), clientv3.WithRev(next), clientv3.WithPrevKV())
	read:
		for {
			select {
			case <-s.done:
				cancel()
				return store.ErrClosed
			case <-ctx.Done():
				cancel()
				return ctx.Err()
			case wr, ok := <-wc:
				if !ok {
					break read
				}
				if wr.CompactRevision > next {
					next = wr.CompactRevision // what was compacted away is lost; requests are retried by their operators
				}
				if wr.Err() != nil {
					break read
				}
				for _, ev := range wr.Events {
					next = ev.Kv.ModRevision + 1
					if m, ok := s.relayMessage(ev); ok {
						f(m)
					}
				}
			}
		}
		cancel()
		select {
		case <-s.done:
			return store.ErrClosed
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// relayMessage decodes an event of the relay keys: a put of a request or
// a result, or the deletion of a request.
func (s *Store) relayMessage(ev *clientv3.Event) (store.RelayMessage, bool) {
	key := strings.TrimPrefix(string(ev.Kv.Key), s.prefix)
	var m store.RelayMessage
	switch {
	case strings.HasPrefix(key, keyRelayReq):
		m.ID, m.Kind = strings.TrimPrefix(key, keyRelayReq), store.RelayRequest
	case strings.HasPrefix(key, keyRelayRes):
		m.ID, m.Kind = strings.TrimPrefix(key, keyRelayRes), store.RelayResult
	default:
		return m, false
	}
	value := ev.Kv.Value
	if ev.Type == clientv3.EventTypeDelete {
		if m.Kind != store.RelayRequest {
			return m, false
		}
		m.Kind = store.RelayGone
		if ev.PrevKv == nil {
			return m, true
		}
		value = ev.PrevKv.Value
	}
	var rec relayRecord
	if err := json.Unmarshal(value, &rec); err != nil {
		return m, false
	}
	m.Gateway = rec.Gateway
	if m.Kind != store.RelayGone {
		m.Data = rec.Data
	}
	return m, true
}
