package spec

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// cloudSpec is a two-site spec whose first site has the given gateways
// (from line 9) and ends with the given cloud block.
func cloudSpec(gateways, cloud string) string {
	return `apiVersion: fednet/v1
kind: Federation
name: c
sites:
  - name: aws-eu
    provider: aws
    region: eu-west-1
    gateways:
` + gateways + cloud + `  - name: lab
    provider: onprem
    gateways: [{name: lab-gw, endpoint: 192.0.2.9:51820}]
`
}

func TestCloudExample(t *testing.T) {
	data, err := os.ReadFile("../../examples/clouds.yaml")
	if err != nil {
		t.Fatal(err)
	}
	f, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	aws, _ := f.Site("aws-eu")
	if aws.Cloud.Kind() != CloudAWS || aws.Cloud.AWS.Region != "eu-west-1" {
		t.Errorf("aws-eu cloud: kind %s region %q; want aws, the site's region", aws.Cloud.Kind(), aws.Cloud.AWS.Region)
	}
	if g := aws.Cloud.AWS.Gateways["aws-gw2"]; g.ENI != "eni-0a1b2c3d4e5f60719" {
		t.Errorf("aws-gw2: %+v", g)
	}
	az, _ := f.Site("azure-we")
	if g := az.Cloud.Azure.Gateways["azure-gw"]; g.NIC != "azure-gw-nic" || az.Cloud.Azure.Priority != DefaultAzurePriority {
		t.Errorf("azure shorthand not filled in: %+v, priority %d", az.Cloud.Azure.Gateways, az.Cloud.Azure.Priority)
	}
	gcp, _ := f.Site("gcp-ew")
	if g := gcp.Cloud.GCP.Gateways["gcp-gw"]; g.Instance != "gcp-gw" || g.Zone != "europe-west1-b" {
		t.Errorf("gcp shorthand not filled in: %+v", gcp.Cloud.GCP.Gateways)
	}
	os, _ := f.Site("os-lab")
	if g := os.Cloud.OpenStack.Gateways["os-gw"]; g.Port != "os-gw-lan" {
		t.Errorf("openstack shorthand not filled in: %+v", os.Cloud.OpenStack.Gateways)
	}
	if office, _ := f.Site("office"); office.Cloud.Kind() != "" {
		t.Errorf("office has cloud kind %q, want none", office.Cloud.Kind())
	}
}

func TestCloudRejects(t *testing.T) {
	one := "      - name: aws-gw\n        endpoint: 198.51.100.10:51820\n"
	two := one + "      - name: aws-gw2\n        endpoint: 198.51.100.11:51820\n"
	good := "    cloud:\n      aws:\n        vpc: vpc-0a1b2c3d\n        routeTables: [rtb-0a1b2c3d]\n        securityGroup: sg-0a1b2c3d\n"
	for _, tc := range []struct {
		name, gateways, cloud string
		want                  []string
	}{
		{"bad vpc", one, strings.Replace(good, "vpc-0a1b2c3d", "vpc-xyz", 1) + "        instance: i-0a1b2c3d\n",
			[]string{"line 13: sites[0].cloud.aws.vpc", `"vpc-xyz" is not a VPC id`}},
		{"no route tables", one, strings.Replace(good, "        routeTables: [rtb-0a1b2c3d]\n", "", 1) + "        eni: eni-0a1b2c3d\n",
			[]string{"sites[0].cloud.aws.routeTables", "routeTables is missing"}},
		{"duplicate route table", one, strings.Replace(good, "[rtb-0a1b2c3d]", "[rtb-0a1b2c3d, rtb-0a1b2c3d]", 1) + "        eni: eni-0a1b2c3d\n",
			[]string{"line 14: sites[0].cloud.aws.routeTables[1]", "listed twice"}},
		{"no gateway ids", one, good, []string{"line 12: sites[0].cloud.aws", "gateways: {aws-gw: {instance:"}},
		{"both instance and eni", one, good + "        instance: i-0a1b2c3d\n        eni: eni-0a1b2c3d\n", []string{"line 17: sites[0].cloud.aws.eni", "not both"}},
		{"shorthand with two gateways", two, good + "        instance: i-0a1b2c3d\n", []string{"line 18: sites[0].cloud.aws.instance", "has 2 gateways"}},
		{"a gateway left out", two, good + "        gateways:\n          aws-gw: {instance: i-0a1b2c3d}\n",
			[]string{"line 18: sites[0].cloud.aws.gateways", "gateway aws-gw2 of site aws-eu is missing"}},
		{"unknown gateway", one, good + "        gateways:\n          aws-gw: {instance: i-0a1b2c3d}\n          nope: {eni: eni-0a1b2c3d}\n",
			[]string{"line 18: sites[0].cloud.aws.gateways.nope", "not a gateway of site aws-eu"}},
		{"typo in a field", one, good + "        instanse: i-0a1b2c3d\n", []string{"line 16: sites[0].cloud.aws.instanse", "did you mean instance?"}},
		{"no region", one, strings.Replace(good, "aws:\n", "aws:\n        region: \"\"\n", 1) + "        instance: i-0a1b2c3d\n", nil},
		{"two providers", one, good + "        instance: i-0a1b2c3d\n      gcp: {project: p, network: n, instance: g, zone: z}\n", []string{"line 11: sites[0].cloud", "names 2 providers"}},
		{"wrong provider block", one, "    cloud:\n      azure: {resourceGroup: rg, routeTables: [rt], nsg: n, nic: x}\n", []string{"sites[0].cloud.azure", "provider aws but a cloud block for azure"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := cloudSpec(tc.gateways, tc.cloud)
			_, err := Parse([]byte(doc))
			if tc.want == nil {
				if err != nil {
					t.Fatalf("want it accepted (region from the site), got %v\n%s", err, doc)
				}
				return
			}
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("got %v, want a spec error\n%s", err, doc)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v\n---\n%s", w, err, doc)
				}
			}
		})
	}
}
