package awstest

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	sdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
)

// VPC is the site aws-eu of examples/clouds.yaml, made in moto: a VPC with
// two subnets and their route tables, an internet gateway, a security
// group, the instance of gateway aws-gw and the network interface of
// gateway aws-gw2, plus some of the operator's own routes and rules that
// fednet must leave alone.
type VPC struct {
	ID          string
	RouteTables []string
	Group       string
	Instance    string
	// InstanceENI is the instance's primary interface.
	InstanceENI string
	ENI         string
	IGW         string
}

// NewVPC makes the VPC with c.
func NewVPC(ctx context.Context, t testing.TB, c *ec2.Client) VPC {
	t.Helper()
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("making the test VPC: %s: %v", what, err)
		}
	}
	var v VPC
	vpc, err := c.CreateVpc(ctx, &ec2.CreateVpcInput{CidrBlock: sdk.String("10.1.0.0/16")})
	must("CreateVpc", err)
	v.ID = sdk.ToString(vpc.Vpc.VpcId)
	igw, err := c.CreateInternetGateway(ctx, &ec2.CreateInternetGatewayInput{})
	must("CreateInternetGateway", err)
	v.IGW = sdk.ToString(igw.InternetGateway.InternetGatewayId)
	_, err = c.AttachInternetGateway(ctx, &ec2.AttachInternetGatewayInput{InternetGatewayId: sdk.String(v.IGW), VpcId: sdk.String(v.ID)})
	must("AttachInternetGateway", err)
	var subnets []string
	for _, cidr := range []string{"10.1.0.0/24", "10.1.1.0/24"} {
		sn, err := c.CreateSubnet(ctx, &ec2.CreateSubnetInput{VpcId: sdk.String(v.ID), CidrBlock: sdk.String(cidr)})
		must("CreateSubnet", err)
		subnets = append(subnets, sdk.ToString(sn.Subnet.SubnetId))
		rt, err := c.CreateRouteTable(ctx, &ec2.CreateRouteTableInput{VpcId: sdk.String(v.ID)})
		must("CreateRouteTable", err)
		id := sdk.ToString(rt.RouteTable.RouteTableId)
		v.RouteTables = append(v.RouteTables, id)
		_, err = c.AssociateRouteTable(ctx, &ec2.AssociateRouteTableInput{RouteTableId: sdk.String(id), SubnetId: sn.Subnet.SubnetId})
		must("AssociateRouteTable", err)
		// The operator's default route, and a tag of theirs.
		_, err = c.CreateRoute(ctx, &ec2.CreateRouteInput{RouteTableId: sdk.String(id), DestinationCidrBlock: sdk.String("0.0.0.0/0"), GatewayId: sdk.String(v.IGW)})
		must("CreateRoute", err)
		_, err = c.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{id}, Tags: []types.Tag{{Key: sdk.String("Name"), Value: sdk.String("app-" + cidr)}}})
		must("CreateTags", err)
	}
	sg, err := c.CreateSecurityGroup(ctx, &ec2.CreateSecurityGroupInput{GroupName: sdk.String("gateways"), Description: sdk.String("gateways"), VpcId: sdk.String(v.ID)})
	must("CreateSecurityGroup", err)
	v.Group = sdk.ToString(sg.GroupId)
	// The operator's SSH rule, and their own rule for one of the peers:
	// fednet needs it, finds it there, and must not remove it.
	_, err = c.AuthorizeSecurityGroupIngress(ctx, &ec2.AuthorizeSecurityGroupIngressInput{GroupId: sdk.String(v.Group), IpPermissions: []types.IpPermission{
		{IpProtocol: sdk.String("tcp"), FromPort: sdk.Int32(22), ToPort: sdk.Int32(22), IpRanges: []types.IpRange{{CidrIp: sdk.String("198.51.100.0/24"), Description: sdk.String("ssh from the office")}}},
		{IpProtocol: sdk.String("udp"), FromPort: sdk.Int32(51820), ToPort: sdk.Int32(51820), IpRanges: []types.IpRange{{CidrIp: sdk.String("192.0.2.30/32"), Description: sdk.String("gcp, by hand")}}},
	}})
	must("AuthorizeSecurityGroupIngress", err)
	run, err := c.RunInstances(ctx, &ec2.RunInstancesInput{ImageId: sdk.String("ami-12c6146b"), MinCount: sdk.Int32(1), MaxCount: sdk.Int32(1), SubnetId: sdk.String(subnets[0])})
	must("RunInstances", err)
	v.Instance = sdk.ToString(run.Instances[0].InstanceId)
	for _, ni := range run.Instances[0].NetworkInterfaces {
		if sdk.ToInt32(ni.Attachment.DeviceIndex) == 0 {
			v.InstanceENI = sdk.ToString(ni.NetworkInterfaceId)
		}
	}
	eni, err := c.CreateNetworkInterface(ctx, &ec2.CreateNetworkInterfaceInput{SubnetId: sdk.String(subnets[0])})
	must("CreateNetworkInterface", err)
	v.ENI = sdk.ToString(eni.NetworkInterface.NetworkInterfaceId)
	return v
}

// Spec returns examples/clouds.yaml (read from path) with site aws-eu's
// identifiers replaced by v's.
func (v VPC) Spec(t testing.TB, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r := strings.NewReplacer(
		"vpc-0a1b2c3d4e5f60718", v.ID,
		"rtb-0a1b2c3d4e5f60718", v.RouteTables[0],
		"rtb-0a1b2c3d4e5f60719", v.RouteTables[1],
		"sg-0a1b2c3d4e5f60718", v.Group,
		"i-0a1b2c3d4e5f60718", v.Instance,
		"eni-0a1b2c3d4e5f60719", v.ENI,
	)
	return r.Replace(string(data))
}

// Snapshot reads back, through the API, everything fednet may touch in
// the VPC: every route and tag of its route tables, every ingress rule of
// its security group, and the source/dest check and tags of the two
// interfaces; one sorted line each.
func (v VPC) Snapshot(ctx context.Context, t testing.TB, c *ec2.Client) []string {
	t.Helper()
	var lines []string
	rts, err := c.DescribeRouteTables(ctx, &ec2.DescribeRouteTablesInput{RouteTableIds: v.RouteTables})
	if err != nil {
		t.Fatalf("DescribeRouteTables: %v", err)
	}
	for _, rt := range rts.RouteTables {
		id := sdk.ToString(rt.RouteTableId)
		for _, r := range rt.Routes {
			target := sdk.ToString(r.NetworkInterfaceId) + sdk.ToString(r.GatewayId) + sdk.ToString(r.InstanceId)
			lines = append(lines, fmt.Sprintf("route %s %s -> %s", id, sdk.ToString(r.DestinationCidrBlock), target))
		}
		for _, tag := range rt.Tags {
			lines = append(lines, fmt.Sprintf("tag %s %s=%s", id, sdk.ToString(tag.Key), sdk.ToString(tag.Value)))
		}
	}
	sgs, err := c.DescribeSecurityGroups(ctx, &ec2.DescribeSecurityGroupsInput{GroupIds: []string{v.Group}})
	if err != nil {
		t.Fatalf("DescribeSecurityGroups: %v", err)
	}
	for _, p := range sgs.SecurityGroups[0].IpPermissions {
		for _, r := range p.IpRanges {
			lines = append(lines, fmt.Sprintf("ingress %s %s %d-%d from %s %q", v.Group, sdk.ToString(p.IpProtocol), sdk.ToInt32(p.FromPort), sdk.ToInt32(p.ToPort), sdk.ToString(r.CidrIp), sdk.ToString(r.Description)))
		}
	}
	nis, err := c.DescribeNetworkInterfaces(ctx, &ec2.DescribeNetworkInterfacesInput{NetworkInterfaceIds: []string{v.InstanceENI, v.ENI}})
	if err != nil {
		t.Fatalf("DescribeNetworkInterfaces: %v", err)
	}
	for _, ni := range nis.NetworkInterfaces {
		id := sdk.ToString(ni.NetworkInterfaceId)
		lines = append(lines, fmt.Sprintf("eni %s source-dest-check %v", id, sdk.ToBool(ni.SourceDestCheck)))
		for _, tag := range ni.TagSet {
			lines = append(lines, fmt.Sprintf("tag %s %s=%s", id, sdk.ToString(tag.Key), sdk.ToString(tag.Value)))
		}
	}
	slices.Sort(lines)
	return lines
}
