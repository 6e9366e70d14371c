//go:build linux

package lab

import (
	"fmt"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// fabricTable is the nftables table (family bridge) in a switch namespace
// that emulates a fabric dropping frames from unknown MACs.
const fabricTable = "fabric"

// dropUnknownMACs installs, in switch sw's namespace, a bridge filter that
// drops every frame entering a port with a source MAC other than that of
// the interface attached to the port:
//
//	table bridge fabric {
//		chain forward {
//			type filter hook forward priority 0; policy accept;
//			iifname "h1" ether saddr != <h1's peer MAC> drop
//			...
//		}
//	}
func (b *builder) dropUnknownMACs(sw *Node) error {
	c, err := nftables.New(nftables.WithNetNSFd(int(b.h[sw].ns)))
	if err != nil {
		return fmt.Errorf("%s: nftables: %w", sw.Namespace, err)
	}
	t := c.AddTable(&nftables.Table{Family: nftables.TableFamilyBridge, Name: fabricTable})
	ch := c.AddChain(forwardChain(t))
	for _, p := range b.ports[sw] {
		if len(p.mac) != 6 {
			return fmt.Errorf("%s: port %s: attached interface has no Ethernet address", sw.Namespace, p.name)
		}
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: []expr.Any{
			&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(p.name)},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseLLHeader, Offset: 6, Len: 6},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte(p.mac)},
			&expr.Verdict{Kind: expr.VerdictDrop},
		}})
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("%s: installing the drop-unknown-MACs filter: %w", sw.Namespace, err)
	}
	return nil
}

// forwardChain returns the forward filter chain of table t, policy
// accept, where the lab's fabric and fault rules drop what they drop.
func forwardChain(t *nftables.Table) *nftables.Chain {
	accept := nftables.ChainPolicyAccept
	return &nftables.Chain{
		Name:     "forward",
		Table:    t,
		Type:     nftables.ChainTypeFilter,
		Hooknum:  nftables.ChainHookForward,
		Priority: nftables.ChainPriorityFilter,
		Policy:   &accept,
	}
}

// ifname returns an interface name as nftables compares it: NUL-padded to
// IFNAMSIZ.
func ifname(name string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return b
}
