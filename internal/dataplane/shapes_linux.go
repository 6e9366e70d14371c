package dataplane

import (
	"fmt"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// SeparateShapes makes the machine's bridges drop every frame between a
// mesh port and a tree port of each of shapes, both ways (table
// ShapeTable, family bridge, chain forward): each shape then carries
// frames on its own, and a gateway can flood through both at once without
// a frame passing from one to the other and coming back. It replaces what
// an earlier call set; with no shapes it deletes the table. It is
// idempotent.
func SeparateShapes(shapes []Shapes) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("separating bridged shapes: %w", err)
	}
	t := &nftables.Table{Family: nftables.TableFamilyBridge, Name: ShapeTable}
	if len(shapes) == 0 {
		// Nothing to keep apart: delete the table if there is one. A
		// kernel that cannot list bridge-family tables has none of ours
		// (an agent starting, or Down, must not fail on it).
		tables, err := c.ListTablesOfFamily(nftables.TableFamilyBridge)
		if err != nil || !slices.ContainsFunc(tables, func(x *nftables.Table) bool { return x.Name == ShapeTable }) {
			return nil
		}
		c.DelTable(t)
		if err := c.Flush(); err != nil {
			return fmt.Errorf("removing the bridged shapes' separation (table bridge %s): %w", ShapeTable, err)
		}
		return nil
	}
	// Delete and rebuild in one transaction (deleting a table that does
	// not exist fails the batch, so add it first: adding is idempotent).
	c.AddTable(t)
	c.DelTable(t)
	c.AddTable(t)
	ch := c.AddChain(&nftables.Chain{Name: "forward", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter})
	for _, s := range shapes {
		for _, dir := range [][2][]byte{{ifname(s.Mesh), []byte(s.TreePrefix)}, {[]byte(s.TreePrefix), ifname(s.Mesh)}} {
			c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: []expr.Any{
				&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: dir[0]},
				&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: dir[1]},
				&expr.Counter{},
				&expr.Verdict{Kind: expr.VerdictDrop},
			}})
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("separating bridged shapes (table bridge %s): %w", ShapeTable, err)
	}
	return nil
}

// ifname is an interface name as nftables compares it whole (NUL-padded);
// a name without padding compares as a prefix.
func ifname(name string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return b
}

// ForgetPort deletes the MAC addresses the bridge learned behind its port
// dev (what `bridge fdb flush dev DEV` does for dynamic entries): frames to
// them flood until they are learned again. A port that does not exist is
// no error.
func ForgetPort(dev string) error {
	return deleteEntries(dev, "forgetting what the bridge learned behind "+dev, func(n *netlink.Neigh) bool {
		// The bridge's entries name it as master (the kernel sets no flag
		// on them); the port's own (NTF_SELF) and permanent ones stay.
		if n.MasterIndex == 0 || n.Flags&netlink.NTF_SELF != 0 || n.State&(netlink.NUD_PERMANENT|netlink.NUD_NOARP) != 0 {
			return false
		}
		n.Flags = netlink.NTF_MASTER
		return true
	})
}
