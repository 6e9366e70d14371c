package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/fednet/fednet/internal/dataplane/nstest"
)

// TestAgentDownNeedsNoKey: in a fresh namespace, `fednet agent --plan P
// --key K --once` sets a gateway up (userspace WireGuard); `fednet agent
// --plan P --down` takes it down without the key, and `--plan P --key K
// --down` does too (issue 10, item 7).
func TestAgentDownNeedsNoKey(t *testing.T) {
	if !nstest.Inner(t) {
		nstest.New(t).Run(t, nstest.EnvWGDev+"=1")
		return
	}
	dir := t.TempDir()
	key := filepath.Join(dir, "private.key")
	if _, err := run(t, "keygen", "--key", key); err != nil {
		t.Fatal(err)
	}
	planJSON, err := run(t, "plan", "-f", filepath.Join("..", "..", "examples", "three-sites.yaml"), "--gateway", "aws-gw", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	planFile := filepath.Join(dir, "plan.json")
	if err := os.WriteFile(planFile, []byte(planJSON), 0o644); err != nil {
		t.Fatal(err)
	}
	up := func() {
		t.Helper()
		out, err := run(t, "agent", "--plan", planFile, "--key", key, "--once", "--wireguard", "userspace")
		if err != nil {
			t.Fatalf("agent --once: %v\n%s", err, out)
		}
		if _, err := netlink.LinkByName("fed0"); err != nil {
			t.Fatalf("agent --once made no fed0: %v\n%s", err, out)
		}
	}
	for _, args := range [][]string{
		{"agent", "--plan", planFile, "--down"},
		{"agent", "--plan", planFile, "--key", key, "--down"},
	} {
		up()
		out, err := run(t, args...)
		if err != nil {
			t.Errorf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
		if !strings.Contains(out, "ip link del fed0\n") || !strings.Contains(out, "nft delete table inet fednet\n") {
			t.Errorf("%s printed:\n%s", strings.Join(args, " "), out)
		}
		if _, err := netlink.LinkByName("fed0"); err == nil {
			t.Errorf("%s left fed0", strings.Join(args, " "))
		}
	}
	// Down of a machine that has nothing is no error either.
	if out, err := run(t, "agent", "--plan", planFile, "--down"); err != nil || out != "no changes\n" {
		t.Errorf("second --down = %q, %v", out, err)
	}
}
