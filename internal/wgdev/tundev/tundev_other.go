//go:build !linux

package tundev

import "errors"

// Config configures a Device.
type Config struct {
	Name  string
	MTU   int
	Mode  Mode
	Netns string
	Logf  func(format string, args ...any)
}

// Device is only available on Linux.
type Device struct{}

// New fails: the device needs Linux's TUN driver.
func New(cfg Config) (*Device, error) {
	return nil, errors.New("the TUN device with offloads needs Linux")
}
