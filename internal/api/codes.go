package api

import "net/http"

// CodeFor returns the error code that goes with an HTTP status, or "" for
// a status the API does not use (the caller picks its fallback).
func CodeFor(status int) string {
	switch status {
	case http.StatusBadRequest, http.StatusMethodNotAllowed:
		return CodeBadRequest
	case http.StatusUnauthorized:
		return CodeUnauthenticated
	case http.StatusForbidden:
		return CodeForbidden
	case http.StatusNotFound:
		return CodeNotFound
	case http.StatusConflict:
		return CodeConflict
	case http.StatusRequestEntityTooLarge:
		return CodeTooLarge
	case http.StatusUnprocessableEntity:
		return CodeInvalidSpec
	case http.StatusUnsupportedMediaType:
		return CodeUnsupportedType
	case http.StatusInternalServerError:
		return CodeInternal
	case http.StatusGatewayTimeout, http.StatusRequestTimeout:
		return CodeTimeout
	case http.StatusPreconditionFailed:
		return CodePreconditionFailed
	case http.StatusTooManyRequests:
		return CodeTooManyRequests
	}
	return ""
}
