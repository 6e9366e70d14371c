// Package script writes, for the sites on Azure, Google Cloud and
// OpenStack, the shell scripts that give the provider what the federation
// needs (cloud.Needs): one script that applies and one that removes, each
// calling the provider's own CLI (az, gcloud, openstack). fednet does not
// call these providers itself: the operator reviews the script and runs
// it where the CLI is logged in.
//
// The scripts are idempotent (run again after a failover or a spec change:
// they move routes to the active gateway and delete fednet's routes and
// rules the spec no longer needs) and they mark what they make (names
// starting with fednet-FEDERATION-, descriptions "fednet FEDERATION/SITE",
// tags), so the remove script deletes only that. Writing them is pure: the
// same spec gives byte-identical scripts (golden tests in testdata/).
package script

import (
	"fmt"
	"hash/fnv"
	"net/netip"
	"strings"

	"github.com/fednet/fednet/internal/backend"
	"github.com/fednet/fednet/internal/cloud"
	"github.com/fednet/fednet/internal/spec"
)

// Script is a provider's pair of scripts for one site.
type Script struct {
	// Tool is the CLI the scripts call (az, gcloud, openstack).
	Tool   string
	Apply  string
	Remove string
}

// For returns the scripts of the site n describes. The site must have a
// cloud block for Azure, GCP or OpenStack.
func For(f *spec.Federation, n cloud.Needs) (Script, error) {
	s, ok := f.Site(n.Site)
	if !ok || s.Cloud == nil {
		return Script{}, fmt.Errorf("site %s has no cloud block", n.Site)
	}
	w := writer{f: f, n: n}
	switch n.Kind {
	case spec.CloudAzure:
		return w.azure(s.Cloud.Azure), nil
	case spec.CloudGCP:
		return w.gcp(s.Cloud.GCP), nil
	case spec.CloudOpenStack:
		return w.openstack(s.Cloud.OpenStack), nil
	}
	return Script{}, fmt.Errorf("site %s is on %s, which fednet configures itself (fednet cloud apply), not by script", n.Site, n.Kind)
}

type writer struct {
	f *spec.Federation
	n cloud.Needs
}

// owner is FEDERATION/SITE, what descriptions and tags carry.
func (w writer) owner() string { return w.n.Federation + "/" + w.n.Site }

// header starts a script: what it is, what it does, how to run it.
func (w writer) header(b *strings.Builder, verb, tool string, does []string) {
	fmt.Fprintf(b, "#!/usr/bin/env bash\n")
	fmt.Fprintf(b, "# fednet cloud %s script for site %s (%s) of federation %s.\n", verb, w.n.Site, w.n.Kind, w.n.Federation)
	fmt.Fprintf(b, "# Written by `fednet cloud plan --site %s%s`; review it, then run it\n", w.n.Site, map[bool]string{true: " --remove", false: ""}[verb == "remove"])
	fmt.Fprintf(b, "# with bash where `%s` is installed and logged in. It is idempotent.\n#\n", tool)
	for _, d := range does {
		fmt.Fprintf(b, "# %s\n", d)
	}
	b.WriteString("set -euo pipefail\n")
}

// name is a resource name fednet-FEDERATION-PARTS, lowercase, shortened
// with a hash of the federation name when it would exceed max.
func (w writer) name(max int, parts ...string) string {
	n := "fednet-" + w.n.Federation + "-" + strings.Join(parts, "-")
	if len(n) <= max {
		return n
	}
	h := fnv.New32a()
	h.Write([]byte(w.n.Federation))
	n = fmt.Sprintf("fednet-%08x-%s", h.Sum32(), strings.Join(parts, "-"))
	if len(n) > max {
		n = n[:max]
	}
	return n
}

// namePrefix is what every name of this federation starts with.
func (w writer) namePrefix(max int) string {
	n := w.name(max, "x")
	return strings.TrimSuffix(n, "x")
}

// dashed writes a prefix as a name part: 10.2.0.0/24 -> 10-2-0-0-24.
func dashed(p netip.Prefix) string {
	return strings.NewReplacer(".", "-", ":", "-", "/", "-").Replace(p.String())
}

func (w writer) routeNames(max int) []string {
	var out []string
	for _, p := range w.n.Routes {
		out = append(out, w.name(max, dashed(p)))
	}
	return out
}

// portName names a tunnel port: udp-51820.
func portName(in cloud.Ingress) string {
	if in.Port == 0 {
		return in.Protocol.String()
	}
	return fmt.Sprintf("%s-%d", in.Protocol, in.Port)
}

// ports groups the ingress needs by protocol and port, in order.
func (w writer) ports() []portSources {
	var out []portSources
	for _, in := range w.n.Ingress {
		if len(out) == 0 || out[len(out)-1].Protocol != in.Protocol || out[len(out)-1].Port != in.Port {
			out = append(out, portSources{Ingress: in})
			out[len(out)-1].Peers = nil
		}
		ps := &out[len(out)-1]
		ps.sources = append(ps.sources, in.Source.String())
		ps.Peers = append(ps.Peers, in.Peers...)
	}
	return out
}

// portSources is one tunnel port and every source it is admitted from.
type portSources struct {
	cloud.Ingress
	sources []string
}

func (p portSources) port() backend.Port { return backend.Port{Protocol: p.Protocol, Port: p.Port} }

func (w writer) gatewayNames() string {
	var names []string
	for _, g := range w.n.Gateways {
		names = append(names, g.Name)
	}
	return strings.Join(names, ", ")
}

func (w writer) routeList() string {
	var ps []string
	for _, p := range w.n.Routes {
		ps = append(ps, p.String())
	}
	if len(ps) == 0 {
		return "(none)"
	}
	return strings.Join(ps, ", ")
}

// words quotes a list for a shell: each item in single quotes.
func words(items []string) string {
	var q []string
	for _, s := range items {
		q = append(q, quote(s))
	}
	return strings.Join(q, " ")
}

// quote single-quotes s for a POSIX shell.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
