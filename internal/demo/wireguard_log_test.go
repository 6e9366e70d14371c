package demo_test

import (
	"bufio"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/lab"
)

// logWireGuard logs, for a failed test, each gateway's userspace WireGuard
// devices as their control sockets tell them (listen port, and per peer
// its endpoint, last handshake and bytes; no keys) and the tail of each
// device's log: whether the tunnels were up, and if not, why.
func logWireGuard(t *testing.T, l *lab.Lab) {
	t.Helper()
	for _, gw := range l.Gateways() {
		socks, _ := filepath.Glob(filepath.Join(gw.WireGuardDir(), "*.sock"))
		for _, s := range socks {
			var b strings.Builder
			c, err := net.DialTimeout("unix", s, time.Second)
			if err != nil {
				t.Logf("%s %s: %v", gw.Name, filepath.Base(s), err)
				continue
			}
			c.SetDeadline(time.Now().Add(2 * time.Second))
			io.WriteString(c, "get=1\n\n")
			sc := bufio.NewScanner(c)
			for sc.Scan() {
				k, _, _ := strings.Cut(sc.Text(), "=")
				switch k {
				case "listen_port", "endpoint", "last_handshake_time_sec", "rx_bytes", "tx_bytes", "errno":
					b.WriteString(" " + sc.Text())
				case "public_key":
					b.WriteString("\n  peer")
				}
			}
			c.Close()
			t.Logf("%s %s:%s", gw.Name, filepath.Base(s), b.String())
			if log, err := os.ReadFile(strings.TrimSuffix(s, ".sock") + ".log"); err == nil {
				if len(log) > 1500 {
					log = log[len(log)-1500:]
				}
				t.Logf("%s %s's log (tail):\n%s", gw.Name, filepath.Base(s), log)
			}
		}
	}
}
