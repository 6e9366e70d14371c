package nstest

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Ping is a ping running in a namespace, whose answers the test reads as
// they come: for counting what a fault costs.
type Ping struct {
	cmd  *exec.Cmd
	out  Buffer
	done chan struct{}
}

// Reply is one answered ping.
type Reply struct {
	Seq int
	At  time.Time // when the answer came (ping -D)
}

// StartPing pings addr from namespace ns every interval (at most 60 s)
// until Stop or the end of t.
func StartPing(t testing.TB, ns, addr string, interval time.Duration) *Ping {
	t.Helper()
	p := &Ping{done: make(chan struct{})}
	p.cmd = exec.Command("ip", "netns", "exec", ns, "ping", "-D", "-n",
		"-i", strconv.FormatFloat(interval.Seconds(), 'f', -1, 64), "-W", "1", "-w", "60", addr)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// Stop ends the ping.
func (p *Ping) Stop() {
	p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
}

// Output returns ping's output so far.
func (p *Ping) Output() string { return p.out.String() }

// Replies returns the answers so far, in order.
func (p *Ping) Replies() []Reply {
	var out []Reply
	sc := bufio.NewScanner(strings.NewReader(p.out.String()))
	for sc.Scan() {
		line := sc.Text()
		stamp, rest, ok := strings.Cut(strings.TrimPrefix(line, "["), "] ")
		_, seq, ok2 := strings.Cut(rest, "icmp_seq=")
		if !ok || !ok2 || !strings.Contains(rest, "bytes from") {
			continue
		}
		seq, _, _ = strings.Cut(seq, " ")
		n, err := strconv.Atoi(seq)
		f, err2 := strconv.ParseFloat(stamp, 64)
		if err != nil || err2 != nil {
			continue
		}
		out = append(out, Reply{Seq: n, At: time.Unix(0, int64(f*1e9))})
	}
	return out
}

// Lost counts the pings between the first and the last answer that got no
// answer.
func Lost(rs []Reply) int {
	if len(rs) == 0 {
		return 0
	}
	seen := map[int]bool{}
	for _, r := range rs {
		seen[r.Seq] = true
	}
	return rs[len(rs)-1].Seq - rs[0].Seq + 1 - len(seen)
}

// LongestGap returns the longest time between two answers: an outage
// plus one interval.
func LongestGap(rs []Reply) time.Duration {
	var gap time.Duration
	for i := 1; i < len(rs); i++ {
		gap = max(gap, rs[i].At.Sub(rs[i-1].At))
	}
	return gap
}

// After counts the answers that came after t.
func After(rs []Reply, t time.Time) int {
	n := 0
	for _, r := range rs {
		if r.At.After(t) {
			n++
		}
	}
	return n
}
