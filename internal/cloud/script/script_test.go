package script

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fednet/fednet/internal/cloud"
	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/spec"
)

var update = flag.Bool("update", false, "rewrite the golden scripts in testdata/")

func example(t *testing.T) *spec.Federation {
	t.Helper()
	data, err := os.ReadFile("../../../examples/clouds.yaml")
	if err != nil {
		t.Fatal(err)
	}
	f, err := spec.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func scripts(t *testing.T, f *spec.Federation, site string, in plan.Inputs) Script {
	t.Helper()
	n, err := cloud.Compute(f, site, cloud.Options{Inputs: in})
	if err != nil {
		t.Fatal(err)
	}
	s, err := For(f, n)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestGolden compares each provider's scripts with testdata/ (go test
// -update rewrites them) and checks that bash can parse them.
func TestGolden(t *testing.T) {
	f := example(t)
	for _, site := range []string{"azure-we", "gcp-ew", "os-lab"} {
		s := scripts(t, f, site, plan.Inputs{})
		for kind, text := range map[string]string{"apply": s.Apply, "remove": s.Remove} {
			path := filepath.Join("testdata", site+"."+kind+".sh")
			if *update {
				if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update to write it)", err)
			}
			if text != string(want) {
				t.Errorf("%s differs from what fednet writes now; review the change and run go test -update:\n%s", path, text)
			}
			if out, err := exec.Command("bash", "-n", "-c", text).CombinedOutput(); err != nil {
				t.Errorf("%s: bash -n: %v\n%s", path, err, out)
			}
		}
	}
}

func TestScriptsFollowNeeds(t *testing.T) {
	f := example(t)
	az := scripts(t, f, "azure-we", plan.Inputs{})
	for _, w := range []string{
		"az network route-table route create -g \"$RG\" --route-table-name 'app-subnet-rt' -n fednet-clouds-10-1-0-0-24 --address-prefix 10.1.0.0/24 --next-hop-type VirtualAppliance --next-hop-ip-address 10.2.0.254",
		"--source-address-prefixes 0.0.0.0/0 192.0.2.30/32 192.0.2.40/32 198.51.100.10/32 198.51.100.11/32",
		"on_forwarding 'azure-gw-nic'   # azure-gw",
	} {
		if !strings.Contains(az.Apply, w) {
			t.Errorf("azure apply lacks %q", w)
		}
	}
	if _, err := For(f, cloud.Needs{Site: "aws-eu", Kind: spec.CloudAWS}); err == nil || !strings.Contains(err.Error(), "fednet cloud apply") {
		t.Errorf("a script for AWS: err %v, want a pointer to fednet cloud apply", err)
	}
	// A prefix that leaves the network leaves the scripts.
	g, err := spec.Parse([]byte(strings.Replace(mustRead(t), "sites: [aws-eu, azure-we, gcp-ew, os-lab, office]", "sites: [aws-eu, azure-we, gcp-ew, os-lab]", 1)))
	if err != nil {
		t.Fatal(err)
	}
	for _, site := range []string{"azure-we", "gcp-ew", "os-lab"} {
		s := scripts(t, g, site, plan.Inputs{})
		if strings.Contains(s.Apply, "10.5.0.0/24") || strings.Contains(s.Apply, "10-5-0-0-24") {
			t.Errorf("%s: office left the network but the script still routes 10.5.0.0/24", site)
		}
	}
}

func mustRead(t *testing.T) string {
	data, err := os.ReadFile("../../../examples/clouds.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
