package aws_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"

	"github.com/fednet/fednet/internal/cloud"
	"github.com/fednet/fednet/internal/cloud/aws"
	"github.com/fednet/fednet/internal/cloud/aws/awstest"
	"github.com/fednet/fednet/internal/plan"
	"github.com/fednet/fednet/internal/spec"
)

const example = "../../../examples/clouds.yaml"

func TestMain(m *testing.M) {
	code := m.Run()
	awstest.StopShared()
	os.Exit(code)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// site parses doc and returns the aws-eu reconciler under in.
func site(t *testing.T, c aws.EC2, doc string, in plan.Inputs) *aws.Site {
	t.Helper()
	f, err := spec.Parse([]byte(doc))
	if err != nil {
		t.Fatalf("spec: %v", err)
	}
	n, err := cloud.Compute(f, "aws-eu", cloud.Options{Inputs: in})
	if err != nil {
		t.Fatal(err)
	}
	s, err := aws.New(aws.Config{EC2: c, Federation: f, Needs: n})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func texts(cs []aws.Change) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.String())
	}
	return out
}

// fednetLines are the snapshot lines that differ from before.
func added(before, after []string) []string {
	var out []string
	for _, l := range after {
		if !slices.Contains(before, l) {
			out = append(out, l)
		}
	}
	return out
}

func TestApplyAgainstMoto(t *testing.T) {
	ctx := ctxT(t)
	srv := awstest.Shared(t)
	c := srv.EC2(awstest.Anyone)
	v := awstest.NewVPC(ctx, t, c)
	doc := v.Spec(t, example)
	before := v.Snapshot(ctx, t, c)

	s := site(t, c, doc, plan.Inputs{})
	planned, err := s.Plan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after := v.Snapshot(ctx, t, c); !slices.Equal(after, before) {
		t.Fatalf("Plan changed the VPC:\n%s", strings.Join(added(before, after), "\n"))
	}
	applied, err := s.Apply(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(texts(planned), texts(applied)) {
		t.Errorf("Apply did not do what Plan said:\nplan:\n%s\napply:\n%s", strings.Join(texts(planned), "\n"), strings.Join(texts(applied), "\n"))
	}
	t.Logf("first apply: %d changes\n%s", len(applied), strings.Join(texts(applied), "\n"))

	// Exactly the planned state, read back through the API: every
	// remote prefix to aws-gw's interface in both tables with its tag,
	// both interfaces' checks off and marked, the ingress rules of the
	// three peers with endpoints and of the one behind NAT, except
	// gcp-gw's, which the operator's own rule already admits.
	owner := "clouds/aws-eu"
	var want []string
	for _, rt := range v.RouteTables {
		for _, p := range []string{"10.2.0.0/24", "10.3.0.0/24", "10.4.0.0/24", "10.5.0.0/24"} {
			want = append(want, fmt.Sprintf("route %s %s -> %s", rt, p, v.InstanceENI), fmt.Sprintf("tag %s fednet:route:%s=%s", rt, p, owner))
		}
	}
	for _, id := range []string{v.InstanceENI, v.ENI} {
		want = append(want, fmt.Sprintf("eni %s source-dest-check false", id), fmt.Sprintf("tag %s fednet:source-dest-check:%s=true", id, owner))
	}
	for _, r := range []string{`0.0.0.0/0 "fednet clouds/aws-eu: behind NAT office-gw"`, `192.0.2.40/32 "fednet clouds/aws-eu: peer os-gw"`, `203.0.113.20/32 "fednet clouds/aws-eu: peer azure-gw"`} {
		want = append(want, fmt.Sprintf("ingress %s udp 51820-51820 from %s", v.Group, r))
	}
	// The UDP-blocked fallback's TCP 443 from every peer (the operator's
	// own rule admits gcp-gw's UDP only).
	for _, r := range []string{`0.0.0.0/0 "fednet clouds/aws-eu: behind NAT office-gw"`, `192.0.2.30/32 "fednet clouds/aws-eu: peer gcp-gw"`, `192.0.2.40/32 "fednet clouds/aws-eu: peer os-gw"`, `203.0.113.20/32 "fednet clouds/aws-eu: peer azure-gw"`} {
		want = append(want, fmt.Sprintf("ingress %s tcp 443-443 from %s", v.Group, r))
	}
	after := v.Snapshot(ctx, t, c)
	var removed []string
	for _, l := range before {
		if !slices.Contains(after, l) {
			removed = append(removed, l)
		}
	}
	slices.Sort(want)
	// The checks were on before: those two lines changed.
	if got := added(before, after); !slices.Equal(got, want) {
		t.Errorf("after apply, new state:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(removed) != 2 || !strings.Contains(removed[0], "source-dest-check true") {
		t.Errorf("apply removed %v; want only the two source-dest-check true lines", removed)
	}

	// The second apply changes nothing.
	again, err := s.Apply(ctx)
	if err != nil || len(again) != 0 {
		t.Errorf("second apply: %v, %v; want no changes", texts(again), err)
	}
	if now := v.Snapshot(ctx, t, c); !slices.Equal(now, after) {
		t.Errorf("second apply changed the VPC")
	}

	// Failover: the routes move to aws-gw2's interface, in place.
	fo := site(t, c, doc, plan.Inputs{}.WithActive("aws-eu", "aws-gw2"))
	moved, err := fo.Apply(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(moved) != 8 {
		t.Errorf("failover made %d changes, want 8 route replacements:\n%s", len(moved), strings.Join(texts(moved), "\n"))
	}
	for _, m := range moved {
		if m.Action != aws.ReplaceRoute || m.Target != v.ENI {
			t.Errorf("failover change %s; want replace-route to %s", m, v.ENI)
		}
	}
	snap := strings.Join(v.Snapshot(ctx, t, c), "\n")
	if strings.Count(snap, "-> "+v.ENI) != 8 || strings.Contains(snap, "-> "+v.InstanceENI) {
		t.Errorf("after failover the routes do not all point at %s:\n%s", v.ENI, snap)
	}

	// A spec change: office leaves the network, azure-gw moves.
	changed := strings.Replace(doc, "sites: [aws-eu, azure-we, gcp-ew, os-lab, office]", "sites: [aws-eu, azure-we, gcp-ew, os-lab]", 1)
	changed = strings.Replace(changed, "203.0.113.20:51820", "203.0.113.99:51820", 1)
	ch, err := site(t, c, changed, plan.Inputs{}.WithActive("aws-eu", "aws-gw2")).Apply(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(texts(ch), "\n")
	for _, w := range []string{"authorize-security-group-ingress --group-id " + v.Group + " --ip-permissions 'IpProtocol=udp,FromPort=51820,ToPort=51820,IpRanges=[{CidrIp=203.0.113.99/32",
		"revoke-security-group-ingress --group-id " + v.Group + " --ip-permissions 'IpProtocol=udp,FromPort=51820,ToPort=51820,IpRanges=[{CidrIp=203.0.113.20/32}]'",
		"authorize-security-group-ingress --group-id " + v.Group + " --ip-permissions 'IpProtocol=tcp,FromPort=443,ToPort=443,IpRanges=[{CidrIp=203.0.113.99/32",
		"revoke-security-group-ingress --group-id " + v.Group + " --ip-permissions 'IpProtocol=tcp,FromPort=443,ToPort=443,IpRanges=[{CidrIp=203.0.113.20/32}]'",
		"delete-route --route-table-id " + v.RouteTables[0] + " --destination-cidr-block 10.5.0.0/24",
		"delete-route --route-table-id " + v.RouteTables[1] + " --destination-cidr-block 10.5.0.0/24"} {
		if !strings.Contains(got, w) {
			t.Errorf("spec change: changes lack %q:\n%s", w, got)
		}
	}
	if len(ch) != 6 { // the tunnel port and the fallback's TCP 443 from the moved peer, two routes
		t.Errorf("spec change made %d changes, want 6:\n%s", len(ch), got)
	}

	// Remove leaves the VPC as it was.
	rm := site(t, c, changed, plan.Inputs{})
	removedChanges, err := rm.Remove(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("remove: %d changes", len(removedChanges))
	if final := v.Snapshot(ctx, t, c); !slices.Equal(final, before) {
		t.Errorf("after remove the VPC differs from before:\nbefore:\n%s\nafter:\n%s", strings.Join(before, "\n"), strings.Join(final, "\n"))
	}
	if again, err := rm.Remove(ctx); err != nil || len(again) != 0 {
		t.Errorf("second remove: %v, %v; want nothing", texts(again), err)
	}
}

func TestBadIdentifiersAndConflicts(t *testing.T) {
	ctx := ctxT(t)
	srv := awstest.Shared(t)
	c := srv.EC2(awstest.Anyone)
	v := awstest.NewVPC(ctx, t, c)
	doc := v.Spec(t, example)
	before := v.Snapshot(ctx, t, c)
	other, err := c.CreateVpc(ctx, &ec2.CreateVpcInput{CidrBlock: ptr("10.9.0.0/16")})
	if err != nil {
		t.Fatal(err)
	}
	otherSG, err := c.CreateSecurityGroup(ctx, &ec2.CreateSecurityGroupInput{GroupName: ptr("x"), Description: ptr("x"), VpcId: other.Vpc.VpcId})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, from, to string
		want           []string
	}{
		{"unknown route table", v.RouteTables[1], "rtb-0123456789abcdef0", []string{"site aws-eu", "ec2 DescribeRouteTables rtb-0123456789abcdef0", "InvalidRouteTableID.NotFound", "check sites[0].cloud.aws.routeTables[1] (line 19)"}},
		{"unknown instance", v.Instance, "i-0123456789abcdef0", []string{"site aws-eu", "ec2 DescribeInstances", "check sites[0].cloud.aws.gateways.aws-gw (line 22)"}},
		{"unknown vpc", v.ID, "vpc-0123456789abcdef0", []string{"ec2 DescribeVpcs", "sites[0].cloud.aws.vpc (line 18)"}},
		{"group of another vpc", v.Group, *otherSG.GroupId, []string{"security group " + *otherSG.GroupId + " is in " + *other.Vpc.VpcId + ", not in the site's " + v.ID}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := site(t, c, strings.Replace(doc, tc.from, tc.to, 1), plan.Inputs{})
			_, err := s.Apply(ctx)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
			if now := v.Snapshot(ctx, t, c); !slices.Equal(now, before) {
				t.Errorf("a refused apply changed the VPC:\n%s", strings.Join(added(before, now), "\n"))
			}
		})
	}

	// The operator's own route for a prefix the federation needs, to
	// somewhere else: a conflict, reported before anything changes.
	if _, err := c.CreateRoute(ctx, &ec2.CreateRouteInput{RouteTableId: &v.RouteTables[0], DestinationCidrBlock: ptr("10.3.0.0/24"), GatewayId: &v.IGW}); err != nil {
		t.Fatal(err)
	}
	before = v.Snapshot(ctx, t, c)
	_, err = site(t, c, doc, plan.Inputs{}).Apply(ctx)
	if err == nil || !strings.Contains(err.Error(), "already routes 10.3.0.0/24 to "+v.IGW+", and fednet did not make that route") {
		t.Errorf("conflicting route: err %v", err)
	}
	if now := v.Snapshot(ctx, t, c); !slices.Equal(now, before) {
		t.Errorf("a refused apply changed the VPC:\n%s", strings.Join(added(before, now), "\n"))
	}
}

// TestMissingPermissions runs moto with its IAM checks on: credentials
// that may only describe get an error naming the site, the call and the
// permission, and the VPC keeps its state.
func TestMissingPermissions(t *testing.T) {
	ctx := ctxT(t)
	srv := awstest.Start(t, awstest.Config{NoAuthActions: 2 * awstest.UserActions})
	admin := srv.User(ctx, t, "admin", "*")
	reader := srv.User(ctx, t, "reader", "ec2:Describe*")
	c := srv.EC2(admin)
	v := awstest.NewVPC(ctx, t, c)
	before := v.Snapshot(ctx, t, c)
	s := site(t, srv.EC2(reader), v.Spec(t, example), plan.Inputs{})
	if _, err := s.Plan(ctx); err != nil {
		t.Fatalf("describing needs only ec2:Describe*: %v", err)
	}
	_, err := s.Apply(ctx)
	if err == nil {
		t.Fatal("apply with read-only credentials: no error")
	}
	for _, w := range []string{"site aws-eu: ec2 CreateTags", "may not call ec2:CreateTags", "site aws-eu: ec2 AuthorizeSecurityGroupIngress", "may not call ec2:AuthorizeSecurityGroupIngress"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error lacks %q:\n%v", w, err)
		}
	}
	if now := v.Snapshot(ctx, t, c); !slices.Equal(now, before) {
		t.Errorf("a denied apply changed the VPC:\n%s", strings.Join(added(before, now), "\n"))
	}
}

// deny fails one EC2 call with the error real EC2 gives for a missing
// permission (moto says AccessDenied; EC2 says UnauthorizedOperation).
type deny struct {
	aws.EC2
}

func (d deny) ModifyNetworkInterfaceAttribute(context.Context, *ec2.ModifyNetworkInterfaceAttributeInput, ...func(*ec2.Options)) (*ec2.ModifyNetworkInterfaceAttributeOutput, error) {
	return nil, &smithy.GenericAPIError{Code: "UnauthorizedOperation", Message: "You are not authorized to perform this operation."}
}

func TestUnauthorizedOperation(t *testing.T) {
	ctx := ctxT(t)
	srv := awstest.Shared(t)
	c := srv.EC2(awstest.Anyone)
	v := awstest.NewVPC(ctx, t, c)
	s := site(t, deny{c}, v.Spec(t, example), plan.Inputs{})
	done, err := s.Apply(ctx)
	if err == nil {
		t.Fatal("no error")
	}
	for _, w := range []string{"site aws-eu: ec2 ModifyNetworkInterfaceAttribute " + v.InstanceENI, "UnauthorizedOperation", "may not call ec2:ModifyNetworkInterfaceAttribute"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error lacks %q:\n%v", w, err)
		}
	}
	// The other changes went ahead: routes and rules are in place, and a
	// second apply (with the permission) completes the rest.
	if len(done) != 15 {
		t.Errorf("%d changes done despite the failed ones, want 15 (7 rules: the tunnel port and the fallback's TCP 443; 8 routes):\n%s", len(done), strings.Join(texts(done), "\n"))
	}
	rest, err := site(t, c, v.Spec(t, example), plan.Inputs{}).Apply(ctx)
	if err != nil || len(rest) != 2 {
		t.Errorf("completing apply: %v, %v; want the two checks", texts(rest), err)
	}
}

func ptr(s string) *string { return &s }

// TestCheckAlreadyOff: an interface whose source/dest check the operator
// had turned off gets no mark, and remove leaves the check off.
func TestCheckAlreadyOff(t *testing.T) {
	ctx := ctxT(t)
	srv := awstest.Shared(t)
	c := srv.EC2(awstest.Anyone)
	v := awstest.NewVPC(ctx, t, c)
	off := false
	if _, err := c.ModifyNetworkInterfaceAttribute(ctx, &ec2.ModifyNetworkInterfaceAttributeInput{NetworkInterfaceId: &v.ENI, SourceDestCheck: &types.AttributeBooleanValue{Value: &off}}); err != nil {
		t.Fatal(err)
	}
	before := v.Snapshot(ctx, t, c)
	s := site(t, c, v.Spec(t, example), plan.Inputs{})
	done, err := s.Apply(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var checks []string
	for _, ch := range done {
		if ch.Action == aws.DisableCheck {
			checks = append(checks, ch.Resource)
		}
	}
	if !slices.Equal(checks, []string{v.InstanceENI}) {
		t.Errorf("checks turned off: %v, want only %s", checks, v.InstanceENI)
	}
	if _, err := s.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	if now := v.Snapshot(ctx, t, c); !slices.Equal(now, before) {
		t.Errorf("after remove:\n%s\nwant:\n%s", strings.Join(now, "\n"), strings.Join(before, "\n"))
	}
}
