package neighbor

import (
	"context"
	"strings"
	"testing"
)

// Run and Leave say what is missing before touching the network or the
// kernel.
func TestRunAndLeaveNeedWhatTheySay(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	tests := []struct {
		name string
		run  func() error
		msg  string
	}{
		{"no data dir", func() error { return Run(ctx, Config{Network: "lan"}) }, "--data-dir is required"},
		{"no network", func() error { return Run(ctx, Config{DataDir: dir}) }, "--network NAME is required"},
		{"no token", func() error { return Run(ctx, Config{DataDir: dir, Network: "lan"}) }, "has not joined yet: give the host token with --token-file"},
		{"bad token", func() error { return Run(ctx, Config{DataDir: dir, Network: "lan", Token: "nope"}) }, "host token:"},
		{"leave before joining", func() error { _, err := Leave(ctx, Config{DataDir: dir}); return err }, "this host has not joined"},
		{"other network", func() error {
			if err := writeJSON(dir, IdentityFile, Identity{Host: "web1", Network: "lan"}); err != nil {
				return err
			}
			return Run(ctx, Config{DataDir: dir, Network: "other"})
		}, "this host joined network lan, not other"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.run(); err == nil || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error = %v, want %q", err, tt.msg)
			}
		})
	}
}
