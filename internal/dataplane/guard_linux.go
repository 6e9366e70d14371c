package dataplane

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// guardPriority is the bridge family's "filter" priority: before the
// bridge learns the frame's source.
const guardPriority = -200

// syncGuard makes the guard table (guard.go) what gs says: replaced in
// one batch when it differs (the sets start empty again: for GuardMemory
// the guard knows fewer hosts), deleted when gs is empty. A table whose
// fingerprint matches is left alone, with what it heard.
func syncGuard(gs []guard) ([]Change, error) {
	want := ""
	if len(gs) > 0 {
		sum := sha256.Sum256([]byte(guardText(gs)))
		want = hex.EncodeToString(sum[:8])
	}
	c, err := nftables.New()
	if err != nil {
		return nil, fmt.Errorf("guarding the site's hosts on the bridges: %w", err)
	}
	have, exists := "", false
	if tables, err := c.ListTablesOfFamily(nftables.TableFamilyBridge); err == nil {
		if i := slices.IndexFunc(tables, func(t *nftables.Table) bool { return t.Name == GuardTable }); i >= 0 {
			exists = true
			rules, err := c.GetRules(tables[i], &nftables.Chain{Name: "prerouting", Table: tables[i]})
			if err == nil && len(rules) > 0 {
				have, _ = commentOf(rules[0].UserData)
				have, _ = strings.CutPrefix(have, fingerprintPrefix)
			}
		}
	} else if len(gs) == 0 {
		return nil, nil // a kernel without bridge tables has none of ours
	}
	t := &nftables.Table{Family: nftables.TableFamilyBridge, Name: GuardTable}
	switch {
	case len(gs) == 0 && !exists:
		return nil, nil
	case len(gs) == 0:
		c.DelTable(t)
		if err := c.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
			return nil, fmt.Errorf("removing the guard of the site's hosts (table bridge %s): %w", GuardTable, err)
		}
		return []Change{Change("nft delete table bridge " + GuardTable)}, nil
	case exists && have == want:
		return nil, nil
	}
	c.AddTable(t)
	c.DelTable(t)
	c.AddTable(t)
	policy := nftables.ChainPolicyAccept
	ch := c.AddChain(&nftables.Chain{Name: "prerouting", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityRef(guardPriority), Policy: &policy})
	first := true
	add := func(exprs ...expr.Any) {
		r := &nftables.Rule{Table: t, Chain: ch, Exprs: exprs}
		if first {
			r.UserData = commentUserData(fingerprintPrefix + want)
			first = false
		}
		c.AddRule(r)
	}
	// The frame's source address: 6 bytes at offset 6 of the link layer.
	saddr := &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseLLHeader, Offset: 6, Len: 6}
	for _, g := range gs {
		set := &nftables.Set{Table: t, Name: guardSet(g.bridge), KeyType: nftables.TypeEtherAddr,
			Dynamic: true, HasTimeout: true, Timeout: GuardMemory}
		if err := c.AddSet(set, nil); err != nil {
			return nil, fmt.Errorf("guarding the site's hosts on %s: %w", g.bridge, err)
		}
		for _, port := range g.local {
			add(
				&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(port)},
				saddr,
				&expr.Dynset{SrcRegKey: 1, SetName: set.Name, SetID: set.ID, Operation: uint32(unix.NFT_DYNSET_OP_UPDATE)},
				&expr.Verdict{Kind: expr.VerdictAccept},
			)
		}
		// The mesh's port by its whole name, the trees' by the prefix
		// (a name compared without its NUL padding).
		for _, name := range [][]byte{ifname(g.tunnels), []byte(g.tunnels + "-")} {
			add(
				&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: name},
				saddr,
				&expr.Lookup{SourceRegister: 1, SetName: set.Name, SetID: set.ID},
				&expr.Counter{},
				&expr.Verdict{Kind: expr.VerdictDrop},
			)
		}
	}
	if err := c.Flush(); err != nil {
		return nil, fmt.Errorf("guarding the site's hosts on the bridges (table bridge %s): %w", GuardTable, err)
	}
	return []Change{Change(fmt.Sprintf("nft replace table bridge %s (a frame from a tunnel with the source of a host heard on the site's own ports in the last %s is a loop: dropped)", GuardTable, GuardMemory))}, nil
}
