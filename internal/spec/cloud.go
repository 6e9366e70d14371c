package spec

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Cloud names, in a site's provider's own identifiers, the resources that
// `fednet cloud` configures so that the site's hosts reach the federation
// through its gateway: route tables, the gateway's network interface, the
// security group or firewall of its public side. Exactly one provider block
// is set. Credentials never go here: each provider's own tools find them
// (docs/cloud.md).
type Cloud struct {
	AWS       *AWSCloud       `yaml:"aws,omitempty" json:"aws,omitempty"`
	Azure     *AzureCloud     `yaml:"azure,omitempty" json:"azure,omitempty"`
	GCP       *GCPCloud       `yaml:"gcp,omitempty" json:"gcp,omitempty"`
	OpenStack *OpenStackCloud `yaml:"openstack,omitempty" json:"openstack,omitempty"`
}

// CloudKind is the provider a site's cloud block is for.
type CloudKind string

// Cloud kinds. The zero CloudKind means no cloud block.
const (
	CloudAWS       CloudKind = "aws"
	CloudAzure     CloudKind = "azure"
	CloudGCP       CloudKind = "gcp"
	CloudOpenStack CloudKind = "openstack"
)

func (k CloudKind) String() string { return string(k) }

// Kind returns the provider whose block is set (the first, if a spec that
// did not pass Parse sets several), or "" for none.
func (c *Cloud) Kind() CloudKind {
	switch {
	case c == nil:
		return ""
	case c.AWS != nil:
		return CloudAWS
	case c.Azure != nil:
		return CloudAzure
	case c.GCP != nil:
		return CloudGCP
	case c.OpenStack != nil:
		return CloudOpenStack
	}
	return ""
}

// AWSCloud holds a site's AWS identifiers: one VPC, the route tables of
// the site's subnets, the security group of the gateways' public side,
// and the instance or network interface (ENI) of each gateway.
type AWSCloud struct {
	// Region defaults to the site's region.
	Region string `yaml:"region,omitempty" json:"region,omitempty"`
	// VPC is the VPC id (vpc-…).
	VPC string `yaml:"vpc" json:"vpc"`
	// RouteTables are the ids (rtb-…) of the route tables of the site's
	// subnets; each gets a route for every remote prefix to the active
	// gateway.
	RouteTables []string `yaml:"routeTables" json:"routeTables"`
	// SecurityGroup (sg-…) is the security group of the gateways' public
	// interface; it gets ingress for the tunnel port from every peer.
	SecurityGroup string `yaml:"securityGroup" json:"securityGroup"`
	// Instance or ENI name the gateway of a site with one gateway; use
	// Gateways for several.
	Instance string `yaml:"instance,omitempty" json:"instance,omitempty"`
	ENI      string `yaml:"eni,omitempty" json:"eni,omitempty"`
	// Gateways maps each gateway of the site to its instance or ENI.
	// Parse fills it from Instance or ENI for a one-gateway site.
	Gateways map[string]AWSGateway `yaml:"gateways,omitempty" json:"gateways,omitempty"`
}

// AWSGateway names one gateway's instance (i-…) or its network interface
// (eni-…): exactly one of the two. With an instance, fednet uses its
// primary network interface.
type AWSGateway struct {
	Instance string `yaml:"instance,omitempty" json:"instance,omitempty"`
	ENI      string `yaml:"eni,omitempty" json:"eni,omitempty"`
}

// AzureCloud holds a site's Azure names, for the az script.
type AzureCloud struct {
	// Subscription is optional (the az CLI's current one by default).
	Subscription  string `yaml:"subscription,omitempty" json:"subscription,omitempty"`
	ResourceGroup string `yaml:"resourceGroup" json:"resourceGroup"`
	// RouteTables are the names of the route tables of the site's subnets.
	RouteTables []string `yaml:"routeTables" json:"routeTables"`
	// NSG is the network security group of the gateways' public NIC.
	NSG string `yaml:"nsg" json:"nsg"`
	// Priority is the first NSG rule priority fednet uses (100..4000,
	// default 3000); one rule per tunnel port, counting up.
	Priority int `yaml:"priority,omitempty" json:"priority,omitempty"`
	// NIC names the gateway's network interface for a one-gateway site.
	NIC string `yaml:"nic,omitempty" json:"nic,omitempty"`
	// Gateways maps each gateway of the site to its NIC.
	Gateways map[string]AzureGateway `yaml:"gateways,omitempty" json:"gateways,omitempty"`
}

// AzureGateway names one gateway's network interface.
type AzureGateway struct {
	NIC string `yaml:"nic" json:"nic"`
}

// GCPCloud holds a site's Google Cloud names, for the gcloud script.
type GCPCloud struct {
	Project string `yaml:"project" json:"project"`
	// Network is the VPC network of the site.
	Network string `yaml:"network" json:"network"`
	// Instance and Zone name the gateway of a one-gateway site.
	Instance string `yaml:"instance,omitempty" json:"instance,omitempty"`
	Zone     string `yaml:"zone,omitempty" json:"zone,omitempty"`
	// Gateways maps each gateway of the site to its instance.
	Gateways map[string]GCPGateway `yaml:"gateways,omitempty" json:"gateways,omitempty"`
}

// GCPGateway names one gateway's instance and zone.
type GCPGateway struct {
	Instance string `yaml:"instance" json:"instance"`
	Zone     string `yaml:"zone" json:"zone"`
}

// OpenStackCloud holds a site's OpenStack (Neutron) names, for the
// openstack script. The site's hosts learn the routes to remote prefixes
// from the router of their subnet (Router) or from DHCP host routes of the
// subnet (Subnet; the private network of a DMZ setup has no router); at
// least one of the two.
type OpenStackCloud struct {
	Router string `yaml:"router,omitempty" json:"router,omitempty"`
	Subnet string `yaml:"subnet,omitempty" json:"subnet,omitempty"`
	// SecurityGroup is the group of the gateways' public port.
	SecurityGroup string `yaml:"securityGroup" json:"securityGroup"`
	// Port names the LAN port of the gateway of a one-gateway site: the
	// port on the site's network that forwards for remote prefixes and so
	// needs them as allowed address pairs.
	Port string `yaml:"port,omitempty" json:"port,omitempty"`
	// Gateways maps each gateway of the site to its LAN port.
	Gateways map[string]OpenStackGateway `yaml:"gateways,omitempty" json:"gateways,omitempty"`
}

// OpenStackGateway names one gateway's port on the site network.
type OpenStackGateway struct {
	Port string `yaml:"port" json:"port"`
}

// DefaultAzurePriority is the first NSG rule priority of AzureCloud.
const DefaultAzurePriority = 3000

// AWS identifiers: a prefix and 8 or 17 hex digits.
var (
	awsVPC      = regexp.MustCompile(`^vpc-[0-9a-f]{8}([0-9a-f]{9})?$`)
	awsRTB      = regexp.MustCompile(`^rtb-[0-9a-f]{8}([0-9a-f]{9})?$`)
	awsSG       = regexp.MustCompile(`^sg-[0-9a-f]{8}([0-9a-f]{9})?$`)
	awsInstance = regexp.MustCompile(`^i-[0-9a-f]{8}([0-9a-f]{9})?$`)
	awsENI      = regexp.MustCompile(`^eni-[0-9a-f]{8}([0-9a-f]{9})?$`)
	awsRegion   = regexp.MustCompile(`^[a-z]{2}(-[a-z]+)+-[0-9]+$`)
	// cloudName is what Azure, GCP and OpenStack names and ids have in
	// common and what a shell script can carry unquoted.
	cloudName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._()-]{0,127}$`)
)

// clouds validates every site's cloud block and fills each provider's
// Gateways from its one-gateway shorthand.
func (c *checker) clouds() {
	for i := range c.f.Sites {
		s := &c.f.Sites[i]
		path := fmt.Sprintf("sites[%d].cloud", i)
		if s.Cloud == nil || c.ps.isBad(path) {
			continue
		}
		set := 0
		for _, b := range []bool{s.Cloud.AWS != nil, s.Cloud.Azure != nil, s.Cloud.GCP != nil, s.Cloud.OpenStack != nil} {
			if b {
				set++
			}
		}
		if set != 1 {
			c.add(path, "site %s's cloud block names %d providers; want exactly one of aws, azure, gcp, openstack (with the site's identifiers under it)", s.Name, set)
			continue
		}
		kind := s.Cloud.Kind()
		if known := CloudKind(s.Provider); known.known() && known != kind {
			c.add(path+"."+string(kind), "site %s has provider %s but a cloud block for %s; write the block under cloud.%s, or correct the provider", s.Name, s.Provider, kind, s.Provider)
			continue
		}
		cc := cloudChecker{c: c, site: s, path: path + "." + string(kind)}
		switch kind {
		case CloudAWS:
			cc.aws(s.Cloud.AWS)
		case CloudAzure:
			cc.azure(s.Cloud.Azure)
		case CloudGCP:
			cc.gcp(s.Cloud.GCP)
		case CloudOpenStack:
			cc.openstack(s.Cloud.OpenStack)
		}
	}
}

func (k CloudKind) known() bool {
	return k == CloudAWS || k == CloudAzure || k == CloudGCP || k == CloudOpenStack
}

// cloudChecker validates one site's provider block at path.
type cloudChecker struct {
	c    *checker
	site *Site
	path string
}

// id checks a required identifier against a pattern.
func (cc cloudChecker) id(field, value string, re *regexp.Regexp, want string) {
	p := cc.path + "." + field
	switch {
	case cc.c.ps.isBad(p):
	case value == "":
		cc.c.add(p, "site %s: %s is missing; want %s", cc.site.Name, field, want)
	case !re.MatchString(value):
		cc.c.add(p, "%q is not %s", value, want)
	}
}

// list checks a required list of identifiers.
func (cc cloudChecker) list(field string, values []string, re *regexp.Regexp, want string) {
	p := cc.path + "." + field
	if cc.c.ps.isBad(p) {
		return
	}
	if len(values) == 0 {
		cc.c.add(p, "site %s: %s is missing; want a list of %s (at least one)", cc.site.Name, field, want)
		return
	}
	for k, v := range values {
		ip := fmt.Sprintf("%s[%d]", p, k)
		switch {
		case !re.MatchString(v):
			cc.c.add(ip, "%q is not %s", v, want)
		case slices.Index(values, v) < k:
			cc.c.add(ip, "%s is listed twice; list each once", v)
		}
	}
}

// gateways checks that names, the keys of a provider's gateways map, are
// exactly the site's gateways, filling the map from the shorthand (when
// given, for a one-gateway site). shorthand says which shorthand fields
// were written; it reports whether the map is usable.
func gatewayMap[G any](cc cloudChecker, m *map[string]G, shorthand []string, short G, example string) bool {
	gpath := cc.path + ".gateways"
	if cc.c.ps.isBad(gpath) {
		return false
	}
	if len(shorthand) > 0 {
		switch {
		case len(*m) > 0:
			cc.c.add(cc.path+"."+shorthand[0], "give %s or gateways, not both; with several gateways name each under gateways:", strings.Join(shorthand, "/"))
			return false
		case len(cc.site.Gateways) != 1:
			cc.c.add(cc.path+"."+shorthand[0], "site %s has %d gateways, so %s cannot say whose it is; name each gateway under gateways: (e.g. gateways: {%s})", cc.site.Name, len(cc.site.Gateways), shorthand[0], example)
			return false
		}
		*m = map[string]G{cc.site.Gateways[0].Name: short}
		return true
	}
	if len(*m) == 0 {
		cc.c.add(cc.path, "site %s: its gateways' interfaces are missing; want gateways: {%s} (one entry per gateway of the site)", cc.site.Name, example)
		return false
	}
	ok := true
	var names []string
	for _, g := range cc.site.Gateways {
		names = append(names, g.Name)
		if _, has := (*m)[g.Name]; !has {
			cc.c.add(gpath, "gateway %s of site %s is missing; name every gateway of the site, so that a failover can move the routes to it", g.Name, cc.site.Name)
			ok = false
		}
	}
	for _, name := range sortedKeys(*m) {
		if !slices.Contains(names, name) {
			cc.c.add(gpath+"."+name, "%q is not a gateway of site %s; its gateways are %s", name, cc.site.Name, strings.Join(names, ", "))
			ok = false
		}
	}
	return ok
}

func (cc cloudChecker) aws(a *AWSCloud) {
	if a.Region == "" {
		a.Region = cc.site.Region
	}
	switch {
	case a.Region == "":
		cc.c.add(cc.path+".region", "site %s has no AWS region; set region: on the site or under cloud.aws (e.g. eu-west-1)", cc.site.Name)
	case !awsRegion.MatchString(a.Region):
		cc.c.add(cc.path+".region", "%q is not an AWS region; want e.g. eu-west-1", a.Region)
	}
	cc.id("vpc", a.VPC, awsVPC, "a VPC id like vpc-0a1b2c3d4e5f60718")
	cc.list("routeTables", a.RouteTables, awsRTB, "route table ids like rtb-0a1b2c3d4e5f60718")
	cc.id("securityGroup", a.SecurityGroup, awsSG, "a security group id like sg-0a1b2c3d4e5f60718")
	var short []string
	if a.Instance != "" {
		short = append(short, "instance")
	}
	if a.ENI != "" {
		short = append(short, "eni")
	}
	if len(short) == 2 {
		cc.c.add(cc.path+".eni", "give instance or eni, not both")
		return
	}
	if !gatewayMap(cc, &a.Gateways, short, AWSGateway{Instance: a.Instance, ENI: a.ENI}, "aws-gw: {instance: i-0a1b2c3d4e5f60718}") {
		return
	}
	for _, name := range sortedKeys(a.Gateways) {
		g := a.Gateways[name]
		p := cc.path + ".gateways." + name
		if len(short) > 0 {
			p = cc.path + "." + short[0]
		}
		switch {
		case (g.Instance == "") == (g.ENI == ""):
			cc.c.add(p, "gateway %s: give its instance (i-…) or its network interface (eni-…), exactly one", name)
		case g.Instance != "" && !awsInstance.MatchString(g.Instance):
			cc.c.add(p, "%q is not an instance id; want e.g. i-0a1b2c3d4e5f60718", g.Instance)
		case g.ENI != "" && !awsENI.MatchString(g.ENI):
			cc.c.add(p, "%q is not a network interface id; want e.g. eni-0a1b2c3d4e5f60718", g.ENI)
		}
	}
}

func (cc cloudChecker) azure(a *AzureCloud) {
	cc.id("resourceGroup", a.ResourceGroup, cloudName, "the resource group's name")
	cc.list("routeTables", a.RouteTables, cloudName, "route table names")
	cc.id("nsg", a.NSG, cloudName, "the network security group's name")
	if a.Subscription != "" {
		cc.id("subscription", a.Subscription, cloudName, "a subscription name or id")
	}
	if !cc.c.set[cc.path+".priority"] {
		a.Priority = DefaultAzurePriority
	} else if a.Priority < 100 || a.Priority > 4000 {
		cc.c.add(cc.path+".priority", "%d is out of range; want 100..4000 (default %d), free in the NSG", a.Priority, DefaultAzurePriority)
	}
	var short []string
	if a.NIC != "" {
		short = []string{"nic"}
	}
	if !gatewayMap(cc, &a.Gateways, short, AzureGateway{NIC: a.NIC}, "azure-gw: {nic: azure-gw-nic}") {
		return
	}
	if len(short) > 0 {
		cc.id("nic", a.NIC, cloudName, "the name of the gateway's network interface")
		return
	}
	for _, name := range sortedKeys(a.Gateways) {
		cc.id("gateways."+name+".nic", a.Gateways[name].NIC, cloudName, "the name of the gateway's network interface")
	}
}

func (cc cloudChecker) gcp(g *GCPCloud) {
	cc.id("project", g.Project, cloudName, "the project id")
	cc.id("network", g.Network, cloudName, "the VPC network's name")
	var short []string
	if g.Instance != "" || g.Zone != "" {
		short = []string{"instance", "zone"}
	}
	if !gatewayMap(cc, &g.Gateways, short, GCPGateway{Instance: g.Instance, Zone: g.Zone}, "gcp-gw: {instance: gcp-gw, zone: europe-west1-b}") {
		return
	}
	if len(short) > 0 {
		cc.id("instance", g.Instance, cloudName, "the gateway's instance name")
		cc.id("zone", g.Zone, cloudName, "the instance's zone, like europe-west1-b")
		return
	}
	for _, name := range sortedKeys(g.Gateways) {
		cc.id("gateways."+name+".instance", g.Gateways[name].Instance, cloudName, "the gateway's instance name")
		cc.id("gateways."+name+".zone", g.Gateways[name].Zone, cloudName, "the instance's zone, like europe-west1-b")
	}
}

func (cc cloudChecker) openstack(o *OpenStackCloud) {
	if o.Router == "" && o.Subnet == "" {
		cc.c.add(cc.path, "site %s: give router (the Neutron router of the site's subnet) or subnet (for DHCP host routes), or both; hosts need one of them to learn the routes to remote sites", cc.site.Name)
	}
	if o.Router != "" {
		cc.id("router", o.Router, cloudName, "a router name or id")
	}
	if o.Subnet != "" {
		cc.id("subnet", o.Subnet, cloudName, "a subnet name or id")
	}
	cc.id("securityGroup", o.SecurityGroup, cloudName, "the security group name or id of the gateways' public port")
	var short []string
	if o.Port != "" {
		short = []string{"port"}
	}
	if !gatewayMap(cc, &o.Gateways, short, OpenStackGateway{Port: o.Port}, "os-gw: {port: os-gw-lan}") {
		return
	}
	if len(short) > 0 {
		cc.id("port", o.Port, cloudName, "the name or id of the gateway's port on the site network")
		return
	}
	for _, name := range sortedKeys(o.Gateways) {
		cc.id("gateways."+name+".port", o.Gateways[name].Port, cloudName, "the name or id of the gateway's port on the site network")
	}
}
