//go:build linux

package lab

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// How an impaired site's link is built (the kernel has tbf but no netem):
//
//   - Rate: a tbf qdisc on both ends of each of the site's gateway veths,
//     pub0 in the gateway (upload) and its port g<i> on the internet bridge
//     (download).
//   - Delay, jitter, loss: a delay line, a process of this program started
//     in the internet namespace (delayLineArg), that owns a TUN device
//     imp<k> (k: the site's place in the spec). Policy routing in the
//     internet namespace sends every packet from or to the site's public
//     addresses through imp<k>; the delay line holds each packet for its
//     delay (or drops it) and writes it back, and it is routed on from
//     there. With sites A and B both impaired, a packet from A to B crosses
//     A's line and then B's:
//
//     prio 1000+k  iif br0 from <gateway of k> lookup 100+k   upload
//     prio 2000+k  iif imp<k> to <gateway of k> lookup main   delivery after k's line
//     prio 3000+k  to <gateway of k> lookup 100+k             download
//     table 100+k  default dev imp<k>
//
// Clear removes the rules and qdiscs and stops the delay line by its PID,
// which a file in the state directory records, so a later program (the
// CLI) can clear what an earlier one set.

// delayLineArg, as a program's first argument, makes it a delay line (see
// init): `<exe> fednet-lab-delay-line TUN DELAY JITTER LOSS`.
const delayLineArg = "fednet-lab-delay-line"

// Rule priorities and table numbers of impaired sites (plus the site's
// index).
const (
	prioUpload   = 1000
	prioDeliver  = 2000
	prioDownload = 3000
	tableBase    = 100
)

// delayQueue bounds the packets a delay line holds; beyond it, it drops
// (tail drop), like a full router buffer.
const delayQueue = 1 << 16

func init() {
	// A program that imports the lab runs as a delay line when the lab
	// starts it as one; it never returns to the program's main.
	if len(os.Args) > 1 && os.Args[1] == delayLineArg {
		if err := runDelayLine(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "delay line:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// Impair shapes the internet link of every gateway of site as im says,
// replacing an earlier impairment of the site; a zero im clears it. It
// needs the lab's namespaces only (not the federation running). On failure
// the site is left unimpaired.
func (l *Lab) Impair(ctx context.Context, site string, im Impairment) error {
	if err := im.Validate(); err != nil {
		return err
	}
	k, gws, err := l.siteLink(site)
	if err != nil {
		return err
	}
	if err := l.Clear(ctx, site); err != nil {
		return err
	}
	if im.IsZero() {
		return nil
	}
	err = l.impair(ctx, site, k, gws, im)
	if err != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		return errors.Join(fmt.Errorf("impairing site %s: %w", site, err), l.Clear(cctx, site))
	}
	return nil
}

func (l *Lab) impair(ctx context.Context, site string, k int, gws []*Node, im Impairment) error {
	if im.Rate > 0 {
		for _, g := range gws {
			if err := setTbf(g, PublicInterface, im); err != nil {
				return err
			}
			if err := setTbf(l.Internet, internetPort(g), im); err != nil {
				return err
			}
		}
	}
	if im.delayed() {
		if err := l.startDelayLine(ctx, site, k, gws, im); err != nil {
			return err
		}
	}
	return os.WriteFile(l.impairFile(site, "state"), []byte(im.String()+"\n"), 0o600)
}

// Impairment returns a description of the site's current impairment as
// Impair recorded it ("none" when there is none).
func (l *Lab) Impairment(site string) (string, error) {
	if _, _, err := l.siteLink(site); err != nil {
		return "", err
	}
	b, err := os.ReadFile(l.impairFile(site, "state"))
	if errors.Is(err, os.ErrNotExist) {
		return "none", nil
	}
	return strings.TrimSpace(string(b)), err
}

// Clear removes the site's impairment: rate limits, policy rules and the
// delay line. Clearing an unimpaired site is a no-op.
func (l *Lab) Clear(ctx context.Context, site string) error {
	k, gws, err := l.siteLink(site)
	if err != nil {
		return err
	}
	var errs []error
	errs = append(errs, l.stopDelayLine(ctx, site))
	errs = append(errs, delRules(l.Internet, k))
	for _, g := range gws {
		errs = append(errs, delRootQdisc(g, PublicInterface), delRootQdisc(l.Internet, internetPort(g)))
	}
	if err := os.Remove(l.impairFile(site, "state")); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("clearing the impairment of site %s: %w", site, err)
	}
	return nil
}

// siteLink returns the site's index in the spec and its gateways.
func (l *Lab) siteLink(site string) (int, []*Node, error) {
	sites := l.Sites()
	k := slices.Index(sites, site)
	if k < 0 {
		return 0, nil, fmt.Errorf("no site %q in lab %q; sites are %s", site, l.Name, strings.Join(sites, ", "))
	}
	gws := l.SiteGateways(site)
	if len(gws) == 0 {
		return 0, nil, fmt.Errorf("site %q has no gateway, so no internet link to impair", site)
	}
	return k, gws, nil
}

// internetPort names a gateway's port on the internet bridge.
func internetPort(g *Node) string { return "g" + strconv.Itoa(g.gwIndex) }

// tunName names the delay line's TUN device of site k.
func tunName(k int) string { return "imp" + strconv.Itoa(k) }

// impairFile is a per-site file in the state directory ("pid", "state").
func (l *Lab) impairFile(site, what string) string {
	return filepath.Join(l.Dir, "impair-"+site+"."+what)
}

// setTbf replaces the root qdisc of link dev in node n by a token bucket.
func setTbf(n *Node, dev string, im Impairment) error {
	return onLink(n, dev, func(h *nsHandle, link netlink.Link) error {
		rate := uint64(im.Rate / 8) // bytes per second
		q := &netlink.Tbf{
			QdiscAttrs: netlink.QdiscAttrs{LinkIndex: link.Attrs().Index, Handle: netlink.MakeHandle(1, 0), Parent: netlink.HANDLE_ROOT},
			Rate:       rate,
			Limit:      uint32(im.limit()),
			Buffer:     netlink.Xmittime(rate, uint32(im.burst())),
		}
		if err := h.nl.QdiscReplace(q); err != nil {
			return fmt.Errorf("%s: rate limit on %s: %w", n.Name, dev, err)
		}
		return nil
	})
}

// delRootQdisc puts the default qdisc back on link dev of node n.
func delRootQdisc(n *Node, dev string) error {
	return onLink(n, dev, func(h *nsHandle, link netlink.Link) error {
		qs, err := h.nl.QdiscList(link)
		if err != nil {
			return fmt.Errorf("%s: qdiscs of %s: %w", n.Name, dev, err)
		}
		for _, q := range qs {
			if q.Attrs().Parent == netlink.HANDLE_ROOT && q.Type() == "tbf" {
				if err := h.nl.QdiscDel(q); err != nil {
					return fmt.Errorf("%s: removing the rate limit on %s: %w", n.Name, dev, err)
				}
			}
		}
		return nil
	})
}

// onLink runs fn with node n's namespace open and its link dev.
func onLink(n *Node, dev string, fn func(h *nsHandle, link netlink.Link) error) error {
	h, err := openNS(n.Namespace)
	if err != nil {
		return err
	}
	defer h.close()
	link, err := h.nl.LinkByName(dev)
	if err != nil {
		return fmt.Errorf("%s: link %s: %w", n.Name, dev, err)
	}
	return fn(h, link)
}

// startDelayLine starts site k's delay line, waits for its TUN device and
// routes the site's traffic through it.
func (l *Lab) startDelayLine(ctx context.Context, site string, k int, gws []*Node, im Impairment) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this program to run the delay line: %w", err)
	}
	dev := tunName(k)
	h, err := openNS(l.Internet.Namespace)
	if err != nil {
		return err
	}
	defer h.close()
	// The kernel removes the TUN device of a delay line just stopped
	// (Clear) after the process is gone, not with it: until then the new
	// line could not create its device and waitLink would find the old
	// one, which vanishes with the route through it.
	if err := waitLinkGone(ctx, h, dev); err != nil {
		return err
	}
	p, err := l.Start(l.Internet, exe, delayLineArg, dev, im.Delay.String(), im.Jitter.String(),
		strconv.FormatFloat(im.Loss, 'g', -1, 64))
	if err != nil {
		return err
	}
	if err := os.WriteFile(l.impairFile(site, "pid"), []byte(strconv.Itoa(p.PID)+"\n"), 0o600); err != nil {
		return errors.Join(err, p.Stop(ctx))
	}
	link, err := waitLink(ctx, h, dev, p)
	if err != nil {
		return err
	}
	if err := h.nl.LinkSetMTU(link, 65535); err != nil {
		return fmt.Errorf("delay line %s: MTU: %w", dev, err)
	}
	// Packets come back out of the TUN with their original sources; loose
	// reverse path filtering accepts them whatever the namespace's default.
	if err := inNamespace(h.ns, func() error {
		return sysctl("net/ipv4/conf/"+dev+"/rp_filter", "2", "net/ipv4/conf/"+dev+"/forwarding", "1")
	}); err != nil {
		return fmt.Errorf("delay line %s: %w", dev, err)
	}
	if err := h.nl.LinkSetUp(link); err != nil {
		return fmt.Errorf("delay line %s: bringing up: %w", dev, err)
	}
	table := tableBase + k
	if err := h.nl.RouteReplace(&netlink.Route{LinkIndex: link.Attrs().Index, Table: table,
		Dst: &net.IPNet{IP: net.IPv4zero, Mask: net.CIDRMask(0, 32)}}); err != nil {
		return fmt.Errorf("delay line %s: route: %w", dev, err)
	}
	for _, g := range gws {
		for _, r := range siteRules(k, g.Public.Addr()) {
			if err := h.nl.RuleAdd(r); err != nil {
				return fmt.Errorf("delay line %s: rule %s: %w", dev, r, err)
			}
		}
	}
	return nil
}

// siteRules returns the policy rules that send a gateway's traffic through
// site k's delay line (see the comment at the top).
func siteRules(k int, gw netip.Addr) []*netlink.Rule {
	host := &net.IPNet{IP: gw.AsSlice(), Mask: net.CIDRMask(32, 32)}
	up := netlink.NewRule()
	up.Priority, up.IifName, up.Src, up.Table = prioUpload+k, BridgeInterface, host, tableBase+k
	deliver := netlink.NewRule()
	deliver.Priority, deliver.IifName, deliver.Dst, deliver.Table = prioDeliver+k, tunName(k), host, unix.RT_TABLE_MAIN
	down := netlink.NewRule()
	down.Priority, down.Dst, down.Table = prioDownload+k, host, tableBase+k
	return []*netlink.Rule{up, deliver, down}
}

// delRules removes every policy rule of site k.
func delRules(n *Node, k int) error {
	h, err := openNS(n.Namespace)
	if err != nil {
		return err
	}
	defer h.close()
	rules, err := h.nl.RuleList(unix.AF_INET)
	if err != nil {
		return fmt.Errorf("listing rules: %w", err)
	}
	var errs []error
	for _, r := range rules {
		switch r.Priority {
		case prioUpload + k, prioDeliver + k, prioDownload + k:
			if err := h.nl.RuleDel(&r); err != nil {
				errs = append(errs, fmt.Errorf("removing rule %s: %w", r, err))
			}
		}
	}
	return errors.Join(errs...)
}

// waitLinkGone polls until no link dev exists (at most 5 s).
func waitLinkGone(ctx context.Context, h *nsHandle, dev string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		_, err := h.nl.LinkByName(dev)
		var notFound netlink.LinkNotFoundError
		if errors.As(err, &notFound) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("delay line %s: the device of the previous delay line is still there: %w", dev, ctx.Err())
		case <-tick.C:
		}
	}
}

// waitLink polls until the delay line has created its TUN device (at most
// 5 s), or fails if the process exits first.
func waitLink(ctx context.Context, h *nsHandle, dev string, p *Process) (netlink.Link, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if link, err := h.nl.LinkByName(dev); err == nil {
			return link, nil
		}
		select {
		case <-p.Done():
			return nil, fmt.Errorf("delay line exited: %v: %s", p.Err(), p.LogText())
		case <-ctx.Done():
			return nil, fmt.Errorf("delay line did not create %s: %w", dev, ctx.Err())
		case <-tick.C:
		}
	}
}

// stopDelayLine ends the site's delay line by the PID its file records,
// after checking that the PID is still a delay line in this lab's internet
// namespace (a PID can be reused).
func (l *Lab) stopDelayLine(ctx context.Context, site string) error {
	file := l.impairFile(site, "pid")
	b, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return fmt.Errorf("delay line PID file %s: %w", file, err)
	}
	if isDelayLine(pid, l.Internet.Namespace) {
		if err := killPID(ctx, pid); err != nil {
			return err
		}
	}
	return os.Remove(file)
}

// isDelayLine reports whether pid is a running delay line in namespace ns.
func isDelayLine(pid int, ns string) bool {
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || !strings.Contains(string(cmdline), "\x00"+delayLineArg+"\x00") {
		return false
	}
	want, err1 := statNS(filepath.Join(netnsDir, ns))
	have, err2 := statNS("/proc/" + strconv.Itoa(pid) + "/ns/net")
	return err1 == nil && err2 == nil && want == have
}

// killPID ends pid: SIGTERM, SIGKILL after StopTimeout, and waits until it
// is gone or a zombie (its parent reaps it).
func killPID(ctx context.Context, pid int) error {
	_ = syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(StopTimeout)
	killed := false
	for i := 0; i < 1000; i++ {
		if !running(pid) {
			return nil
		}
		if !killed && (time.Now().After(deadline) || ctx.Err() != nil) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			killed = true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("process %d did not exit", pid)
}

// running reports whether pid exists and is not a zombie.
func running(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(rest, "Z")
}

// runDelayLine is the delay line process: args are the TUN device name,
// the delay, the jitter and the loss probability. It runs until killed.
func runDelayLine(args []string) error {
	if len(args) != 4 {
		return fmt.Errorf("usage: %s TUN DELAY JITTER LOSS", delayLineArg)
	}
	delay, err1 := time.ParseDuration(args[1])
	jitter, err2 := time.ParseDuration(args[2])
	loss, err3 := strconv.ParseFloat(args[3], 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return err
	}
	fd, err := openTun(args[0])
	if err != nil {
		return err
	}
	s := &schedule{delay: delay, jitter: jitter, loss: loss, rng: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))}
	type packet struct {
		due time.Time
		b   []byte
	}
	q := make(chan packet, delayQueue)
	errc := make(chan error, 2)
	go func() {
		for p := range q {
			if d := time.Until(p.due); d > 0 {
				time.Sleep(d)
			}
			if _, err := unix.Write(fd, p.b); err != nil && !errors.Is(err, unix.EINVAL) {
				errc <- fmt.Errorf("writing to %s: %w", args[0], err)
				return
			}
		}
	}()
	go func() {
		buf := make([]byte, 1<<16)
		for {
			n, err := unix.Read(fd, buf)
			if err != nil {
				if errors.Is(err, unix.EINTR) {
					continue
				}
				errc <- fmt.Errorf("reading from %s: %w", args[0], err)
				return
			}
			due, ok := s.next(time.Now())
			if !ok {
				continue
			}
			select {
			case q <- packet{due: due, b: slices.Clone(buf[:n])}:
			default: // queue full: tail drop
			}
		}
	}()
	return <-errc
}

// openTun creates TUN device name (IP packets without a header) in the
// process's network namespace and returns its file descriptor. The device
// goes away when the process exits.
func openTun(name string) (int, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("opening /dev/net/tun: %w", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return -1, err
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("creating TUN device %s: %w", name, err)
	}
	return fd, nil
}

// CrossTraffic runs a UDP iperf3 flow of rate bit/s across the internet
// link of site's first gateway in direction dir, between that gateway and
// the internet namespace (the gateway's router address). rate counts
// frames on the link as Impairment.Rate does (the flow's UDP payload rate
// is lower by its headers). The gateway runs the iperf3 client, so a
// gateway firewall that admits only WireGuard still lets the flow in (it
// is established traffic). stop ends both processes by PID; it is safe to
// call more than once. The flow lasts at most an hour; (*Lab).Down ends it
// too.
func (l *Lab) CrossTraffic(ctx context.Context, site string, dir Direction, rate float64) (stop func() error, err error) {
	if rate < 8000 || rate > maxRate {
		return nil, fmt.Errorf("cross traffic rate %v bit/s: use 8kbit up to 100gbit", rate)
	}
	if dir != Upload && dir != Download {
		return nil, fmt.Errorf("cross traffic direction %v: use upload or download", dir)
	}
	_, gws, err := l.siteLink(site)
	if err != nil {
		return nil, err
	}
	g := gws[0]
	port := strconv.Itoa(5201 + int(iperfPort.Add(1)-1)%200)
	srv, err := l.Start(l.Internet, "iperf3", "-s", "-4", "-B", g.Via.String(), "-p", port)
	if err != nil {
		return nil, err
	}
	procs := []*Process{srv}
	stop = func() error {
		var errs []error
		for _, p := range slices.Backward(procs) {
			errs = append(errs, p.Stop(context.Background()))
		}
		return errors.Join(errs...)
	}
	exited := make(chan error, 1)
	go func() { <-srv.Done(); exited <- srv.Err() }()
	if err := waitListening(ctx, srv.PID, port, exited); err != nil {
		return nil, errors.Join(fmt.Errorf("cross traffic server: %w: %s", err, srv.LogText()), stop())
	}
	payload := float64(crossPayload) / float64(crossPayload+udpFrameOverhead)
	args := []string{"-c", g.Via.String(), "-4", "-u", "-p", port, "-l", strconv.Itoa(crossPayload),
		"-b", strconv.FormatFloat(rate*payload, 'f', 0, 64), "-t", "3600"}
	if dir == Download {
		args = append(args, "-R")
	}
	cli, err := l.Start(g, "iperf3", args...)
	if err != nil {
		return nil, errors.Join(err, stop())
	}
	procs = append(procs, cli)
	return stop, nil
}
