package manager

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fednet/fednet/internal/api"
)

// TestBadInput sends malformed JSON, wrong types, unknown fields, oversized
// bodies, invalid specs, bad query parameters and wrong methods to every
// endpoint, and checks the status, the code and that the message names the
// field at fault. None of it may change the state.
func TestBadInput(t *testing.T) {
	h := newHarness(t)
	doc := threeSites(t)
	h.putSpec(doc)
	cred, _ := h.enroll("aws-gw")
	_, secret := h.token("azure-gw") // bad enrollments must not use it up
	admin := h.m.AdminToken()
	key := randomKey(t).String()
	huge := `{"yaml":"` + strings.Repeat("a", api.MaxRequestBytes) + `"}`
	plan := gwPath(api.PathPlan, "aws-gw")
	status := gwPath(api.PathStatus, "aws-gw")
	keyPath := gwPath(api.PathKey, "aws-gw")
	rotate := gwPath(api.PathRotate, "aws-gw")
	var before api.Overview
	h.ok(req{method: "GET", path: api.PathFederation}, &before)

	type want struct {
		status int
		code   string
		field  string // when set: the error's field, and named in its message (path parameters: by value)
		msg    string // when set: in the message
	}
	bad := func(field string) want { return want{400, api.CodeBadRequest, field, ""} }
	invalidReport := func(field string) want { return want{422, api.CodeInvalidReport, field, ""} }
	badMsg := func(msg string) want { return want{400, api.CodeBadRequest, "", msg} }
	tooLarge := want{413, api.CodeTooLarge, "", "larger than"}
	method := want{405, api.CodeBadRequest, "", "not allowed"}
	tests := []struct {
		name   string
		method string
		path   string
		token  string
		body   string
		ctype  string
		want   want
	}{
		// PUT /v1/spec
		{"spec malformed", "PUT", api.PathSpec, admin, `{"yaml":`, "", badMsg("malformed JSON")},
		{"spec syntax", "PUT", api.PathSpec, admin, `{"yaml" "x"}`, "", badMsg("malformed JSON at byte")},
		{"spec wrong type", "PUT", api.PathSpec, admin, `{"yaml":5}`, "", bad("yaml")},
		{"spec unknown field", "PUT", api.PathSpec, admin, `{"yaml":"x","dryRun":true}`, "", bad("dryRun")},
		{"spec not an object", "PUT", api.PathSpec, admin, `["yaml"]`, "", badMsg("want a JSON object")},
		{"spec empty body", "PUT", api.PathSpec, admin, ``, "", badMsg("empty")},
		{"spec empty yaml", "PUT", api.PathSpec, admin, `{"yaml":"  "}`, "", bad("yaml")},
		{"spec trailing data", "PUT", api.PathSpec, admin, `{"yaml":"x"} {}`, "", badMsg("after the JSON object")},
		{"spec oversized", "PUT", api.PathSpec, admin, huge, "", tooLarge},
		{"spec oversized yaml", "PUT", api.PathSpec, admin, strings.Repeat("#", api.MaxRequestBytes+1), "application/yaml", tooLarge},
		{"spec invalid", "PUT", api.PathSpec, admin, `{"yaml":"apiVersion: fednet/v1\nkind: Federation\nname: x\nsites: []\n"}`, "", want{422, api.CodeInvalidSpec, "sites", "current revision stays in force"}},
		{"spec invalid field", "PUT", api.PathSpec, admin, jsonString(strings.Replace(doc, "listenPort: 51820", "listenPort: 99999", 1)), "", want{422, api.CodeInvalidSpec, "overlay.listenPort", "line 8"}},
		{"spec bad yaml", "PUT", api.PathSpec, admin, `{"yaml":"sites: [\n"}`, "", want{422, api.CodeInvalidSpec, "", "not valid"}},
		{"spec bad yaml raw", "PUT", api.PathSpec, admin, "name: [", "text/yaml", want{422, api.CodeInvalidSpec, "", "not valid"}},
		{"spec dryRun value", "PUT", api.PathSpec + "?dryRun=maybe", admin, jsonString(doc), "", bad("dryRun")},
		{"spec dryRun typo", "PUT", api.PathSpec + "?dryrun=true", admin, jsonString(doc), "", bad("dryrun")},
		{"spec dryRun twice", "PUT", api.PathSpec + "?dryRun=true&dryRun=false", admin, jsonString(doc), "", bad("dryRun")},
		{"spec media type", "PUT", api.PathSpec, admin, "x", "text/plain", want{415, api.CodeUnsupportedType, "Content-Type", ""}},
		{"spec get query", "GET", api.PathSpec + "?revision=1", admin, "", "", bad("revision")},
		{"spec method", "DELETE", api.PathSpec, admin, "", "", method},
		// /v1/revisions
		{"revisions query", "GET", api.PathRevisions + "?limit=1", admin, "", "", bad("limit")},
		{"revisions method", "POST", api.PathRevisions, admin, "{}", "", method},
		// /v1/tokens
		{"token malformed", "POST", api.PathTokens, admin, `{"gateway":"aws-gw"`, "", badMsg("malformed JSON")},
		{"token wrong type", "POST", api.PathTokens, admin, `{"gateway":1}`, "", bad("gateway")},
		{"token ttl type", "POST", api.PathTokens, admin, `{"gateway":"aws-gw","ttl":3600}`, "", bad("ttl")},
		{"token unknown field", "POST", api.PathTokens, admin, `{"gateway":"aws-gw","region":"x"}`, "", bad("region")},
		{"token gateway and site", "POST", api.PathTokens, admin, `{"gateway":"aws-gw","site":"x"}`, "", bad("gateway")},
		{"host token no network", "POST", api.PathTokens, admin, `{"site":"aws-eu"}`, "", bad("network")},
		{"host token ordinary fabric", "POST", api.PathTokens, admin, `{"site":"aws-eu","network":"apps"}`, "", want{409, api.CodeConflict, "site", "does not declare fabric: dropsUnknownMACs"}},
		{"token no gateway", "POST", api.PathTokens, admin, `{}`, "", bad("gateway")},
		{"token unknown gateway", "POST", api.PathTokens, admin, `{"gateway":"nope-gw"}`, "", want{404, api.CodeNotFound, "gateway", "nope-gw"}},
		{"token ttl syntax", "POST", api.PathTokens, admin, `{"gateway":"aws-gw","ttl":"soon"}`, "", bad("ttl")},
		{"token ttl too long", "POST", api.PathTokens, admin, `{"gateway":"aws-gw","ttl":"169h"}`, "", bad("ttl")},
		{"token ttl negative", "POST", api.PathTokens, admin, `{"gateway":"aws-gw","ttl":"-1h"}`, "", bad("ttl")},
		{"token oversized", "POST", api.PathTokens, admin, huge, "", tooLarge},
		{"token media type", "POST", api.PathTokens, admin, `{}`, "application/xml", want{415, api.CodeUnsupportedType, "Content-Type", ""}},
		{"tokens query", "GET", api.PathTokens + "?all=1", admin, "", "", bad("all")},
		{"tokens method", "PUT", api.PathTokens, admin, "{}", "", method},
		{"token revoke unknown", "DELETE", "/v1/tokens/nope", admin, "", "", want{404, api.CodeNotFound, "id", "nope"}},
		{"token method", "GET", "/v1/tokens/nope", admin, "", "", method},
		// /v1/enroll, with a valid join token
		{"enroll malformed", "POST", api.PathEnroll, secret, `{"publicKey":`, "", badMsg("malformed JSON")},
		{"enroll key type", "POST", api.PathEnroll, secret, `{"publicKey":5}`, "", bad("publicKey")},
		{"enroll key value", "POST", api.PathEnroll, secret, `{"publicKey":"bm90IGEga2V5"}`, "", bad("publicKey")},
		{"enroll no key", "POST", api.PathEnroll, secret, `{}`, "", bad("publicKey")},
		{"enroll unknown field", "POST", api.PathEnroll, secret, `{"publicKey":"` + key + `","privateKey":"x"}`, "", bad("privateKey")},
		{"enroll endpoint", "POST", api.PathEnroll, secret, `{"publicKey":"` + key + `","endpoint":"nope"}`, "", bad("endpoint")},
		{"enroll endpoint type", "POST", api.PathEnroll, secret, `{"publicKey":"` + key + `","endpoint":[]}`, "", bad("endpoint")},
		{"enroll oversized", "POST", api.PathEnroll, secret, huge, "", tooLarge},
		{"enroll query", "POST", api.PathEnroll + "?gateway=x", secret, `{}`, "", bad("gateway")},
		{"enroll method", "GET", api.PathEnroll, secret, "", "", method},
		// /v1/gateways
		{"gateways query", "GET", api.PathGateways + "?site=x", admin, "", "", bad("site")},
		{"gateways method", "POST", api.PathGateways, admin, "{}", "", method},
		{"gateway unknown", "GET", "/v1/gateways/nope-gw", admin, "", "", want{404, api.CodeNotFound, "name", "nope-gw"}},
		{"gateway remove unknown", "DELETE", "/v1/gateways/nope-gw", admin, "", "", want{404, api.CodeNotFound, "name", "nope-gw"}},
		{"gateway method", "PUT", gwPath(api.PathGateway, "aws-gw"), admin, "{}", "", method},
		// plan watch
		{"plan after", "GET", plan + "?after=x", cred, "", "", bad("after")},
		{"plan after negative", "GET", plan + "?after=-1", cred, "", "", bad("after")},
		{"plan timeout", "GET", plan + "?timeout=forever", cred, "", "", bad("timeout")},
		{"plan timeout long", "GET", plan + "?timeout=10m", cred, "", "", bad("timeout")},
		{"plan timeout negative", "GET", plan + "?timeout=-1s", cred, "", "", bad("timeout")},
		{"plan query", "GET", plan + "?revision=1", cred, "", "", bad("revision")},
		{"plan unknown", "GET", "/v1/gateways/nope-gw/plan", admin, "", "", want{404, api.CodeNotFound, "name", "nope-gw"}},
		{"plan method", "POST", plan, cred, "{}", "", method},
		// status
		{"status malformed", "PUT", status, cred, `{"links":[`, "", badMsg("malformed JSON")},
		{"status type", "PUT", status, cred, `{"generation":"1"}`, "", bad("generation")},
		{"status nested type", "PUT", status, cred, `{"links":[{"peer":"azure-gw","rxBytes":"x"}]}`, "", bad("links.rxBytes")},
		{"status nested key", "PUT", status, cred, `{"links":[{"peer":"azure-gw","publicKey":"x"}]}`, "", bad("links")},
		{"status nested time", "PUT", status, cred, `{"links":[{"peer":"azure-gw","lastHandshake":"yesterday"}]}`, "", bad("links")},
		{"status unknown field", "PUT", status, cred, `{"generation":1,"uptime":5}`, "", bad("uptime")},
		{"status negative", "PUT", status, cred, `{"generation":-1}`, "", invalidReport("generation")},
		{"status no peer", "PUT", status, cred, `{"links":[{}]}`, "", invalidReport("links[0].peer")},
		{"status oversized", "PUT", status, cred, huge, "", tooLarge},
		{"status method", "GET", status, cred, "", "", method},
		// key
		{"key malformed", "PUT", keyPath, cred, `{`, "", badMsg("malformed JSON")},
		{"key missing", "PUT", keyPath, cred, `{}`, "", bad("publicKey")},
		{"key value", "PUT", keyPath, cred, `{"publicKey":"short"}`, "", bad("publicKey")},
		{"key rotation type", "PUT", keyPath, cred, `{"publicKey":"` + key + `","rotation":"1"}`, "", bad("rotation")},
		{"key rotation unasked", "PUT", keyPath, cred, `{"publicKey":"` + key + `","rotation":5}`, "", bad("rotation")},
		{"key unknown field", "PUT", keyPath, cred, `{"publicKey":"` + key + `","privateKey":"x"}`, "", bad("privateKey")},
		{"key oversized", "PUT", keyPath, cred, huge, "", tooLarge},
		{"key method", "POST", keyPath, cred, "{}", "", method},
		// rotate
		{"rotate body", "POST", rotate, admin, `{"now":true}`, "", bad("now")},
		{"rotate malformed", "POST", rotate, admin, `{`, "", badMsg("malformed JSON")},
		{"rotate unknown", "POST", "/v1/gateways/nope-gw/rotate", admin, "", "", want{404, api.CodeNotFound, "name", "nope-gw"}},
		{"rotate not enrolled", "POST", gwPath(api.PathRotate, "onprem-gw"), admin, "", "", want{409, api.CodeConflict, "name", "not enrolled"}},
		{"rotate method", "GET", rotate, admin, "", "", method},
		// read models
		{"sites query", "GET", api.PathSites + "?provider=aws", admin, "", "", bad("provider")},
		{"sites method", "POST", api.PathSites, admin, "{}", "", method},
		{"links query", "GET", api.PathLinks + "?up=1", admin, "", "", bad("up")},
		{"links method", "DELETE", api.PathLinks, admin, "", "", method},
		{"networks query", "GET", api.PathNetworks + "?x=1", admin, "", "", bad("x")},
		{"networks method", "PUT", api.PathNetworks, admin, "{}", "", method},
		{"status query", "GET", api.PathFederation + "?watch=1", admin, "", "", bad("watch")},
		{"status method", "POST", api.PathFederation, admin, "{}", "", method},
		{"openapi method", "POST", api.PathOpenAPI, "", "{}", "", method},
		{"no such endpoint", "GET", "/v1/nothing", admin, "", "", want{404, api.CodeNotFound, "", "no such endpoint"}},
		{"no such version", "GET", "/v2/spec", admin, "", "", want{404, api.CodeNotFound, "", "/openapi.yaml"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := req{method: tt.method, path: tt.path, token: tt.token}
			if tt.body != "" {
				r.body = tt.body
			}
			if tt.ctype != "" {
				r.header = map[string]string{"Content-Type": tt.ctype}
			}
			a := h.do(r)
			w := tt.want
			if a.status != w.status || a.err.Code != w.code {
				t.Fatalf("got %d %q (%s), want %d %q", a.status, a.err.Code, a.err.Message, w.status, w.code)
			}
			if ct := a.header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q, want application/json", ct)
			}
			if w.field != "" {
				if a.err.Field != w.field {
					t.Errorf("field %q, want %q (message %q)", a.err.Field, w.field, a.err.Message)
				}
				// Path parameters (name, id) are named by their value (in msg).
				if !strings.Contains(a.err.Message, w.field) && w.field != "Content-Type" && w.field != "name" && w.field != "id" {
					t.Errorf("message %q does not name the field %s", a.err.Message, w.field)
				}
			}
			if w.msg != "" && !strings.Contains(a.err.Message, w.msg) {
				t.Errorf("message %q lacks %q", a.err.Message, w.msg)
			}
			if w.code == api.CodeInvalidSpec && len(a.err.Problems) == 0 {
				t.Errorf("422 without problems")
			}
			if w.status == 405 && a.header.Get("Allow") == "" {
				t.Errorf("405 without Allow")
			}
		})
	}

	// Nothing of that changed the state: the revision, the generation, the
	// join token (still usable).
	var after api.Overview
	h.ok(req{method: "GET", path: api.PathFederation}, &after)
	if after.Revision != before.Revision || after.Generation != before.Generation {
		t.Errorf("bad input changed the state: revision %d→%d generation %d→%d", before.Revision, after.Revision, before.Generation, after.Generation)
	}
	var cur api.SpecResponse
	h.ok(req{method: "GET", path: api.PathSpec}, &cur)
	if cur.Revision != 1 || cur.YAML != doc {
		t.Errorf("after invalid specs the current spec is revision %d", cur.Revision)
	}
	h.ok(req{method: "POST", path: api.PathEnroll, token: secret, body: api.EnrollRequest{PublicKey: randomKey(t)}}, nil)
}

func jsonString(doc string) string {
	b, _ := json.Marshal(api.SpecRequest{YAML: doc})
	return string(b)
}

// TestAuth checks who may call what: 401 without or with an unknown token,
// 403 with a known token that may not.
func TestAuth(t *testing.T) {
	h := newHarness(t)
	h.putSpec(threeSites(t))
	credA, _ := h.enroll("aws-gw")
	credB, _ := h.enroll("azure-gw")
	admin := h.m.AdminToken()
	planB := gwPath(api.PathPlan, "azure-gw")
	tests := []struct {
		name         string
		method, path string
		token        string
		header       map[string]string
		body         any
		status       int
	}{
		{"admin call without token", "GET", api.PathSpec, "", nil, nil, 401},
		{"admin call with wrong token", "GET", api.PathSpec, "wrong", nil, nil, 401},
		{"admin call with basic auth", "GET", api.PathSpec, "", map[string]string{"Authorization": "Basic YWRtaW46eA=="}, nil, 401},
		{"admin call with a gateway credential", "GET", api.PathSpec, credA, nil, nil, 403},
		{"admin put with a gateway credential", "PUT", api.PathSpec, credA, nil, api.SpecRequest{YAML: "x"}, 403},
		{"token create with a gateway credential", "POST", api.PathTokens, credA, nil, api.TokenRequest{Gateway: "aws-gw"}, 403},
		{"rotate with a gateway credential", "POST", gwPath(api.PathRotate, "aws-gw"), credA, nil, nil, 403},
		{"remove with a gateway credential", "DELETE", gwPath(api.PathGateway, "azure-gw"), credA, nil, nil, 403},
		{"own plan", "GET", gwPath(api.PathPlan, "aws-gw"), credA, nil, nil, 200},
		{"other gateway's plan", "GET", planB, credA, nil, nil, 403},
		{"plan without token", "GET", planB, "", nil, nil, 401},
		{"plan with wrong token", "GET", planB, "wrong", nil, nil, 401},
		{"plan as admin", "GET", planB, admin, nil, nil, 200},
		{"other gateway's status", "PUT", gwPath(api.PathStatus, "azure-gw"), credA, nil, api.StatusReport{}, 403},
		{"status as admin", "PUT", gwPath(api.PathStatus, "azure-gw"), admin, nil, api.StatusReport{}, 403},
		{"own status", "PUT", gwPath(api.PathStatus, "azure-gw"), credB, nil, api.StatusReport{}, 204},
		{"other gateway's key", "PUT", gwPath(api.PathKey, "azure-gw"), credA, nil, api.KeyRequest{PublicKey: randomKey(t)}, 403},
		{"key as admin", "PUT", gwPath(api.PathKey, "azure-gw"), admin, nil, api.KeyRequest{PublicKey: randomKey(t)}, 403},
		{"key without token", "PUT", gwPath(api.PathKey, "azure-gw"), "", nil, api.KeyRequest{PublicKey: randomKey(t)}, 401},
		{"enroll without token", "POST", api.PathEnroll, "", nil, api.EnrollRequest{PublicKey: randomKey(t)}, 401},
		{"enroll with unknown token", "POST", api.PathEnroll, "wrong", nil, api.EnrollRequest{PublicKey: randomKey(t)}, 401},
		{"enroll with admin token", "POST", api.PathEnroll, admin, nil, api.EnrollRequest{PublicKey: randomKey(t)}, 401},
		{"openapi without token", "GET", api.PathOpenAPI, "", nil, nil, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := h.do(req{method: tt.method, path: tt.path, token: tt.token, header: tt.header, body: tt.body})
			if a.status != tt.status {
				t.Fatalf("got %d %+v, want %d", a.status, a.err, tt.status)
			}
			switch tt.status {
			case 401:
				if a.err.Code != api.CodeUnauthenticated || a.header.Get("WWW-Authenticate") == "" {
					t.Errorf("401 with code %q, WWW-Authenticate %q", a.err.Code, a.header.Get("WWW-Authenticate"))
				}
			case 403:
				if a.err.Code != api.CodeForbidden || a.err.Message == "" {
					t.Errorf("403 with %+v", a.err)
				}
			}
		})
	}
}

// TestJoinTokens: a token works once, not after expiry, not after
// revocation; the whole token string works as the bearer too.
func TestJoinTokens(t *testing.T) {
	h := newHarness(t)
	h.putSpec(threeSites(t))
	enroll := func(secret string) answer {
		return h.do(req{method: "POST", path: api.PathEnroll, token: secret, body: api.EnrollRequest{PublicKey: randomKey(t), Endpoint: "198.51.100.10:51820"}})
	}
	// The whole token works as the bearer, once.
	var tok api.Token
	h.ok(req{method: "POST", path: api.PathTokens, body: api.TokenRequest{Gateway: "aws-gw", TTL: "10m"}}, &tok)
	if tok.Expires.Sub(tok.Created) != 10*time.Minute || tok.Token == "" || !strings.HasPrefix(tok.Token, api.JoinTokenPrefix) {
		t.Errorf("token: %+v", tok)
	}
	jt, err := api.ParseJoinToken(tok.Token)
	if err != nil || jt.Manager != h.url || jt.CAFingerprint != h.m.CAFingerprint() || jt.ID != tok.ID {
		t.Errorf("join token content %+v, %v", jt, err)
	}
	if a := enroll(tok.Token); a.status != 200 {
		t.Fatalf("enroll with the whole token: %d %+v", a.status, a.err)
	}
	if a := enroll(jt.Secret); a.status != http.StatusConflict || !strings.Contains(a.err.Message, "already used") {
		t.Errorf("used token: %d %+v", a.status, a.err)
	}
	// Expired.
	_, secret := h.token("azure-gw")
	h.clock.Advance(DefaultTokenTTL + time.Second)
	if a := enroll(secret); a.status != http.StatusConflict || !strings.Contains(a.err.Message, "expired") {
		t.Errorf("expired token: %d %+v", a.status, a.err)
	}
	// Revoked.
	tok, secret = h.token("azure-gw")
	var revoked api.Token
	h.ok(req{method: "DELETE", path: "/v1/tokens/" + tok.ID}, &revoked)
	if !revoked.Revoked {
		t.Errorf("revoke answer: %+v", revoked)
	}
	if a := enroll(secret); a.status != http.StatusConflict || !strings.Contains(a.err.Message, "revoked") {
		t.Errorf("revoked token: %d %+v", a.status, a.err)
	}
	// Removing a gateway revokes its unused tokens.
	_, secret = h.token("onprem-gw")
	h.ok(req{method: "DELETE", path: gwPath(api.PathGateway, "onprem-gw")}, nil)
	if a := enroll(secret); a.status != http.StatusConflict {
		t.Errorf("token of a gateway removed after it was made: %d %+v", a.status, a.err)
	}
	// The enrolled key is checked for uniqueness.
	var gw api.Gateway
	h.ok(req{method: "GET", path: gwPath(api.PathGateway, "aws-gw")}, &gw)
	_, secret = h.token("azure-gw")
	if a := h.do(req{method: "POST", path: api.PathEnroll, token: secret, body: api.EnrollRequest{PublicKey: gw.PublicKey}}); a.status != 409 || a.err.Field != "publicKey" {
		t.Errorf("enrolling with aws-gw's key: %d %+v", a.status, a.err)
	}
	if gw.Endpoint != "198.51.100.10:51820" || gw.ObservedAddress != "127.0.0.1" {
		t.Errorf("gateway after enrollment: %+v", gw)
	}
}
