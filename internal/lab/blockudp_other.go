//go:build !linux

package lab

import "context"

// SetUDPBlocked blocks or unblocks a site's UDP; it needs Linux.
func (l *Lab) SetUDPBlocked(ctx context.Context, site string, blocked bool) error {
	return errUnsupported
}
