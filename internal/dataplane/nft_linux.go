package dataplane

import (
	"errors"
	"fmt"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// replaceTable replaces the table rs.table with rs in one netlink batch:
// add table (a no-op when it exists), delete table, add table, chains and
// rules. The kernel applies the batch atomically: packets see the old table
// or the new one, never none or half of one. The first rule carries the
// fingerprint as its comment.
func replaceTable(rs ruleset, fingerprint string) error {
	c, err := nftables.New()
	if err != nil {
		return err
	}
	t := &nftables.Table{Name: rs.table, Family: nftables.TableFamilyINet}
	c.AddTable(t)
	c.DelTable(t)
	c.AddTable(t)
	for i, ch := range rs.chains {
		policy := nftables.ChainPolicyAccept
		if ch.policy == "drop" {
			policy = nftables.ChainPolicyDrop
		}
		hook := nftables.ChainHookInput
		if ch.hook == "forward" {
			hook = nftables.ChainHookForward
		}
		nch := c.AddChain(&nftables.Chain{
			Name:     ch.name,
			Table:    t,
			Type:     nftables.ChainTypeFilter,
			Hooknum:  hook,
			Priority: nftables.ChainPriorityRef(nftables.ChainPriority(ch.priority)),
			Policy:   &policy,
		})
		for j, r := range ch.rules {
			nr := &nftables.Rule{Table: t, Chain: nch, Exprs: r.exprs()}
			if i == 0 && j == 0 {
				nr.UserData = commentUserData(fingerprintPrefix + fingerprint)
			}
			c.AddRule(nr)
		}
	}
	return c.Flush()
}

// deleteTable deletes the table; a missing table is not an error.
func deleteTable(name string) error {
	c, err := nftables.New()
	if err != nil {
		return err
	}
	c.DelTable(&nftables.Table{Name: name, Family: nftables.TableFamilyINet})
	if err := c.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
		return err
	}
	return nil
}

// readTable returns the table's state, nil when there is no such table.
func readTable(name string) (*TableState, error) {
	c, err := nftables.New()
	if err != nil {
		return nil, err
	}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return nil, fmt.Errorf("listing nftables tables: %w", err)
	}
	for _, t := range tables {
		if t.Name != name {
			continue
		}
		ts := &TableState{Name: name}
		// A table without our input chain, or whose first rule has no
		// fingerprint, is not one we built: it gets replaced.
		rules, err := c.GetRules(t, &nftables.Chain{Name: chainInput, Table: t})
		if err == nil && len(rules) > 0 {
			if s, ok := commentOf(rules[0].UserData); ok {
				ts.Fingerprint, _ = strings.CutPrefix(s, fingerprintPrefix)
				if ts.Fingerprint == s {
					ts.Fingerprint = ""
				}
			}
		}
		return ts, nil
	}
	return nil, nil
}

// dport matches packets of transport protocol proto to port.
func dport(proto byte, port int) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(uint16(port))},
	}
}

// commentUserData encodes a rule comment as nft does (NFTNL_UDATA_RULE_COMMENT,
// NUL-terminated), so `nft list` shows it.
func commentUserData(s string) []byte {
	b := []byte{0, byte(len(s) + 1)}
	b = append(b, s...)
	return append(b, 0)
}

// commentOf returns the comment in rule user data.
func commentOf(ud []byte) (string, bool) {
	for len(ud) >= 2 {
		typ, n := ud[0], int(ud[1])
		if len(ud) < 2+n {
			return "", false
		}
		if typ == 0 {
			return strings.TrimSuffix(string(ud[2:2+n]), "\x00"), true
		}
		ud = ud[2+n:]
	}
	return "", false
}

// exprs returns the rule as nftables expressions, the same bytecode nft
// generates for the rule's text.
func (r rule) exprs() []expr.Any {
	var out []expr.Any
	lastFamily := byte(0) // nfproto already checked for addresses
	for _, m := range r.matches {
		switch m := m.(type) {
		case ifName:
			key := expr.MetaKeyIIFNAME
			if m.out {
				key = expr.MetaKeyOIFNAME
			}
			op := expr.CmpOpEq
			if m.negate {
				op = expr.CmpOpNeq
			}
			name := make([]byte, unix.IFNAMSIZ)
			copy(name, m.name)
			out = append(out,
				&expr.Meta{Key: key, Register: 1},
				&expr.Cmp{Op: op, Register: 1, Data: name})
		case ctState:
			var bits uint32
			if m.invalid {
				bits |= expr.CtStateBitINVALID
			}
			if m.established {
				bits |= expr.CtStateBitESTABLISHED
			}
			if m.related {
				bits |= expr.CtStateBitRELATED
			}
			out = append(out,
				&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
				&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
					Mask: binaryutil.NativeEndian.PutUint32(bits), Xor: make([]byte, 4)},
				&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)})
		case addr:
			fam, offset, size := byte(unix.NFPROTO_IPV4), uint32(12), uint32(4)
			if m.prefix.Addr().Is6() {
				fam, offset, size = unix.NFPROTO_IPV6, 8, 16
			}
			if m.dst {
				offset += size
			}
			if fam != lastFamily {
				out = append(out,
					&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
					&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{fam}})
				lastFamily = fam
			}
			bits := m.prefix.Bits()
			if bits == 0 {
				continue
			}
			// As nft does: a byte-aligned prefix loads only the bytes it
			// covers; another loads the whole address and masks it.
			network := m.prefix.Masked().Addr().AsSlice()
			if bits%8 == 0 {
				n := uint32(bits / 8)
				out = append(out,
					&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: n},
					&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: network[:n]})
				continue
			}
			mask := make([]byte, size)
			for i := range mask {
				b := max(0, min(8, bits-8*i))
				mask[i] = byte(0xff << (8 - b))
			}
			out = append(out,
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: size},
				&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: size, Mask: mask, Xor: make([]byte, size)},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: network})
		case udpDport:
			out = append(out, dport(unix.IPPROTO_UDP, m.port)...)
		case tcpDport:
			out = append(out, dport(unix.IPPROTO_TCP, m.port)...)
		case l4proto:
			out = append(out,
				&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{m.proto}})
		case fibReversePath:
			out = append(out,
				&expr.Fib{Register: 1, FlagSADDR: true, FlagIIF: true, ResultOIF: true, FlagPRESENT: true},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(1)})
		case icmpType:
			fam, proto := byte(unix.NFPROTO_IPV4), byte(unix.IPPROTO_ICMP)
			if m.v6 {
				fam, proto = unix.NFPROTO_IPV6, unix.IPPROTO_ICMPV6
			}
			out = append(out,
				&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{fam}},
				&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{m.typ}})
		case limitRate:
			out = append(out, &expr.Limit{Type: expr.LimitTypePkts, Rate: uint64(m.perSecond), Unit: expr.LimitTimeSecond, Burst: 5})
		case tcpSyn:
			out = append(out,
				&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 13, Len: 1},
				&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 1, Mask: []byte{0x02}, Xor: []byte{0}},
				&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{0}})
		case mssAbove:
			out = append(out,
				&expr.Exthdr{DestRegister: 1, Type: 2, Offset: 2, Len: 2, Op: expr.ExthdrOpTcpopt},
				&expr.Cmp{Op: expr.CmpOpGt, Register: 1, Data: binaryutil.BigEndian.PutUint16(uint16(m.size))})
		default:
			panic(fmt.Sprintf("dataplane: no expressions for match %T", m))
		}
	}
	switch {
	case r.mssSet > 0:
		out = append(out,
			&expr.Immediate{Register: 1, Data: binaryutil.BigEndian.PutUint16(uint16(r.mssSet))},
			&expr.Exthdr{SourceRegister: 1, Type: 2, Offset: 2, Len: 2, Op: expr.ExthdrOpTcpopt})
	case r.verdict == "drop":
		out = append(out, &expr.Verdict{Kind: expr.VerdictDrop})
	default:
		out = append(out, &expr.Verdict{Kind: expr.VerdictAccept})
	}
	return out
}
