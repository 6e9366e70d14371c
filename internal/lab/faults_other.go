//go:build !linux

package lab

import "context"

// SetCables unplugs or plugs back a node; it needs Linux.
func (l *Lab) SetCables(ctx context.Context, n *Node, up bool) error { return errUnsupported }

// SetUplink unplugs or plugs back a gateway's internet link; it needs Linux.
func (l *Lab) SetUplink(ctx context.Context, gw *Node, up bool) error { return errUnsupported }

// Processes lists a node's processes; it needs Linux.
func (n *Node) Processes() ([]ProcessInfo, error) { return nil, errUnsupported }

// Kill kills a node's processes; it needs Linux.
func (n *Node) Kill(ctx context.Context, match func(ProcessInfo) bool) ([]ProcessInfo, error) {
	return nil, errUnsupported
}

// KillAll kills every process of a node; it needs Linux.
func (n *Node) KillAll(ctx context.Context) ([]ProcessInfo, error) { return nil, errUnsupported }

// Block cuts one direction between two nodes; it needs Linux.
func (l *Lab) Block(ctx context.Context, from, to *Node, blocked bool) error { return errUnsupported }

// Separate drops frames between two nodes; it needs Linux.
func (l *Lab) Separate(ctx context.Context, a, b *Node, separated bool) error {
	return errUnsupported
}

// HoldVirtualAddress adds a site's virtual address; it needs Linux.
func (l *Lab) HoldVirtualAddress(ctx context.Context, gw *Node) error { return errUnsupported }

// VirtualAddressHolders finds who holds a site's virtual address; it needs
// Linux.
func (l *Lab) VirtualAddressHolders(ctx context.Context, site string) ([]*Node, error) {
	return nil, errUnsupported
}
