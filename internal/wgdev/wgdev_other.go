//go:build !linux

package wgdev

import "context"

// Run is not supported on this platform; it returns ErrUnsupported.
func Run(ctx context.Context, name string, logf func(string, ...any), opts ...Option) error {
	return ErrUnsupported
}

// Serve is not supported on this platform; it returns ErrUnsupported.
func Serve(ctx context.Context, cfg Config) error { return ErrUnsupported }
