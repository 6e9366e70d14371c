// Package etcd is a store.Store on an etcd v3 cluster, for several
// managers sharing one federation state: any manager serves any request,
// and each follows the others' changes through etcd watches.
//
// Every key lives under a prefix (Config.Prefix, "/fednet/" by default), so
// one etcd cluster can hold several federations or other data:
//
//	meta/generation        the generation counter (decimal)
//	meta/revision          the current spec revision's number (decimal)
//	meta/history-floor     changes at or below it are pruned (decimal)
//	revisions/NNNN…        one spec revision (JSON), 20-digit number
//	tokens/ID              a join token (JSON)
//	token-secrets/HEX      the ID of the token with that secret hash
//	gateways/NAME          an enrolled gateway (JSON)
//	hosts/NAME             a joined host (JSON)
//	plans                  every gateway's plan record (one JSON object)
//	changes/NNNN…          what the commit of that generation changed
//	reports/NAME           a gateway's last status report (JSON)
//	identity               the federation's identity (JSON)
//	relay/req/ID           a relayed measurement request, on a lease
//	relay/res/ID           its result, on the same lease (see relay.go)
//
// A Commit is one etcd transaction: it reads what its preconditions
// depend on, checks them, and writes only if none of what it read changed
// meanwhile (compares on mod revisions), else reads again. So revisions
// and generations are linearizable: of concurrent applies, exactly one
// stores each revision number, and none is lost. The plans of a commit go
// into one key, so a change of every plan is one write rather than one per
// gateway (etcd bounds the operations of a transaction, 128 by default).
// Watch waits on an etcd watch of the generation key.
package etcd

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fednet/fednet/internal/manager/store"
	"github.com/fednet/fednet/internal/plan"
)

// DefaultPrefix is the key prefix when Config.Prefix is empty.
const DefaultPrefix = "/fednet/"

// DefaultDialTimeout bounds the first connection when Config.DialTimeout is
// zero.
const DefaultDialTimeout = 5 * time.Second

// historyGenerations is how many generations of change history Watch can
// answer from (at least); a watcher further behind gets the whole state.
var historyGenerations int64 = 1024

// maxAttempts bounds how often a write reads again after another writer
// changed what it read; beyond it the write fails with store.ErrConflict.
const maxAttempts = 32

// Config says which etcd cluster to use and how.
type Config struct {
	// Endpoints are the cluster's client URLs (http://h:2379 or
	// https://h:2379). Required.
	Endpoints []string
	// TLS, when set, secures the connections (with a client certificate
	// when it holds one). Endpoints must then be https.
	TLS *tls.Config
	// Prefix is the prefix of every key; DefaultPrefix when empty. It
	// must end in "/".
	Prefix string
	// DialTimeout bounds connecting at Open; DefaultDialTimeout when zero.
	DialTimeout time.Duration
}

// Store is a store.Store on etcd. Create it with Open; it is safe for
// concurrent use, also by managers in other processes on the same cluster
// and prefix.
type Store struct {
	cli    *clientv3.Client
	prefix string

	mu     sync.Mutex // guards closed
	closed bool
	done   chan struct{} // closed by Close

	reports *store.ReportBatcher // writes reports (putReports)
}

var _ store.Store = (*Store)(nil)

// Open connects to the cluster and checks that it answers (within
// DialTimeout). The caller must Close the store.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("etcd store: no endpoints; want etcd://HOST:PORT[,HOST:PORT...]")
	}
	prefix := cfg.Prefix
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if !strings.HasSuffix(prefix, "/") {
		return nil, fmt.Errorf("etcd store: prefix %q must end in /", prefix)
	}
	timeout := cfg.DialTimeout
	if timeout <= 0 {
		timeout = DefaultDialTimeout
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:            cfg.Endpoints,
		TLS:                  cfg.TLS,
		DialTimeout:          timeout,
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
		Logger:               zap.NewNop(),
		// Requests hold whole plan records and state: allow large ones.
		MaxCallSendMsgSize: 16 << 20,
		MaxCallRecvMsgSize: 64 << 20,
	})
	if err != nil {
		return nil, fmt.Errorf("etcd store %s: %w", strings.Join(cfg.Endpoints, ","), err)
	}
	// Answer or fail now, not at the first request.
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if _, err := cli.Get(cctx, prefix+keyGeneration); err != nil {
		cli.Close()
		return nil, fmt.Errorf("etcd store %s: the cluster does not answer within %v: %w", strings.Join(cfg.Endpoints, ","), timeout, err)
	}
	s := &Store{cli: cli, prefix: prefix, done: make(chan struct{})}
	s.reports = store.NewReportBatcher(s.putReports, store.ReportLinger)
	return s, nil
}

// Keys under the prefix.
const (
	keyGeneration   = "meta/generation"
	keyRevision     = "meta/revision"
	keyFloor        = "meta/history-floor"
	keyPlans        = "plans"
	keyIdentity     = "identity"
	dirRevisions    = "revisions/"
	dirTokens       = "tokens/"
	dirTokenSecrets = "token-secrets/"
	dirGateways     = "gateways/"
	dirHosts        = "hosts/"
	dirChanges      = "changes/"
	dirReports      = "reports/"
)

func (s *Store) key(k string) string { return s.prefix + k }

func numberKey(dir string, n int64) string { return fmt.Sprintf("%s%020d", dir, n) }

// Close closes the connection; Watch calls waiting return store.ErrClosed.
// It is safe to call more than once.
func (s *Store) Close() error {
	// The reports' writer first, without s.mu (its errors take it): no
	// write is under way once the client is closed.
	s.reports.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	close(s.done)
	return s.cli.Close()
}

func (s *Store) check() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return store.ErrClosed
	}
	return nil
}

// fail wraps an etcd error with what was being done; after Close it is
// store.ErrClosed.
func (s *Store) fail(what string, err error) error {
	if s.check() != nil {
		return store.ErrClosed
	}
	return fmt.Errorf("%s: etcd: %w", what, err)
}

// Records as stored (JSON). Times are unix nanoseconds (0: none), so that
// they come back as they went in.

// revisionRecord is a spec revision. Its YAML is stored gzipped
// (YAMLGzip): a spec of a thousand sites is 230 kB of YAML and 25 kB
// gzipped, which every member of the cluster writes and every other
// manager reads, for each revision; and with the plans of the same commit
// it stays under etcd's 1.5 MiB per request at several thousand sites.
// Records written plain (YAML) are read as well.
type revisionRecord struct {
	Number   int    `json:"number"`
	YAML     string `json:"yaml,omitempty"`
	YAMLGzip []byte `json:"yamlGzip,omitempty"`
	Created  int64  `json:"created"`
}

// maxSpecBytes bounds the YAML a stored revision unzips to: far above
// any spec (a request to the manager is at most api.MaxRequestBytes),
// far below what would hurt a manager reading a damaged record.
const maxSpecBytes = 64 << 20

// fromRevision returns the record of revision r, its YAML gzipped.
func fromRevision(r store.Revision) revisionRecord {
	var b bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&b, gzip.BestSpeed) // a valid level: no error
	zw.Write([]byte(r.YAML))                         // into a bytes.Buffer: no error
	zw.Close()
	return revisionRecord{Number: r.Number, YAMLGzip: b.Bytes(), Created: nanos(r.Created)}
}

type tokenRecord struct {
	ID         string `json:"id"`
	Gateway    string `json:"gateway,omitempty"`
	SecretHash string `json:"secretHash"`
	Created    int64  `json:"created"`
	Expires    int64  `json:"expires"`
	Used       int64  `json:"used,omitempty"`
	Revoked    bool   `json:"revoked,omitempty"`
	Site       string `json:"site,omitempty"`
	Network    string `json:"network,omitempty"`
	Replaces   string `json:"replaces,omitempty"`
}

type gatewayRecord struct {
	Name            string   `json:"name"`
	PublicKey       plan.Key `json:"publicKey"`
	CredentialHash  string   `json:"credentialHash"`
	RotateRequested int      `json:"rotateRequested,omitempty"`
	RotateAnswered  int      `json:"rotateAnswered,omitempty"`
	Endpoint        string   `json:"endpoint,omitempty"`
	ObservedAddress string   `json:"observedAddress,omitempty"`
	Enrolled        int64    `json:"enrolled"`
	Removed         bool     `json:"removed,omitempty"`
	Activated       int64    `json:"activated,omitempty"`
}

type hostRecord struct {
	Name           string `json:"name"`
	Site           string `json:"site"`
	Network        string `json:"network"`
	Address        string `json:"address"`
	Slot           int    `json:"slot"`
	CredentialHash string `json:"credentialHash"`
	Joined         int64  `json:"joined"`
}

type planRecord struct {
	Generation int64  `json:"g"`
	Revision   int    `json:"r"`
	Sum        string `json:"s,omitempty"`
	JSON       []byte `json:"j,omitempty"`
}

type reportRecord struct {
	JSON     []byte `json:"json"`
	Received int64  `json:"received"`
}

type identityRecord struct {
	CACert         []byte `json:"caCert"`
	AdminTokenHash string `json:"adminTokenHash"`
}

// change is one entry of a commit's history: what it changed.
type change struct {
	Kind string `json:"k"` // spec, gateway, host, plan
	Name string `json:"n,omitempty"`
}

var (
	nanos     = store.UnixNano
	fromNanos = store.FromUnixNano
)

func hashString(h store.Hash) string { return hex.EncodeToString(h[:]) }

func parseHash(s string) (store.Hash, error) {
	var h store.Hash
	if s == "" {
		return h, nil
	}
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(h) {
		return h, fmt.Errorf("damaged hash %q", s)
	}
	copy(h[:], b)
	return h, nil
}

func toRevision(r revisionRecord) (store.Revision, error) {
	rev := store.Revision{Number: r.Number, YAML: r.YAML, Created: fromNanos(r.Created)}
	if r.YAMLGzip == nil {
		return rev, nil
	}
	zr, err := gzip.NewReader(bytes.NewReader(r.YAMLGzip))
	if err != nil {
		return rev, fmt.Errorf("revision %d: its gzipped YAML: %w", r.Number, err)
	}
	yaml, err := io.ReadAll(io.LimitReader(zr, maxSpecBytes+1))
	switch {
	case err != nil:
		return rev, fmt.Errorf("revision %d: its gzipped YAML: %w", r.Number, err)
	case len(yaml) > maxSpecBytes:
		return rev, fmt.Errorf("revision %d: its gzipped YAML unzips to more than %d bytes", r.Number, maxSpecBytes)
	}
	rev.YAML = string(yaml)
	return rev, nil
}

func fromToken(t store.Token) tokenRecord {
	return tokenRecord{ID: t.ID, Gateway: t.Gateway, SecretHash: hashString(t.SecretHash), Created: nanos(t.Created), Expires: nanos(t.Expires),
		Used: nanos(t.Used), Revoked: t.Revoked, Site: t.Site, Network: t.Network, Replaces: t.Replaces}
}

func toToken(r tokenRecord) (store.Token, error) {
	h, err := parseHash(r.SecretHash)
	if err != nil {
		return store.Token{}, fmt.Errorf("token %s: %w", r.ID, err)
	}
	return store.Token{ID: r.ID, Gateway: r.Gateway, SecretHash: h, Created: fromNanos(r.Created), Expires: fromNanos(r.Expires),
		Used: fromNanos(r.Used), Revoked: r.Revoked, Site: r.Site, Network: r.Network, Replaces: r.Replaces}, nil
}

func fromGateway(g store.Gateway) gatewayRecord {
	return gatewayRecord{Name: g.Name, PublicKey: g.PublicKey, CredentialHash: hashString(g.CredentialHash), RotateRequested: g.RotateRequested,
		RotateAnswered: g.RotateAnswered, Endpoint: g.Endpoint, ObservedAddress: g.ObservedAddress, Enrolled: nanos(g.Enrolled), Removed: g.Removed, Activated: nanos(g.Activated)}
}

func toGateway(r gatewayRecord) (store.Gateway, error) {
	h, err := parseHash(r.CredentialHash)
	if err != nil {
		return store.Gateway{}, fmt.Errorf("gateway %s: %w", r.Name, err)
	}
	return store.Gateway{Name: r.Name, PublicKey: r.PublicKey, CredentialHash: h, RotateRequested: r.RotateRequested, RotateAnswered: r.RotateAnswered,
		Endpoint: r.Endpoint, ObservedAddress: r.ObservedAddress, Enrolled: fromNanos(r.Enrolled), Removed: r.Removed, Activated: fromNanos(r.Activated)}, nil
}

func fromHost(h store.Host) hostRecord {
	return hostRecord{Name: h.Name, Site: h.Site, Network: h.Network, Address: h.Address, Slot: h.Slot, CredentialHash: hashString(h.CredentialHash), Joined: nanos(h.Joined)}
}

func toHost(r hostRecord) (store.Host, error) {
	h, err := parseHash(r.CredentialHash)
	if err != nil {
		return store.Host{}, fmt.Errorf("host %s: %w", r.Name, err)
	}
	return store.Host{Name: r.Name, Site: r.Site, Network: r.Network, Address: r.Address, Slot: r.Slot, CredentialHash: h, Joined: fromNanos(r.Joined)}, nil
}

// decodeAll decodes the values of kvs into T and converts each.
func decodeAll[R, T any](what string, kvs [][]byte, conv func(R) (T, error)) ([]T, error) {
	out := make([]T, 0, len(kvs))
	for _, v := range kvs {
		var r R
		if err := json.Unmarshal(v, &r); err != nil {
			return nil, fmt.Errorf("%s: damaged record: %w", what, err)
		}
		t, err := conv(r)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

func values(resp *clientv3.GetResponse) [][]byte {
	out := make([][]byte, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		out[i] = kv.Value
	}
	return out
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil { // records hold only strings, numbers and byte slices
		panic(fmt.Sprintf("encoding %T: %v", v, err))
	}
	return string(b)
}

// number parses a decimal counter; an absent key is 0.
func number(resp *clientv3.GetResponse) (int64, error) {
	if len(resp.Kvs) == 0 {
		return 0, nil
	}
	n, err := strconv.ParseInt(string(resp.Kvs[0].Value), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("damaged counter %s: %w", resp.Kvs[0].Key, err)
	}
	return n, nil
}

// modRevision is the mod revision of the single key of resp, 0 when it
// is absent (what a compare on an absent key's mod revision sees).
func modRevision(resp *clientv3.GetResponse) int64 {
	if len(resp.Kvs) == 0 {
		return 0
	}
	return resp.Kvs[0].ModRevision
}

// snapshot reads keys at one etcd revision: the first read fixes it, the
// others read at it, so that together they are one consistent state.
type snapshot struct {
	s   *Store
	ctx context.Context
	rev int64
}

func (sn *snapshot) get(key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	if sn.rev != 0 {
		opts = append(opts, clientv3.WithRev(sn.rev))
	}
	resp, err := sn.s.cli.Get(sn.ctx, sn.s.key(key), opts...)
	if err != nil {
		return nil, err
	}
	if sn.rev == 0 {
		sn.rev = resp.Header.Revision
	}
	return resp, nil
}

// Spec implements store.Store.
func (s *Store) Spec(ctx context.Context) (store.Revision, error) {
	if err := s.check(); err != nil {
		return store.Revision{}, err
	}
	r, err := s.currentSpec(&snapshot{s: s, ctx: ctx})
	if err != nil {
		return store.Revision{}, err
	}
	if r == nil {
		return store.Revision{}, fmt.Errorf("current spec: %w", store.ErrNotFound)
	}
	return *r, nil
}

// Revisions implements store.Store.
func (s *Store) Revisions(ctx context.Context) ([]store.Revision, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	resp, err := s.cli.Get(ctx, s.key(dirRevisions), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, s.fail("listing revisions", err)
	}
	return decodeAll("revision", values(resp), toRevision)
}

// Generation implements store.Store.
func (s *Store) Generation(ctx context.Context) (int64, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	resp, err := s.cli.Get(ctx, s.key(keyGeneration))
	if err != nil {
		return 0, s.fail("reading the generation", err)
	}
	return number(resp)
}

// CreateToken implements store.Store.
func (s *Store) CreateToken(ctx context.Context, t store.Token) error {
	if err := s.check(); err != nil {
		return err
	}
	idKey, secretKey := s.key(dirTokens+t.ID), s.key(dirTokenSecrets+hashString(t.SecretHash))
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(idKey), "=", 0), clientv3.Compare(clientv3.CreateRevision(secretKey), "=", 0)).
		Then(clientv3.OpPut(idKey, mustJSON(fromToken(t))), clientv3.OpPut(secretKey, t.ID)).
		Commit()
	if err != nil {
		return s.fail("creating token "+t.ID, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("token %s: %w", t.ID, store.ErrExists)
	}
	return nil
}

// Token implements store.Store.
func (s *Store) Token(ctx context.Context, id string) (store.Token, error) {
	if err := s.check(); err != nil {
		return store.Token{}, err
	}
	t, _, err := s.readToken(&snapshot{s: s, ctx: ctx}, id)
	return t, err
}

// readToken reads token id and its mod revision.
func (s *Store) readToken(sn *snapshot, id string) (store.Token, int64, error) {
	resp, err := sn.get(dirTokens + id)
	if err != nil {
		return store.Token{}, 0, s.fail("reading token "+id, err)
	}
	if len(resp.Kvs) == 0 {
		return store.Token{}, 0, fmt.Errorf("token %s: %w", id, store.ErrNotFound)
	}
	toks, err := decodeAll("token", values(resp), toToken)
	if err != nil {
		return store.Token{}, 0, err
	}
	return toks[0], resp.Kvs[0].ModRevision, nil
}

// TokenBySecret implements store.Store.
func (s *Store) TokenBySecret(ctx context.Context, h store.Hash) (store.Token, error) {
	if err := s.check(); err != nil {
		return store.Token{}, err
	}
	t, _, err := s.tokenBySecret(&snapshot{s: s, ctx: ctx}, h)
	return t, err
}

func (s *Store) tokenBySecret(sn *snapshot, h store.Hash) (store.Token, int64, error) {
	resp, err := sn.get(dirTokenSecrets + hashString(h))
	if err != nil {
		return store.Token{}, 0, s.fail("finding a token", err)
	}
	if len(resp.Kvs) == 0 {
		return store.Token{}, 0, fmt.Errorf("token: %w", store.ErrNotFound)
	}
	return s.readToken(sn, string(resp.Kvs[0].Value))
}

// Tokens implements store.Store.
func (s *Store) Tokens(ctx context.Context) ([]store.Token, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	toks, _, err := s.tokens(&snapshot{s: s, ctx: ctx})
	return toks, err
}

// tokens reads every token with its mod revision (by ID).
func (s *Store) tokens(sn *snapshot) ([]store.Token, map[string]int64, error) {
	resp, err := sn.get(dirTokens, clientv3.WithPrefix())
	if err != nil {
		return nil, nil, s.fail("listing tokens", err)
	}
	toks, err := decodeAll("token", values(resp), toToken)
	if err != nil {
		return nil, nil, err
	}
	mods := map[string]int64{}
	for i, kv := range resp.Kvs {
		mods[toks[i].ID] = kv.ModRevision
	}
	slices.SortFunc(toks, func(a, b store.Token) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return toks, mods, nil
}

// RevokeToken implements store.Store.
func (s *Store) RevokeToken(ctx context.Context, id string) (store.Token, error) {
	if err := s.check(); err != nil {
		return store.Token{}, err
	}
	for range maxAttempts {
		t, mod, err := s.readToken(&snapshot{s: s, ctx: ctx}, id)
		if err != nil {
			return store.Token{}, err
		}
		t.Revoked = true
		k := s.key(dirTokens + id)
		resp, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", mod)).Then(clientv3.OpPut(k, mustJSON(fromToken(t)))).Commit()
		if err != nil {
			return store.Token{}, s.fail("revoking token "+id, err)
		}
		if resp.Succeeded {
			return t, nil
		}
	}
	return store.Token{}, fmt.Errorf("revoking token %s: %w", id, store.ErrConflict)
}

// Gateways implements store.Store.
func (s *Store) Gateways(ctx context.Context) ([]store.Gateway, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	return s.gateways(&snapshot{s: s, ctx: ctx})
}

func (s *Store) gateways(sn *snapshot) ([]store.Gateway, error) {
	resp, err := sn.get(dirGateways, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, s.fail("listing gateways", err)
	}
	return decodeAll("gateway", values(resp), toGateway)
}

// Hosts implements store.Store.
func (s *Store) Hosts(ctx context.Context) ([]store.Host, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	return s.hosts(&snapshot{s: s, ctx: ctx})
}

func (s *Store) hosts(sn *snapshot) ([]store.Host, error) {
	resp, err := sn.get(dirHosts, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, s.fail("listing hosts", err)
	}
	return decodeAll("host", values(resp), toHost)
}

// Plans implements store.Store.
func (s *Store) Plans(ctx context.Context) ([]store.Plan, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	plans, _, err := s.plans(&snapshot{s: s, ctx: ctx})
	if err != nil {
		return nil, err
	}
	return sortedPlans(plans, nil)
}

// plans reads the plan records (by gateway) and the key's mod revision.
func (s *Store) plans(sn *snapshot) (map[string]planRecord, int64, error) {
	resp, err := sn.get(keyPlans)
	if err != nil {
		return nil, 0, s.fail("reading plans", err)
	}
	out := map[string]planRecord{}
	if len(resp.Kvs) > 0 {
		if err := json.Unmarshal(resp.Kvs[0].Value, &out); err != nil {
			return nil, 0, fmt.Errorf("plans: damaged record: %w", err)
		}
	}
	return out, modRevision(resp), nil
}

// sortedPlans returns the plans of recs named in names (all when names is
// nil), by gateway.
func sortedPlans(recs map[string]planRecord, names []string) ([]store.Plan, error) {
	if names == nil {
		names = slices.Sorted(maps.Keys(recs))
	}
	out := []store.Plan{}
	for _, n := range names {
		r, ok := recs[n]
		if !ok {
			continue
		}
		sum, err := parseHash(r.Sum)
		if err != nil {
			return nil, fmt.Errorf("plan of %s: %w", n, err)
		}
		out = append(out, store.Plan{Gateway: n, Generation: r.Generation, Revision: r.Revision, Sum: sum, JSON: r.JSON})
	}
	return out, nil
}
