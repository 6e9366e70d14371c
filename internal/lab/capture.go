package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// captureSnaplen is how many bytes of each frame a capture keeps: enough
// for the Ethernet, IP, UDP and WireGuard headers.
const captureSnaplen = 256

// Capture is a running tcpdump on the internet router's bridge, inbound
// only: it records every packet a gateway sends to the internet exactly
// once (gateways reach each other only through the router; see Routers),
// and not the router's forwarded copy.
type Capture struct {
	path string
	proc *Process

	mu      sync.Mutex
	stopped bool
	dropped int
}

// StartCapture starts tcpdump on the internet bridge of l, writing a pcap
// under the state directory's captures/, and returns once tcpdump captures
// (ctx bounds that wait, at most 10 s). The capture runs until Stop or
// until the lab goes down.
func StartCapture(ctx context.Context, l *Lab) (*Capture, error) {
	return StartCaptureOn(ctx, l, l.Internet, BridgeInterface, "-Q", "in")
}

// StartCaptureOn is StartCapture on any interface of any lab node, such as
// a host's segment interface; args are further tcpdump options or a
// filter expression.
func StartCaptureOn(ctx context.Context, l *Lab, n *Node, iface string, args ...string) (*Capture, error) {
	path := ""
	for i := 1; ; i++ {
		path = filepath.Join(l.Dir, "captures", n.Name+"-"+strconv.Itoa(i)+".pcap")
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err == nil {
			f.Close()
			break
		}
		if !os.IsExist(err) {
			return nil, fmt.Errorf("capture file: %w", err)
		}
	}
	// -Z root: tcpdump must not drop to its own user, which cannot write
	// the state directory. --immediate-mode and -U: every packet reaches
	// the file as it arrives, so Stop loses nothing.
	cmd := append([]string{"-i", iface, "-n", "-U", "--immediate-mode",
		"-s", strconv.Itoa(captureSnaplen), "-Z", "root", "-w", path}, args...)
	p, err := l.Start(n, "tcpdump", cmd...)
	if err != nil {
		return nil, err
	}
	c := &Capture{path: path, proc: p}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !strings.Contains(p.LogText(), "listening on") {
		select {
		case <-p.Done():
			return nil, fmt.Errorf("tcpdump on %s of %s exited: %v: %s", iface, n, p.Err(), p.LogText())
		case <-ctx.Done():
			_ = p.Stop(context.Background())
			return nil, fmt.Errorf("tcpdump on %s of %s did not start: %w: %s", iface, n, ctx.Err(), p.LogText())
		case <-tick.C:
		}
	}
	return c, nil
}

// Path returns the pcap file the capture writes.
func (c *Capture) Path() string { return c.path }

// Dropped returns how many packets the kernel dropped before tcpdump read
// them, as tcpdump reported on exit (valid after Stop).
func (c *Capture) Dropped() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dropped
}

var droppedRE = regexp.MustCompile(`(\d+) packets? dropped by kernel`)

// Stop waits until the capture file has stopped growing (at most 2 s), ends
// tcpdump and returns the pcap path. Calling Stop again returns the path.
func (c *Capture) Stop() (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return c.path, nil
	}
	c.stopped = true
	// Let packets in flight reach the file: wait for 100 ms without growth.
	deadline := time.Now().Add(2 * time.Second)
	last, still := int64(-1), 0
	for time.Now().Before(deadline) && still < 5 {
		st, err := os.Stat(c.path)
		if err != nil {
			break
		}
		if st.Size() == last {
			still++
		} else {
			last, still = st.Size(), 0
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := c.proc.Signal(syscall.SIGINT); err != nil {
		return c.path, err
	}
	select {
	case <-c.proc.Done():
	case <-time.After(StopTimeout):
		if err := c.proc.Stop(context.Background()); err != nil {
			return c.path, fmt.Errorf("stopping tcpdump: %w", err)
		}
	}
	if m := droppedRE.FindStringSubmatch(c.proc.LogText()); m != nil {
		c.dropped, _ = strconv.Atoi(m[1])
	}
	return c.path, nil
}
