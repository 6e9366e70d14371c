//go:build !linux

package lab

import "context"

// SetInternet cuts or restores a site's internet link; it needs Linux.
func (l *Lab) SetInternet(ctx context.Context, site string, up bool) error { return errUnsupported }
