// Package aws brings one site's AWS VPC to what the federation needs
// (cloud.Needs) through the EC2 API: source/destination check off on every
// gateway's network interface, a route for every remote prefix to the
// active gateway's interface in each of the site's route tables, and
// security-group ingress for the tunnel ports from every peer.
//
// It reads first and changes only what differs, so Apply is idempotent and
// Plan is its dry run. Everything it makes is marked: routes by a tag on
// their route table (fednet:route:PREFIX = FEDERATION/SITE), ingress rules
// by their description ("fednet FEDERATION/SITE: …"), and a source/dest
// check it turned off by a tag on the interface that records the previous
// value. Remove undoes exactly what is marked, and leaves the operator's
// own routes and rules alone; an operator's route for a prefix the
// federation needs, pointing elsewhere, is reported as a conflict before
// anything changes.
package aws

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	sdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"

	"github.com/fednet/fednet/internal/backend"
	"github.com/fednet/fednet/internal/cloud"
	"github.com/fednet/fednet/internal/spec"
)

// EC2 is the part of the EC2 API this package calls; *ec2.Client has it.
// Every call may fail with a smithy.APIError.
type EC2 interface {
	DescribeVpcs(context.Context, *ec2.DescribeVpcsInput, ...func(*ec2.Options)) (*ec2.DescribeVpcsOutput, error)
	DescribeInstances(context.Context, *ec2.DescribeInstancesInput, ...func(*ec2.Options)) (*ec2.DescribeInstancesOutput, error)
	DescribeNetworkInterfaces(context.Context, *ec2.DescribeNetworkInterfacesInput, ...func(*ec2.Options)) (*ec2.DescribeNetworkInterfacesOutput, error)
	DescribeRouteTables(context.Context, *ec2.DescribeRouteTablesInput, ...func(*ec2.Options)) (*ec2.DescribeRouteTablesOutput, error)
	DescribeSecurityGroups(context.Context, *ec2.DescribeSecurityGroupsInput, ...func(*ec2.Options)) (*ec2.DescribeSecurityGroupsOutput, error)
	ModifyNetworkInterfaceAttribute(context.Context, *ec2.ModifyNetworkInterfaceAttributeInput, ...func(*ec2.Options)) (*ec2.ModifyNetworkInterfaceAttributeOutput, error)
	CreateRoute(context.Context, *ec2.CreateRouteInput, ...func(*ec2.Options)) (*ec2.CreateRouteOutput, error)
	ReplaceRoute(context.Context, *ec2.ReplaceRouteInput, ...func(*ec2.Options)) (*ec2.ReplaceRouteOutput, error)
	DeleteRoute(context.Context, *ec2.DeleteRouteInput, ...func(*ec2.Options)) (*ec2.DeleteRouteOutput, error)
	CreateTags(context.Context, *ec2.CreateTagsInput, ...func(*ec2.Options)) (*ec2.CreateTagsOutput, error)
	DeleteTags(context.Context, *ec2.DeleteTagsInput, ...func(*ec2.Options)) (*ec2.DeleteTagsOutput, error)
	AuthorizeSecurityGroupIngress(context.Context, *ec2.AuthorizeSecurityGroupIngressInput, ...func(*ec2.Options)) (*ec2.AuthorizeSecurityGroupIngressOutput, error)
	RevokeSecurityGroupIngress(context.Context, *ec2.RevokeSecurityGroupIngressInput, ...func(*ec2.Options)) (*ec2.RevokeSecurityGroupIngressOutput, error)
}

// Tag keys and the description prefix that mark what fednet made.
const (
	// RouteTagPrefix + the destination prefix is the route table tag of a
	// route fednet made; its value is FEDERATION/SITE.
	RouteTagPrefix = "fednet:route:"
	// CheckTagPrefix + FEDERATION/SITE is the interface tag recording that
	// fednet turned the source/destination check off; its value is the
	// check's previous value, which Remove restores.
	CheckTagPrefix = "fednet:source-dest-check:"
)

// Config says which site to reconcile.
type Config struct {
	// EC2 is the client, for the site's region.
	EC2 EC2
	// Federation is the parsed spec (for the site's cloud block and the
	// lines of its fields in error messages).
	Federation *spec.Federation
	// Needs is what the site needs (cloud.Compute).
	Needs cloud.Needs
}

// Site reconciles one site's VPC. Its methods are safe to call again; they
// are not meant to run concurrently for the same site.
type Site struct {
	ec2   EC2
	f     *spec.Federation
	needs cloud.Needs
	spec  *spec.AWSCloud
	index int
	// owner is FEDERATION/SITE, the value of fednet's marks.
	owner string
}

// New checks cfg. The site must have a cloud.aws block.
func New(cfg Config) (*Site, error) {
	if cfg.EC2 == nil || cfg.Federation == nil {
		return nil, errors.New("aws: Config needs EC2 and Federation")
	}
	for i := range cfg.Federation.Sites {
		s := &cfg.Federation.Sites[i]
		if s.Name != cfg.Needs.Site {
			continue
		}
		if s.Cloud == nil || s.Cloud.AWS == nil {
			return nil, fmt.Errorf("site %s has no cloud.aws block", s.Name)
		}
		return &Site{ec2: cfg.EC2, f: cfg.Federation, needs: cfg.Needs, spec: s.Cloud.AWS, index: i, owner: cfg.Federation.Name + "/" + s.Name}, nil
	}
	return nil, fmt.Errorf("no site %q in the spec", cfg.Needs.Site)
}

// Action is one kind of change to the VPC.
type Action uint8

// Actions.
const (
	DisableCheck Action = iota + 1 // source/destination check off
	RestoreCheck                   // source/destination check back on
	CreateRoute
	ReplaceRoute
	DeleteRoute
	ForgetRoute // drop fednet's tag of a route that is gone or no longer fednet's
	Authorize
	Revoke
)

var actionNames = map[Action]string{
	DisableCheck: "disable-source-dest-check", RestoreCheck: "restore-source-dest-check",
	CreateRoute: "create-route", ReplaceRoute: "replace-route", DeleteRoute: "delete-route", ForgetRoute: "forget-route",
	Authorize: "authorize-ingress", Revoke: "revoke-ingress",
}

func (a Action) String() string {
	if s, ok := actionNames[a]; ok {
		return s
	}
	return fmt.Sprintf("Action(%d)", uint8(a))
}

// Change is one change to the VPC. String renders it as the aws CLI
// command that would do the same.
type Change struct {
	Action Action
	// Resource is the interface, route table or security group changed.
	Resource string
	// Gateway names the gateway whose interface it is (check changes).
	Gateway string
	// Destination and Target are a route's prefix and interface.
	Destination netip.Prefix
	Target      string
	// Rule is an ingress rule (Authorize, Revoke).
	Rule Rule
	// Restore is, for RestoreCheck, the check's value before fednet
	// turned it off: Remove sets it back on only when it was on.
	Restore bool
	// Owner is FEDERATION/SITE, whose marks the change writes or deletes.
	Owner string
}

// Rule is one security-group ingress rule.
type Rule struct {
	Protocol backend.Protocol
	Port     int
	Source   netip.Prefix
	// Description marks fednet's rules.
	Description string
}

func (c Change) String() string {
	switch c.Action {
	case DisableCheck:
		return fmt.Sprintf("aws ec2 modify-network-interface-attribute --network-interface-id %s --no-source-dest-check   # gateway %s", c.Resource, c.Gateway)
	case RestoreCheck:
		if !c.Restore {
			return fmt.Sprintf("aws ec2 delete-tags --resources %s --tags Key=%s%s   # gateway %s: the check was off before fednet; it stays off", c.Resource, CheckTagPrefix, c.Owner, c.Gateway)
		}
		return fmt.Sprintf("aws ec2 modify-network-interface-attribute --network-interface-id %s --source-dest-check   # gateway %s", c.Resource, c.Gateway)
	case CreateRoute, ReplaceRoute:
		return fmt.Sprintf("aws ec2 %s --route-table-id %s --%s %s --network-interface-id %s", c.Action, c.Resource, cidrFlag(c.Destination), c.Destination, c.Target)
	case DeleteRoute:
		return fmt.Sprintf("aws ec2 delete-route --route-table-id %s --%s %s", c.Resource, cidrFlag(c.Destination), c.Destination)
	case ForgetRoute:
		return fmt.Sprintf("aws ec2 delete-tags --resources %s --tags Key=%s%s   # the route is not fednet's (any more)", c.Resource, RouteTagPrefix, c.Destination)
	case Authorize:
		return fmt.Sprintf("aws ec2 authorize-security-group-ingress --group-id %s --ip-permissions '%s'", c.Resource, c.Rule.permissionText())
	case Revoke:
		return fmt.Sprintf("aws ec2 revoke-security-group-ingress --group-id %s --ip-permissions '%s'", c.Resource, Rule{Protocol: c.Rule.Protocol, Port: c.Rule.Port, Source: c.Rule.Source}.permissionText())
	}
	return c.Action.String()
}

func cidrFlag(p netip.Prefix) string {
	if p.Addr().Is6() {
		return "destination-ipv6-cidr-block"
	}
	return "destination-cidr-block"
}

func (r Rule) permissionText() string {
	var b strings.Builder
	fmt.Fprintf(&b, "IpProtocol=%s", protocolName(r.Protocol))
	if r.Port != 0 {
		fmt.Fprintf(&b, ",FromPort=%d,ToPort=%d", r.Port, r.Port)
	}
	key, field := "IpRanges", "CidrIp"
	if r.Source.Addr().Is6() {
		key, field = "Ipv6Ranges", "CidrIpv6"
	}
	fmt.Fprintf(&b, ",%s=[{%s=%s", key, field, r.Source)
	if r.Description != "" {
		fmt.Fprintf(&b, ",Description=%q", r.Description)
	}
	b.WriteString("}]")
	return b.String()
}

// protocolName is the EC2 name of a protocol: tcp and udp by name, others
// by number.
func protocolName(p backend.Protocol) string {
	if p == backend.TCP || p == backend.UDP {
		return p.String()
	}
	return strconv.Itoa(int(p))
}

// state is what the site's resources hold now.
type state struct {
	// enis maps each gateway to its interface.
	enis map[string]eni
	// tables are the route tables in spec order.
	tables []table
	// rules are the security group's ingress rules with an IP range.
	rules []Rule
}

type eni struct {
	id    string
	check bool
	// mark is the value of fednet's check tag, "" when absent.
	mark string
}

type table struct {
	id string
	// routes maps a destination to its target (an interface id, or the
	// gateway, NAT gateway, peering … id; "" when unknown).
	routes map[netip.Prefix]string
	// ours are the destinations whose tag says fednet made their route
	// for this site.
	ours map[netip.Prefix]bool
}

// Describe names a site's AWS resources, for humans: the VPC, the route
// tables, the security group and each gateway's instance or interface.
func Describe(a *spec.AWSCloud, n cloud.Needs) string {
	var b strings.Builder
	fmt.Fprintf(&b, "AWS %s: vpc %s, route tables %s, security group %s\n", a.Region, a.VPC, strings.Join(a.RouteTables, ", "), a.SecurityGroup)
	for _, g := range n.Gateways {
		id := a.Gateways[g.Name]
		what := "instance " + id.Instance
		if id.ENI != "" {
			what = "network interface " + id.ENI
		}
		active := ""
		if g.Name == n.Active {
			active = " (active: the routes' target)"
		}
		fmt.Fprintf(&b, "  gateway %s: %s%s\n", g.Name, what, active)
	}
	return b.String()
}

// Plan reads the site's resources and returns the changes Apply would
// make, in the order it would make them; nothing is changed.
func (s *Site) Plan(ctx context.Context) ([]Change, error) {
	st, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	return s.diff(st)
}

// Apply brings the site's resources to the site's needs and returns what
// it changed. It reads and checks everything first: bad identifiers and
// conflicts change nothing. A call that fails then does not stop the
// others; Apply returns every error, and running it again completes the
// rest.
func (s *Site) Apply(ctx context.Context) ([]Change, error) {
	changes, err := s.Plan(ctx)
	if err != nil {
		return nil, err
	}
	return s.execute(ctx, changes)
}

// PlanRemove returns the changes Remove would make.
func (s *Site) PlanRemove(ctx context.Context) ([]Change, error) {
	st, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	return s.removal(st), nil
}

// Remove deletes every route and rule fednet made for this site and
// restores the source/destination checks it turned off, and returns what
// it changed. Resources fednet did not mark are left alone.
func (s *Site) Remove(ctx context.Context) ([]Change, error) {
	changes, err := s.PlanRemove(ctx)
	if err != nil {
		return nil, err
	}
	return s.execute(ctx, changes)
}

func (s *Site) path(field string) string {
	return fmt.Sprintf("sites[%d].cloud.aws.%s", s.index, field)
}

// field names a spec field with its line, for messages.
func (s *Site) field(name string) string {
	p := s.path(name)
	if l := s.f.Line(p); l > 0 {
		return fmt.Sprintf("%s (line %d)", p, l)
	}
	return p
}

// read describes the VPC, the gateways' interfaces, the route tables and
// the security group, checking that each exists and is in the VPC.
func (s *Site) read(ctx context.Context) (*state, error) {
	a := s.spec
	st := &state{enis: map[string]eni{}}
	if _, err := s.ec2.DescribeVpcs(ctx, &ec2.DescribeVpcsInput{VpcIds: []string{a.VPC}}); err != nil {
		return nil, s.callError("DescribeVpcs", a.VPC, "vpc", err)
	}
	for _, gw := range s.needs.Gateways {
		g := a.Gateways[gw.Name]
		fieldName := "gateways." + gw.Name
		if a.Instance != "" || a.ENI != "" {
			fieldName = map[bool]string{true: "instance", false: "eni"}[a.Instance != ""]
		}
		var iface types.NetworkInterface
		if g.Instance != "" {
			id, err := s.primaryENI(ctx, g.Instance, fieldName)
			if err != nil {
				return nil, err
			}
			g.ENI = id
		}
		out, err := s.ec2.DescribeNetworkInterfaces(ctx, &ec2.DescribeNetworkInterfacesInput{NetworkInterfaceIds: []string{g.ENI}})
		if err != nil {
			return nil, s.callError("DescribeNetworkInterfaces", g.ENI, fieldName, err)
		}
		if len(out.NetworkInterfaces) != 1 {
			return nil, fmt.Errorf("site %s: %s: network interface %s not found", s.needs.Site, s.field(fieldName), g.ENI)
		}
		iface = out.NetworkInterfaces[0]
		if v := sdk.ToString(iface.VpcId); v != a.VPC {
			return nil, fmt.Errorf("site %s: %s: network interface %s of gateway %s is in %s, not in the site's %s (%s)", s.needs.Site, s.field(fieldName), g.ENI, gw.Name, v, a.VPC, s.field("vpc"))
		}
		e := eni{id: g.ENI, check: sdk.ToBool(iface.SourceDestCheck)}
		for _, t := range iface.TagSet {
			if sdk.ToString(t.Key) == CheckTagPrefix+s.owner {
				e.mark = sdk.ToString(t.Value)
				if e.mark == "" {
					e.mark = "true"
				}
			}
		}
		st.enis[gw.Name] = e
	}
	for k, id := range a.RouteTables {
		out, err := s.ec2.DescribeRouteTables(ctx, &ec2.DescribeRouteTablesInput{RouteTableIds: []string{id}})
		field := fmt.Sprintf("routeTables[%d]", k)
		if err != nil {
			return nil, s.callError("DescribeRouteTables", id, field, err)
		}
		if len(out.RouteTables) != 1 {
			return nil, fmt.Errorf("site %s: %s: route table %s not found", s.needs.Site, s.field(field), id)
		}
		rt := out.RouteTables[0]
		if v := sdk.ToString(rt.VpcId); v != a.VPC {
			return nil, fmt.Errorf("site %s: %s: route table %s is in %s, not in the site's %s (%s)", s.needs.Site, s.field(field), id, v, a.VPC, s.field("vpc"))
		}
		t := table{id: id, routes: map[netip.Prefix]string{}, ours: map[netip.Prefix]bool{}}
		for _, r := range rt.Routes {
			dst := sdk.ToString(r.DestinationCidrBlock)
			if dst == "" {
				dst = sdk.ToString(r.DestinationIpv6CidrBlock)
			}
			p, err := netip.ParsePrefix(dst)
			if err != nil {
				continue // a prefix list route
			}
			t.routes[p.Masked()] = routeTarget(r)
		}
		for _, tag := range rt.Tags {
			if rest, ok := strings.CutPrefix(sdk.ToString(tag.Key), RouteTagPrefix); ok && sdk.ToString(tag.Value) == s.owner {
				if p, err := netip.ParsePrefix(rest); err == nil {
					t.ours[p] = true
				}
			}
		}
		st.tables = append(st.tables, t)
	}
	out, err := s.ec2.DescribeSecurityGroups(ctx, &ec2.DescribeSecurityGroupsInput{GroupIds: []string{a.SecurityGroup}})
	if err != nil {
		return nil, s.callError("DescribeSecurityGroups", a.SecurityGroup, "securityGroup", err)
	}
	if len(out.SecurityGroups) != 1 {
		return nil, fmt.Errorf("site %s: %s: security group %s not found", s.needs.Site, s.field("securityGroup"), a.SecurityGroup)
	}
	sg := out.SecurityGroups[0]
	if v := sdk.ToString(sg.VpcId); v != a.VPC {
		return nil, fmt.Errorf("site %s: %s: security group %s is in %s, not in the site's %s (%s)", s.needs.Site, s.field("securityGroup"), a.SecurityGroup, v, a.VPC, s.field("vpc"))
	}
	st.rules = ingressRules(sg.IpPermissions)
	return st, nil
}

// primaryENI returns the interface at device index 0 of an instance.
func (s *Site) primaryENI(ctx context.Context, instance, field string) (string, error) {
	out, err := s.ec2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{instance}})
	if err != nil {
		return "", s.callError("DescribeInstances", instance, field, err)
	}
	for _, r := range out.Reservations {
		for _, in := range r.Instances {
			for _, ni := range in.NetworkInterfaces {
				if ni.Attachment != nil && sdk.ToInt32(ni.Attachment.DeviceIndex) == 0 {
					return sdk.ToString(ni.NetworkInterfaceId), nil
				}
			}
		}
	}
	return "", fmt.Errorf("site %s: %s: instance %s has no primary network interface (device index 0); name the gateway's interface with eni: instead", s.needs.Site, s.field(field), instance)
}

// routeTarget is the id a route points at.
func routeTarget(r types.Route) string {
	for _, id := range []*string{r.NetworkInterfaceId, r.InstanceId, r.GatewayId, r.NatGatewayId, r.TransitGatewayId, r.VpcPeeringConnectionId, r.LocalGatewayId, r.CarrierGatewayId, r.EgressOnlyInternetGatewayId} {
		if v := sdk.ToString(id); v != "" {
			return v
		}
	}
	return ""
}

// ingressRules flattens the security group's permissions into rules with
// one source each; permissions with a port range or a group source are
// not fednet's and are left out.
func ingressRules(perms []types.IpPermission) []Rule {
	var out []Rule
	for _, p := range perms {
		proto, ok := parseProtocol(sdk.ToString(p.IpProtocol))
		if !ok {
			continue
		}
		from, to := int(sdk.ToInt32(p.FromPort)), int(sdk.ToInt32(p.ToPort))
		if from != to && proto != backend.ESP {
			continue
		}
		port := from
		if proto == backend.ESP {
			port = 0
		}
		add := func(cidr, desc string) {
			if src, err := netip.ParsePrefix(cidr); err == nil {
				out = append(out, Rule{Protocol: proto, Port: port, Source: src.Masked(), Description: desc})
			}
		}
		for _, r := range p.IpRanges {
			add(sdk.ToString(r.CidrIp), sdk.ToString(r.Description))
		}
		for _, r := range p.Ipv6Ranges {
			add(sdk.ToString(r.CidrIpv6), sdk.ToString(r.Description))
		}
	}
	return out
}

func parseProtocol(s string) (backend.Protocol, bool) {
	switch s {
	case "udp", "17":
		return backend.UDP, true
	case "tcp", "6":
		return backend.TCP, true
	case "50":
		return backend.ESP, true
	}
	return 0, false
}

// description is the description of fednet's rule for an ingress need.
func (s *Site) description(in cloud.Ingress) string {
	what := "peer"
	if len(in.Peers) > 1 {
		what = "peers"
	}
	if in.Source == cloud.Anywhere {
		what = "behind NAT"
	}
	d := fmt.Sprintf("%s: %s %s", s.mark(), what, strings.Join(in.Peers, " "))
	if len(d) > 255 {
		d = d[:255]
	}
	return d
}

// mark is the description prefix of fednet's rules for this site.
func (s *Site) mark() string { return "fednet " + s.owner }

func (s *Site) ours(r Rule) bool {
	return r.Description == s.mark() || strings.HasPrefix(r.Description, s.mark()+":")
}

// diff computes Apply's changes: checks first, then ingress, then routes,
// so traffic is steered to the gateway only once it can pass.
func (s *Site) diff(st *state) ([]Change, error) {
	var changes []Change
	for _, gw := range s.needs.Gateways {
		e := st.enis[gw.Name]
		if e.check {
			changes = append(changes, Change{Action: DisableCheck, Resource: e.id, Gateway: gw.Name})
		}
	}

	type ruleKey struct {
		proto  backend.Protocol
		port   int
		source netip.Prefix
	}
	want := map[ruleKey]bool{}
	have := map[ruleKey]bool{}
	for _, r := range st.rules {
		have[ruleKey{r.Protocol, r.Port, r.Source}] = true
	}
	for _, in := range s.needs.Ingress {
		k := ruleKey{in.Protocol, in.Port, in.Source}
		want[k] = true
		if !have[k] {
			changes = append(changes, Change{Action: Authorize, Resource: s.spec.SecurityGroup,
				Rule: Rule{Protocol: in.Protocol, Port: in.Port, Source: in.Source, Description: s.description(in)}})
		}
	}
	for _, r := range st.rules {
		if s.ours(r) && !want[ruleKey{r.Protocol, r.Port, r.Source}] {
			changes = append(changes, Change{Action: Revoke, Resource: s.spec.SecurityGroup, Rule: r})
		}
	}

	target := st.enis[s.needs.Active].id
	var conflicts []error
	for k, t := range st.tables {
		wanted := map[netip.Prefix]bool{}
		for _, p := range s.needs.Routes {
			wanted[p] = true
			cur, exists := t.routes[p]
			switch {
			case !exists:
				changes = append(changes, Change{Action: CreateRoute, Resource: t.id, Destination: p, Target: target})
			case cur == target:
			case t.ours[p]:
				changes = append(changes, Change{Action: ReplaceRoute, Resource: t.id, Destination: p, Target: target})
			default:
				conflicts = append(conflicts, fmt.Errorf("site %s: route table %s (%s) already routes %s to %s, and fednet did not make that route; delete it or take %s out of the federation's networks", s.needs.Site, t.id, s.field(fmt.Sprintf("routeTables[%d]", k)), p, orUnknown(cur), p))
			}
		}
		for _, p := range sortedPrefixes(t.ours) {
			if wanted[p] {
				continue
			}
			if cur, exists := t.routes[p]; exists && s.gatewayENI(st, cur) {
				changes = append(changes, Change{Action: DeleteRoute, Resource: t.id, Destination: p})
			} else {
				changes = append(changes, Change{Action: ForgetRoute, Resource: t.id, Destination: p})
			}
		}
	}
	if len(conflicts) > 0 {
		return nil, errors.Join(conflicts...)
	}
	return changes, nil
}

// removal computes Remove's changes: routes first, then rules, then the
// checks, the reverse of Apply's order.
func (s *Site) removal(st *state) []Change {
	var changes []Change
	for _, t := range st.tables {
		for _, p := range sortedPrefixes(t.ours) {
			if cur, exists := t.routes[p]; exists && s.gatewayENI(st, cur) {
				changes = append(changes, Change{Action: DeleteRoute, Resource: t.id, Destination: p})
			} else {
				changes = append(changes, Change{Action: ForgetRoute, Resource: t.id, Destination: p})
			}
		}
	}
	for _, r := range st.rules {
		if s.ours(r) {
			changes = append(changes, Change{Action: Revoke, Resource: s.spec.SecurityGroup, Rule: r})
		}
	}
	for _, gw := range s.needs.Gateways {
		if e := st.enis[gw.Name]; e.mark != "" {
			changes = append(changes, Change{Action: RestoreCheck, Resource: e.id, Gateway: gw.Name, Restore: e.mark == "true", Owner: s.owner})
		}
	}
	return changes
}

// gatewayENI reports whether id is the interface of one of the site's
// gateways.
func (s *Site) gatewayENI(st *state, id string) bool {
	for _, e := range st.enis {
		if e.id == id {
			return true
		}
	}
	return false
}

func orUnknown(s string) string {
	if s == "" {
		return "an unknown target"
	}
	return s
}

func sortedPrefixes(m map[netip.Prefix]bool) []netip.Prefix {
	var out []netip.Prefix
	for p := range m {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	return out
}

// execute makes the changes in order. A failed change does not stop the
// others: the errors are joined. Marks are written before what they mark
// is made and deleted after it is gone, so an interrupted run leaves
// nothing unmarked.
func (s *Site) execute(ctx context.Context, changes []Change) ([]Change, error) {
	var done []Change
	var errs []error
	for _, c := range changes {
		if err := s.do(ctx, c); err != nil {
			errs = append(errs, err)
			continue
		}
		done = append(done, c)
	}
	return done, errors.Join(errs...)
}

func (s *Site) do(ctx context.Context, c Change) error {
	routeTag := []types.Tag{{Key: sdk.String(RouteTagPrefix + c.Destination.String()), Value: sdk.String(s.owner)}}
	checkTag := []types.Tag{{Key: sdk.String(CheckTagPrefix + s.owner)}}
	switch c.Action {
	case DisableCheck:
		checkTag[0].Value = sdk.String("true")
		if _, err := s.ec2.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{c.Resource}, Tags: checkTag}); err != nil {
			return s.callError("CreateTags", c.Resource, "", err)
		}
		_, err := s.ec2.ModifyNetworkInterfaceAttribute(ctx, &ec2.ModifyNetworkInterfaceAttributeInput{
			NetworkInterfaceId: sdk.String(c.Resource), SourceDestCheck: &types.AttributeBooleanValue{Value: sdk.Bool(false)}})
		return s.callError("ModifyNetworkInterfaceAttribute", c.Resource+" (source/dest check off)", "", err)
	case RestoreCheck:
		if c.Restore {
			_, err := s.ec2.ModifyNetworkInterfaceAttribute(ctx, &ec2.ModifyNetworkInterfaceAttributeInput{
				NetworkInterfaceId: sdk.String(c.Resource), SourceDestCheck: &types.AttributeBooleanValue{Value: sdk.Bool(true)}})
			if err != nil {
				return s.callError("ModifyNetworkInterfaceAttribute", c.Resource+" (source/dest check on)", "", err)
			}
		}
		_, err := s.ec2.DeleteTags(ctx, &ec2.DeleteTagsInput{Resources: []string{c.Resource}, Tags: checkTag})
		return s.callError("DeleteTags", c.Resource, "", err)
	case CreateRoute:
		if _, err := s.ec2.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{c.Resource}, Tags: routeTag}); err != nil {
			return s.callError("CreateTags", c.Resource, "", err)
		}
		in := &ec2.CreateRouteInput{RouteTableId: sdk.String(c.Resource), NetworkInterfaceId: sdk.String(c.Target)}
		if c.Destination.Addr().Is6() {
			in.DestinationIpv6CidrBlock = sdk.String(c.Destination.String())
		} else {
			in.DestinationCidrBlock = sdk.String(c.Destination.String())
		}
		_, err := s.ec2.CreateRoute(ctx, in)
		return s.callError("CreateRoute", c.Resource+" "+c.Destination.String()+" -> "+c.Target, "", err)
	case ReplaceRoute:
		in := &ec2.ReplaceRouteInput{RouteTableId: sdk.String(c.Resource), NetworkInterfaceId: sdk.String(c.Target)}
		if c.Destination.Addr().Is6() {
			in.DestinationIpv6CidrBlock = sdk.String(c.Destination.String())
		} else {
			in.DestinationCidrBlock = sdk.String(c.Destination.String())
		}
		_, err := s.ec2.ReplaceRoute(ctx, in)
		return s.callError("ReplaceRoute", c.Resource+" "+c.Destination.String()+" -> "+c.Target, "", err)
	case DeleteRoute:
		in := &ec2.DeleteRouteInput{RouteTableId: sdk.String(c.Resource)}
		if c.Destination.Addr().Is6() {
			in.DestinationIpv6CidrBlock = sdk.String(c.Destination.String())
		} else {
			in.DestinationCidrBlock = sdk.String(c.Destination.String())
		}
		if _, err := s.ec2.DeleteRoute(ctx, in); err != nil {
			return s.callError("DeleteRoute", c.Resource+" "+c.Destination.String(), "", err)
		}
		fallthrough
	case ForgetRoute:
		routeTag[0].Value = nil
		_, err := s.ec2.DeleteTags(ctx, &ec2.DeleteTagsInput{Resources: []string{c.Resource}, Tags: routeTag})
		return s.callError("DeleteTags", c.Resource, "", err)
	case Authorize:
		_, err := s.ec2.AuthorizeSecurityGroupIngress(ctx, &ec2.AuthorizeSecurityGroupIngressInput{GroupId: sdk.String(c.Resource), IpPermissions: []types.IpPermission{permission(c.Rule)}})
		return s.callError("AuthorizeSecurityGroupIngress", c.Resource+" "+ruleText(c.Rule), "", err)
	case Revoke:
		r := c.Rule
		r.Description = ""
		_, err := s.ec2.RevokeSecurityGroupIngress(ctx, &ec2.RevokeSecurityGroupIngressInput{GroupId: sdk.String(c.Resource), IpPermissions: []types.IpPermission{permission(r)}})
		return s.callError("RevokeSecurityGroupIngress", c.Resource+" "+ruleText(c.Rule), "", err)
	}
	return fmt.Errorf("aws: unknown change %v", c.Action)
}

func ruleText(r Rule) string {
	return fmt.Sprintf("%s from %s", backend.Port{Protocol: r.Protocol, Port: r.Port}, r.Source)
}

func permission(r Rule) types.IpPermission {
	p := types.IpPermission{IpProtocol: sdk.String(protocolName(r.Protocol))}
	if r.Port != 0 {
		p.FromPort, p.ToPort = sdk.Int32(int32(r.Port)), sdk.Int32(int32(r.Port))
	}
	var desc *string
	if r.Description != "" {
		desc = sdk.String(r.Description)
	}
	if r.Source.Addr().Is6() {
		p.Ipv6Ranges = []types.Ipv6Range{{CidrIpv6: sdk.String(r.Source.String()), Description: desc}}
	} else {
		p.IpRanges = []types.IpRange{{CidrIp: sdk.String(r.Source.String()), Description: desc}}
	}
	return p
}

const credentialsHint = "; no usable AWS credentials: fednet finds them the standard AWS way (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE and ~/.aws, or the instance role)"

// callError wraps the error of an EC2 call with the site, the call and
// what it was about, and says what to do about the common failures:
// missing permissions, unknown identifiers (naming the spec field when
// field is given), missing credentials. It returns nil for a nil err.
func (s *Site) callError(call, what, field string, err error) error {
	if err == nil {
		return nil
	}
	hint := ""
	var ae smithy.APIError
	if errors.As(err, &ae) {
		code := ae.ErrorCode()
		switch {
		case code == "UnauthorizedOperation" || code == "AccessDenied" || code == "AccessDeniedException":
			hint = fmt.Sprintf("; the AWS credentials in use may not call ec2:%s: grant it (docs/cloud.md lists the IAM policy fednet needs)", call)
		case strings.HasSuffix(code, ".NotFound") || strings.HasSuffix(code, ".Malformed"):
			if field != "" {
				hint = fmt.Sprintf("; check %s in the spec: %s does not exist in region %s", s.field(field), strings.Fields(what)[0], s.spec.Region)
			}
		case code == "AuthFailure" || code == "InvalidClientTokenId" || code == "SignatureDoesNotMatch" || code == "ExpiredToken":
			hint = credentialsHint
		}
	} else if strings.Contains(err.Error(), "retrieve credentials") {
		hint = credentialsHint
	}
	return fmt.Errorf("site %s: ec2 %s %s: %w%s", s.needs.Site, call, what, err, hint)
}
