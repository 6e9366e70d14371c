package manager

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	openapi "github.com/fednet/fednet/api"
	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/backend"
	"github.com/fednet/fednet/internal/plan"
)

// document is the part of an OpenAPI document the tests read.
type document struct {
	OpenAPI    string                          `yaml:"openapi"`
	Paths      map[string]map[string]yaml.Node `yaml:"paths"`
	Components struct {
		Schemas map[string]struct {
			Properties map[string]yaml.Node `yaml:"properties"`
		} `yaml:"schemas"`
	} `yaml:"components"`
}

var httpMethods = []string{"get", "put", "post", "delete", "patch", "head", "options"}

// TestOpenAPIMatchesRoutes: api/openapi.yaml documents every route the
// manager serves, and nothing else.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	var doc document
	if err := yaml.Unmarshal(openapi.OpenAPI, &doc); err != nil {
		t.Fatalf("api/openapi.yaml: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.0.") {
		t.Errorf("openapi: %q, want 3.0.x", doc.OpenAPI)
	}
	documented := map[string]bool{}
	for path, item := range doc.Paths {
		for key := range item {
			if slices.Contains(httpMethods, key) {
				documented[strings.ToUpper(key)+" "+path] = true
			} else if key != "parameters" && key != "summary" && key != "description" {
				t.Errorf("paths.%s has unexpected key %q", path, key)
			}
		}
	}
	m := &Manager{}
	served := map[string]bool{}
	for _, rt := range m.routes() {
		served[rt.method+" "+rt.path] = true
	}
	for op := range served {
		if !documented[op] {
			t.Errorf("%s is served but not in api/openapi.yaml", op)
		}
	}
	for op := range documented {
		if !served[op] {
			t.Errorf("%s is in api/openapi.yaml but not served", op)
		}
	}
}

// TestOpenAPIReferences: every $ref points at something, and every
// operation has an operationId (unique) and responses.
func TestOpenAPIReferences(t *testing.T) {
	var raw map[string]any
	if err := yaml.Unmarshal(openapi.OpenAPI, &raw); err != nil {
		t.Fatal(err)
	}
	var walk func(v any, at string)
	walk = func(v any, at string) {
		switch v := v.(type) {
		case map[string]any:
			for k, c := range v {
				if k == "$ref" {
					ref, _ := c.(string)
					if !resolves(raw, ref) {
						t.Errorf("%s: $ref %q resolves to nothing", at, ref)
					}
					continue
				}
				walk(c, at+"."+k)
			}
		case []any:
			for _, c := range v {
				walk(c, at+"[]")
			}
		}
	}
	walk(raw, "")
	ids := map[string]string{}
	paths, _ := raw["paths"].(map[string]any)
	for path, item := range paths {
		for method, op := range item.(map[string]any) {
			if !slices.Contains(httpMethods, method) {
				continue
			}
			o := op.(map[string]any)
			id, _ := o["operationId"].(string)
			if id == "" {
				t.Errorf("%s %s has no operationId", method, path)
			} else if other, dup := ids[id]; dup {
				t.Errorf("operationId %s is used by %s and %s %s", id, other, method, path)
			}
			ids[id] = method + " " + path
			if _, ok := o["responses"]; !ok {
				t.Errorf("%s %s has no responses", method, path)
			}
		}
	}
}

// resolves reports whether a local reference (#/a/b/c) names a node of doc.
func resolves(doc map[string]any, ref string) bool {
	rest, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		return false
	}
	var cur any = doc
	for _, part := range strings.Split(rest, "/") {
		m, ok := cur.(map[string]any)
		if !ok {
			return false
		}
		if cur, ok = m[part]; !ok {
			return false
		}
	}
	return true
}

// TestOpenAPISchemasMatchTypes: each schema lists exactly the JSON fields of
// the Go type it describes, so api/openapi.yaml and internal/api stay in
// step.
func TestOpenAPISchemasMatchTypes(t *testing.T) {
	var doc document
	if err := yaml.Unmarshal(openapi.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	types := map[string]any{
		"Error": api.Error{}, "Problem": api.Problem{}, "SpecRequest": api.SpecRequest{}, "SpecResponse": api.SpecResponse{},
		"Revision": api.Revision{}, "TokenRequest": api.TokenRequest{}, "Token": api.Token{},
		"EnrollRequest": api.EnrollRequest{}, "EnrollResponse": api.EnrollResponse{}, "PlanResponse": api.PlanResponse{},
		"KeyRequest": api.KeyRequest{}, "StatusReport": api.StatusReport{}, "LinkStatus": api.LinkStatus{}, "LinkProbe": api.LinkProbe{}, "LinkEgress": api.LinkEgress{},
		"Gateway": api.Gateway{}, "Site": api.Site{}, "Link": api.Link{}, "Network": api.Network{}, "Overview": api.Overview{},
		"Plan": plan.Gateway{}, "PlanTunnel": plan.Tunnel{}, "PlanPeer": plan.Peer{}, "PlanWireGuardPeer": plan.WireGuardPeer{}, "PlanRoute": plan.Route{},
		"PlanFirewall": plan.Firewall{}, "PlanPublicPort": backend.Port{}, "PlanFlow": plan.Flow{}, "PlanBridge": plan.Bridge{}, "PlanVXLAN": plan.VXLAN{},
		"PlanBounds": plan.Bounds{}, "PlanLAN": plan.LAN{}, "HostJoinRequest": api.HostJoinRequest{}, "HostTunnelResponse": api.HostTunnelResponse{},
		"HostTunnel": plan.HostTunnel{}, "Host": api.Host{}, "PlanNeighborRule": plan.NeighborRule{},
		"BandwidthRequest": api.BandwidthRequest{}, "Measurement": api.Measurement{}, "BandwidthResult": api.BandwidthResult{},
		"FailoverStatus": api.FailoverStatus{}, "Failover": api.Failover{},
	}
	for name, v := range types {
		s, ok := doc.Components.Schemas[name]
		if !ok {
			t.Errorf("schema %s is missing", name)
			continue
		}
		var want, got []string
		rt := reflect.TypeOf(v)
		for i := range rt.NumField() {
			tag, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
			if tag != "" && tag != "-" {
				want = append(want, tag)
			}
		}
		for p := range s.Properties {
			got = append(got, p)
		}
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(want, got) {
			t.Errorf("schema %s has properties %v; %T has JSON fields %v", name, got, v, want)
		}
	}
}
