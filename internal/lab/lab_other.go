//go:build !linux

package lab

import (
	"context"
	"errors"
)

var errUnsupported = errors.New("the lab needs Linux network namespaces")

// Up builds a lab; it needs Linux.
func Up(ctx context.Context, cfg Config) (*Lab, error) { return nil, errUnsupported }

// Open returns an existing lab; it needs Linux.
func Open(ctx context.Context, cfg Config) (*Lab, error) { return nil, errUnsupported }

// Down removes a lab; it needs Linux.
func Down(ctx context.Context, name string) error { return errUnsupported }

// Down removes the lab; it needs Linux.
func (l *Lab) Down(ctx context.Context) error { return errUnsupported }

// Status reports what exists of a lab; it needs Linux.
func Status(ctx context.Context, name string) (State, error) { return State{}, errUnsupported }

// Start runs a program in a node; it needs Linux.
func (l *Lab) Start(n *Node, name string, args ...string) (*Process, error) {
	return nil, errUnsupported
}

// Do runs fn in the node's namespace; it needs Linux.
func (n *Node) Do(fn func() error) error { return errUnsupported }

// SetBridgedMTU changes a bridged network's MTU; it needs Linux.
func (l *Lab) SetBridgedMTU(ctx context.Context, network string, mtu int) error {
	return errUnsupported
}
