package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fednet/fednet/internal/plan"
)

// run executes the command line and returns its standard output.
func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := NewRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

func TestKeygen(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "private.key")
	pub, err := run(t, "keygen", "--key", key)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(key)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v, want 0600", st.Mode().Perm())
	}
	if _, err := plan.ParseKey(strings.TrimSpace(pub)); err != nil {
		t.Errorf("keygen printed %q, not a public key: %v", pub, err)
	}
	again, err := run(t, "pubkey", "--key", key)
	if err != nil || again != pub {
		t.Errorf("pubkey printed %q (%v), keygen printed %q", again, err, pub)
	}
	priv, _ := os.ReadFile(key)
	if strings.Contains(string(priv), strings.TrimSpace(pub)) {
		t.Error("the private key file holds the public key")
	}
	if _, err := run(t, "keygen", "--key", key); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Errorf("overwriting a key: err %v, want a refusal that mentions --force", err)
	}
	if _, err := run(t, "keygen", "--key", key, "--force"); err != nil {
		t.Errorf("--force: %v", err)
	}
}

func TestPlanCommand(t *testing.T) {
	spec := filepath.Join("..", "..", "examples", "three-sites.yaml")
	text, err := run(t, "plan", "-f", spec)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"10.1.0.0/24", "10.1.0.254", "gateway aws-gw", "gateway onprem-gw", "mtu 1440"} {
		if !strings.Contains(text, want) {
			t.Errorf("plan output lacks %q", want)
		}
	}
	js, err := run(t, "plan", "-f", spec, "--gateway", "azure-gw", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	g, err := plan.Decode([]byte(js))
	if err != nil {
		t.Fatalf("plan -o json --gateway is not a plan the agent reads: %v", err)
	}
	if g.Name != "azure-gw" || len(g.Peers) != 2 {
		t.Errorf("got plan of %s with %d peers", g.Name, len(g.Peers))
	}
}

func TestErrorsNameTheFix(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("apiVersion: fednet/v1\nkind: Federation\nname: x\nsites:\n  - name: a\n    provider: aws\n    gateways: []\n    colour: blue\n"), 0o644)
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"plan"}, []string{"-f spec.yaml"}},
		{[]string{"plan", "-f", bad}, []string{"line 8", "sites[0].colour", "line 7"}},
		{[]string{"plan", "-f", filepath.Join(dir, "missing.yaml")}, []string{"reading spec"}},
		{[]string{"plan", "-f", filepath.Join("..", "..", "examples", "three-sites.yaml"), "-o", "xml"}, []string{"text or json"}},
		{[]string{"plan", "-f", filepath.Join("..", "..", "examples", "three-sites.yaml"), "--gateway", "nope"}, []string{"aws-gw", "--gateway"}},
		{[]string{"agent"}, []string{"--plan FILE is required"}},
		{[]string{"agent", "--plan", "x", "--wireguard", "bogus"}, []string{"auto, kernel or userspace"}},
		{[]string{"agent", "--plan", "x", "--key", filepath.Join(dir, "nokey")}, []string{"reading --key"}},
		{[]string{"keygen"}, []string{"--key FILE is required"}},
		{[]string{"lab", "demo", "--sites", "1"}, []string{"2 to 12"}},
		{[]string{"host", "join", "--data-dir", dir}, []string{"--network NAME is required"}},
		{[]string{"host", "join", "--data-dir", dir, "--network", "lan"}, []string{"has not joined yet", "--token-file"}},
		{[]string{"host", "join", "--data-dir", dir, "--network", "lan", "--address", "192.168.50.20"}, []string{"--address", "ADDRESS/LENGTH"}},
		{[]string{"host", "join", "--data-dir", dir, "--network", "lan", "--lan-address", "x"}, []string{"--lan-address"}},
		{[]string{"host", "leave", "--data-dir", dir}, []string{"has not joined"}},
		{[]string{"token", "create", "--site", "aws-eu"}, []string{"--site SITE and --network NETWORK"}},
		{[]string{"token", "create", "--gateway", "g", "--site", "aws-eu"}, []string{"not both"}},
	} {
		_, err := run(t, tc.args...)
		if err == nil {
			t.Errorf("%v: no error", tc.args)
			continue
		}
		if os.Geteuid() != 0 && tc.args[0] == "lab" {
			continue // refused for want of root before the flag is checked
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: error %q lacks %q", tc.args, err, w)
			}
		}
	}
}
