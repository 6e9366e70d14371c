package demo_test

import (
	"strings"
	"testing"

	"github.com/fednet/fednet/internal/demo"
	"github.com/fednet/fednet/internal/external"
	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/spec"
)

// TestSwanctlConf translates the interop spec's external sites from the
// provider's vocabulary back into strongSwan's notation, and refuses
// what a provider would refuse.
func TestSwanctlConf(t *testing.T) {
	f, err := spec.Parse([]byte(demo.InteropSpecYAML))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		site string
		want []string
	}{
		{"aws-vpc", []string{"version = 2", "proposals = aes256gcm16-prfsha384-ecp384", "esp_proposals = aes256gcm16-ecp384",
			"local_ts = 10.1.1.0/24", "remote_ts = 0.0.0.0/0", "rekey_time = 28800s", "remote_addrs = 198.51.100.10"}},
		{"os-lab", []string{"version = 1", "proposals = aes128-sha1-modp1536", "local_ts = 10.4.0.0/24", "remote_ts = 10.5.0.0/24", "remote_addrs = 198.51.100.30"}},
	} {
		c, err := external.New(f, plan.Inputs{}, tc.site)
		if err != nil {
			t.Fatal(err)
		}
		conf, err := demo.SwanctlConf(c, "abcdefghij0123456789")
		if err != nil {
			t.Fatalf("%s: %v", tc.site, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(conf, w) {
				t.Errorf("%s: swanctl.conf lacks %q:\n%s", tc.site, w, conf)
			}
		}
		// A name the provider does not use is refused, not guessed.
		c.IKE[0].Encryption = "AES-999"
		if _, err := demo.SwanctlConf(c, "abcdefghij0123456789"); err == nil || !strings.Contains(err.Error(), "AES-999") {
			t.Errorf("%s: an unknown cipher name: %v", tc.site, err)
		}
	}
	c, _ := external.New(f, plan.Inputs{}, "aws-vpc")
	if _, err := demo.SwanctlConf(c, "0starts-with-zero"); err == nil || !strings.Contains(err.Error(), "AWS") {
		t.Errorf("a key AWS refuses was accepted: %v", err)
	}
}
