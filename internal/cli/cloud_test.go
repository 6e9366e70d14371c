package cli

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/cloud/aws/awstest"
)

// TestCloudCommandsAgainstMoto runs fednet cloud apply and remove against
// moto through the standard AWS configuration (AWS_ENDPOINT_URL and the
// access key in the environment), as an operator would.
func TestCloudCommandsAgainstMoto(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := awstest.Start(t, awstest.Config{})
	c := srv.EC2(awstest.Anyone)
	v := awstest.NewVPC(ctx, t, c)
	dir := t.TempDir()
	file := filepath.Join(dir, "spec.yaml")
	if err := os.WriteFile(file, []byte(v.Spec(t, "../../examples/clouds.yaml")), 0o644); err != nil {
		t.Fatal(err)
	}
	for k, val := range map[string]string{
		"AWS_ENDPOINT_URL": srv.URL, "AWS_ACCESS_KEY_ID": awstest.Anyone.AccessKeyID, "AWS_SECRET_ACCESS_KEY": awstest.Anyone.SecretAccessKey,
		"AWS_CONFIG_FILE": filepath.Join(dir, "none"), "AWS_SHARED_CREDENTIALS_FILE": filepath.Join(dir, "none"), "AWS_PROFILE": "", "AWS_EC2_METADATA_DISABLED": "true",
	} {
		t.Setenv(k, val)
	}
	before := v.Snapshot(ctx, t, c)

	dry, err := run(t, "cloud", "apply", "-f", file, "--site", "aws-eu", "--dry-run")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(dry, "aws ec2 create-route"); n != 8 {
		t.Errorf("--dry-run shows %d create-route, want 8:\n%s", n, dry)
	}
	if now := v.Snapshot(ctx, t, c); !slices.Equal(now, before) {
		t.Fatal("--dry-run changed the VPC")
	}
	out, err := run(t, "cloud", "apply", "-f", file, "--site", "aws-eu")
	if err != nil {
		t.Fatal(err)
	}
	if out != dry {
		t.Errorf("apply printed\n%s\nbut --dry-run said\n%s", out, dry)
	}
	snap := strings.Join(v.Snapshot(ctx, t, c), "\n")
	if strings.Count(snap, "-> "+v.InstanceENI) != 8 {
		t.Errorf("after apply, not 8 routes to aws-gw's interface:\n%s", snap)
	}
	again, err := run(t, "cloud", "apply", "-f", file, "--site", "aws-eu")
	if err != nil || !strings.HasPrefix(again, "no changes") {
		t.Errorf("second apply: %q, %v; want no changes", again, err)
	}
	moved, err := run(t, "cloud", "apply", "-f", file, "--site", "aws-eu", "--active", "aws-gw2")
	if err != nil || strings.Count(moved, "aws ec2 replace-route") != 8 {
		t.Errorf("failover apply: %v\n%s", err, moved)
	}
	if _, err := run(t, "cloud", "remove", "-f", file, "--site", "aws-eu"); err != nil {
		t.Fatal(err)
	}
	if now := v.Snapshot(ctx, t, c); !slices.Equal(now, before) {
		t.Errorf("after remove the VPC is not as it was:\n%s", strings.Join(now, "\n"))
	}
}

func TestCloudCommandErrors(t *testing.T) {
	spec := filepath.Join("..", "..", "examples", "clouds.yaml")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"cloud", "apply", "-f", spec}, "--site SITE is required"},
		{[]string{"cloud", "apply", "-f", spec, "--site", "nope"}, "sites are aws-eu"},
		{[]string{"cloud", "apply", "-f", spec, "--site", "office"}, "has no cloud block"},
		{[]string{"cloud", "apply", "-f", spec, "--site", "azure-we"}, "fednet cloud plan --site azure-we > azure-we-apply.sh"},
		{[]string{"cloud", "remove", "-f", spec, "--site", "gcp-ew"}, "fednet cloud plan --site gcp-ew --remove"},
		{[]string{"cloud", "apply", "-f", spec, "--site", "aws-eu", "--active", "azure-gw"}, "--active azure-gw: not a gateway of site aws-eu"},
		{[]string{"cloud", "plan", "-f", spec, "--site", "aws-eu", "--remove"}, "fednet cloud remove --site aws-eu --dry-run"},
		{[]string{"cloud"}, "plan, apply or remove"},
	} {
		_, err := run(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err %v, want %q", tc.args, err, tc.want)
		}
	}
	out, err := run(t, "cloud", "plan", "-f", spec, "--site", "gcp-ew")
	if err != nil || !strings.HasPrefix(out, "#!/usr/bin/env bash\n# site gcp-ew (gcp, federation clouds)") || !strings.Contains(out, "route fednet-clouds-gcp-ew-10-1-0-0-24 10.1.0.0/24") {
		t.Errorf("cloud plan gcp-ew: %v\n%s", err, out)
	}
}

// TestCloudPlanFromManager reads the spec from a real manager when -f is
// left out.
func TestCloudPlanFromManager(t *testing.T) {
	loggedIn(t)
	mustRun(t, "apply", "-f", filepath.Join("..", "..", "examples", "clouds.yaml"))
	out := mustRun(t, "cloud", "plan", "--site", "aws-eu", "--active", "aws-gw2")
	contains(t, "cloud plan from the manager's spec", out, "active gateway aws-gw2", "route 10.5.0.0/24 -> aws-gw2 (", "gateway aws-gw2: network interface eni-0a1b2c3d4e5f60719 (active: the routes' target)")
	script := mustRun(t, "cloud", "plan", "--site", "os-lab", "--remove")
	contains(t, "openstack removal script", script, "unroute router \"$ROUTER\"", "unpair 'os-gw-lan' 10.1.0.0/24")
}
