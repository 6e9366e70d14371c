package lab

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net/netip"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// PingResult is what one run of ping reported.
type PingResult struct {
	Sent, Received int
	// RTTs are the round-trip times of the replies in arrival order
	// (duplicates left out).
	RTTs []time.Duration
	// Min, Avg, Max and Mdev are ping's own summary (zero without replies).
	Min, Avg, Max, Mdev time.Duration
}

// Loss returns the fraction of probes without a reply, 0 to 1 (1 when
// nothing was sent).
func (r PingResult) Loss() float64 {
	if r.Sent == 0 {
		return 1
	}
	return 1 - float64(r.Received)/float64(r.Sent)
}

// String summarises the result like ping's last lines.
func (r PingResult) String() string {
	return fmt.Sprintf("%d sent, %d received, rtt min/avg/max/mdev %v/%v/%v/%v", r.Sent, r.Received, r.Min, r.Avg, r.Max, r.Mdev)
}

// Commander runs programs somewhere: a lab Node runs them in its
// namespace; other implementations (fednet bench on a live federation)
// run them on this machine. String names the place in errors.
type Commander interface {
	Command(ctx context.Context, name string, args ...string) *exec.Cmd
	String() string
}

// Ping sends count ICMP echo requests, interval apart, from node from to
// address to with iputils ping, and waits at most a second for the last
// reply. Lost probes are not an error (see Loss); an error means ping
// could not run or reported no summary (for example "Network is
// unreachable"). Intervals below 200 ms need root. ctx bounds the run,
// which never lasts longer than count*interval plus a few seconds.
func Ping(ctx context.Context, from Commander, to netip.Addr, count int, interval time.Duration) (PingResult, error) {
	if count < 1 {
		return PingResult{}, fmt.Errorf("ping: count %d: send at least 1", count)
	}
	if interval <= 0 {
		interval = time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(count)*interval+5*time.Second)
	defer cancel()
	args := []string{"-n", "-c", strconv.Itoa(count), "-i", strconv.FormatFloat(interval.Seconds(), 'f', -1, 64), "-W", "1", to.String()}
	var out bytes.Buffer
	cmd := from.Command(ctx, "ping", args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	runErr := cmd.Run() // exit status 1 means lost replies; the summary says how many
	r, err := parsePing(out.String())
	if err != nil {
		if runErr != nil {
			return r, fmt.Errorf("ping %s from %s: %w: %s", to, from, runErr, tail(out.String(), 500))
		}
		return r, fmt.Errorf("ping %s from %s: %w", to, from, err)
	}
	return r, nil
}

var (
	pingReplyRE   = regexp.MustCompile(`icmp_seq=\d+ .*time=([0-9.]+) ms`)
	pingSummaryRE = regexp.MustCompile(`(\d+) packets transmitted, (\d+) (?:packets )?received`)
	pingRTTRE     = regexp.MustCompile(`= ([0-9.]+)/([0-9.]+)/([0-9.]+)/([0-9.]+) ms`)
)

// parsePing reads iputils ping output.
func parsePing(out string) (PingResult, error) {
	var r PingResult
	summary := false
	for _, line := range strings.Split(out, "\n") {
		if m := pingReplyRE.FindStringSubmatch(line); m != nil && !strings.Contains(line, "DUP!") {
			r.RTTs = append(r.RTTs, ms(m[1]))
			continue
		}
		if m := pingSummaryRE.FindStringSubmatch(line); m != nil {
			r.Sent, _ = strconv.Atoi(m[1])
			r.Received, _ = strconv.Atoi(m[2])
			summary = true
			continue
		}
		if m := pingRTTRE.FindStringSubmatch(line); m != nil && strings.HasPrefix(strings.TrimSpace(line), "rtt") {
			r.Min, r.Avg, r.Max, r.Mdev = ms(m[1]), ms(m[2]), ms(m[3]), ms(m[4])
		}
	}
	if !summary {
		return r, fmt.Errorf("no summary in ping output")
	}
	return r, nil
}

// ms converts a decimal count of milliseconds to a duration.
func ms(s string) time.Duration {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) {
		return 0
	}
	return time.Duration(v * float64(time.Millisecond))
}
