//go:build !linux

package lab

import "context"

// Impair shapes a site's internet link; it needs Linux.
func (l *Lab) Impair(ctx context.Context, site string, im Impairment) error { return errUnsupported }

// Clear removes a site's impairment; it needs Linux.
func (l *Lab) Clear(ctx context.Context, site string) error { return errUnsupported }

// Impairment describes a site's impairment; it needs Linux.
func (l *Lab) Impairment(site string) (string, error) { return "", errUnsupported }

// CrossTraffic runs a UDP flow across a site's link; it needs Linux.
func (l *Lab) CrossTraffic(ctx context.Context, site string, dir Direction, rate float64) (stop func() error, err error) {
	return nil, errUnsupported
}
