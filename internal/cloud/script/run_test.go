package script

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fednet/fednet/internal/plan"
)

// stub is a provider CLI for tests: it appends its command line to $LOG
// and answers from $ANSWERS, whose lines are "PATTERN<TAB>OUTPUT": the
// first whose PATTERN occurs in the command line wins; OUTPUT "!" makes
// the call fail, as a describe of something absent does.
const stub = `#!/usr/bin/env bash
line="$(basename "$0") $*"
echo "$line" >> "$LOG"
while IFS=$'\t' read -r pattern output; do
  case "$line" in *"$pattern"*)
    [ "$output" = "!" ] && exit 1
    printf '%b\n' "$output"; exit 0 ;;
  esac
done < "$ANSWERS"
`

// run runs script with the stubbed tool and returns the commands it ran.
func run(t *testing.T, tool, script string, answers []string) []string {
	t.Helper()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash is not installed")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, tool), []byte(stub), 0o755); err != nil {
		t.Fatal(err)
	}
	// python3 reads the openstack client's JSON; the test has it or skips.
	if tool == "openstack" {
		if _, err := exec.LookPath("python3"); err != nil {
			t.Skip("python3 is not installed")
		}
	}
	ans := filepath.Join(dir, "answers")
	// Raw-string answers may write the tab as \t.
	text := strings.ReplaceAll(strings.Join(answers, "\n")+"\n", `\t`, "\t")
	os.WriteFile(ans, []byte(text), 0o644)
	log := filepath.Join(dir, "log")
	os.WriteFile(log, nil, 0o644)
	cmd := exec.Command("bash", "-c", script)
	cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"), "LOG="+log, "ANSWERS="+ans)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("script failed: %v\n%s", err, out)
	}
	data, _ := os.ReadFile(log)
	return strings.Split(strings.TrimSpace(string(data)), "\n")
}

func has(t *testing.T, calls []string, want ...string) {
	t.Helper()
	for _, w := range want {
		found := false
		for _, c := range calls {
			found = found || strings.Contains(c, w)
		}
		if !found {
			t.Errorf("no call contains %q; calls:\n%s", w, strings.Join(calls, "\n"))
		}
	}
}

func hasNot(t *testing.T, calls []string, unwanted string) {
	t.Helper()
	for _, c := range calls {
		if strings.Contains(c, unwanted) {
			t.Errorf("unexpected call %q", c)
		}
	}
}

// TestScriptsRun runs each script against a stub of its CLI that reports
// a stale route or rule, and checks the calls: what the needs ask for is
// made, what is stale is deleted, what is the operator's is left.
func TestScriptsRun(t *testing.T) {
	f := example(t)
	t.Run("azure", func(t *testing.T) {
		s := scripts(t, f, "azure-we", plan.Inputs{})
		calls := run(t, "az", s.Apply, []string{
			"nic show\tfalse",
			"route-table route list\tfednet-clouds-10-1-0-0-24\\nfednet-clouds-10-9-0-0-24",
			"nsg rule list\tfednet-clouds-azure-we-udp-51820",
		})
		has(t, calls, "nic update -g fednet-rg -n azure-gw-nic --ip-forwarding true --set tags.fednet-ip-forwarding=clouds/azure-we",
			"route-table route create -g fednet-rg --route-table-name app-subnet-rt -n fednet-clouds-10-5-0-0-24 --address-prefix 10.5.0.0/24 --next-hop-type VirtualAppliance --next-hop-ip-address 10.2.0.254",
			"route-table route delete -g fednet-rg --route-table-name app-subnet-rt -n fednet-clouds-10-9-0-0-24")
		hasNot(t, calls, "route delete -g fednet-rg --route-table-name app-subnet-rt -n fednet-clouds-10-1-0-0-24")
		hasNot(t, calls, "nsg rule delete")
		rm := run(t, "az", s.Remove, []string{
			"nic show\tclouds/azure-we",
			"route-table route list\tfednet-clouds-10-1-0-0-24",
			"nsg rule list\tfednet-clouds-azure-we-udp-51820",
		})
		has(t, rm, "route-table route delete -g fednet-rg --route-table-name app-subnet-rt -n fednet-clouds-10-1-0-0-24",
			"nsg rule delete -g fednet-rg --nsg-name azure-gw-nsg -n fednet-clouds-azure-we-udp-51820",
			"nic update -g fednet-rg -n azure-gw-nic --ip-forwarding false --remove tags.fednet-ip-forwarding")
	})
	t.Run("gcp", func(t *testing.T) {
		s := scripts(t, f, "gcp-ew", plan.Inputs{})
		calls := run(t, "gcloud", s.Apply, []string{
			"instances describe\tTrue",
			"routes describe fednet-clouds-gcp-ew-10-1-0-0-24\thttps://www.googleapis.com/compute/v1/projects/fednet-demo/zones/europe-west1-b/instances/gcp-gw",
			"routes describe fednet-clouds-gcp-ew-10-2-0-0-24\thttps://www.googleapis.com/compute/v1/projects/fednet-demo/zones/europe-west1-b/instances/old-gw",
			"routes describe\t!",
			"firewall-rules describe\t!",
			"routes list\tfednet-clouds-gcp-ew-10-9-0-0-24",
		})
		has(t, calls, "routes delete fednet-clouds-gcp-ew-10-2-0-0-24",
			"routes create fednet-clouds-gcp-ew-10-2-0-0-24 --project fednet-demo --network default --destination-range 10.2.0.0/24 --next-hop-instance gcp-gw --next-hop-instance-zone europe-west1-b",
			"routes create fednet-clouds-gcp-ew-10-4-0-0-24",
			"routes delete fednet-clouds-gcp-ew-10-9-0-0-24",
			"firewall-rules create fednet-clouds-gcp-ew-udp-51820 --project fednet-demo --network default --direction INGRESS --action ALLOW --rules udp:51820 --source-ranges 0.0.0.0/0,192.0.2.40/32,198.51.100.10/32,198.51.100.11/32,203.0.113.20/32 --target-tags fednet-clouds-gcp-ew")
		hasNot(t, calls, "routes create fednet-clouds-gcp-ew-10-1-0-0-24")
		// A gateway that cannot forward stops the script before any change.
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "gcloud"), []byte("#!/bin/sh\necho False\n"), 0o755)
		cmd := exec.Command("bash", "-c", s.Apply)
		cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "created without --can-ip-forward") {
			t.Errorf("canIpForward false: err %v, output %s", err, out)
		}
	})
	t.Run("openstack", func(t *testing.T) {
		s := scripts(t, f, "os-lab", plan.Inputs{})
		calls := run(t, "openstack", s.Apply, []string{
			"port show os-gw-lan -f value -c allowed_address_pairs\t[{'ip_address': '10.1.0.0/24', 'mac_address': 'fa:16:3e:00:00:01'}]",
			`router show\t{"routes": [{"destination": "10.1.0.0/24", "nexthop": "10.4.0.254"}, {"destination": "10.9.0.0/24", "nexthop": "10.4.0.254"}, {"destination": "0.0.0.0/0", "nexthop": "10.4.0.1"}]}`,
			`subnet show\t{"host_routes": []}`,
			"security group rule list\tr-old\\nr-ops",
			`security group rule show r-old\t{"description": "fednet clouds/os-lab: peer gone-gw", "protocol": "udp", "port_range_min": 51820, "remote_ip_prefix": "198.51.100.99/32"}`,
			`security group rule show r-ops\t{"description": "ssh", "protocol": "tcp", "port_range_min": 22, "remote_ip_prefix": "0.0.0.0/0"}`,
		})
		has(t, calls, "port set os-gw-lan --allowed-address ip-address=10.2.0.0/24",
			"router remove route --route destination=10.9.0.0/24,gateway=10.4.0.254 lab-router",
			"router add route --route destination=10.5.0.0/24,gateway=10.4.0.254 lab-router",
			"subnet set --host-route destination=10.1.0.0/24,gateway=10.4.0.254 lab-subnet",
			"security group rule create fednet-public --ingress --ethertype IPv4 --protocol udp --dst-port 51820 --remote-ip 203.0.113.20/32 --description fednet clouds/os-lab: peer azure-gw",
			"security group rule delete r-old")
		hasNot(t, calls, "port set os-gw-lan --allowed-address ip-address=10.1.0.0/24")
		hasNot(t, calls, "router add route --route destination=10.1.0.0/24")
		hasNot(t, calls, "destination=0.0.0.0/0")
		hasNot(t, calls, "rule delete r-ops")
	})
}
