package external_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fednet/fednet/internal/external"
	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/spec"
)

var update = flag.Bool("update", false, "rewrite golden files")

func load(t *testing.T) *spec.Federation {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "profiles.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := spec.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestGolden renders every profile's site as text and JSON against the
// files under testdata (go test ./internal/external -update rewrites them
// after review).
func TestGolden(t *testing.T) {
	f := load(t)
	for _, site := range []string{"vpc", "vnet", "gcp-vpc", "cloud", "router"} {
		t.Run(site, func(t *testing.T) {
			c, err := external.New(f, plan.Inputs{}, site)
			if err != nil {
				t.Fatal(err)
			}
			js, err := json.MarshalIndent(c, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			golden(t, site+".txt", []byte(c.Text()))
			golden(t, site+".json", append(js, '\n'))
		})
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test ./internal/external -update creates it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (go test ./internal/external -update rewrites it after review):\n%s", path, got)
	}
}

// TestFacts checks what the golden files could hide: the prefixes follow
// the networks, children follow the profile, the AWS inside addresses.
func TestFacts(t *testing.T) {
	f := load(t)
	cloud, err := external.New(f, plan.Inputs{}, "cloud")
	if err != nil {
		t.Fatal(err)
	}
	// cloud (VPNaaS: a child SA per pair) has 2 prefixes and reaches
	// hq, branch and the other externals' prefixes through apps.
	if n := len(cloud.LocalPrefixes) * len(cloud.RemotePrefixes); len(cloud.ChildSAs) != n || n == 0 {
		t.Errorf("cloud: %d child SAs for %d x %d prefixes", len(cloud.ChildSAs), len(cloud.LocalPrefixes), len(cloud.RemotePrefixes))
	}
	vpc, err := external.New(f, plan.Inputs{}, "vpc")
	if err != nil {
		t.Fatal(err)
	}
	if len(vpc.ChildSAs) != 1 || vpc.InsideLocal.String() != "169.254.20.5/30" || vpc.InsidePeer.String() != "169.254.20.6/30" || vpc.PeerAddress.String() != "198.51.100.10" {
		t.Errorf("vpc: %+v", vpc)
	}
	gcp, err := external.New(f, plan.Inputs{}, "gcp-vpc")
	if err != nil {
		t.Fatal(err)
	}
	if gcp.PeerGateway != "branch-gw" || gcp.PeerAddress.String() != "203.0.113.20" {
		t.Errorf("gcp-vpc: via %s %s, want branch-gw 203.0.113.20", gcp.PeerGateway, gcp.PeerAddress)
	}
	for _, tc := range []struct{ site, want string }{{"hq", "is not external"}, {"nowhere", "no site"}} {
		if _, err := external.New(f, plan.Inputs{}, tc.site); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want an error with %q", tc.site, err, tc.want)
		}
	}
}
