// Package openapi embeds api/openapi.yaml, the OpenAPI 3.0 description of
// the manager's HTTPS JSON API, so that the manager serves it at
// /openapi.yaml. The Go types of the same API are in internal/api.
package openapi

import _ "embed"

// OpenAPI is the content of openapi.yaml.
//
//go:embed openapi.yaml
var OpenAPI []byte
