package demo

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/client"
	"github.com/fednet/fednet/internal/lab"
	"github.com/fednet/fednet/internal/lab/etcdlab"
)

// ManagerPort is the port the lab's manager listens on.
const ManagerPort = 7443

// EtcdClientPort and EtcdPeerPort are the ports of the etcd members that
// run beside the managers of a lab with several.
const (
	EtcdClientPort = 2379
	EtcdPeerPort   = 2380
)

// Managed is a federation run by a manager on a lab: `fednet manager` in
// the lab's manager node, one `fednet agent` per gateway enrolled with a
// join token, the spec applied through the API. On a lab with several
// manager nodes (lab.Config.Managers), an etcd member runs beside each
// manager, in its node, and the managers share that cluster.
type Managed struct {
	Lab    *lab.Lab
	Binary string
	// Admin talks to the managers (every one, failing over) with the
	// admin token.
	Admin *client.Client

	mu          sync.Mutex
	fingerprint string // of the managers' CA
	adminToken  string
	managers    []*lab.Process // by manager node
	etcd        *etcdlab.Cluster
	agents      map[string]*lab.Process
}

// StartManaged starts the manager of l (built with lab.Config.Manager) and
// waits until its API answers; with several manager nodes, the etcd
// cluster first, then every manager. It enrolls nobody yet.
func StartManaged(ctx context.Context, l *lab.Lab, binary string) (*Managed, error) {
	if l.Manager == nil {
		return nil, errors.New("the lab has no manager node (lab.Config.Manager)")
	}
	m := &Managed{Lab: l, Binary: binary, agents: map[string]*lab.Process{}, managers: make([]*lab.Process, len(l.Managers))}
	if len(l.Managers) > 1 {
		var members []etcdlab.Member
		for i, node := range l.Managers {
			members = append(members, etcdlab.Member{
				Name:    fmt.Sprintf("etcd%d", i+1),
				Client:  netip.AddrPortFrom(node.Public.Addr(), EtcdClientPort).String(),
				Peer:    netip.AddrPortFrom(node.Public.Addr(), EtcdPeerPort).String(),
				Command: node.Command,
			})
		}
		c, err := etcdlab.Start(ctx, etcdlab.Config{Members: members, Dir: filepath.Join(l.Dir, "etcd"), Token: "fednet-lab-" + l.Name, Dial: l.Manager.DialContext})
		if err != nil {
			return nil, fmt.Errorf("starting the etcd cluster: %w", err)
		}
		m.etcd = c
	}
	if err := m.StartManager(ctx); err != nil {
		m.Stop(context.WithoutCancel(ctx))
		return nil, err
	}
	return m, nil
}

// URL is the (first) manager's address on the lab internet.
func (m *Managed) URL() string { return m.URLAt(0) }

// URLAt is the address of manager i (by lab.Lab.Managers).
func (m *Managed) URLAt(i int) string {
	return "https://" + netip.AddrPortFrom(m.Lab.Managers[i].Public.Addr(), ManagerPort).String()
}

// URLs are every manager's address.
func (m *Managed) URLs() []string {
	var out []string
	for i := range m.Lab.Managers {
		out = append(out, m.URLAt(i))
	}
	return out
}

// Etcd is the etcd cluster of a lab with several managers, else nil.
func (m *Managed) Etcd() *etcdlab.Cluster { return m.etcd }

// StartManager (re)starts every manager that is not running, on its data
// directory, and waits until each answers: the first before the others,
// which get copies of its CA and admin token (a federation has one).
func (m *Managed) StartManager(ctx context.Context) error {
	for i := range m.Lab.Managers {
		if i > 0 {
			if err := copyIdentity(m.Lab.Managers[0].Dir, m.Lab.Managers[i].Dir); err != nil {
				return err
			}
		}
		if p := m.Manager(i); p != nil && !p.Exited() {
			continue
		}
		if err := m.StartManagerAt(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

// StartManagerAt (re)starts manager i and waits until it answers.
func (m *Managed) StartManagerAt(ctx context.Context, i int) error {
	node := m.Lab.Managers[i]
	addr := netip.AddrPortFrom(node.Public.Addr(), ManagerPort).String()
	args := []string{"manager", "--data-dir", node.Dir, "--listen", addr, "--advertise", m.URLAt(i)}
	if m.etcd != nil {
		args = append(args, "--store", m.etcd.StoreURL())
		for j, u := range m.URLs() {
			if j != i {
				args = append(args, "--join-url", u)
			}
		}
	}
	p, err := m.Lab.Start(node, m.Binary, args...)
	if err != nil {
		return fmt.Errorf("starting %s: %w", node.Name, err)
	}
	m.mu.Lock()
	m.managers[i] = p
	m.mu.Unlock()
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := m.connect(ctx, i)
		if err == nil {
			return nil
		}
		if p.Exited() || time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s did not come up: %v; its log:\n%s", node.Name, err, tail(p.LogText(), 2000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Manager returns manager i's current process, or nil.
func (m *Managed) Manager(i int) *lab.Process {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.managers[i]
}

// StopManagerAt ends manager i (the others go on).
func (m *Managed) StopManagerAt(ctx context.Context, i int) error {
	if p := m.Manager(i); p != nil {
		return p.Stop(ctx)
	}
	return nil
}

// copyIdentity copies the CA and admin token of a manager's data directory
// into another's (created if missing), as an operator adding a manager to
// a federation does; files already there are left.
func copyIdentity(from, to string) error {
	if err := os.MkdirAll(to, 0o700); err != nil {
		return err
	}
	for _, f := range []string{"ca.crt", "ca.key", "admin.token"} {
		if _, err := os.Stat(filepath.Join(to, f)); err == nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join(from, f))
		if err != nil {
			return fmt.Errorf("copying the federation's CA to another manager: %w", err)
		}
		if err := os.WriteFile(filepath.Join(to, f), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// connect makes the admin client from the first manager's data directory
// and checks that manager i answers.
func (m *Managed) connect(ctx context.Context, i int) error {
	dir := m.Lab.Manager.Dir
	token, err := os.ReadFile(filepath.Join(dir, "admin.token"))
	if err != nil {
		return err
	}
	pemBytes, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		return err
	}
	block, _ := pem.Decode(pemBytes)
	if block == nil {
		return errors.New("ca.crt holds no PEM block")
	}
	if _, err := x509.ParseCertificate(block.Bytes); err != nil {
		return fmt.Errorf("ca.crt: %w", err)
	}
	m.mu.Lock()
	m.fingerprint = client.Fingerprint(block.Bytes)
	m.adminToken = string(trimSpace(token))
	m.mu.Unlock()
	one, err := client.New(client.Config{URL: m.URLAt(i), Token: string(trimSpace(token)), CAFingerprint: m.CAFingerprint(), DialContext: m.Dialer()})
	if err != nil {
		return err
	}
	_, err = one.Overview(ctx)
	one.Close()
	if err != nil {
		return err
	}
	c, err := m.ClientAs(string(trimSpace(token)))
	if err != nil {
		return err
	}
	m.mu.Lock()
	if m.Admin != nil {
		m.Admin.Close()
	}
	m.Admin = c
	m.mu.Unlock()
	return nil
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == ' ' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

// AdminToken is the federation's admin token.
func (m *Managed) AdminToken() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.adminToken
}

// CAFingerprint is the hex SHA-256 of the manager's CA certificate, as
// operators pass it (--ca-fingerprint).
func (m *Managed) CAFingerprint() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.fingerprint
}

// ClientAs returns a client of the manager that authenticates with token.
// The lab's addresses are not routable from this machine's own namespace
// (the lab never touches it), so the client opens its connections inside
// the manager's node, which reaches its own public address.
func (m *Managed) ClientAs(token string) (*client.Client, error) {
	m.mu.Lock()
	fp := m.fingerprint
	m.mu.Unlock()
	return client.New(client.Config{URLs: m.URLs(), Token: token, CAFingerprint: fp, DialContext: m.Dialer()})
}

// Dialer dials from the manager's namespace: the test process, and lab
// hosts (which have no route to the lab internet), reach the manager so.
func (m *Managed) Dialer() func(ctx context.Context, network, addr string) (net.Conn, error) {
	node := m.Lab.Manager
	return node.DialContext
}

// ManagerProcess is the first manager's process (its log, its exit), or
// nil.
func (m *Managed) ManagerProcess() *lab.Process {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.managers) == 0 {
		return nil
	}
	return m.managers[0]
}

// StopManager ends every manager process.
func (m *Managed) StopManager(ctx context.Context) error {
	var errs []error
	for i := range m.Lab.Managers {
		errs = append(errs, m.StopManagerAt(ctx, i))
	}
	return errors.Join(errs...)
}

// Apply puts a spec through the API and returns the manager's answer.
func (m *Managed) Apply(ctx context.Context, specYAML string) (*api.SpecResponse, error) {
	return m.Admin.PutSpec(ctx, specYAML, false)
}

// Enroll creates a join token for a gateway and starts its agent with it.
func (m *Managed) Enroll(ctx context.Context, gateway string) error {
	return m.EnrollWith(ctx, gateway)
}

// EnrollWith is Enroll with further agent arguments (--ipsec-vici).
func (m *Managed) EnrollWith(ctx context.Context, gateway string, extra ...string) error {
	node := m.Lab.Gateway(gateway)
	if node == nil {
		return fmt.Errorf("gateway %s is not in the lab", gateway)
	}
	tok, err := m.Admin.CreateToken(ctx, gateway, 10*time.Minute)
	if err != nil {
		return fmt.Errorf("join token for %s: %w", gateway, err)
	}
	// As an operator should: the token in a file only root reads, not on
	// the command line.
	file := filepath.Join(node.Dir, "join.token")
	if err := os.WriteFile(file, []byte(tok.Token+"\n"), 0o600); err != nil {
		return fmt.Errorf("join token for %s: %w", gateway, err)
	}
	return m.startAgent(node, append([]string{"--token-file", file}, extra...)...)
}

// StartAgent starts a gateway's agent again on its data directory (it
// needs no token once enrolled).
func (m *Managed) StartAgent(gateway string) error {
	node := m.Lab.Gateway(gateway)
	if node == nil {
		return fmt.Errorf("gateway %s is not in the lab", gateway)
	}
	return m.startAgent(node)
}

func (m *Managed) startAgent(node *lab.Node, args ...string) error {
	argv := append([]string{"agent", "--data-dir", AgentDir(node)}, args...)
	p, err := m.Lab.Start(node, m.Binary, argv...)
	if err != nil {
		return fmt.Errorf("starting the agent of %s: %w", node.Name, err)
	}
	m.mu.Lock()
	m.agents[node.Name] = p
	m.mu.Unlock()
	return nil
}

// AgentDir is a gateway agent's data directory in the lab.
func AgentDir(gw *lab.Node) string { return filepath.Join(gw.Dir, "agent") }

// Agent returns the current agent process of a gateway, or nil.
func (m *Managed) Agent(gateway string) *lab.Process {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.agents[gateway]
}

// StopAgent ends a gateway's agent; its tunnels stay.
func (m *Managed) StopAgent(ctx context.Context, gateway string) error {
	if p := m.Agent(gateway); p != nil {
		return p.Stop(ctx)
	}
	return nil
}

// Stop ends the agents, the managers and the etcd cluster.
func (m *Managed) Stop(ctx context.Context) error {
	m.mu.Lock()
	procs := slices.Clone(m.managers)
	for _, p := range m.agents {
		procs = append(procs, p)
	}
	if m.Admin != nil {
		m.Admin.Close()
	}
	m.mu.Unlock()
	var errs []error
	for _, p := range procs {
		if p != nil {
			errs = append(errs, p.Stop(ctx))
		}
	}
	if m.etcd != nil {
		errs = append(errs, m.etcd.Close())
	}
	return errors.Join(errs...)
}

// AgentsAlive returns an error naming the first agent that has exited.
func (m *Managed) AgentsAlive() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, p := range m.agents {
		if p.Exited() {
			return fmt.Errorf("the agent of %s exited (%v); its log:\n%s", name, p.Err(), tail(p.LogText(), 2000))
		}
	}
	return nil
}

// WaitApplied polls the manager until every named gateway that is enrolled
// and has a plan reports that it applied that plan, and returns how long
// that took. A gateway that has not enrolled yet, or left the spec, has
// nothing to wait for.
func (m *Managed) WaitApplied(ctx context.Context, gateways []string) (time.Duration, error) {
	start := time.Now()
	var last error
	for {
		gws, err := m.Admin.Gateways(ctx)
		if err == nil {
			behind := ""
			byName := map[string]api.Gateway{}
			for _, g := range gws {
				byName[g.Name] = g
			}
			for _, name := range gateways {
				g, ok := byName[name]
				if !ok || !g.Enrolled || g.Removed || g.PlanGeneration == 0 {
					continue // no agent, or no plan any more (left the spec)
				}
				if g.AppliedGeneration < g.PlanGeneration {
					behind = name + " (applied " + strconv.FormatInt(g.AppliedGeneration, 10) + " of " + strconv.FormatInt(g.PlanGeneration, 10) + ")"
					break
				}
			}
			if behind == "" {
				return time.Since(start), nil
			}
			err = errors.New(behind + " is behind")
		}
		last = err
		select {
		case <-ctx.Done():
			return time.Since(start), fmt.Errorf("waiting for the agents to apply: %v: %w", last, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Propagate applies specYAML and measures the time from the call until
// every gateway the change affects reports the new plan applied.
func (m *Managed) Propagate(ctx context.Context, specYAML string) (time.Duration, *api.SpecResponse, error) {
	start := time.Now()
	resp, err := m.Apply(ctx, specYAML)
	if err != nil {
		return 0, nil, err
	}
	if _, err := m.WaitApplied(ctx, resp.Affected); err != nil {
		return time.Since(start), resp, err
	}
	return time.Since(start), resp, nil
}

// WithUnderlayMTU returns specYAML with overlay.underlayMTU set: a change
// that touches every gateway's plan (tunnel MTU and MSS clamp). Comments
// are lost.
func WithUnderlayMTU(specYAML string, mtu int) (string, error) {
	var doc map[string]any
	if err := yaml.Unmarshal([]byte(specYAML), &doc); err != nil {
		return "", err
	}
	ov, _ := doc["overlay"].(map[string]any)
	if ov == nil {
		ov = map[string]any{}
	}
	ov["underlayMTU"] = mtu
	doc["overlay"] = ov
	b, err := yaml.Marshal(doc)
	return string(b), err
}
