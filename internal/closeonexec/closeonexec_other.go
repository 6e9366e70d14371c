//go:build !linux

package closeonexec

func inherited() {}
