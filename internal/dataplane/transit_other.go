//go:build !linux

package dataplane

import (
	"errors"
	"runtime"
)

// SyncTransit returns an error: gateways run on Linux only.
func SyncTransit(c TransitConfig) ([]Change, error) {
	return nil, errors.New("dataplane: the transit device needs Linux, not " + runtime.GOOS)
}

// DownTransit does nothing off Linux.
func DownTransit() error { return nil }

// ForgetLearned does nothing off Linux.
func ForgetLearned(dev string) error { return nil }

// SetPortLearning does nothing off Linux.
func SetPortLearning(dev string, on bool) error { return nil }

// SeparateShapes does nothing off Linux.
func SeparateShapes(shapes []Shapes) error { return nil }

// ForgetPort does nothing off Linux.
func ForgetPort(dev string) error { return nil }
