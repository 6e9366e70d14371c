//go:build linux

package lab

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
)

// TestImpair shapes sites' internet links of a real lab and checks what
// crosses them: added delay in ping round trips, loss, a tbf rate limit
// on iperf3, cross traffic sharing the limit, and that Clear puts
// everything back and stops the delay line.
func TestImpair(t *testing.T) {
	needRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	l, err := Up(ctx, Config{Federation: threeSites(), Name: testName("i"), HostsPerSite: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Down(context.Background()) })
	aws, azure := l.Gateway("aws-gw"), l.Gateway("azure-gw")
	to := azure.Public.Addr()

	ping := func(count int, interval time.Duration) PingResult {
		t.Helper()
		r, err := Ping(ctx, aws, to, count, interval)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	base := ping(5, 100*time.Millisecond)
	if base.Received == 0 || base.Avg > 20*time.Millisecond {
		t.Fatalf("unimpaired underlay: %v", base)
	}

	t.Run("Delay", func(t *testing.T) {
		if err := l.Impair(ctx, azure.Site, Impairment{Delay: 50 * time.Millisecond, Jitter: 2 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
		r := ping(5, 100*time.Millisecond)
		// 50 ms each way on azure's link: about 100 ms added.
		if r.Received == 0 || r.Min < 90*time.Millisecond || r.Max > time.Second {
			t.Errorf("with 50 ms delay on azure's link: %v, want round trips of about 100 ms", r)
		}
		if got, _ := l.Impairment(azure.Site); got != "delay 50ms, jitter 2ms" {
			t.Errorf("Impairment(azure) = %q", got)
		}
		// A second site's line adds to the first: 50+20 ms each way.
		if err := l.Impair(ctx, aws.Site, Impairment{Delay: 20 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
		if r := ping(3, 100*time.Millisecond); r.Received == 0 || r.Min < 130*time.Millisecond {
			t.Errorf("with 20 ms on aws and 50 ms on azure: %v, want round trips of about 140 ms", r)
		}
	})

	// Replacing an impairment stops the old delay line and starts a new
	// one on a device of the same name, which the kernel removes a moment
	// after the old process is gone: each new delay must still be on the
	// path, replacement after replacement (as bench's delay sweep does).
	t.Run("Replace", func(t *testing.T) {
		for _, d := range []time.Duration{5, 10, 25, 50, 100} {
			d *= time.Millisecond
			if err := l.Impair(ctx, azure.Site, Impairment{Delay: d}); err != nil {
				t.Fatalf("delay %v: %v", d, err)
			}
			if r := ping(2, 50*time.Millisecond); r.Received == 0 || r.Min < 2*d-2*time.Millisecond {
				t.Fatalf("after replacing the impairment by %v each way on azure's link and 20 ms on aws's: %v, want round trips above %v", d, r, 2*d)
			}
		}
	})

	t.Run("Clear", func(t *testing.T) {
		pid := readPID(t, l, azure.Site)
		for _, s := range []string{aws.Site, azure.Site} {
			if err := l.Clear(ctx, s); err != nil {
				t.Fatal(err)
			}
		}
		if running(pid) {
			t.Errorf("delay line %d still runs after Clear", pid)
		}
		if r := ping(5, 100*time.Millisecond); r.Received == 0 || r.Min > 20*time.Millisecond {
			t.Errorf("after Clear: %v, want the unimpaired round trip", r)
		}
		h, err := openNS(l.Internet.Namespace)
		if err != nil {
			t.Fatal(err)
		}
		defer h.close()
		rules, _ := h.nl.RuleList(netlink.FAMILY_V4)
		for _, r := range rules {
			if r.Priority >= prioUpload && r.Priority < prioDownload+100 {
				t.Errorf("rule left after Clear: %v", r)
			}
		}
		if _, err := h.nl.LinkByName(tunName(1)); err == nil {
			t.Errorf("TUN device %s left after Clear", tunName(1))
		}
		if got, _ := l.Impairment(azure.Site); got != "none" {
			t.Errorf("Impairment(azure) after Clear = %q", got)
		}
	})

	t.Run("Loss", func(t *testing.T) {
		if err := l.Impair(ctx, azure.Site, Impairment{Loss: 0.2}); err != nil {
			t.Fatal(err)
		}
		defer l.Clear(ctx, azure.Site)
		// 20 % each way loses 1-0.8² = 36 % of exchanges.
		r := ping(100, 10*time.Millisecond)
		if loss := r.Loss(); loss < 0.15 || loss > 0.6 {
			t.Errorf("with 20%% loss each way: %v (%.0f%% lost), want about 36%%", r, 100*loss)
		}
	})

	t.Run("Rate", func(t *testing.T) {
		const rate = 20e6
		if err := l.Impair(ctx, azure.Site, Impairment{Rate: rate}); err != nil {
			t.Fatal(err)
		}
		defer l.Clear(ctx, azure.Site)
		tp, err := Iperf3(ctx, aws, azure, to, 2*time.Second, 1)
		if err != nil {
			t.Fatal(err)
		}
		if tp.Mbps > rate/1e6*1.1 || tp.Mbps < rate/1e6*0.3 {
			t.Errorf("TCP through a 20 Mbit/s limit: %v", tp)
		}
		if !strings.Contains(qdiscs(t, l.Internet, internetPort(azure)), "tbf") || !strings.Contains(qdiscs(t, azure, PublicInterface), "tbf") {
			t.Errorf("no tbf on both ends of azure's link")
		}
		// UDP cross traffic at half the limit into azure leaves TCP about
		// the other half.
		stop, err := l.CrossTraffic(ctx, azure.Site, Download, rate/2)
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		// TCP from azure to aws would be upload; download is aws to azure.
		tp2, err := Iperf3(ctx, aws, azure, to, 2*time.Second, 1)
		if err != nil {
			t.Fatal(err)
		}
		if tp2.Mbps > rate/1e6*0.8 {
			t.Errorf("TCP beside 10 Mbit/s of cross traffic in a 20 Mbit/s link: %v, want clearly less than the limit", tp2)
		}
		if err := stop(); err != nil {
			t.Error(err)
		}
		t.Logf("TCP alone %.1f Mbit/s, beside cross traffic %.1f Mbit/s (limit 20)", tp.Mbps, tp2.Mbps)
	})
}

// readPID reads the site's delay-line PID file.
func readPID(t *testing.T, l *Lab, site string) int {
	t.Helper()
	b, err := os.ReadFile(l.impairFile(site, "pid"))
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	for _, c := range strings.TrimSpace(string(b)) {
		pid = pid*10 + int(c-'0')
	}
	return pid
}

// qdiscs lists the qdisc types on link dev of node n.
func qdiscs(t *testing.T, n *Node, dev string) string {
	t.Helper()
	out, err := n.Run(context.Background(), "tc", "qdisc", "show", "dev", dev)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
