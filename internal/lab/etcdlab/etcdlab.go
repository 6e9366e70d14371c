// Package etcdlab runs real etcd servers (the etcd binary: Debian's
// etcd-server package, which make deps installs, or the upstream release)
// for tests, the control-plane bench and the lab: one member or a cluster,
// each member a process on addresses the caller gives (loopback, or a lab
// node's address with the process inside the node's namespace). Members
// can be stopped, killed and started again; Close stops every one and
// removes their data.
package etcdlab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// Binary returns the path of the etcd server binary, or an error saying how
// to install it.
func Binary() (string, error) {
	for _, p := range []string{"etcd", "/usr/bin/etcd", "/usr/local/bin/etcd"} {
		if path, err := exec.LookPath(p); err == nil {
			return path, nil
		}
	}
	return "", errors.New("no etcd binary found: install Debian's etcd-server package (make deps does, as root) or put the upstream etcd release on PATH")
}

// Member says where one member runs.
type Member struct {
	// Name is the member's name (unique in the cluster).
	Name string
	// Client and Peer are the HOST:PORT it serves clients and peers on;
	// port 0 picks a free loopback port (Client and Peer must then be on
	// 127.0.0.1).
	Client, Peer string
	// Command, when set, makes the command that runs the member (to run
	// it inside a network namespace); exec.CommandContext when nil.
	Command func(ctx context.Context, name string, args ...string) *exec.Cmd
}

// Config is a cluster to start.
type Config struct {
	// Members of the cluster; one is a single-member cluster. Required.
	Members []Member
	// Dir holds each member's data directory and log. Required.
	Dir string
	// Token is the cluster's initial token (keeps two labs' clusters
	// apart); "fednet" when empty.
	Token string
	// MaxTxnOps raises etcd's bound on the operations of a transaction
	// (--max-txn-ops); etcd's default 128 when zero.
	MaxTxnOps int
	// Dial, when set, opens this process's connections to the members
	// (health checks, Client): for members in a namespace this one has
	// no route into.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Cluster is a running etcd cluster. Its methods are safe for concurrent
// use.
type Cluster struct {
	cfg     Config
	binary  string
	members []Member

	mu    sync.Mutex
	procs map[string]*proc
}

type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// Start starts every member and waits until the cluster answers (a read
// through all endpoints), at most a minute or until ctx ends. On failure
// it stops what it started and says why, with the end of the members'
// logs.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	if len(cfg.Members) == 0 || cfg.Dir == "" {
		return nil, errors.New("etcdlab: Members and Dir are required")
	}
	if cfg.Token == "" {
		cfg.Token = "fednet"
	}
	c := &Cluster{cfg: cfg, binary: bin, procs: map[string]*proc{}}
	for _, m := range cfg.Members {
		var err error
		if m.Client, err = freeAddr(m.Client); err != nil {
			return nil, err
		}
		if m.Peer, err = freeAddr(m.Peer); err != nil {
			return nil, err
		}
		c.members = append(c.members, m)
	}
	for _, m := range c.members {
		if err := c.start(ctx, m, true); err != nil {
			c.Close()
			return nil, err
		}
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := c.WaitHealthy(wctx); err != nil {
		logs := c.logs()
		c.Close()
		return nil, fmt.Errorf("etcd cluster did not come up: %w\n%s", err, logs)
	}
	return c, nil
}

// freeAddr returns addr, with port 0 replaced by a free port.
func freeAddr(addr string) (string, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("etcdlab: address %q: %w", addr, err)
	}
	if port != "0" {
		return addr, nil
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", fmt.Errorf("etcdlab: finding a free port on %s: %w", host, err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func (c *Cluster) dataDir(name string) string { return filepath.Join(c.cfg.Dir, name+".etcd") }
func (c *Cluster) logPath(name string) string { return filepath.Join(c.cfg.Dir, name+".log") }

// start runs member m; initial says whether the cluster is new.
func (c *Cluster) start(ctx context.Context, m Member, initial bool) error {
	var peers []string
	for _, o := range c.members {
		peers = append(peers, o.Name+"=http://"+o.Peer)
	}
	state := "new"
	if !initial {
		state = "existing"
	}
	args := []string{
		"--name", m.Name,
		"--data-dir", c.dataDir(m.Name),
		"--listen-client-urls", "http://" + m.Client,
		"--advertise-client-urls", "http://" + m.Client,
		"--listen-peer-urls", "http://" + m.Peer,
		"--initial-advertise-peer-urls", "http://" + m.Peer,
		"--initial-cluster", strings.Join(peers, ","),
		"--initial-cluster-state", state,
		"--initial-cluster-token", c.cfg.Token,
		// Lab networks are fast: elect quickly after a member dies.
		"--heartbeat-interval", "100",
		"--election-timeout", "1000",
		"--logger", "zap",
		"--log-outputs", "stderr",
		"--auto-compaction-mode", "revision",
		"--auto-compaction-retention", "10000",
	}
	if c.cfg.MaxTxnOps > 0 {
		args = append(args, "--max-txn-ops", fmt.Sprint(c.cfg.MaxTxnOps))
	}
	if err := os.MkdirAll(c.cfg.Dir, 0o700); err != nil {
		return fmt.Errorf("etcdlab: %w", err)
	}
	log, err := os.OpenFile(c.logPath(m.Name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("etcdlab: %w", err)
	}
	var cmd *exec.Cmd
	if m.Command != nil {
		cmd = m.Command(context.WithoutCancel(ctx), c.binary, args...)
	} else {
		cmd = exec.Command(c.binary, args...)
	}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), "ETCD_UNSUPPORTED_ARCH=") // quiet on amd64; needed on arm64 for 3.4
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("starting etcd member %s: %w", m.Name, err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		cmd.Wait()
		log.Close()
		close(p.done)
	}()
	c.mu.Lock()
	c.procs[m.Name] = p
	c.mu.Unlock()
	return nil
}

// Endpoints are the members' client URLs, in member order.
func (c *Cluster) Endpoints() []string {
	var out []string
	for _, m := range c.members {
		out = append(out, "http://"+m.Client)
	}
	return out
}

// StoreURL is the cluster as fednet manager --store takes it:
// etcd://h1:p1,h2:p2,...
func (c *Cluster) StoreURL() string {
	var hosts []string
	for _, m := range c.members {
		hosts = append(hosts, m.Client)
	}
	return "etcd://" + strings.Join(hosts, ",")
}

// Members returns the members' names, in order.
func (c *Cluster) Members() []string {
	var out []string
	for _, m := range c.members {
		out = append(out, m.Name)
	}
	return out
}

func (c *Cluster) member(name string) (Member, bool) {
	for _, m := range c.members {
		if m.Name == name {
			return m, true
		}
	}
	return Member{}, false
}

// PID returns the process id of a running member, 0 when it is not
// running.
func (c *Cluster) PID(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.procs[name]
	if !ok {
		return 0
	}
	select {
	case <-p.done:
		return 0
	default:
		return p.cmd.Process.Pid
	}
}

// Kill kills member name at once (SIGKILL), as a crash would, and waits
// for it to exit.
func (c *Cluster) Kill(name string) error { return c.signal(name, syscall.SIGKILL) }

// Stop stops member name (SIGTERM, SIGKILL after five seconds).
func (c *Cluster) Stop(name string) error { return c.signal(name, syscall.SIGTERM) }

func (c *Cluster) signal(name string, sig syscall.Signal) error {
	c.mu.Lock()
	p, ok := c.procs[name]
	c.mu.Unlock()
	if !ok {
		return fmt.Errorf("no etcd member %q is running", name)
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
		return nil
	case <-time.After(5 * time.Second):
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-p.done:
		return nil
	case <-time.After(5 * time.Second):
		return fmt.Errorf("etcd member %s (pid %d) did not exit", name, p.cmd.Process.Pid)
	}
}

// Restart starts member name again on its data directory (after Kill or
// Stop); it rejoins the cluster.
func (c *Cluster) Restart(ctx context.Context, name string) error {
	m, ok := c.member(name)
	if !ok {
		return fmt.Errorf("no etcd member %q", name)
	}
	if c.PID(name) != 0 {
		return fmt.Errorf("etcd member %s is running", name)
	}
	return c.start(ctx, m, false)
}

// Client returns a client of the cluster (all endpoints); the caller
// closes it.
func (c *Cluster) Client() (*clientv3.Client, error) { return c.client(c.Endpoints()...) }

func (c *Cluster) client(endpoints ...string) (*clientv3.Client, error) {
	cfg := clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
	if dial := c.cfg.Dial; dial != nil {
		cfg.DialOptions = []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return dial(ctx, "tcp", addr)
		})}
	}
	return clientv3.New(cfg)
}

// WaitHealthy waits until every running member answers a linearizable
// read, polling until ctx ends.
func (c *Cluster) WaitHealthy(ctx context.Context) error {
	var last error
	for {
		last = c.healthy(ctx)
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *Cluster) healthy(ctx context.Context) error {
	for _, m := range c.members {
		if c.PID(m.Name) == 0 {
			continue
		}
		cli, err := c.client("http://" + m.Client)
		if err != nil {
			return err
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err = cli.Get(rctx, "health")
		cancel()
		cli.Close()
		if err != nil {
			return fmt.Errorf("member %s: %w", m.Name, err)
		}
	}
	return nil
}

// Leader returns the name of the current leader, as the running members
// see it.
func (c *Cluster) Leader(ctx context.Context) (string, error) {
	cli, err := c.Client()
	if err != nil {
		return "", err
	}
	defer cli.Close()
	for _, m := range c.members {
		if c.PID(m.Name) == 0 {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := cli.Status(sctx, "http://"+m.Client)
		cancel()
		if err != nil {
			continue
		}
		if st.Leader == 0 {
			continue
		}
		ms, err := cli.MemberList(ctx)
		if err != nil {
			return "", fmt.Errorf("listing etcd members: %w", err)
		}
		for _, mm := range ms.Members {
			if mm.ID == st.Leader {
				return mm.Name, nil
			}
		}
	}
	return "", errors.New("no running etcd member knows a leader")
}

// logs returns the end of every member's log.
func (c *Cluster) logs() string {
	var b strings.Builder
	for _, m := range c.members {
		data, _ := os.ReadFile(c.logPath(m.Name))
		s := strings.TrimSpace(string(data))
		if len(s) > 3000 {
			s = "..." + s[len(s)-3000:]
		}
		fmt.Fprintf(&b, "--- etcd %s:\n%s\n", m.Name, s)
	}
	return b.String()
}

// Close kills every member and removes the data directories. It is safe
// to call more than once.
func (c *Cluster) Close() error {
	c.mu.Lock()
	procs := c.procs
	c.procs = map[string]*proc{}
	c.mu.Unlock()
	for _, p := range procs {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
		}
	}
	var errs []error
	for _, m := range c.members {
		errs = append(errs, os.RemoveAll(c.dataDir(m.Name)))
	}
	return errors.Join(errs...)
}
