package manager

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fednet/fednet/internal/api"
	"github.com/fednet/fednet/internal/console"
)

// apiError is an error with the HTTP status and body to answer it with.
type apiError struct {
	status int
	body   api.Error
}

func (e *apiError) Error() string { return e.body.Message }

// fail returns an *apiError; the code follows from the status.
func fail(status int, field, format string, args ...any) *apiError {
	return &apiError{status: status, body: api.Error{Code: codeFor(status), Message: fmt.Sprintf(format, args...), Field: field}}
}

// failCode is fail with a code of its own rather than the status's.
func failCode(status int, code, field, format string, args ...any) *apiError {
	ae := fail(status, field, format, args...)
	ae.body.Code = code
	return ae
}

func codeFor(status int) string {
	if c := api.CodeFor(status); c != "" {
		return c
	}
	return api.CodeInternal
}

// auth says who may call an endpoint.
type auth int

const (
	authNone    auth = iota // anyone (enrollment checks its join token itself)
	authAdmin               // the admin token
	authGateway             // the credential of the gateway {name}
	authEither              // the admin token or the credential of the gateway {name}
)

// handlerFunc serves a request; an error it returns is answered (an
// *apiError as it says, anything else as 500) and logged once.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// route is one method on one path.
type route struct {
	method, path string
	auth         auth
	h            handlerFunc
}

// routes lists every endpoint. The OpenAPI test checks api/openapi.yaml
// against this list.
func (m *Manager) routes() []route {
	return []route{
		{"GET", api.PathOpenAPI, authNone, m.getOpenAPI},
		{"GET", api.PathSpec, authAdmin, m.getSpec},
		{"PUT", api.PathSpec, authAdmin, m.putSpec},
		{"GET", api.PathRevisions, authAdmin, m.getRevisions},
		{"GET", api.PathTokens, authAdmin, m.getTokens},
		{"POST", api.PathTokens, authAdmin, m.postToken},
		{"DELETE", api.PathToken, authAdmin, m.deleteToken},
		{"POST", api.PathEnroll, authNone, m.postEnroll},
		{"GET", api.PathGateways, authAdmin, m.getGateways},
		{"GET", api.PathGateway, authAdmin, m.getGateway},
		{"DELETE", api.PathGateway, authAdmin, m.deleteGateway},
		{"GET", api.PathPlan, authEither, m.getPlan},
		{"PUT", api.PathStatus, authGateway, m.putStatus},
		{"PUT", api.PathKey, authGateway, m.putKey},
		{"POST", api.PathRotate, authAdmin, m.postRotate},
		{"POST", api.PathActivate, authAdmin, m.postActivate},
		{"POST", api.PathBandwidth, authAdmin, m.postBandwidth},
		{"GET", api.PathMeasurements, authGateway, m.getMeasurements},
		{"PUT", api.PathMeasurement, authGateway, m.putMeasurement},
		{"GET", api.PathSites, authAdmin, m.getSites},
		{"GET", api.PathLinks, authAdmin, m.getLinks},
		{"GET", api.PathNetworks, authAdmin, m.getNetworks},
		{"GET", api.PathFederation, authAdmin, m.getOverview},
		// Hosts authenticate in their handlers: a host token to join, the
		// host's credential or the admin token afterwards.
		{"GET", api.PathHosts, authAdmin, m.getHosts},
		{"POST", api.PathHosts, authNone, m.postHost},
		{"GET", api.PathHost, authNone, m.getHost},
		{"DELETE", api.PathHost, authNone, m.deleteHost},
		{"GET", api.PathHostTunnel, authNone, m.getHostTunnel},
	}
}

// Handler returns the API's HTTP handler. It expects TLS in front (Serve
// provides it); it is exported for tests and for embedding.
func (m *Manager) Handler() http.Handler {
	mux := http.NewServeMux()
	byPath := map[string][]route{}
	var paths []string
	for _, rt := range m.routes() {
		if _, ok := byPath[rt.path]; !ok {
			paths = append(paths, rt.path)
		}
		byPath[rt.path] = append(byPath[rt.path], rt)
	}
	// One handler per path that dispatches on the method itself, so that a
	// wrong method gets a JSON 405 like every other error.
	for _, p := range paths {
		rts := byPath[p]
		mux.Handle(p, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var allowed []string
			for _, rt := range rts {
				if rt.method == r.Method || rt.method == "GET" && r.Method == "HEAD" {
					m.serve(w, r, rt)
					return
				}
				allowed = append(allowed, rt.method)
			}
			w.Header().Set("Allow", strings.Join(allowed, ", "))
			m.answerError(w, r, fail(http.StatusMethodNotAllowed, "", "method %s is not allowed on %s; use %s", r.Method, p, strings.Join(allowed, " or ")))
		}))
	}
	// The web console (docs/console.md) has its own login and answers;
	// a browser pointed at the manager's root finds it.
	mux.Handle(console.Prefix, m.console.Handler())
	mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/" && (r.Method == "GET" || r.Method == "HEAD") && strings.Contains(r.Header.Get("Accept"), "text/html") {
			http.Redirect(w, r, console.Prefix, http.StatusFound)
			return
		}
		m.answerError(w, r, fail(http.StatusNotFound, "", "no such endpoint %s; the API is described at %s", r.URL.Path, api.PathOpenAPI))
	}))
	return mux
}

// serve authenticates and runs one route. A request with a body must
// deliver it within Limits.BodyTimeout (readBody lifts the deadline once
// the body is read, so that long polls are not cut).
func (m *Manager) serve(w http.ResponseWriter, r *http.Request, rt route) {
	w.Header().Set("Cache-Control", "no-store")
	if r.ContentLength != 0 { // -1: unknown (chunked); HTTP/2 without END_STREAM
		// Not every ResponseWriter can (httptest's recorder cannot): then
		// the server's own timeouts are all there is.
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(m.limits.BodyTimeout))
	}
	if err := m.authenticate(r, rt.auth); err != nil {
		m.answerError(w, r, err)
		return
	}
	if err := rt.h(w, r); err != nil {
		m.answerError(w, r, err)
	}
}

// answerError writes err as an api.Error and logs it, once. Failed
// authentications (401) are not logged one by one: the auth limiter counts
// them, logs them as one line per interval, and turns them into 429 once
// their address is over its budget.
func (m *Manager) answerError(w http.ResponseWriter, r *http.Request, err error) {
	var ae *apiError
	switch {
	case !errors.As(err, &ae):
		m.cfg.Logf("%s %s: internal error: %v", r.Method, r.URL.Path, err)
		ae = fail(http.StatusInternalServerError, "", "internal error: %v", err)
	case ae.status == http.StatusUnauthorized:
		addr := clientAddr(r)
		if m.authFail.fail(addr) {
			w.Header().Set("Retry-After", strconv.Itoa(int(max(1, 1/m.limits.AuthFailuresPerSecond))))
			ae = fail(http.StatusTooManyRequests, "Authorization", "too many failed authentications from %s; slow down (at most %g a second, --auth-failures-per-second)", addr, m.limits.AuthFailuresPerSecond)
		} else {
			w.Header().Set("WWW-Authenticate", `Bearer realm="fednet"`)
		}
	default:
		m.cfg.Logf("%s %s from %s: %d %s", r.Method, r.URL.Path, r.RemoteAddr, ae.status, ae.body.Message)
	}
	writeJSON(w, ae.status, ae.body)
}

// writeJSON answers with v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encoding answer: %w", err)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, err = w.Write(append(b, '\n'))
	return err
}

// checkQuery rejects query parameters other than allowed, so that a typo
// (?dryrun=true) never does something else than asked.
func checkQuery(r *http.Request, allowed ...string) error {
	q := r.URL.Query()
	for _, k := range slices.Sorted(maps.Keys(q)) {
		if !slices.Contains(allowed, k) {
			if len(allowed) == 0 {
				return fail(http.StatusBadRequest, k, "unknown query parameter %q; %s %s takes none", k, r.Method, r.URL.Path)
			}
			return fail(http.StatusBadRequest, k, "unknown query parameter %q; %s %s takes %s", k, r.Method, r.URL.Path, strings.Join(allowed, ", "))
		}
		if len(q[k]) > 1 {
			return fail(http.StatusBadRequest, k, "query parameter %q is given %d times; give it once", k, len(q[k]))
		}
	}
	return nil
}

// checkContentType accepts application/json (and a missing Content-Type)
// plus the extra media types given.
func checkContentType(r *http.Request, extra ...string) (string, error) {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return "application/json", nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return "", fail(http.StatusUnsupportedMediaType, "Content-Type", "Content-Type %q cannot be parsed; send application/json", ct)
	}
	if mt == "application/json" || slices.Contains(extra, mt) {
		return mt, nil
	}
	want := "application/json"
	if len(extra) > 0 {
		want += " or " + strings.Join(extra, ", ")
	}
	return "", fail(http.StatusUnsupportedMediaType, "Content-Type", "Content-Type %s is not accepted here; send %s", mt, want)
}

// readBody reads the whole request body, at most api.MaxRequestBytes,
// within the deadline serve set (408 when it passes); then it lifts the
// deadline.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if r.ContentLength > api.MaxRequestBytes {
		return nil, tooLarge()
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, api.MaxRequestBytes))
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return nil, tooLarge()
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, fail(http.StatusRequestTimeout, "", "the request body did not arrive in time (--body-timeout); send it whole, at once")
	case err != nil:
		return nil, fail(http.StatusBadRequest, "", "reading the request body: %v", err)
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	return data, nil
}

func tooLarge() error {
	return fail(http.StatusRequestEntityTooLarge, "", "request body is larger than %d bytes", api.MaxRequestBytes)
}

// decode reads a JSON request body into v, rejecting unknown fields,
// wrong types, trailing data and bodies above api.MaxRequestBytes. An
// empty body is allowed only when optional. valueField names the field
// whose own parser (a key, say) fails with an error that names no field.
func decode(w http.ResponseWriter, r *http.Request, v any, optional bool, valueField string) error {
	if _, err := checkContentType(r); err != nil {
		return err
	}
	data, err := readBody(w, r)
	if err != nil {
		return err
	}
	return decodeJSON(data, v, optional, valueField)
}

func decodeJSON(data []byte, v any, optional bool, valueField string) error {
	if len(strings.TrimSpace(string(data))) == 0 {
		if optional {
			return nil
		}
		return fail(http.StatusBadRequest, "", "request body is empty; want a JSON object (see %s)", api.PathOpenAPI)
	}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case err == nil:
	case errors.As(err, &syn):
		return fail(http.StatusBadRequest, "", "malformed JSON at byte %d: %v", syn.Offset, syn)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fail(http.StatusBadRequest, "", "malformed JSON: the body ends in the middle of a value")
	case errors.As(err, &typ):
		if typ.Field == "" {
			return fail(http.StatusBadRequest, "", "request body is a JSON %s; want a JSON object", typ.Value)
		}
		return fail(http.StatusBadRequest, typ.Field, "field %s: got a JSON %s, want %s", typ.Field, typ.Value, jsonKind(typ.Type.String()))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return fail(http.StatusBadRequest, field, "unknown field %q; see %s for the fields of this request", field, api.PathOpenAPI)
	case valueField != "":
		return fail(http.StatusBadRequest, valueField, "field %s: %v", valueField, err)
	default:
		return fail(http.StatusBadRequest, "", "bad request body: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fail(http.StatusBadRequest, "", "unexpected data after the JSON object; send one object")
	}
	return nil
}

// jsonKind names the JSON type that fits a Go type, for error messages.
func jsonKind(goType string) string {
	switch {
	case goType == "string", strings.HasSuffix(goType, ".Key"), goType == "time.Time":
		return "a string"
	case strings.HasPrefix(goType, "int"), strings.HasPrefix(goType, "uint"), strings.HasPrefix(goType, "float"), goType == "time.Duration":
		return "a number"
	case goType == "bool":
		return "true or false"
	case strings.HasPrefix(goType, "[]"):
		return "an array"
	}
	return "an object"
}
