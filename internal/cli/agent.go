package cli

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/fednet/fednet/internal/agent"
	"github.com/fednet/fednet/internal/dataplane"
	"github.com/fednet/fednet/internal/dataplane/ipsec"
	"github.com/fednet/fednet/internal/dataplane/wireguard"
	"github.com/fednet/fednet/internal/metrics"
	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/wgdev"
)

func newAgentCmd() *cobra.Command {
	var planFile, keyFile, wgMode string
	var once, down bool
	var resync time.Duration
	var haCfg agent.HAConfig
	var metricsListen string
	var m managedFlags
	cmd := &cobra.Command{
		Use:   "agent (--data-dir DIR [--token-file FILE] | --plan FILE --key FILE)",
		Short: "Apply a gateway's plan to this machine and keep it applied",
		Long: `Agent runs on a site's gateway. It applies the gateway's plan to the kernel:
the WireGuard interface and peers, addresses, routes, IP forwarding and the
fednet nftables table. It reads what is there first and changes only what
differs, so applying again changes nothing, and it changes only what fednet
owns: a plan that names another's interface or table, routes outside the
federation's prefixes or bridges the uplink is refused whole (docs/agent.md).
Stopping the agent leaves the tunnels up; --down removes what fednet made
(no key needed).

One reconcile loop, two plan sources. The loop applies the plan in force,
applies again on every new plan from its source, every --resync (drift repair,
e.g. a route someone deleted by hand), and runs the link probes for it. A plan
the agent cannot use (a newer plan format than this fednet reads, a broken
file) is refused: the plan in force stays, the refusal is logged and reported.
The source is either a manager or a plan file:

Managed mode (--data-dir DIR): the plan comes from a manager. On first start
the agent generates its WireGuard key in DIR/private.key (the private key never
leaves the machine), enrolls with the one-time join token from "fednet token
create" (--token-file FILE; --token TOKEN works too, but shows it in ps), and
keeps its credential in DIR/credential.json. It then watches its plan, applies
each new one, keeps the last one in DIR/plan.json and reports status every
--status-interval. A restarted agent re-applies DIR/plan.json at once, before
and without reaching the manager. When the
manager asks (fednet rotate-key), it rolls its key. The data plane stays as it
is, and the agent keeps retrying with backoff (logging at once, then at most
once a minute), while the manager:
  - cannot be reached;
  - answers 401, i.e. does not know the gateway's credential (its state was
    lost or restored from an older backup);
  - has no plan for the gateway (403 other than gateway_removed, 404), e.g.
    because the spec no longer lists it.
Only when the gateway is removed (fednet gateway remove: 403 gateway_removed)
does the agent exit, with status 1, leaving the data plane as it is. Once
enrolled, neither --token-file nor --token is needed.

--endpoint HOST:PORT is a note to the manager, not a setting: the agent sends
it when it enrolls, the manager stores it, shows it as the gateway's endpoint
(fednet get gateways) when the spec gives none, and logs a warning when it
differs from the spec's. Plans never use it: peers reach a gateway at its
spec's gateways[].endpoint (or not at all, for behindNAT). To change where
peers send, change the spec.

Static mode (--plan FILE --key FILE): the plan comes from a file written by
"fednet plan --gateway NAME -o json". The first plan must be good (else exit
status 1). The agent applies the file again when its content changes (checked
every second) and at once on SIGHUP.

Link probes and metrics (both modes): the agent answers link probes on its
transit address (UDP 51821) and probes every peer through the tunnel once a
second (RTT, loss, jitter; docs/probe.md). It answers available-bandwidth
probe streams on UDP 51822 of its transit address, and with
--bandwidth-interval estimates each link's available bandwidth on a schedule
(docs/bandwidth.md). It serves Prometheus metrics at
http://--metrics-listen/metrics (default ` + metrics.DefaultAgentListen + `; "" turns it off;
docs/metrics.md). docs/agent.md describes the loop and its sources.

WireGuard: the kernel module when the kernel has it, otherwise a userspace
device ("fednet wgdev", wireguard-go) in its own long-lived process, so that
agent restarts never drop a tunnel. Force one with --wireguard.`,
		Example: `  # managed: enroll once with a join token, then just restart with --data-dir
  fednet agent --data-dir /var/lib/fednet/agent --token-file join.token
  fednet agent --data-dir /var/lib/fednet/agent
  fednet agent --data-dir /var/lib/fednet/agent --down            # remove what the cached plan created

  # static: a plan file from "fednet plan --gateway NAME -o json"
  fednet agent --plan /etc/fednet/plan.json --key /etc/fednet/private.key
  fednet agent --plan plan.json --key private.key --once   # apply and exit
  fednet agent --plan plan.json --down                     # remove it all (no key needed)`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if m.dataDir != "" {
				m.ha = haCfg
				return runManagedAgent(cmd, m, wgMode, resync, once, down, planFile, keyFile, metricsListen)
			}
			if m.token != "" || m.tokenFile != "" || m.manager != "" || m.endpoint != "" {
				return errors.New("--token, --token-file, --manager and --endpoint need --data-dir DIR (managed mode), where the agent keeps its key and credential")
			}
			if planFile == "" {
				return errors.New("--plan FILE is required for a plan file (write one with: fednet plan -f spec.yaml --gateway NAME -o json); " +
					"or give --data-dir DIR (with --token-file FILE on first start) to get plans from a manager")
			}
			mode, err := wireguard.ParseMode(wgMode)
			if err != nil {
				return fmt.Errorf("--wireguard: %w", err)
			}
			// Taking a gateway down needs no key; given one, --down also
			// recognizes a tunnel interface made by a fednet from before
			// tunnel marks (its device holds the key).
			var priv plan.Key
			if !down || keyFile != "" {
				k, err := readPrivateKey(keyFile)
				if err != nil {
					return err
				}
				priv = plan.Key(k)
			}
			logger := log.New(os.Stderr, "", log.LstdFlags)
			dp, err := newDataplane(priv, mode, logger.Printf)
			if err != nil {
				return err
			}
			cfg := agent.Config{PlanFile: planFile, Dataplane: dp, Resync: resync, Logf: logger.Printf, HA: haCfg}
			ctx := cmd.Context()
			out := cmd.OutOrStdout()
			switch {
			case down:
				changes, err := agent.Down(ctx, cfg)
				printChanges(out, changes)
				return err
			case once:
				changes, err := agent.Once(ctx, cfg)
				printChanges(out, changes)
				return err
			}
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			reload := make(chan struct{}, 1)
			go func() {
				for range hup {
					select {
					case reload <- struct{}{}:
					default:
					}
				}
			}()
			cfg.Reload = reload
			if cfg.Bandwidth, err = m.bandwidthConfig(); err != nil {
				return err
			}
			var stop func()
			if cfg.Metrics, stop, err = serveAgentMetrics(ctx, metricsListen, logger.Printf); err != nil {
				return err
			}
			defer stop()
			logger.Printf("agent: applying %s", planFile)
			defer logStop(ctx, logger.Printf, func() (plan.Gateway, error) { return agent.LoadPlan(planFile) },
				fmt.Sprintf("fednet agent --plan %s --down", planFile))()
			return agent.Run(ctx, cfg)
		},
	}
	cmd.Flags().StringVar(&planFile, "plan", "", "plan file (JSON from fednet plan --gateway NAME -o json)")
	cmd.Flags().StringVar(&keyFile, "key", "", "WireGuard private key file (from fednet keygen)")
	cmd.Flags().StringVar(&wgMode, "wireguard", "auto", "WireGuard implementation: auto, kernel or userspace")
	cmd.Flags().StringVar(&ipsecSocket, "ipsec-vici", ipsec.DefaultSocket, "strongSwan charon's vici socket, for links on backend ipsec (docs/interop.md)")
	cmd.Flags().BoolVar(&once, "once", false, "apply the plan once and exit")
	cmd.Flags().BoolVar(&down, "down", false, "remove everything the plan created and exit")
	cmd.Flags().DurationVar(&resync, "resync", agent.DefaultResync, "how often to re-apply the plan to repair drift")
	cmd.Flags().StringVar(&metricsListen, "metrics-listen", metrics.DefaultAgentListen, "HOST:PORT of the Prometheus metrics endpoint (/metrics); \"\" disables it")
	cmd.Flags().StringVar(&m.dataDir, "data-dir", "", "managed mode: directory of the agent's key, credential and last plan (created 0700)")
	cmd.Flags().StringVar(&m.token, "token", "", "managed mode: join token from fednet token create (first start only; visible in ps, prefer --token-file)")
	cmd.Flags().StringVar(&m.tokenFile, "token-file", "", "managed mode: file holding the join token (first start only)")
	cmd.Flags().StringVar(&m.manager, "manager", "", "managed mode: manager URL, replacing the join token's (https://HOST:PORT; several managers of the federation comma-separated)")
	cmd.Flags().StringVar(&m.endpoint, "endpoint", "", "managed mode: this gateway's public HOST:PORT, sent at enrollment for the record only: the manager shows it and warns when it differs from the spec's; peers always use the spec's gateways[].endpoint")
	cmd.Flags().DurationVar(&m.bandwidthInterval, "bandwidth-interval", 0, "estimate every link's available bandwidth this often (e.g. 10m, jittered ±20%; at least 1m); 0 turns the schedule off")
	cmd.Flags().DurationVar(&m.statusInterval, "status-interval", agent.DefaultStatusInterval, "managed mode: how often to report status to the manager")
	cmd.Flags().BoolVar(&haCfg.Off, "no-failover", false, "do not elect the site's active gateway nor reroute around failed links and gateways (docs/resilience.md)")
	cmd.Flags().DurationVar(&haCfg.Interval, "failover-interval", 0, "interval of the failover echoes (default 50ms; a failure is seen after 6 missed)")
	cmd.Flags().DurationVar(&haCfg.HoldDown, "hold-down", 0, "how long a failed link or gateway must answer again before traffic moves back (default 10s)")
	cmd.MarkFlagsMutuallyExclusive("once", "down")
	cmd.MarkFlagsMutuallyExclusive("plan", "data-dir")
	cmd.MarkFlagsMutuallyExclusive("token", "token-file")
	return cmd
}

// managedFlags are the agent's managed-mode flags.
type managedFlags struct {
	dataDir, token, tokenFile, manager, endpoint string
	statusInterval                               time.Duration
	ha                                           agent.HAConfig
	// bandwidthInterval schedules available-bandwidth estimates (both
	// modes).
	bandwidthInterval time.Duration
}

// bandwidthConfig checks --bandwidth-interval.
func (m managedFlags) bandwidthConfig() (agent.BandwidthConfig, error) {
	if m.bandwidthInterval != 0 && m.bandwidthInterval < agent.MinBandwidthInterval {
		return agent.BandwidthConfig{}, fmt.Errorf("--bandwidth-interval %v: use 0 (off) or at least %v; each estimate loads the link for a second or so", m.bandwidthInterval, agent.MinBandwidthInterval)
	}
	return agent.BandwidthConfig{Interval: m.bandwidthInterval}, nil
}

// runManagedAgent runs "fednet agent --data-dir DIR".
func runManagedAgent(cmd *cobra.Command, m managedFlags, wgMode string, resync time.Duration, once, down bool, planFile, keyFile, metricsListen string) error {
	switch {
	case once:
		return errors.New("--once works with --plan only; a managed agent keeps running (stop it to leave the data plane as it is)")
	case keyFile != "":
		return fmt.Errorf("--key is for --plan mode; a managed agent keeps its key in %s", filepath.Join(m.dataDir, agent.KeyFile))
	case m.statusInterval <= 0:
		return fmt.Errorf("--status-interval %v: give a positive duration such as 5s", m.statusInterval)
	}
	mode, err := wireguard.ParseMode(wgMode)
	if err != nil {
		return fmt.Errorf("--wireguard: %w", err)
	}
	logger := log.New(cmd.ErrOrStderr(), "", log.LstdFlags)
	if down {
		cached, err := agent.LoadCachedPlan(m.dataDir)
		if err != nil {
			return err
		}
		// Down needs no key; the agent's, when there is one, also
		// recognizes a tunnel interface made by a fednet from before
		// tunnel marks.
		var priv plan.Key
		if path := filepath.Join(m.dataDir, agent.KeyFile); fileExists(path) {
			k, err := readPrivateKey(path)
			if err != nil {
				return err
			}
			priv = plan.Key(k)
		}
		dp, err := newDataplane(priv, mode, logger.Printf)
		if err != nil {
			return err
		}
		changes, err := dp.Down(cmd.Context(), cached.Plan)
		printChanges(cmd.OutOrStdout(), changes)
		return err
	}
	if m.tokenFile != "" {
		var err error
		if m.token, err = readTokenFile(m.tokenFile); err != nil {
			return err
		}
	}
	bw, err := m.bandwidthConfig()
	if err != nil {
		return err
	}
	mx, stop, err := serveAgentMetrics(cmd.Context(), metricsListen, logger.Printf)
	if err != nil {
		return err
	}
	defer stop()
	defer logStop(cmd.Context(), logger.Printf, func() (plan.Gateway, error) {
		cached, err := agent.LoadCachedPlan(m.dataDir)
		if err != nil {
			return plan.Gateway{}, err
		}
		return cached.Plan, nil
	}, fmt.Sprintf("fednet agent --data-dir %s --down", m.dataDir))()
	return agent.RunManaged(cmd.Context(), agent.ManagedConfig{
		Bandwidth: bw,
		Metrics:   mx,
		DataDir:   m.dataDir,
		JoinToken: m.token,
		Manager:   m.manager,
		Endpoint:  m.endpoint,
		NewDataplane: func(priv plan.Key) (dataplane.Dataplane, error) {
			return newDataplane(priv, mode, logger.Printf)
		},
		StatusInterval: m.statusInterval,
		Resync:         resync,
		HA:             m.ha,
		Logf:           logger.Printf,
	})
}

// logStop logs one line when ctx ends (SIGINT or SIGTERM): what the agent
// leaves running, from the plan applied gives, and the command that removes
// it. The returned function cancels the line (an agent that ends on its own
// says why itself); call it when the agent returns.
func logStop(ctx context.Context, logf func(string, ...any), applied func() (plan.Gateway, error), down string) (cancel func()) {
	return onStop(ctx, func() {
		cause := context.Cause(ctx)
		p, err := applied()
		if err != nil {
			logf("agent stopping (%v); no plan was applied, so nothing of fednet is left running here", cause)
			return
		}
		var tunnels []string
		for _, t := range p.Tunnels {
			tunnels = append(tunnels, t.Name)
		}
		logf("agent stopping (%v); left running as they are: tunnel %s with %d peers (a userspace tunnel keeps its fednet wgdev process), "+
			"%d routes, %d bridges and the nftables table %s; traffic keeps flowing on the last plan; %s removes them",
			cause, strings.Join(tunnels, ", "), len(p.Peers), len(p.Routes), len(p.Bridges), p.Firewall.Table, down)
	})
}

// newDataplane returns this machine's data plane with the gateway's
// private key (zero: enough for --down) and WireGuard mode.
func newDataplane(priv plan.Key, mode wireguard.Mode, logf func(string, ...any)) (dataplane.Dataplane, error) {
	return dataplane.NewLinux(dataplane.Config{WireGuard: wireguard.Config{PrivateKey: priv, Mode: mode},
		IPsec: ipsec.Config{Socket: ipsecSocket}, Logf: logf})
}

// ipsecSocket is the agent's --ipsec-vici: charon's vici socket.
var ipsecSocket = ipsec.DefaultSocket

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// serveAgentMetrics serves a new agent exporter on addr ("" disables the
// endpoint; the exporter is still returned). stop ends the server and
// waits for it.
func serveAgentMetrics(ctx context.Context, addr string, logf func(string, ...any)) (*metrics.Agent, func(), error) {
	mx := metrics.NewAgent()
	ctx, cancel := context.WithCancel(ctx)
	done, err := metrics.Serve(ctx, addr, mx.Handler(), logf)
	if err != nil {
		cancel()
		return nil, nil, err
	}
	return mx, func() { cancel(); <-done }, nil
}

func printChanges(w interface{ Write([]byte) (int, error) }, changes []dataplane.Change) {
	for _, c := range changes {
		fmt.Fprintln(w, c)
	}
	if len(changes) == 0 {
		fmt.Fprintln(w, "no changes")
	}
}

func newWgdevCmd() *cobra.Command {
	var tunFlag, aqmFlag, bindFlag, procsFlag string
	var fallbackPort uint16
	cmd := &cobra.Command{
		Use:   "wgdev IFNAME",
		Short: "Run a userspace WireGuard device (started by the agent when the kernel has no WireGuard)",
		Long: `Wgdev creates the TUN interface IFNAME and runs WireGuard on it in userspace
(wireguard-go), with the standard control socket /var/run/wireguard/IFNAME.sock
that "wg" and the agent configure it through. It runs until the interface is
deleted or it gets SIGTERM. The agent starts it by itself when needed; you
rarely run it by hand.

The TUN device (--tun, or ` + wgdev.TUNEnv + ` in the environment, which the agent
passes on): "offload" (the default) moves TCP, UDP and bridged networks' VXLAN
across the kernel boundary in super-packets of up to 64 KiB, with every
offload the kernel accepts; "no-tunnel" and "none" turn the VXLAN offload or
all offloads off, as an older kernel would; "wireguard-go" is wireguard-go's
own TUN device, as a standalone wireguard-go runs.

The UDP bind (--bind, or ` + wgdev.BindEnv + `): "batch" (the default) reads up to a
whole batch of datagrams per system call when they arrive one by one, as from
a path that does not merge them (in the lab: 1.2-1.4 times the TCP at 0.6-0.7
of the CPU per byte of wireguard-go's bind, docs/bench.md), and as
wireguard-go's when they arrive merged; "wireguard-go" is wireguard-go's own,
which reads two messages per call.

Queue management (--aqm, or ` + wgdev.AQMEnv + `): CoDel keeps the packets waiting
inside the device to a few milliseconds under load, dropping large packets of
the flows that fill the queue ("on", the default; "off"; or
"target=5ms,interval=100ms").

Threads (--procs, or ` + wgdev.ProcsEnv + `): by default half the CPUs run the
device's Go code at once, leaving the rest to the kernel's share of the work
(TUN and UDP system calls, forwarding); "0" gives one per CPU, as wireguard-go
runs (docs/bench.md).

With --tcp-fallback PORT, a peer whose UDP is blocked is reached over TLS on
TCP PORT instead (docs/interop.md): the device accepts such streams on PORT,
and dials a peer's PORT when a handshake sent over UDP goes unanswered for
3 s; it goes back to UDP when UDP answers again.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if tunFlag == "" {
				tunFlag = os.Getenv(wgdev.TUNEnv)
			}
			t, err := wgdev.ParseTUN(tunFlag)
			if err != nil {
				return fmt.Errorf("--tun: %w", err)
			}
			if aqmFlag == "" {
				aqmFlag = os.Getenv(wgdev.AQMEnv)
			}
			q, err := wgdev.ParseAQM(aqmFlag)
			if err != nil {
				return fmt.Errorf("--aqm: %w", err)
			}
			if procsFlag == "" {
				procsFlag = os.Getenv(wgdev.ProcsEnv)
			}
			if bindFlag == "" {
				bindFlag = os.Getenv(wgdev.BindEnv)
			}
			bind, err := wgdev.ParseBind(bindFlag)
			if err != nil {
				return fmt.Errorf("--bind: %w", err)
			}
			procs, err := wgdev.ParseProcs(procsFlag)
			if err != nil {
				return fmt.Errorf("--procs: %w", err)
			}
			logger := log.New(os.Stderr, "wgdev: ", log.LstdFlags)
			return wgdev.Serve(cmd.Context(), wgdev.Config{Name: args[0], TUN: t, AQM: q, Bind: bind, Procs: procs, FallbackPort: fallbackPort, Logf: logger.Printf})
		},
	}
	cmd.Flags().StringVar(&tunFlag, "tun", "", "TUN device: offload, no-tunnel, none or wireguard-go (default offload, or $"+wgdev.TUNEnv+")")
	cmd.Flags().StringVar(&aqmFlag, "aqm", "", "queue management: on, off, or target=DURATION,interval=DURATION (default on, or $"+wgdev.AQMEnv+")")
	cmd.Flags().StringVar(&bindFlag, "bind", "", "UDP bind: batch (fednet's: up to a whole batch per read when datagrams come one by one) or wireguard-go (default batch, or $"+wgdev.BindEnv+")")
	cmd.Flags().StringVar(&procsFlag, "procs", "", "threads running the device's Go code at once (GOMAXPROCS): a number, or 0 for one per CPU (default half the CPUs, or $"+wgdev.ProcsEnv+")")
	cmd.Flags().Uint16Var(&fallbackPort, "tcp-fallback", 0, "TCP port of the UDP-blocked fallback (TLS streams), 0 for none; the agent passes the plan's (443 by default)")
	return cmd
}
